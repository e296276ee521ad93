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

from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import median
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.findings import finding

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


# --------------------------------------------------------------------------- NVML memory and link health
#
# Findings are dicts {severity, check, message, evidence}; severity is "info" (recorded,
# never counted against the node), "warn" or "reject". An absent or unreadable counter is
# "not measured", never a failure; NOT_SUPPORTED (retired pages on GPUs that remap rows
# instead, NVLink on a GPU without links) is recorded as such.

NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


def _count(value):
    """A non-negative whole number, else None (bools, None, errors and negatives are not counts)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def evaluate_memory_health(snapshot, max_uncorrectable_rows):
    """Findings from one GPU's memory-health snapshot (row remapping and page retirement).

    ``snapshot``: ``{"remapped_rows": {correctable, uncorrectable, pending, failure} |
    {"not_supported": true} | {"error": text}, "retired_pages": {single_bit, double_bit,
    pending} | {"not_supported": true}}``; either part may be missing.

    A failed row remapping rejects (the GPU has run out of spare rows for a bank); more
    uncorrectable remapped rows than ``max_uncorrectable_rows`` reject; a pending remap or
    a pending page retirement warns: the GPU must be reset before the remap takes effect.
    """
    findings = []
    snapshot = snapshot if isinstance(snapshot, dict) else {}
    rows = snapshot.get("remapped_rows")
    if not isinstance(rows, dict):
        findings.append(finding("remapped_rows", "info", None, "row remapping not measured"))
    elif rows.get("not_supported"):
        findings.append(finding("remapped_rows", "info", None, "row remapping not supported by this GPU"))
    elif rows.get("error"):
        findings.append(finding("remapped_rows", "info", None, "row remapping not readable: %s" % rows["error"]))
    else:
        evidence = {k: rows.get(k) for k in ("correctable", "uncorrectable", "pending", "failure")}
        if rows.get("failure") is True:
            findings.append(
                finding(
                    "remap_failure",
                    "reject",
                    None,
                    "a row remapping failed: the memory has no spare row left where it needed one",
                    evidence,
                )
            )
        if rows.get("pending") is True:
            findings.append(
                finding("remap_pending", "warn", None, "row remapping pending: reset the GPU before use", evidence)
            )
        unc = _count(rows.get("uncorrectable"))
        if unc is not None and unc > max_uncorrectable_rows:
            findings.append(
                finding(
                    "remapped_rows_uncorrectable",
                    "reject",
                    None,
                    "%d rows remapped after uncorrectable errors (more than %d allowed)"
                    % (unc, max_uncorrectable_rows),
                    dict(evidence, allowed=max_uncorrectable_rows),
                )
            )
    pages = snapshot.get("retired_pages")
    if not isinstance(pages, dict):
        findings.append(finding("retired_pages", "info", None, "page retirement not measured"))
    elif pages.get("not_supported"):
        findings.append(finding("retired_pages", "info", None, "page retirement not supported (the GPU remaps rows)"))
    elif pages.get("pending") is True:
        findings.append(
            finding(
                "retired_pages_pending",
                "warn",
                None,
                "page retirement pending: reset the GPU before use",
                {k: pages.get(k) for k in ("single_bit", "double_bit", "pending")},
            )
        )
    return findings


def _growth(before, after):
    """after - before for two counts; None when either is unknown or the counter was reset."""
    b, a = _count(before), _count(after)
    if b is None or a is None or a < b:
        return None
    return a - b


def counter_growth(before, after):
    """Growth of the link error counters between two snapshots of one GPU.

    Returns ``{"nvlink": {link: {counter: delta}}, "pcie_replay": delta}`` with only the
    counters that grew; counters missing from either snapshot, or lower in the second (a
    driver reload resets them), are left out.
    """
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    grown = {"nvlink": {}, "pcie_replay": None}
    links_before = before.get("nvlink_errors") if isinstance(before.get("nvlink_errors"), dict) else {}
    links_after = after.get("nvlink_errors") if isinstance(after.get("nvlink_errors"), dict) else {}
    for link in sorted(links_after, key=str):
        b = links_before.get(link) if isinstance(links_before.get(link), dict) else {}
        a = links_after[link] if isinstance(links_after[link], dict) else {}
        for counter in NVLINK_COUNTERS:
            delta = _growth(b.get(counter), a.get(counter))
            if delta:
                grown["nvlink"].setdefault(str(link), {})[counter] = delta
    delta = _growth(before.get("pcie_replay"), after.get("pcie_replay"))
    if delta:
        grown["pcie_replay"] = delta
    return grown


def evaluate_link_errors(before, after, previous=None):
    """Findings for growing NVLink error counters and PCIe replays.

    ``before``/``after``: snapshots of one GPU taken before and after the acceptance load.
    ``previous``: the ``after`` snapshot the last acceptance of the same GPU recorded (None
    when unknown). Growth under the load warns; growth since the last acceptance warns
    too. Replays and recoveries are retried transfers: the link works but is marginal.
    """
    findings = []
    for label, old, new, check_suffix in (
        ("during the acceptance load", before, after, "growing"),
        ("since the last acceptance", previous, before, "grew_since_last"),
    ):
        if not isinstance(old, dict) or not isinstance(new, dict):
            continue
        grown = counter_growth(old, new)
        for link, counters in sorted(grown["nvlink"].items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0):
            findings.append(
                finding(
                    "nvlink_errors_%s" % check_suffix,
                    "warn",
                    None,
                    "NVLink %s error counters grew %s: %s"
                    % (link, label, ", ".join("%s +%d" % (c, d) for c, d in sorted(counters.items()))),
                    {"link": link, "growth": counters},
                )
            )
        if grown["pcie_replay"]:
            findings.append(
                finding(
                    "pcie_replay_%s" % check_suffix,
                    "warn",
                    None,
                    "PCIe replay counter grew by %s %s" % (grown["pcie_replay"], label),
                    {"growth": grown["pcie_replay"], "before": old.get("pcie_replay"), "after": new.get("pcie_replay")},
                )
            )
    if isinstance(after, dict) and after.get("pcie_replay") is None and after.get("pcie_replay_not_supported"):
        findings.append(finding("pcie_replay", "info", None, "PCIe replay counter not supported"))
    return findings


# Reasons under which a lower clock is the GPU doing what it was built to do: it holds its
# power limit or its temperature target.
BY_DESIGN_REASONS = ("sw_power_cap", "sw_thermal")


def evaluate_clock_samples(samples, max_sm_mhz, min_fraction, max_low_share):
    """Judge SM clock samples taken under sustained load.

    ``samples``: ``[{"sm_mhz": int, "reasons": [throttle reason names], "power_w": float}]``.
    Samples with ``gpu_idle`` active are not under load and are skipped. A loaded sample
    is low when its clock is below ``min_fraction`` of ``max_sm_mhz``. Each low sample is
    explained by its reasons: a critical one (hardware slowdown, hardware thermal, power
    brake) is a fault; a power cap or the thermal target is by design; anything else
    (no reason, an application clock or a locked clock, a board limit) is unexplained.

    Returns ``(summary, findings)``. When more than ``max_low_share`` of the loaded
    samples are low for a critical reason, or unexplained, the GPU is rejected, naming the
    reasons that were active; low by the thermal target alone warns (check the cooling).
    """
    summary = {"samples": 0, "loaded": 0, "max_sm_mhz": max_sm_mhz}
    if not samples or not max_sm_mhz:
        return None, [finding("clocks", "info", None, "SM clocks under load not measured")]
    loaded = []
    for s in samples:
        if not isinstance(s, dict) or not isinstance(s.get("sm_mhz"), (int, float)):
            continue
        names = [classify_throttle_reason(r)[0] for r in s.get("reasons") or []]
        if "gpu_idle" in names:
            continue
        loaded.append((float(s["sm_mhz"]), names, s.get("power_w")))
    summary["samples"] = len(samples)
    summary["loaded"] = len(loaded)
    if not loaded:
        return summary, [finding("clocks", "info", None, "no SM clock sample under load")]
    buckets = {"critical": [], "by_design": [], "thermal": [], "unexplained": []}
    reasons_seen = {}
    for mhz, names, _power in loaded:
        for n in names:
            reasons_seen[n] = reasons_seen.get(n, 0) + 1
        if mhz >= min_fraction * max_sm_mhz:
            continue
        critical = [n for n in names if classify_throttle_reason(n)[1] == "critical"]
        if critical:
            buckets["critical"].append(critical)
        elif "sw_power_cap" in names:
            buckets["by_design"].append(names)
        elif "sw_thermal" in names:
            buckets["thermal"].append(names)
        else:
            buckets["unexplained"].append(names)
    clocks = [mhz for mhz, _n, _p in loaded]
    powers = [p for _m, _n, p in loaded if isinstance(p, (int, float))]
    med = median(clocks)
    summary.update(
        {
            "median_sm_mhz": med,
            "min_sm_mhz": min(clocks),
            "median_fraction": round(med / max_sm_mhz, 4),
            "median_power_w": median(powers) if powers else None,
            "low_share": {k: round(len(v) / float(len(loaded)), 4) for k, v in buckets.items()},
            "reasons_seen": reasons_seen,
        }
    )
    findings = []

    def active(bucket):
        seen = {}
        for names in bucket:
            for n in names:
                seen[n] = seen.get(n, 0) + 1
        return sorted(seen, key=lambda n: (-seen[n], n))

    evidence = {"min_fraction": min_fraction, "max_low_share": max_low_share, "max_sm_mhz": max_sm_mhz}
    share = summary["low_share"]
    if share["critical"] > max_low_share:
        reasons = active(buckets["critical"])
        findings.append(
            finding(
                "clock_throttled_hw",
                "reject",
                None,
                "SM clock below %d%% of %d MHz in %d%% of the samples under load, held by %s"
                % (round(min_fraction * 100), max_sm_mhz, round(share["critical"] * 100), ", ".join(reasons)),
                dict(evidence, share=share["critical"], reasons=reasons, median_sm_mhz=med),
            )
        )
    if share["unexplained"] > max_low_share:
        reasons = active(buckets["unexplained"])
        findings.append(
            finding(
                "clock_low",
                "reject",
                None,
                "SM clock below %d%% of %d MHz in %d%% of the samples under load without a power or thermal cap"
                " (active reasons: %s)"
                % (
                    round(min_fraction * 100),
                    max_sm_mhz,
                    round(share["unexplained"] * 100),
                    ", ".join(reasons) if reasons else "none",
                ),
                dict(evidence, share=share["unexplained"], reasons=reasons, median_sm_mhz=med),
            )
        )
    if share["thermal"] > max_low_share:
        findings.append(
            finding(
                "clock_thermal",
                "warn",
                None,
                "SM clock held below %d%% of %d MHz by the temperature target in %d%% of the samples: check the cooling"
                % (round(min_fraction * 100), max_sm_mhz, round(share["thermal"] * 100)),
                dict(evidence, share=share["thermal"], median_sm_mhz=med),
            )
        )
    return summary, findings
