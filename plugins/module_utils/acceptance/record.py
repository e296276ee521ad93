# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Acceptance's record: the journal entry (``acceptance.json``), the figures the fleet report
compares, and the Prometheus textfile.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import atomic_write
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import ACCEPTANCE_FILE, Journal
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.metrics import escape_label, format_value

from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance.levels import VERDICT_EXIT_CODES
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance.limits import finite_number
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance.judging import rounded
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance.runner import summarize_burn_in


HISTORY_KEEP = 20
RECORD_FILE = ACCEPTANCE_FILE
RECORD_SCHEMA = 1


# --------------------------------------------------------------------------- the node's record
#
# The journal keeps the latest acceptance of the host in <journal_dir>/acceptance.json
# (mode 0600, like the rest of the journal), with a short history; the fleet report reads
# its ``metrics`` (one number per metric for the whole host: the worst GPU or pair) and
# ``gpu_name`` to compare hosts of the same GPU model.


def fleet_metrics(measurements, burn_in_summary=None):
    """One number per metric the fleet compares (reporting/fleet.py ``FLEET_METRICS``) for the
    whole host: its worst GPU or pair."""
    out = {}

    def worst(key, values, better):
        values = [v for v in values if finite_number(v) is not None]
        if values:
            out[key] = rounded(min(values) if better == "higher" else max(values))

    gpus = (measurements or {}).get("gpus") or {}
    for direction in ("h2d", "d2h"):
        for numa in ("local", "remote"):
            key = "%s_%s" % (direction, numa)
            worst(key + "_gbps", [(g.get(key) or {}).get("gbps") for g in gpus.values()], "higher")
    worst("memory_gbps", [(g.get("memory") or {}).get("gbps") for g in gpus.values()], "higher")
    pairs = (measurements or {}).get("pairs") or {}
    worst("p2p_gbps", [p.get("gbps") for p in pairs.values()], "higher")
    worst("p2p_latency_us", [p.get("latency_us") for p in pairs.values()], "lower")
    clocks = (measurements or {}).get("clocks") or {}
    worst("sm_clock_mhz", [c.get("median_sm_mhz") for c in clocks.values()], "higher")
    worst("gemm_tflops", [g.get("tflops_median") for g in (burn_in_summary or {}).get("gpus") or []], "higher")
    return out


