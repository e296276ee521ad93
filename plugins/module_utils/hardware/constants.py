# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hardware constants every reader of the host shares, and the one reading of a version (its
leading numbers: version_text, version_prefix) with the order of any version's numbers (version_order).

Standard library only: the workload program (workloads/) ships this file's text as its own
first part, so the program and the collection decode NVML's bits from the same table.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# A PCI address in sysfs form: domain:bus:device.function ("0000:3b:00.0").
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# The PCI vendor id of NVIDIA, as sysfs writes it.
NVIDIA_VENDOR = "0x10de"
# nvmlIntNvLinkDeviceType_t of an NVLink's remote end: 0 GPU, 1 IBM NPU, 2 NVSwitch.
NVLINK_DEVICE_TYPE_SWITCH = 2

# PCIe transfer rate per lane (GT/s) by generation.
PCIE_GT_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0, 7: 128.0}

# nvmlClocksEventReason* / nvmlClocksThrottleReason* bits (same values under both names).
CLOCKS_EVENT_REASONS = (
    (0x0000000000000001, "gpu_idle"),
    (0x0000000000000002, "applications_clocks_setting"),
    (0x0000000000000004, "sw_power_cap"),
    (0x0000000000000008, "hw_slowdown"),
    (0x0000000000000010, "sync_boost"),
    (0x0000000000000020, "sw_thermal_slowdown"),
    (0x0000000000000040, "hw_thermal_slowdown"),
    (0x0000000000000080, "hw_power_brake_slowdown"),
    (0x0000000000000100, "display_clock_setting"),
    (0x0000000000000200, "board_limit"),
    (0x0000000000000400, "reliability"),
)
# Reasons that mean the GPU is held below the clocks it was asked for by hardware
# protection, heat or the power brake, as opposed to idling or honouring a configured cap
# (a GPU under full load sits at its power cap by design, and the power limit is itself a
# setting being tuned). Topology reports them as a finding; a bench block that saw one is
# void: it measured the cooling or the PSU, not the software stack.
SLOWDOWN_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


# The leading numbers of a version: "580.159.04", "v12.2", "6.8.0-45-generic".
VERSION_PREFIX = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


def version_order(version):
    """A key that orders versions by the numbers in them, in order: library versions
    ("12.4.127" > "12.4.99", "2.28.3" > "2.28"), BIOS versions ("F13" > "F12", "2.17a.3" ->
    (2, 17, 3)); text without a number, or None, is the empty key, below every version."""
    return tuple(int(n) for n in re.findall(r"[0-9]+", "" if version is None else str(version)))


def version_text(text, parts=None, least=1):
    """The leading version as written, at most ``parts`` of its numbers ("580.159.04-0ubuntu1" ->
    "580.159.04", "v12.2" -> "12.2", "6.8.0-45-generic" with parts=2 -> "6.8"); None without one or
    with fewer than ``least`` numbers. The one reading of a version's leading numbers: version_prefix
    and compat.parse_version are its numeric forms."""
    match = VERSION_PREFIX.match(text or "")
    if not match:
        return None
    numbers = match.group(1).split(".")
    if len(numbers) < least:
        return None
    return ".".join(numbers[:parts])


def version_prefix(text, parts=None):
    """The leading numbers of a version, at most ``parts`` of them ("6.8.0-45-generic" -> (6, 8, 0),
    "v12.2" -> (12, 2)); None without one (hardware/compat.py's parse_version is its strict form)."""
    found = version_text(text, parts)
    return None if found is None else tuple(int(p) for p in found.split("."))
