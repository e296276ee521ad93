# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""XID parsing from kernel log text as dmesg, journalctl and syslog print it; the NVML memory, link and
clock rules on constructed inputs."""

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import health as h

DMESG = "".join(
    [
        "[    0.604859] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Releas"
        "e Build  (nixbld@)\n",
        "[    1.270547] NVRM: gpuClearFbhubPoisonIntrForBug2924523_GA100: FBHUB Interrupt detected. Clearing it.\n",
        "[ 8812.114455] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n",
        "[ 8812.114460] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n",
        "[ 9120.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n",
        "[10001.221133] NVRM: Xid (PCI:0000:86:00): 31, pid=48211, name=python3, Ch 00000008, intr "
        "00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1c_0a000000. Fault is of"
        " type FAULT_PDE ACCESS_TYPE_VIRT_READ\n",
    ]
)

JOURNAL = "".join(
    [
        "Nov 29 13:02:11 h100-03 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=2211, name=torchrun, A"
        "n uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at part"
        "ition 6, subpartition 0.\n",
        "Nov 29 13:02:11 h100-03 kernel: NVRM: Xid (PCI:0000:18:00): 63, pid=2211, name=torchrun, R"
        "ow Remapper: New row (0x00000000000a8f1c) was marked for remapping, reset gpu to activate."
        "\n",
        "Nov 29 13:05:40 h100-03 kernel: NVRM: Xid (PCI:0000:9a:00): 74, pid=3312, name=python, NVL"
        "ink: fatal error detected on link 4(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)\n",
        "Nov 29 13:07:02 h100-03 kernel: NVRM: Xid (PCI:0000:9a:00): 119, pid=3312, name=python, Ti"
        "meout after 6s of waiting for RPC response from GPU0 GSP!\n",
        "Nov 29 13:08:00 h100-03 kernel: NVRM: Xid (0000:c1:00): 13, Graphics SM Warp Exception on "
        "(GPC 0, TPC 1, SM 0): Out Of Range Address\n",
        "Nov 29 13:09:00 h100-03 kernel: NVRM: Xid (PCI:0000:c1:00): 999, pid=1, name=x, something new\n",
    ]
)


def test_dmesg_lines():
    events = h.parse_xid_lines(DMESG)
    assert [e["xid"] for e in events] == [79, 79, 31]
    first = events[0]
    assert first["pci_bus_id"] == "0000:3b:00.0"
    assert first["severity"] == "critical"
    assert first["pid"] == "unknown"
    assert first["detail"] == "GPU has fallen off the bus."
    assert events[2]["pid"] == "48211"
    assert events[2]["process"] == "python3"
    assert events[2]["severity"] == "warning"
    assert events[2]["pci_bus_id"] == "0000:86:00.0"


def test_journal_lines_and_old_format():
    events = h.parse_xid_lines(JOURNAL)
    assert [(e["xid"], e["severity"]) for e in events] == [
        (48, "critical"),
        (63, "critical"),
        (74, "critical"),
        (119, "critical"),
        (13, "warning"),
        (999, "warning"),
    ]
    assert events[0]["process"] == "torchrun"
    assert events[4]["pci_bus_id"] == "0000:c1:00.0"  # no "PCI:" prefix (older drivers)
    assert events[4]["pid"] is None
    assert "not in the catalog" in events[5]["description"]


def test_non_xid_lines_are_ignored():
    assert h.parse_xid_lines("NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n") == []
    assert h.parse_xid_lines("") == []
    assert h.parse_xid_lines(None) == []


def test_summarize_groups_by_bus_and_xid():
    groups = h.summarize_xids(h.parse_xid_lines(DMESG), max_lines=1)
    got = [(g["pci_bus_id"], g["xid"], g["count"]) for g in groups]
    assert got == [("0000:3b:00.0", 79, 2), ("0000:86:00.0", 31, 1)]
    assert len(groups[0]["samples"]) == 1


@pytest.mark.parametrize("xid", [48, 63, 64, 74, 79, 92, 94, 95, 119, 120])
def test_critical_xids(xid):
    assert h.classify_xid(xid)[0] == "critical"


@pytest.mark.parametrize(("xid", "sev"), [(13, "warning"), (31, "warning"), (43, "warning"), (45, "info")])
def test_application_level_xids(xid, sev):
    assert h.classify_xid(xid)[0] == sev


@pytest.mark.parametrize(
    ("name", "norm", "sev"),
    [
        ("hw_slowdown", "hw_slowdown", "critical"),
        ("hw_thermal_slowdown", "hw_thermal", "critical"),
        ("HwPowerBrakeSlowdown", "hw_power_brake", "critical"),
        ("sw_thermal_slowdown", "sw_thermal", "warning"),
        ("clocks_event_reason_sw_thermal_slowdown", "sw_thermal", "warning"),
        ("gpu_idle", "gpu_idle", "info"),
        ("GpuIdle", "gpu_idle", "info"),
        ("sw_power_cap", "sw_power_cap", "info"),
        ("board_limit", "board_limit", "warning"),
        ("mystery", "mystery", "warning"),
    ],
)
def test_throttle_reasons(name, norm, sev):
    n, s, _desc = h.classify_throttle_reason(name)
    assert (n, s) == (norm, sev)


def test_worst_severity():
    assert h.worst_severity(["info", "critical", "warning"]) == "critical"
    assert h.worst_severity([]) is None


# ------------------------------------------------------------------ NVML memory and link health
# Constructed inputs, in the shape the acceptance program records NVML's answers.


def rows(correctable=0, uncorrectable=0, pending=False, failure=False):
    return {
        "remapped_rows": {
            "correctable": correctable,
            "uncorrectable": uncorrectable,
            "pending": pending,
            "failure": failure,
        },
        "retired_pages": {"not_supported": True},
    }


def severities(findings):
    return sorted((f["severity"], f["id"]) for f in findings if f["severity"] != "info")


def test_memory_health_rules():
    assert severities(h.evaluate_memory_health(rows(correctable=3), 8)) == []
    assert severities(h.evaluate_memory_health(rows(pending=True), 8)) == [("warn", "remap_pending")]
    assert severities(h.evaluate_memory_health(rows(failure=True), 8)) == [("reject", "remap_failure")]
    assert severities(h.evaluate_memory_health(rows(uncorrectable=9), 8)) == [("reject", "remapped_rows_uncorrectable")]
    assert severities(h.evaluate_memory_health(rows(uncorrectable=8), 8)) == []
    pending = h.evaluate_memory_health(rows(pending=True), 8)
    assert "reset the GPU before use" in pending[0]["message"]


def test_memory_health_not_supported_or_absent_is_never_a_failure():
    notes = h.evaluate_memory_health({"remapped_rows": {"not_supported": True}}, 0)
    assert severities(notes) == []
    assert [f["message"] for f in notes] == [
        "row remapping not supported by this GPU",
        "page retirement not measured",
    ]
    assert severities(h.evaluate_memory_health(None, 0)) == []
    assert severities(h.evaluate_memory_health({"remapped_rows": {"error": "Unknown Error"}}, 0)) == []


def test_retired_pages_pending_warns():
    snap = {
        "remapped_rows": {"not_supported": True},
        "retired_pages": {"single_bit": 2, "double_bit": 0, "pending": True},
    }
    assert severities(h.evaluate_memory_health(snap, 8)) == [("warn", "retired_pages_pending")]


def links(replay=0, recovery=0, crc=0, pcie=0):
    return {
        "nvlink_errors": {"0": {"replay": replay, "recovery": recovery, "crc_flit": crc, "crc_data": 0}},
        "pcie_replay": pcie,
    }


def test_growing_link_counters_warn():
    assert severities(h.evaluate_link_errors(links(), links())) == []
    found = h.evaluate_link_errors(links(replay=1), links(replay=4, crc=2))
    assert severities(found) == [("warn", "nvlink_errors_growing")]
    assert "replay +3" in found[0]["message"] and "crc_flit +2" in found[0]["message"]
    assert severities(h.evaluate_link_errors(links(pcie=1), links(pcie=5))) == [("warn", "pcie_replay_growing")]


def test_counter_reset_and_missing_counters_are_not_growth():
    assert severities(h.evaluate_link_errors(links(replay=9), links(replay=0))) == []
    assert severities(h.evaluate_link_errors({"pcie_replay": None}, {"pcie_replay": 3})) == []
    assert severities(h.evaluate_link_errors(None, links(replay=3))) == []


def test_growth_since_the_last_acceptance_warns():
    found = h.evaluate_link_errors(links(recovery=2), links(recovery=2), previous=links(recovery=1))
    assert severities(found) == [("warn", "nvlink_errors_grew_since_last")]


def clock(mhz, *reasons, n=10):
    return [{"sm_mhz": mhz, "reasons": list(reasons), "power_w": 500.0, "t": i * 0.5} for i in range(n)]


def test_clock_rules():
    summary, found = h.evaluate_clock_samples(clock(1900), 1980, 0.85, 0.2)
    assert found == [] and summary["median_sm_mhz"] == 1900
    _s, found = h.evaluate_clock_samples(clock(1400, "sw_power_cap"), 1980, 0.85, 0.2)
    assert found == []
    _s, found = h.evaluate_clock_samples(clock(800, "applications_clocks_setting"), 1980, 0.85, 0.2)
    assert severities(found) == [("reject", "clock_low")]
    assert found[0]["evidence"]["reasons"] == ["applications_clocks_setting"]
    _s, found = h.evaluate_clock_samples(clock(800), 1980, 0.85, 0.2)
    assert "active reasons: none" in found[0]["message"]
    _s, found = h.evaluate_clock_samples(clock(800, "HwSlowdown", "sw_power_cap"), 1980, 0.85, 0.2)
    assert severities(found) == [("reject", "clock_throttled_hw")] and "hw_slowdown" in found[0]["message"]
    _s, found = h.evaluate_clock_samples(clock(1500, "sw_thermal_slowdown"), 1980, 0.85, 0.2)
    assert severities(found) == [("warn", "clock_thermal")]


def test_clock_share_and_absent_samples():
    mixed = clock(1900, n=9) + clock(800, n=2)  # 18% low: under the 20% share
    assert h.evaluate_clock_samples(mixed, 1980, 0.85, 0.2)[1] == []
    summary, found = h.evaluate_clock_samples([], 1980, 0.85, 0.2)
    assert summary is None and severities(found) == []
    summary, found = h.evaluate_clock_samples(clock(200, "gpu_idle"), 1980, 0.85, 0.2)
    assert summary["loaded"] == 0 and severities(found) == []
