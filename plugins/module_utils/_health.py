# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU health signals from text: XID errors in the kernel log, throttle-reason severity.

Pure parsing, stdlib only. The NVIDIA driver logs an XID as
``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.``
(older drivers omit ``PCI:``; dmesg prefixes ``[  123.456789]``, syslog/journal prefix a
date, host and ``kernel:``).

XID severities follow NVIDIA's "XID Errors" catalog (docs.nvidia.com/deploy/xid-errors) and
its recommended actions: an XID whose action is "reset the GPU", "drain and reboot", or
"contact support" is critical for accepting or tuning a node; an XID that the catalog
attributes to the application (illegal address, page fault, stopped processing caused by
user code) is a warning, because it needs a look but does not by itself prove the
hardware bad; preemptive cleanup is informational. An XID not in the table is a warning.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# xid -> (severity, short name)
XID_CATALOG = {
    8: ("warning", "GPU stopped processing (channel timeout)"),
    13: ("warning", "graphics engine exception (usually an application fault)"),
    31: ("warning", "GPU memory page fault (usually an application fault)"),
    32: ("warning", "invalid or corrupted push buffer stream"),
    38: ("critical", "driver firmware error"),
    43: ("warning", "GPU stopped processing (usually an application fault)"),
    45: ("info", "preemptive cleanup after a channel was killed"),
    48: ("critical", "double-bit ECC error (DBE)"),
    61: ("critical", "internal micro-controller breakpoint/warning"),
    62: ("critical", "internal micro-controller halt"),
    63: ("critical", "ECC page retirement or row remapping recorded (reset the GPU to apply)"),
    64: ("critical", "ECC page retirement or row remapping failure"),
    68: ("warning", "video decoder exception"),
    69: ("warning", "graphics engine class error"),
    74: ("critical", "NVLink error"),
    79: ("critical", "GPU has fallen off the bus"),
    92: ("critical", "high single-bit ECC error rate"),
    94: ("critical", "contained ECC error (reset the GPU)"),
    95: ("critical", "uncontained ECC error (reset the GPU)"),
    109: ("warning", "context switch timeout"),
    119: ("critical", "GSP RPC timeout"),
    120: ("critical", "GSP error"),
    121: ("critical", "C2C link error"),
    140: ("critical", "unrecovered ECC error"),
    154: ("critical", "GPU recovery action changed (reset or reboot required)"),
}

_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\):\s*"
    r"(?P<xid>\d+)(?:,\s*(?P<rest>.*))?$"
)
_PID_RE = re.compile(r"pid=(?P<pid>'?<?[\w-]+>?'?)")
_NAME_RE = re.compile(r"name=(?P<name>[^,]+)")

SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


def classify_xid(xid):
    """(severity, description) for an XID number."""
    return XID_CATALOG.get(int(xid), ("warning", "XID %d (not in the catalog this tool knows)" % int(xid)))


def normalize_bus_id(bus):
    """ "0000:3B:00" or "0000:3b:00.0" -> "0000:3b:00.0" (the sysfs form used in facts)."""
    bus = bus.lower()
    if "." not in bus:
        bus += ".0"
    return bus


def parse_xid_lines(text):
    """Every XID event in a kernel log text, in order.

    Each event: xid, severity, description, pci_bus_id (sysfs form), pid, process, detail,
    line (the original line, stripped).
    """
    events = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if "NVRM: Xid" not in line:
            continue
        m = _XID_RE.search(line)
        if not m:
            continue
        xid = int(m.group("xid"))
        severity, desc = classify_xid(xid)
        rest = m.group("rest") or ""
        pid_m = _PID_RE.search(rest)
        name_m = _NAME_RE.search(rest)
        # the free-text part follows pid=..., name=...,
        detail = rest
        for mm in (pid_m, name_m):
            if mm:
                detail = detail.replace(mm.group(0), "")
        detail = detail.strip(" ,")
        events.append(
            {
                "xid": xid,
                "severity": severity,
                "description": desc,
                "pci_bus_id": normalize_bus_id(m.group("bus")),
                "pid": pid_m.group("pid").strip("'<>") if pid_m else None,
                "process": name_m.group("name").strip() if name_m else None,
                "detail": detail,
                "line": line,
            }
        )
    return events


def summarize_xids(events, max_lines=3):
    """Group XID events by (pci_bus_id, xid): count, severity, first lines as samples."""
    groups = {}
    order = []
    for ev in events:
        key = (ev["pci_bus_id"], ev["xid"])
        if key not in groups:
            groups[key] = {
                "pci_bus_id": ev["pci_bus_id"],
                "xid": ev["xid"],
                "severity": ev["severity"],
                "description": ev["description"],
                "count": 0,
                "samples": [],
            }
            order.append(key)
        g = groups[key]
        g["count"] += 1
        if len(g["samples"]) < max_lines:
            g["samples"].append(ev["line"])
    return [groups[k] for k in order]


# Throttle (clock event) reasons, as NVML names them, reduced to a stable short name.
THROTTLE_SEVERITY = {
    "hw_slowdown": ("critical", "hardware slowdown (thermal or power brake asserted by the board)"),
    "hw_thermal": ("critical", "hardware thermal slowdown"),
    "hw_power_brake": ("critical", "hardware power brake (external power brake signal)"),
    "sw_thermal": ("warning", "software thermal slowdown (GPU or memory temperature above target)"),
    "sw_power_cap": ("info", "software power cap (draw reached the power limit)"),
    "sync_boost": ("info", "sync boost (clocks held with other GPUs)"),
    "applications_clocks_setting": ("info", "application clocks setting"),
    "display_clock_setting": ("info", "display clock setting"),
    "gpu_idle": ("info", "GPU idle"),
    "board_limit": ("warning", "board limit (clocks held by a board-level limit)"),
    "reliability": ("warning", "reliability limit (voltage/current held for long-term reliability)"),
}

_THROTTLE_ALIASES = {
    "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "hw_power_brake",
    "sw_thermal_slowdown": "sw_thermal",
    "idle": "gpu_idle",
    "applications_clocks": "applications_clocks_setting",
    "app_clocks": "applications_clocks_setting",
    "display_clock": "display_clock_setting",
    "power_cap": "sw_power_cap",
}


def normalize_throttle_reason(name):
    """ "HwThermalSlowdown", "hw_thermal_slowdown", "clocks_event_reason_hw_thermal_slowdown"
    -> "hw_thermal"."""
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(name)).lower().strip()
    for prefix in ("clocks_event_reason_", "clocks_throttle_reason_", "throttle_reason_", "nvml_"):
        if s.startswith(prefix):
            s = s[len(prefix) :]
    return _THROTTLE_ALIASES.get(s, s)


def classify_throttle_reason(name):
    """(normalized name, severity, description); unknown reasons are warnings."""
    n = normalize_throttle_reason(name)
    severity, desc = THROTTLE_SEVERITY.get(n, ("warning", "throttle reason %s" % n))
    return n, severity, desc


def worst_severity(severities):
    """The highest of info/warning/critical in an iterable; None when empty."""
    worst = None
    for s in severities:
        if worst is None or SEVERITY_RANK[s] > SEVERITY_RANK[worst]:
            worst = s
    return worst