def _iso(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def build_record(decision, report, level, now, previous=None):
    """The journal record of one acceptance run (also what the role writes on the controller)."""
    report = report if isinstance(report, dict) else {}
    decision = decision or {}
    gpus = report.get("gpus") or []
    names = sorted({str(g.get("name")) for g in gpus if g.get("name")})
    measurements = decision.get("measurements") or {}
    burn = summarize_burn_in(report.get("burn_in")) if report.get("burn_in") else None
    problems = [
        {"severity": severity, "check": p["check"], "subject": p["subject"], "message": p["message"]}
        for severity, items in (("reject", decision.get("rejections") or []), ("warn", decision.get("warnings") or []))
        for p in items
    ]
    record = {
        "schema": RECORD_SCHEMA,
        "time": _iso(now),
        "timestamp": round(now, 3),
        "level": level,
        "verdict": decision.get("verdict", "reject"),
        "exit_code": decision.get("exit_code", VERDICT_EXIT_CODES["reject"]),
        "summary": decision.get("summary", ""),
        "problems": problems,
        "gpu_name": ", ".join(names) if names else None,
        "gpu_count": len(gpus),
        "gpus": [{"index": g.get("index"), "name": g.get("name"), "uuid": g.get("uuid")} for g in gpus],
        "metrics": fleet_metrics(measurements, burn),
        "measurements": {k: v for k, v in measurements.items() if k != "health"},
        "health": measurements.get("health") or {},
        "notes": decision.get("notes") or [],
    }
    history = list((previous or {}).get("history") or [])
    history.append({k: record[k] for k in ("time", "level", "verdict", "summary")})
    record["history"] = history[-HISTORY_KEEP:]
    return record


def read_record(journal_dir):
    """The last acceptance record in the journal; None when there is none or it is unreadable."""
    path = os.path.join(journal_dir, RECORD_FILE)
    try:
        with open(path) as fh:
            record = json.load(fh)
    except (IOError, OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_record(journal_dir, record, lock_timeout=60):
    """Write the record atomically (mode 0600) under the journal lock."""
    journal = Journal(journal_dir)
    journal.lock(lock_timeout)
    try:
        data = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8")
        atomic_write(os.path.join(journal_dir, RECORD_FILE), data, mode=0o600)
    finally:
        journal.unlock()


# The file's name in node_exporter's textfile directory (stacktune_metrics_dir).
METRICS_FILE = "stacktune_acceptance.prom"
# (name, help), in the order they are written; every family is a gauge. Base units
# (bytes per second, seconds) and ratios, as Prometheus names them.
METRIC_FAMILIES = (
    ("stacktune_acceptance_verdict", "Verdict of the last acceptance: 1 for the verdict given, 0 for the others."),
    ("stacktune_acceptance_exit_code", "Exit code of the last acceptance: 0 pass, 1 warn, 2 reject."),
    ("stacktune_acceptance_timestamp_seconds", "Unix time of the last acceptance."),
    ("stacktune_acceptance_problems", "Checks of the last acceptance that warned or rejected, by check and severity."),
    (
        "stacktune_acceptance_bandwidth_bytes_per_second",
        "Measured copy bandwidth per GPU and path, in bytes per second.",
    ),
    (
        "stacktune_acceptance_bandwidth_ratio",
        "Measured bandwidth over what the link or memory carries (PCIe, memory), per GPU and path.",
    ),
    (
        "stacktune_acceptance_p2p_bandwidth_bytes_per_second",
        "Peer-to-peer copy bandwidth per GPU pair, in bytes per second.",
    ),
    ("stacktune_acceptance_p2p_bandwidth_ratio", "Peer-to-peer bandwidth over the NVLink or PCIe limit, per GPU pair."),
    ("stacktune_acceptance_p2p_latency_seconds", "Time of a small peer-to-peer copy, launch included."),
    ("stacktune_acceptance_sm_clock_ratio", "Median SM clock under the burn-in GEMM over the GPU's maximum SM clock."),
    ("stacktune_acceptance_remapped_rows", "Rows remapped by the GPU, by cause (correctable, uncorrectable)."),
    ("stacktune_acceptance_remap_pending", "1 when a row remapping waits for a GPU reset."),
    ("stacktune_acceptance_remap_failure", "1 when a row remapping has failed."),
)


def _sample(name, labels, value):
    if labels:
        inner = ",".join('%s="%s"' % (k, escape_label(v)) for k, v in sorted(labels.items()))
        return "%s{%s} %s" % (name, inner, format_value(value))
    return "%s %s" % (name, format_value(value))


def _bytes_per_second(gbps):
    """GB/s (10^9 bytes per second, as the measurements are kept) in bytes per second."""
    return round(float(gbps) * 1e9)


def render_metrics(record):
    """The Prometheus textfile of an acceptance record (node_exporter's textfile collector)."""
    samples = {name: [] for name, _help in METRIC_FAMILIES}
    for verdict in ("pass", "warn", "reject"):
        samples["stacktune_acceptance_verdict"].append(({"verdict": verdict}, int(record.get("verdict") == verdict)))
    samples["stacktune_acceptance_exit_code"].append(({}, int(record.get("exit_code", 2))))
    samples["stacktune_acceptance_timestamp_seconds"].append(({}, float(record.get("timestamp") or 0)))
    counts = {}
    for p in record.get("problems") or []:
        key = (p.get("check"), p.get("severity"))
        counts[key] = counts.get(key, 0) + 1
    for (check, severity), count in sorted(counts.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        samples["stacktune_acceptance_problems"].append(({"check": check, "severity": severity}, count))
    measurements = record.get("measurements") or {}
    for gpu, entries in sorted((measurements.get("gpus") or {}).items()):
        for path in ("h2d_local", "d2h_local", "h2d_remote", "d2h_remote", "memory"):
            entry = entries.get(path) or {}
            if finite_number(entry.get("gbps")) is not None:
                samples["stacktune_acceptance_bandwidth_bytes_per_second"].append(
                    ({"gpu": gpu, "path": path}, _bytes_per_second(entry["gbps"]))
                )
            if finite_number(entry.get("fraction")) is not None:
                samples["stacktune_acceptance_bandwidth_ratio"].append(({"gpu": gpu, "path": path}, entry["fraction"]))
    for pair, entry in sorted((measurements.get("pairs") or {}).items()):
        src, _sep, dst = pair.partition("->")
        labels = {"src": src, "dst": dst}
        if finite_number(entry.get("gbps")) is not None:
            samples["stacktune_acceptance_p2p_bandwidth_bytes_per_second"].append(
                (labels, _bytes_per_second(entry["gbps"]))
            )
        if finite_number(entry.get("fraction")) is not None:
            samples["stacktune_acceptance_p2p_bandwidth_ratio"].append((labels, entry["fraction"]))
        if finite_number(entry.get("latency_us")) is not None:
            samples["stacktune_acceptance_p2p_latency_seconds"].append((labels, entry["latency_us"] / 1e6))
    for gpu, clock in sorted((measurements.get("clocks") or {}).items()):
        if finite_number(clock.get("median_fraction")) is not None:
            samples["stacktune_acceptance_sm_clock_ratio"].append(({"gpu": gpu}, clock["median_fraction"]))
    uuids = {g.get("uuid"): "gpu%s" % g.get("index") for g in record.get("gpus") or []}
    for key, snap in sorted((record.get("health") or {}).items()):
        rows = (snap or {}).get("remapped_rows") or {}
        gpu = uuids.get(key, key)
        for cause in ("correctable", "uncorrectable"):
            if finite_number(rows.get(cause)) is not None:
                samples["stacktune_acceptance_remapped_rows"].append(({"gpu": gpu, "cause": cause}, rows[cause]))
        for flag, name in (
            ("pending", "stacktune_acceptance_remap_pending"),
            ("failure", "stacktune_acceptance_remap_failure"),
        ):
            if isinstance(rows.get(flag), bool):
                samples[name].append(({"gpu": gpu}, int(rows[flag])))
    lines = []
    for name, help_text in METRIC_FAMILIES:
        if not samples[name]:
            continue
        lines.append("# HELP %s %s" % (name, help_text))
        lines.append("# TYPE %s gauge" % name)
        for labels, value in samples[name]:
            lines.append(_sample(name, labels, value))
    return "\n".join(lines) + "\n"


def write_metrics(path, text):
    """Write the textfile atomically (mode 0644; the directory is created when missing)."""
    atomic_write(path, text.encode("utf-8"), mode=0o644)
