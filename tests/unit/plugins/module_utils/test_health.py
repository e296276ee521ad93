# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""XID parsing from kernel log text as dmesg, journalctl and syslog print it."""

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils import _health as h

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
