# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fleet report logic on facts replayed from the topology fixtures.

h200.json and no_gpu_debian.json are recorded on real hosts; degraded_8gpu_constructed.json
is constructed by hand (a DGX H100 with one GPU at Gen3 x8). A fleet is made of copies of
these facts in which single fields are changed, the way nodes bought in batches differ.
"""

from __future__ import absolute_import, division, print_function

import copy
import json
import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.reporting import fleet
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import assemble

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "topology")


def facts_of(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return assemble(json.load(handle))


@pytest.fixture(scope="module")
def dgx():
    return facts_of("degraded_8gpu_constructed.json")


@pytest.fixture(scope="module")
def h200():
    return facts_of("h200.json")


@pytest.fixture(scope="module")
def nogpu():
    return facts_of("no_gpu_debian.json")


def healthy(dgx, bios="1.7.0"):
    """The constructed DGX with every link at Gen5 x16 and the given BIOS version."""
    facts = copy.deepcopy(dgx)
    for gpu in facts["gpus"]:
        gpu["pcie"].update({"gen_current": 5, "width_current": 16})
    facts["host"]["bios"]["version"] = bios
    return facts


def test_host_row_of_the_recorded_h200(h200):
    row = fleet.host_row(h200, ["580.159.04"])
    assert row["kernel"] == "6.18.44-fc-v657-gpu"
    assert row["os"] == "ubuntu 24.04"
    assert (row["driver_package"], row["driver_module"], row["driver_nvml"]) == ("580.159.04",) * 3
    assert (row["cuda_driver"], row["cuda_runtime"], row["cudnn"], row["nccl"]) == (
        "13.0",
        "13.0.96",
        "9.14.0",
        "2.28.3",
    )
    assert row["bios"] is None  # the VM exposes no DMI BIOS version
    assert row["microcode"] == "0x1"
    assert (row["gpu_model"], row["gpu_count"], row["vbios"]) == ("NVIDIA H200", 1, "96.00.A5.00.1A")
    assert row["pcie"] == "Gen5 x16"
    assert row["pcie_gpus"] == ["gpu0 Gen5 x16"]


def test_host_row_of_a_gpu_less_host(nogpu):
    row = fleet.host_row(nogpu)
    assert row["gpu_count"] == 0
    assert row["pcie"] is None and row["vbios"] is None and row["gpu_model"] is None
    assert row["driver_package"] is None and row["driver_nvml"] is None
    assert row["pcie_gpus"] == []


def test_a_narrow_link_makes_the_host_degraded(dgx):
    row = fleet.host_row(dgx)
    assert row["pcie"] == "degraded"
    assert "gpu2 Gen3 x8 (max Gen5 x16)" in row["pcie_gpus"]
    assert sum(1 for link in row["pcie_gpus"] if "(max" in link) == 1


@pytest.mark.parametrize(
    "pcie, reasons, state, degraded, idle_downshift",
    [
        ({"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}, [], "Gen5 x16", False, False),
        # idle power saving lowers the speed only; the link is reported at its maximum
        ({"gen_current": 1, "gen_max": 5, "width_current": 16, "width_max": 16}, ["gpu_idle"], "Gen5 x16", False, True),
        # the same speed drop on a busy GPU is a degraded link
        (
            {"gen_current": 4, "gen_max": 5, "width_current": 16, "width_max": 16},
            [],
            "Gen4 x16 (max Gen5 x16)",
            True,
            False,
        ),
        # a lane drop is never power saving, idle or not
        (
            {"gen_current": 5, "gen_max": 5, "width_current": 8, "width_max": 16},
            ["gpu_idle"],
            "Gen5 x8 (max Gen5 x16)",
            True,
            False,
        ),
        ({"gen_current": None, "gen_max": None, "width_current": None, "width_max": None}, [], "unknown", False, False),
    ],
)
def test_gpu_pcie_states(pcie, reasons, state, degraded, idle_downshift):
    link = fleet.gpu_pcie({"index": 3, "pcie": pcie, "throttle_reasons": reasons})
    assert (link["state"], link["degraded"], link["idle_downshift"]) == (state, degraded, idle_downshift)


def test_summarize_field_majority_and_outliers():
    s = fleet.summarize_field({"n1": "1.7.0", "n2": "1.7.0", "n3": "1.5.2", "n4": "1.7.0", "n5": None})
    assert s["majority"] == "1.7.0"
    assert (s["majority_hosts"], s["hosts"], s["share"]) == (3, 5, 0.6)
    assert s["outliers"] == {"n3": "1.5.2", "n5": None}
    assert not s["unanimous"] and not s["tie"]
    assert [v["value"] for v in s["values"]] == ["1.7.0", "1.5.2", None]


def test_summarize_field_tie_names_no_outlier():
    s = fleet.summarize_field({"a": "5.15", "b": "5.4"})
    assert s["tie"] and s["majority"] is None and s["outliers"] == {}
    assert sorted(v["value"] for v in s["values"]) == ["5.15", "5.4"]


def test_summarize_field_unanimous_and_all_unknown():
    assert fleet.summarize_field({"a": 8, "b": 8})["unanimous"]
    s = fleet.summarize_field({"a": None, "b": None})
    assert s["unanimous"] and s["majority"] is None and s["outliers"] == {}


def test_three_nodes_on_the_old_bios_are_found_per_group(dgx, h200):
    """Ten H100 nodes, three of them on an older BIOS; two H200 nodes in their own group."""
    hosts = {"h100-%02d" % i: healthy(dgx, "1.5.2" if i in (3, 7, 9) else "1.7.0") for i in range(10)}
    hosts["h200-a"] = copy.deepcopy(h200)
    hosts["h200-b"] = copy.deepcopy(h200)
    groups = {
        "all": sorted(hosts),
        "ungrouped": [],
        "h100": sorted(h for h in hosts if h.startswith("h100")),
        "h200": ["h200-a", "h200-b"],
        "other": ["not-in-this-run"],
    }
    report = fleet.fleet_report(hosts, groups=groups)
    assert sorted(report["groups"]) == ["all", "h100", "h200"]
    bios = report["groups"]["h100"]["fields"]["bios"]
    assert bios["majority"] == "1.7.0"
    assert sorted(bios["outliers"]) == ["h100-03", "h100-07", "h100-09"]
    assert report["groups"]["h100"]["outlier_hosts"] == {"h100-03": ["bios"], "h100-07": ["bios"], "h100-09": ["bios"]}
    assert report["groups"]["h200"]["outlier_hosts"] == {}
    # across all hosts the two H200 nodes differ in many fields from the H100 majority
    everyone = report["groups"]["all"]
    assert everyone["fields"]["gpu_count"]["majority"] == 8
    assert sorted(everyone["fields"]["gpu_count"]["outliers"]) == ["h200-a", "h200-b"]
    assert set(report["outlier_hosts"]) == {"h100-03", "h100-07", "h100-09", "h200-a", "h200-b"}
    assert report["hosts"]["h200-a"]["groups"] == ["h200"]
    assert report["host_count"] == 12 and report["missing_facts"] == []


def test_degraded_link_and_driver_mismatch_are_outliers(dgx):
    hosts = {"n%d" % i: healthy(dgx) for i in range(4)}
    hosts["n2"] = copy.deepcopy(dgx)  # the Gen3 x8 GPU
    hosts["n2"]["host"]["bios"]["version"] = "1.7.0"
    hosts["n3"]["driver"]["kernel_module_version"] = "550.90.07"
    packages = {"n0": ["550.90.07"], "n1": ["550.90.07"], "n2": ["550.90.07"], "n3": ["550.90.07", "550.54.15"]}
    report = fleet.fleet_report(hosts, driver_packages=packages)
    fields = report["groups"]["all"]["fields"]
    assert fields["pcie"]["majority"] == "Gen5 x16"
    assert fields["pcie"]["outliers"] == {"n2": "degraded"}
    assert fields["driver_module"]["outliers"] == {"n3": "550.90.07"}
    assert fields["driver_package"]["majority"] == "550.90.07"
    assert fields["driver_package"]["outliers"] == {"n3": "550.54.15, 550.90.07"}


def test_hosts_without_facts_are_listed_not_compared(h200):
    report = fleet.fleet_report({"a": h200, "b": {"ansible_facts": {"stacktune": h200}}, "c": None, "d": {}})
    assert report["missing_facts"] == ["c", "d"]
    assert report["host_count"] == 2
    assert report["groups"]["all"]["outlier_hosts"] == {}


def test_fields_restrict_and_unknown_fields_fail(h200):
    report = fleet.fleet_report({"a": h200}, fields=["bios", "kernel"])
    assert report["fields"] == ["bios", "kernel"]
    assert sorted(report["groups"]["all"]["fields"]) == ["bios", "kernel"]
    with pytest.raises(ValueError, match="unknown field"):
        fleet.fleet_report({"a": h200}, fields=["bios", "colour"])
    with pytest.raises(TypeError):
        fleet.fleet_report([h200])


def test_empty_fleet():
    report = fleet.fleet_report({})
    assert report["host_count"] == 0 and report["groups"] == {} and report["outlier_hosts"] == []
    assert "0 host(s)" in fleet.render_markdown(report)


def test_markdown_names_outliers_and_ties(dgx):
    hosts = {
        "a": healthy(dgx, "1.7.0"),
        "b": healthy(dgx, "1.7.0"),
        "c": healthy(dgx, "1.5.2"),
        "d": copy.deepcopy(dgx),
    }
    hosts["d"]["host"]["bios"]["version"] = "1.7.0"
    hosts["d"]["host"]["kernel_release"] = "5.4.0-150-generic"
    report = fleet.fleet_report(hosts, groups={"h100": ["a", "b", "c", "d"], "pair": ["a", "c"]})
    text = fleet.render_markdown(report, title="Fleet", generated_at="2026-11-30T10:00:00Z")
    assert text.startswith("# Fleet\n")
    assert "| BIOS | 1.7.0 | 3/4 | c: 1.5.2 |" in text
    assert "| PCIe | Gen5 x16 | 3/4 | d: degraded |" in text
    assert "| Kernel | 5.15.0-119-generic | 3/4 | d: 5.4.0-150-generic |" in text
    assert "## Group h100 (4 host(s))" in text and "## Group pair (2 host(s))" in text
    # in the pair group a and c disagree on the BIOS: no majority, nobody is an outlier
    pair = text.split("## Group pair")[1].split("## Hosts")[0]
    assert "| BIOS | no majority: 1.5.2 (1); 1.7.0 (1) | - | none |" in pair
    assert "Outliers across all hosts: c (BIOS); d (Kernel, PCIe)." in text
    assert "- d: gpu2 Gen3 x8 (max Gen5 x16)" in text
    assert "**1.5.2**" in text  # the outlier value is marked in the host table


# ------------------------------------------------------------------ acceptance measurements across hosts
# Constructed records in the shape the acceptance role writes into each host's journal; the
# H2D number is the H200 test host's measured 55.0 GB/s.


def record(memory=4100.0, h2d=55.0, name="NVIDIA H200", latency=11.5):
    return {
        "schema": 1,
        "verdict": "pass",
        "level": "standard",
        "time": "2026-11-30T10:00:00Z",
        "gpu_name": name,
        "metrics": {"memory_gbps": memory, "h2d_local_gbps": h2d, "p2p_latency_us": latency},
    }


def test_robust_outliers_median_mad_and_both_floors():
    values = {"a": 55.0, "b": 54.6, "c": 55.3, "d": 54.9, "e": 55.1, "g": 55.2, "f": 44.0}
    out = fleet.robust_outliers(values, "higher", min_hosts=5, z=3.5, min_deviation=0.1)
    assert out["status"] == "compared" and out["median"] == 55.0
    assert out["mad"] == pytest.approx(0.2 * 1.4826, abs=1e-3)
    assert list(out["outliers"]) == ["f"]
    assert out["outliers"]["f"]["deviation"] == -0.2 and out["outliers"]["f"]["z"] > 3.5
    # a faster host is not an outlier of a higher-is-better metric
    assert fleet.robust_outliers(dict(values, f=66.0), "higher")["outliers"] == {}
    # lower is better: a slow latency is
    lat = fleet.robust_outliers({"a": 10, "b": 10, "c": 10, "d": 10, "e": 14}, "lower")
    assert list(lat["outliers"]) == ["e"]


def test_tiny_spread_needs_the_relative_floor():
    # 2% below identical hosts: infinite robust z (MAD 0) but under the 10% floor
    values = {"a": 55.0, "b": 55.0, "c": 55.0, "d": 55.0, "e": 53.9}
    assert fleet.robust_outliers(values, "higher")["outliers"] == {}
    assert fleet.robust_outliers(dict(values, e=49.5), "higher")["outliers"]["e"]["z"] is None


def test_noisy_metric_needs_the_z_floor():
    # 12% below the median, but the group spreads that much: not an outlier
    values = {"a": 700.0, "b": 640.0, "c": 760.0, "d": 690.0, "e": 616.0, "f": 730.0}
    out = fleet.robust_outliers(values, "higher")
    assert out["outliers"] == {}


def test_group_below_the_minimum_cannot_compare():
    out = fleet.robust_outliers({"a": 1.0, "b": 2.0, "c": 3.0}, "higher", min_hosts=5)
    assert out["status"] == "cannot_compare" and out["message"] == "cannot compare: 3 hosts"
    assert fleet.robust_outliers({"a": 1.0}, "higher")["message"] == "cannot compare: 1 host"


def test_acceptance_report_groups_by_gpu_model():
    records = {"h%d" % i: record() for i in range(6)}
    records["h3"] = record(memory=4100.0 * 0.8)
    records["l1"] = record(memory=800.0, name="NVIDIA L40S")
    records["none"] = None
    records["text"] = json.dumps(record())
    acc = fleet.acceptance_report(records)
    assert acc["missing"] == ["none"]
    h200 = acc["groups"]["NVIDIA H200"]
    assert h200["hosts"] == ["h0", "h1", "h2", "h3", "h4", "h5", "text"]
    assert h200["outlier_hosts"] == {"h3": ["memory_gbps"]}
    assert h200["metrics"]["h2d_local_gbps"]["outliers"] == {}
    assert acc["groups"]["NVIDIA L40S"]["metrics"]["memory_gbps"]["message"] == "cannot compare: 1 host"
    assert acc["outlier_hosts"] == {"h3": ["NVIDIA H200: memory_gbps"]}
    assert "gemm_tflops" not in h200["metrics"]  # nobody measured it


def test_acceptance_report_rule_is_validated():
    with pytest.raises(ValueError, match="fleet_report_acceptance_min_hosts"):
        fleet.acceptance_report({}, min_hosts=2)
    with pytest.raises(ValueError, match="fleet_report_acceptance_z"):
        fleet.acceptance_report({}, z=0)
    with pytest.raises(ValueError, match="fleet_report_acceptance_min_deviation"):
        fleet.acceptance_report({}, min_deviation=1.5)


def test_fleet_report_carries_the_acceptance_section(h200):
    facts = {"gpu-%d" % i: h200 for i in range(5)}
    records = {"gpu-%d" % i: record() for i in range(5)}
    records["gpu-4"] = record(h2d=44.0)
    report = fleet.fleet_report(facts, acceptance=records)
    assert report["acceptance"]["outlier_hosts"] == {"gpu-4": ["NVIDIA H200: h2d_local_gbps"]}
    text = fleet.render_markdown(report)
    assert "## Acceptance measurements" in text
    assert "| host-to-device, local NUMA (GB/s) | 5 | 55 | 0 | gpu-4: 44 (-20.0%) |" in text
    assert "acceptance" not in fleet.fleet_report(facts)
