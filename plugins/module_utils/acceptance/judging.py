# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Acceptance's judging of measurements: bandwidth and latency against the limits, memory and
link health counters, and SM clocks under load (the rules in ``hardware/health.py``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.health import (
    evaluate_clock_samples,
    evaluate_link_errors,
    evaluate_memory_health,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.parsers import decode_clocks_event_reasons

from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance.limits import (
    MEMORY_BANDWIDTH_GBPS,
    finite_number,
    memory_limit_gbps,
    p2p_limit,
    pcie_limit_of,
)


# --------------------------------------------------------------------------- measurements


def rounded(value, digits=3):
    return None if value is None else round(float(value), digits)


def _judge(value, limit, warn_below, reject_below):
    """(fraction, status): ok, warn, reject, not_measured or no_limit."""
    value = finite_number(value)
    if value is None:
        return None, "not_measured"
    if not limit:
        return None, "no_limit"
    fraction = value / limit
    if reject_below > 0 and fraction < reject_below:
        return fraction, "reject"
    if warn_below > 0 and fraction < warn_below:
        return fraction, "warn"
    return fraction, "ok"


def _entry(value, limit, label, warn_below, reject_below):
    fraction, status = _judge(value, limit, warn_below, reject_below)
    return {
        "gbps": rounded(value),
        "limit_gbps": rounded(limit),
        "limit": label,
        "fraction": rounded(fraction, 4),
        "status": status,
    }


def _problem(severity, check, subject, message, evidence=None):
    return {"severity": severity, "check": check, "subject": subject, "message": message, "evidence": evidence or {}}


def _bandwidth_problem(check, subject, what, entry, warn_below, reject_below):
    bound = reject_below if entry["status"] == "reject" else warn_below
    return _problem(
        entry["status"],
        check,
        subject,
        "%s: %.1f GB/s = %d%% of %s (%.1f GB/s), below %d%%"
        % (
            what,
            entry["gbps"],
            round(entry["fraction"] * 100),
            entry["limit"],
            entry["limit_gbps"],
            round(bound * 100),
        ),
        dict(entry, threshold=bound),
    )


DIRECTIONS = {"h2d": "host-to-device", "d2h": "device-to-host"}


def evaluate_bandwidth(report, thresholds, memory_table=MEMORY_BANDWIDTH_GBPS):
    """Per-GPU and per-pair bandwidths as fractions of their limits, and the problems.

    Returns ``(measurements, problems, notes)``. A report without bandwidth results (level
    quick, or a program from before these measurements) has every value "not measured".
    """
    t = thresholds
    devices = {d.get("index"): d for d in report.get("devices") or [] if isinstance(d, dict)}
    names = {g.get("index"): g.get("name") for g in report.get("gpus") or []}
    gpu_bus_ids = {d.get("pci_bus_id") for d in devices.values() if d.get("pci_bus_id")}
    bw = report.get("bandwidth")
    measurements = {"gpus": {}, "pairs": {}, "remote_numa": None}
    problems, notes = [], []
    for idx, name in names.items():
        measurements["gpus"]["gpu%s" % idx] = {"name": name}
    if not isinstance(bw, dict):
        notes.append("bandwidths not measured")
        return measurements, problems, notes
    measurements["remote_numa"] = bw.get("remote_note") or "measured"
    if bw.get("remote_note"):
        notes.append(bw["remote_note"])
    if bw.get("remote_buffer"):
        notes.append("fault injection: the copies labelled local were made from a remote NUMA node")
    if bw.get("error"):
        problems.append(_problem("warn", "measurement_error", "host", "bandwidth measurement failed: %s" % bw["error"]))
    for rec in bw.get("host") or []:
        idx = rec.get("gpu")
        subject = "gpu%s" % idx
        gpu = measurements["gpus"].setdefault(subject, {"name": names.get(idx)})
        label = "remote" if rec.get("numa") == "remote" else "local"
        if rec.get("error"):
            problems.append(
                _problem("warn", "measurement_error", subject, "%s copies failed: %s" % (label, rec["error"]))
            )
        limit, limit_label = pcie_limit_of(devices.get(idx))
        warn, reject = (
            (t["pcie_remote_warn_below"], t["pcie_remote_reject_below"])
            if label == "remote"
            else (t["pcie_warn_below"], t["pcie_reject_below"])
        )
        for direction in ("h2d", "d2h"):
            entry = _entry((rec.get(direction) or {}).get("gbps"), limit, limit_label, warn, reject)
            entry["numa_node"] = rec.get("node")
            gpu["%s_%s" % (direction, label)] = entry
            if entry["status"] in ("warn", "reject"):
                what = "%s copy from NUMA node %s (%s)" % (DIRECTIONS[direction], rec.get("node"), label)
                check = "pcie_remote_bandwidth" if label == "remote" else "pcie_bandwidth"
                problems.append(_bandwidth_problem(check, subject, what, entry, warn, reject))
            elif entry["status"] == "no_limit":
                notes.append("%s: PCIe link generation/width unknown, %s copy not judged" % (subject, direction))
    for rec in bw.get("memory") or []:
        idx = rec.get("gpu")
        subject = "gpu%s" % idx
        gpu = measurements["gpus"].setdefault(subject, {"name": names.get(idx)})
        if rec.get("error"):
            problems.append(_problem("warn", "measurement_error", subject, "memory copy failed: %s" % rec["error"]))
        limit = memory_limit_gbps(names.get(idx), memory_table)
        label = "%s memory" % names.get(idx) if limit else None
        entry = _entry(rec.get("gbps"), limit, label, t["memory_warn_below"], t["memory_reject_below"])
        gpu["memory"] = entry
        if entry["status"] in ("warn", "reject"):
            problems.append(
                _bandwidth_problem(
                    "memory_bandwidth",
                    subject,
                    "device memory copy (read + write)",
                    entry,
                    t["memory_warn_below"],
                    t["memory_reject_below"],
                )
            )
        elif entry["status"] == "no_limit":
            notes.append("%s: no memory bandwidth known for %s, measured but not judged" % (subject, names.get(idx)))
    for rec in bw.get("p2p") or []:
        a, b = rec.get("src"), rec.get("dst")
        subject = "gpu%s->gpu%s" % (a, b)
        if rec.get("error"):
            problems.append(_problem("warn", "measurement_error", subject, "peer copy failed: %s" % rec["error"]))
        limit, label = p2p_limit(devices.get(a), devices.get(b), gpu_bus_ids)
        entry = _entry(rec.get("gbps"), limit, label, t["p2p_warn_below"], t["p2p_reject_below"])
        entry["latency_us"] = rounded(rec.get("latency_us"))
        entry["peer_access"] = rec.get("access")
        measurements["pairs"][subject] = entry
        if entry["status"] in ("warn", "reject"):
            what = "peer copy" if rec.get("access") else "copy without peer access"
            problems.append(
                _bandwidth_problem("p2p_bandwidth", subject, what, entry, t["p2p_warn_below"], t["p2p_reject_below"])
            )
    if len(names) < 2:
        notes.append("one GPU: no peer-to-peer pair to measure")
    return measurements, problems, notes


def _uuid_key(device, gpu):
    return (device or {}).get("uuid") or (gpu or {}).get("uuid") or "gpu%s" % (gpu or {}).get("index")


def evaluate_health(report, thresholds, previous=None):
    """Memory and link health from the NVML snapshots the program took before and after
    its load. ``previous``: the last acceptance record's ``health`` (GPU uuid -> snapshot)."""
    health = report.get("health")
    problems, notes, out = [], [], {}
    if not isinstance(health, dict):
        notes.append("memory and link health not measured")
        return out, problems, notes
    if health.get("error"):
        notes.append("NVML not available: %s" % health["error"])
    devices = {d.get("index"): d for d in report.get("devices") or [] if isinstance(d, dict)}
    before = health.get("before") or {}
    after = health.get("after") or {}
    previous = previous if isinstance(previous, dict) else {}
    for gpu in report.get("gpus") or []:
        idx = gpu.get("index")
        subject = "gpu%s" % idx
        snap_before = before.get(str(idx))
        snap_after = after.get(str(idx)) or snap_before
        key = _uuid_key(devices.get(idx), gpu)
        out[key] = snap_after
        for f in evaluate_memory_health(snap_after, thresholds["max_uncorrectable_remapped_rows"]):
            if f["severity"] == "info":
                notes.append("%s: %s" % (subject, f["message"]))
            else:
                problems.append(_problem(f["severity"], f["id"], subject, f["message"], f["evidence"]))
        for f in evaluate_link_errors(snap_before, snap_after, previous.get(key)):
            if f["severity"] == "info":
                notes.append("%s: %s" % (subject, f["message"]))
            else:
                problems.append(_problem(f["severity"], f["id"], subject, f["message"], f["evidence"]))
    return out, problems, notes


def evaluate_clocks(burn, thresholds):
    """SM clocks under the burn-in GEMM, per GPU: (summaries, problems, notes)."""
    summaries, problems, notes = {}, [], []
    for g in (burn or {}).get("gpus") or []:
        subject = "gpu%s" % g.get("gpu")
        samples = []
        for s in g.get("samples") or []:
            if not isinstance(s, dict):
                continue
            mask = s.get("reasons")
            names = decode_clocks_event_reasons(mask) if isinstance(mask, int) and not isinstance(mask, bool) else []
            samples.append({"sm_mhz": s.get("sm_mhz"), "reasons": names, "power_w": s.get("power_w")})
        if g.get("sampler_error"):
            notes.append("%s: clock sampling failed: %s" % (subject, g["sampler_error"]))
        summary, findings = evaluate_clock_samples(
            samples, g.get("max_sm_mhz"), thresholds["clock_min_fraction"], thresholds["clock_max_low_share"]
        )
        if summary is not None:
            summary["power_limit_w"] = g.get("power_limit_w")
            summaries[subject] = summary
        for f in findings:
            if f["severity"] == "info":
                notes.append("%s: %s" % (subject, f["message"]))
            else:
                problems.append(_problem(f["severity"], f["id"], subject, f["message"], f["evidence"]))
    return summaries, problems, notes
