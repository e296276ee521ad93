# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Preflight checks over facts in the facts-schema shape.

Facts come from two places: the recorded fixtures of the facts module (assembled exactly
as the module assembles them on a host) and a small builder for the H200 test host as
measured (driver 580.159.04, CUDA 13.0, cuDNN 9.19, NCCL 2.28), varied one field at a time.
"""

import copy
import json
import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import topology as topo
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.preflight import (
    findings_at_or_above,
    run_preflight,
    validate_policy,
)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "topology")


def fixture_facts(name):
    with open(os.path.join(FIXTURES, name + ".json")) as fh:
        return topo.assemble(json.load(fh))


def gpu(index, **over):
    g = {
        "index": index,
        "name": "NVIDIA H200",
        "uuid": "GPU-%d" % index,
        "pci_bus_id": "0000:%02x:00.0" % (0x18 + index),
        "power": {
            "limit_w": 700.0,
            "default_limit_w": 700.0,
            "min_limit_w": 200.0,
            "max_limit_w": 700.0,
            "enforced_limit_w": 700.0,
            "draw_w": 75.3,
        },
        "ecc": {
            "mode_current": True,
            "mode_pending": True,
            "volatile_corrected": 0,
            "volatile_uncorrected": 0,
            "aggregate_corrected": 0,
            "aggregate_uncorrected": 0,
            "remapped_rows_pending": False,
            "remapped_rows_failure": False,
        },
        "throttle_reasons": ["gpu_idle"],
        "temperature_c": 31,
    }
    g.update(over)
    return g


def h200_facts(n=1, driver="580.159.04", cuda_runtime="13.0.96", driver_cuda="13.0"):
    return {
        "schema_version": 1,
        "collected_at": "2026-11-29T14:00:00Z",
        "reason": None,
        "gpu_count": n,
        "driver": {
            "nvml_version": driver,
            "kernel_module_version": driver,
            "agree": True,
            "cuda_driver_version": driver_cuda,
        },
        "libraries": {
            "cuda_runtime": cuda_runtime,
            "cudnn": "9.19.0",
            "nccl": "2.28.3",
            "sources": {"cuda_runtime": "/opt/torch/.venv/lib/libcudart.so.13"},
        },
        "gpus": [gpu(i) for i in range(n)],
        "findings": [],
    }


def check(result, name):
    return next(c for c in result["checks"] if c["name"] == name)


def ids(result):
    return [f["id"] for f in result["findings"]]


def test_healthy_h200_passes_everything_it_can_check():
    res = run_preflight(h200_facts(), {"expected_gpu_count": 1, "psu_capacity_watts": 2000, "platform_watts": 600})
    assert res["ok"] is True
    assert res["findings"] == []
    assert {c["status"] for c in res["checks"] if c["name"] != "kernel_xid"} == {"pass"}
    assert check(res, "kernel_xid")["status"] == "skip"
    assert "580.65.06" in check(res, "driver_cuda_compat")["why"]


def test_every_check_has_name_status_why_and_every_finding_its_keys():
    res = run_preflight(fixture_facts("degraded_8gpu_constructed"), {"expected_gpu_count": 8})
    for c in res["checks"]:
        assert set(c) == {"name", "status", "why"}
        assert c["status"] in ("pass", "fail", "skip")
    for f in res["findings"]:
        assert set(f) >= {"id", "severity", "subject", "message", "evidence"}
        assert f["severity"] in ("info", "warning", "critical")


def test_470_driver_with_cuda_11_6_runtime_is_critical():
    res = run_preflight(h200_facts(driver="470.57.02", cuda_runtime="11.6.55", driver_cuda="11.4"), {})
    assert res["ok"] is False
    f = next(f for f in res["findings"] if f["id"] == "driver_cuda_incompatible")
    assert f["severity"] == "critical"
    assert f["evidence"]["required_driver"] == "510.39.01"
    assert check(res, "driver_cuda_compat")["status"] == "fail"


def test_525_60_13_with_cuda_12_2_passes_with_an_info_finding():
    res = run_preflight(h200_facts(driver="525.60.13", cuda_runtime="12.2.140", driver_cuda="12.0"), {})
    assert check(res, "driver_cuda_compat")["status"] == "pass"
    f = next(f for f in res["findings"] if f["id"] == "driver_cuda_minor_compat")
    assert f["severity"] == "info"
    assert res["ok"] is True


def test_no_cuda_runtime_skips_with_reason():
    facts = h200_facts()
    facts["libraries"]["cuda_runtime"] = None
    assert check(run_preflight(facts, {}), "driver_cuda_compat")["status"] == "skip"


def test_default_denylist_hit():
    res = run_preflight(h200_facts(driver="515.65.01", cuda_runtime="11.7.99", driver_cuda="11.7"), {})
    f = next(f for f in res["findings"] if f["id"] == "driver_denylisted")
    assert f["severity"] == "critical"
    assert f["evidence"]["list"] == "default"
    assert "apex" in f["message"]


def test_default_denylist_can_be_turned_off():
    facts = h200_facts(driver="515.65.01", cuda_runtime="11.7.99", driver_cuda="11.7")
    res = run_preflight(facts, {"use_default_denylist": False})
    assert "driver_denylisted" not in ids(res)
    assert check(res, "driver_denylist")["status"] == "skip"


def test_user_denylist_hit_and_miss():
    policy = {"driver_denylist": [{"prefix": "580.159", "reason": "our ticket OPS-1"}]}
    res = run_preflight(h200_facts(), policy)
    f = next(f for f in res["findings"] if f["id"] == "driver_denylisted")
    assert f["evidence"] == {
        "driver": "580.159.04",
        "entry": {"prefix": "580.159"},
        "reason": "our ticket OPS-1",
        "list": "user",
    }
    res = run_preflight(h200_facts(driver="580.82.07"), policy)
    assert "driver_denylisted" not in ids(res)
    assert "2 deny-list entries" in check(res, "driver_denylist")["why"]


def test_denylist_checks_the_loaded_module_too():
    facts = h200_facts()
    facts["driver"]["kernel_module_version"] = "515.65.01"
    facts["driver"]["agree"] = False
    res = run_preflight(facts, {})
    assert "driver_denylisted" in ids(res)
    assert "driver_version_mismatch" in ids(res)


@pytest.mark.parametrize(
    ("n", "cap", "platform", "headroom", "status", "total", "usable"),
    [
        (8, 12000, 2500, 10, "pass", 8100.0, 10800.0),
        (8, 6000, 1500, 10, "fail", 7100.0, 5400.0),
        (1, 850, 100, 10, "fail", 800.0, 765.0),  # under capacity, inside the headroom
        (1, 900, 100, 10, "pass", 800.0, 810.0),
        (1, 850, 100, 0, "pass", 800.0, 850.0),
    ],
)
def test_power_budget(n, cap, platform, headroom, status, total, usable):
    policy = {"psu_capacity_watts": cap, "platform_watts": platform, "power_headroom_percent": headroom}
    res = run_preflight(h200_facts(n=n), policy)
    assert check(res, "power_budget")["status"] == status
    exceeded = [f for f in res["findings"] if f["id"] == "power_budget_exceeded"]
    if status == "fail":
        assert exceeded[0]["severity"] == "critical"
        assert exceeded[0]["evidence"]["total_w"] == total
        assert exceeded[0]["evidence"]["usable_w"] == usable
        assert res["ok"] is False
    else:
        assert exceeded == []
        assert "%.0f W needed <= %.0f W usable" % (total, usable) in check(res, "power_budget")["why"]


def test_field_report_eight_consumer_gpus_on_850w():
    facts = h200_facts(n=8)
    for g in facts["gpus"]:
        g["name"] = "NVIDIA GeForce RTX 3090"
        g["power"] = {"limit_w": 350.0, "max_limit_w": 390.0}
    res = run_preflight(facts, {"psu_capacity_watts": 850, "platform_watts": 250})
    f = next(f for f in res["findings"] if f["id"] == "power_budget_exceeded")
    assert f["evidence"]["gpu_total_w"] == 2800.0
    assert res["ok"] is False


def test_power_budget_max_limit_source_counts_the_ceiling():
    facts = h200_facts(n=4)
    for g in facts["gpus"]:
        g["power"]["limit_w"] = 300.0
        g["power"]["max_limit_w"] = 350.0
    policy = {"psu_capacity_watts": 2400, "platform_watts": 600}
    assert check(run_preflight(facts, policy), "power_budget")["status"] == "pass"  # 1800 <= 2160
    policy["power_limit_source"] = "max"
    res = run_preflight(facts, policy)  # 2000 <= 2160
    assert check(res, "power_budget")["status"] == "pass"
    assert "2000 W needed" in check(res, "power_budget")["why"]
    policy["power_headroom_percent"] = 20  # 2000 > 1920
    assert check(run_preflight(facts, policy), "power_budget")["status"] == "fail"


def test_power_budget_undeclared_is_skipped_with_reason():
    res = run_preflight(h200_facts(), {})
    c = check(res, "power_budget")
    assert c["status"] == "skip"
    assert "stacktune_psu_capacity_watts" in c["why"]


def test_power_budget_platform_undeclared_is_info():
    res = run_preflight(h200_facts(), {"psu_capacity_watts": 2000})
    assert check(res, "power_budget")["status"] == "pass"
    assert [f["severity"] for f in res["findings"] if f["id"] == "power_platform_undeclared"] == ["info"]


def test_gpu_count_mismatch():
    res = run_preflight(h200_facts(n=7), {"expected_gpu_count": 8})
    f = next(f for f in res["findings"] if f["id"] == "gpu_count_mismatch")
    assert f["severity"] == "critical"
    assert f["evidence"]["found"] == 7 and f["evidence"]["expected"] == 8
    res = run_preflight(h200_facts(n=2), {"expected_gpu_count": 1})
    assert next(f for f in res["findings"] if f["id"] == "gpu_count_mismatch")["severity"] == "warning"
    assert check(run_preflight(h200_facts(), {}), "gpu_count")["status"] == "skip"


def test_no_gpu_host_fails_only_when_gpus_are_expected():
    facts = fixture_facts("no_gpu_debian")
    res = run_preflight(facts, {"expected_gpu_count": 4})
    assert res["ok"] is False
    assert check(res, "nvml")["status"] == "fail"
    assert next(f for f in res["findings"] if f["id"] == "nvml_unavailable")["severity"] == "critical"
    res = run_preflight(facts, {})
    assert check(res, "nvml")["status"] == "pass"
    assert res["ok"] is True
    assert check(res, "power_budget")["status"] == "skip"


def test_degraded_fixture_reuses_facts_findings():
    facts = fixture_facts("degraded_8gpu_constructed")
    res = run_preflight(facts, {"expected_gpu_count": 8})
    pcie = [f for f in res["findings"] if f["id"] == "pcie_link_degraded"]
    assert pcie == [f for f in facts["findings"] if f["id"] == "pcie_link_degraded"]
    assert check(res, "pcie_links")["status"] == "fail"
    mismatch = next(f for f in res["findings"] if f["id"] == "driver_version_mismatch")
    assert mismatch["severity"] == "critical"
    assert check(res, "driver_agreement")["status"] == "fail"
    assert res["ok"] is False
    # facts findings the preflight does not own (ASPM, NUMA) are not repeated
    assert "aspm_enabled" not in ids(res)


def test_ecc_and_remapping():
    facts = h200_facts(n=3)
    facts["gpus"][0]["ecc"]["volatile_uncorrected"] = 2
    facts["gpus"][0]["ecc"]["aggregate_uncorrected"] = 2
    facts["gpus"][1]["ecc"]["aggregate_uncorrected"] = 1
    facts["gpus"][2]["ecc"]["remapped_rows_pending"] = True
    res = run_preflight(facts, {})
    got = sorted((f["id"], f["subject"], f["severity"]) for f in res["findings"])
    assert got == [
        ("ecc_uncorrected_errors", "gpu0", "critical"),
        ("ecc_uncorrected_errors", "gpu1", "warning"),
        ("remapped_rows_pending", "gpu2", "critical"),
    ]


def test_ecc_facts_finding_not_duplicated():
    facts = h200_facts()
    facts["gpus"][0]["ecc"]["remapped_rows_pending"] = True
    facts["findings"] = [
        {"id": "remapped_rows_pending", "severity": "warning", "subject": "gpu0", "message": "m", "evidence": {}}
    ]
    res = run_preflight(facts, {})
    rr = [f for f in res["findings"] if f["id"] == "remapped_rows_pending"]
    assert len(rr) == 1 and rr[0]["severity"] == "critical"


def test_throttle():
    facts = h200_facts(n=2)
    facts["gpus"][0]["throttle_reasons"] = ["sw_power_cap", "hw_thermal_slowdown"]
    facts["gpus"][1]["throttle_reasons"] = ["sw_thermal_slowdown"]
    res = run_preflight(facts, {})
    got = [(f["subject"], f["severity"]) for f in res["findings"] if f["id"] == "gpu_throttled"]
    assert got == [("gpu0", "critical"), ("gpu1", "warning")]


def test_kernel_log_xids_map_to_gpus():
    facts = h200_facts(n=2)
    text = (
        "[ 8812.1] NVRM: Xid (PCI:0000:19:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        "[ 8813.1] NVRM: Xid (PCI:0000:5e:00): 13, pid=1, name=x, Graphics Exception\n"
    )
    res = run_preflight(facts, {}, {"source": "dmesg --level=err,warn", "text": text, "error": None})
    xids = [f for f in res["findings"] if f["id"] == "kernel_xid"]
    assert [(f["subject"], f["severity"], f["evidence"]["xid"]) for f in xids] == [
        ("gpu1", "critical", 79),
        ("pci:0000:5e:00.0", "warning", 13),
    ]
    assert xids[0]["evidence"]["source"] == "dmesg --level=err,warn"


def test_unreadable_kernel_log_is_info_and_skip():
    log = {"source": None, "text": "", "error": "dmesg: read kernel buffer failed: Operation not permitted"}
    res = run_preflight(h200_facts(), {}, log)
    assert check(res, "kernel_xid")["status"] == "skip"
    f = next(f for f in res["findings"] if f["id"] == "kernel_log_unreadable")
    assert f["severity"] == "info"
    assert res["ok"] is True


def test_unknown_schema_version_warns():
    facts = h200_facts()
    facts["schema_version"] = 2
    assert check(run_preflight(facts, {}), "facts_schema")["status"] == "fail"


def test_findings_at_or_above():
    fs = [{"severity": "info"}, {"severity": "warning"}, {"severity": "critical"}]
    assert len(findings_at_or_above(fs, "critical")) == 1
    assert len(findings_at_or_above(fs, "warning")) == 2
    assert findings_at_or_above(fs, "never") == []


@pytest.mark.parametrize(
    ("policy", "needle"),
    [
        ({"psu_capacity_watts": 0}, "stacktune_psu_capacity_watts must be a positive number"),
        ({"psu_capacity_watts": -850}, "stacktune_psu_capacity_watts must be a positive number"),
        ({"psu_capacity_watts": "lots"}, "stacktune_psu_capacity_watts must be a positive number"),
        ({"platform_watts": -1}, "stacktune_platform_watts must be a number >= 0"),
        ({"expected_gpu_count": 1.5}, "stacktune_expected_gpu_count must be a whole number"),
        ({"expected_gpu_count": -1}, "stacktune_expected_gpu_count must be a whole number"),
        ({"power_headroom_percent": 100}, "preflight_power_headroom_percent must be a number from 0"),
        ({"power_limit_source": "peak"}, "preflight_power_limit_source must be one of limit, max"),
        ({"fail_on": "error"}, "preflight_fail_on must be one of critical, warning, never"),
        ({"use_default_denylist": "yes"}, "preflight_use_default_denylist must be a boolean"),
        ({"driver_denylist": "515.65.01"}, "preflight_driver_denylist must be a list"),
        ({"driver_denylist": [{"version": "515.65.01"}]}, "preflight_driver_denylist[0]: reason"),
        ({"minor_compat_majors": ["twelve"]}, "preflight_cuda_minor_compat_majors must hold"),
        ({"psu": 1}, "unknown policy key"),
    ],
)
def test_bad_policy_values_name_the_variable(policy, needle):
    with pytest.raises(ValueError) as exc:
        validate_policy(policy)
    assert needle in str(exc.value)


def test_policy_names_can_be_the_module_options():
    with pytest.raises(ValueError, match="^psu_capacity_watts must"):
        validate_policy({"psu_capacity_watts": 0}, names={"psu_capacity_watts": "psu_capacity_watts"})


def test_policy_strings_from_templating_are_numbers():
    p = validate_policy({"psu_capacity_watts": "12000", "expected_gpu_count": "8", "platform_watts": None})
    assert p["psu_capacity_watts"] == 12000.0
    assert p["expected_gpu_count"] == 8
    assert p["power_headroom_percent"] == 10


def test_preflight_does_not_modify_the_facts():
    facts = fixture_facts("degraded_8gpu_constructed")
    before = copy.deepcopy(facts)
    run_preflight(facts, {"expected_gpu_count": 9, "psu_capacity_watts": 1000})
    assert facts == before
