# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fleet version report: what each host runs, the most common value per field, and the outliers.

Input is the facts of many hosts as :mod:`hardware/topology.py` builds them (``ansible_facts['stacktune']``),
optionally with each host's installed driver package versions (the driver role's result).
Per inventory group, and for all hosts together, every field (kernel, driver package /
module / NVML, CUDA, cuDNN, NCCL, BIOS, CPU microcode, GPU VBIOS, GPU count, PCIe state ...)
gets its most common value and the hosts that differ from it. With the hosts' latest
acceptance records, the measured bandwidths, latencies and clocks are compared per GPU
model with a robust rule (median and MAD), naming the hosts that are slower than their
peers. Nothing here touches a host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math

from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import median

SCHEMA_VERSION = 1

# (metric, which way is better, label): the host-level numbers the fleet compares, from
# each host's acceptance record (acceptance/record.py ``fleet_metrics``).
FLEET_METRICS = (
    ("h2d_local_gbps", "higher", "host-to-device, local NUMA (GB/s)"),
    ("d2h_local_gbps", "higher", "device-to-host, local NUMA (GB/s)"),
    ("h2d_remote_gbps", "higher", "host-to-device, remote NUMA (GB/s)"),
    ("d2h_remote_gbps", "higher", "device-to-host, remote NUMA (GB/s)"),
    ("p2p_gbps", "higher", "peer-to-peer (GB/s)"),
    ("p2p_latency_us", "lower", "peer-to-peer small copy (us)"),
    ("memory_gbps", "higher", "device memory (GB/s)"),
    ("gemm_tflops", "higher", "burn-in GEMM (TFLOP/s)"),
    ("sm_clock_mhz", "higher", "SM clock under burn-in (MHz)"),
)

# (field, Markdown label), in report order.
FIELDS = (
    ("kernel", "Kernel"),
    ("os", "OS"),
    ("driver_package", "Driver (package)"),
    ("driver_module", "Driver (kernel module)"),
    ("driver_nvml", "Driver (NVML)"),
    ("cuda_driver", "CUDA (driver supports)"),
    ("cuda_runtime", "CUDA runtime"),
    ("cudnn", "cuDNN"),
    ("nccl", "NCCL"),
    ("bios", "BIOS"),
    ("microcode", "CPU microcode"),
    ("gpu_model", "GPU model"),
    ("gpu_count", "GPU count"),
    ("vbios", "GPU VBIOS"),
    ("pcie", "PCIe"),
)
FIELD_NAMES = tuple(name for name, _label in FIELDS)
LABELS = dict(FIELDS)

# Inventory groups that say nothing about the hardware.
SKIPPED_GROUPS = ("all", "ungrouped")


def _get(data, *path):
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _joined(values):
    """One string for a set of per-GPU values: the distinct ones, sorted; None when none is known."""
    known = sorted({str(v) for v in values if v is not None})
    return ", ".join(known) if known else None


def _link(gen, width):
    if gen is None or width is None:
        return None
    return "Gen%s x%s" % (gen, width)


def gpu_pcie(gpu):
    """PCIe state of one GPU: its link, its maximum, and whether it is degraded.

    A lane-count drop is always degraded. A generation drop on a GPU that NVML reports
    idle is power saving (the link speeds up under load), so the link is reported at
    its maximum with ``idle_downshift`` set; on a busy GPU it is degraded.
    """
    pcie = gpu.get("pcie") or {}
    gen_cur, gen_max = pcie.get("gen_current"), pcie.get("gen_max")
    width_cur, width_max = pcie.get("width_current"), pcie.get("width_max")
    width_low = None not in (width_cur, width_max) and width_cur < width_max
    gen_low = None not in (gen_cur, gen_max) and gen_cur < gen_max
    idle = "gpu_idle" in (gpu.get("throttle_reasons") or [])
    degraded = bool(width_low or (gen_low and not idle))
    current = _link(gen_cur, width_cur)
    maximum = _link(gen_max, width_max)
    if degraded:
        state = "%s (max %s)" % (current, maximum)
    elif gen_low:
        state = maximum
    else:
        state = current or maximum
    return {
        "gpu": gpu.get("index"),
        "current": current,
        "max": maximum,
        "state": state or "unknown",
        "degraded": degraded,
        "idle_downshift": bool(gen_low and idle and not width_low),
    }


def _pcie_summary(links):
    if not links:
        return None
    if any(link["degraded"] for link in links):
        return "degraded"
    return _joined(link["state"] for link in links)


def _os_name(os_facts):
    if not isinstance(os_facts, dict):
        return None
    parts = [p for p in (os_facts.get("id"), os_facts.get("version_id")) if p]
    return " ".join(parts) if parts else None


def _package_versions(value):
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return _joined(value)
    text = str(value).strip()
    return text or None


def stacktune_facts(entry):
    """The stacktune facts from ansible_facts['stacktune'], ansible_facts, or a hostvars entry."""
    if not isinstance(entry, dict):
        return None
    if "schema_version" in entry:
        return entry
    if isinstance(entry.get("stacktune"), dict):
        return entry["stacktune"]
    facts = entry.get("ansible_facts")
    if isinstance(facts, dict) and isinstance(facts.get("stacktune"), dict):
        return facts["stacktune"]
    return None


def host_row(facts, driver_packages=None):
    """The report fields of one host from its stacktune facts (None: facts missing)."""
    gpus = [g for g in (_get(facts, "gpus") or []) if isinstance(g, dict)]
    links = [gpu_pcie(g) for g in gpus]
    row = {
        "kernel": _get(facts, "host", "kernel_release"),
        "os": _os_name(_get(facts, "host", "os")),
        "driver_package": _package_versions(driver_packages),
        "driver_module": _get(facts, "driver", "kernel_module_version"),
        "driver_nvml": _get(facts, "driver", "nvml_version"),
        "cuda_driver": _get(facts, "driver", "cuda_driver_version"),
        "cuda_runtime": _get(facts, "libraries", "cuda_runtime"),
        "cudnn": _get(facts, "libraries", "cudnn"),
        "nccl": _get(facts, "libraries", "nccl"),
        "bios": _get(facts, "host", "bios", "version"),
        "microcode": _get(facts, "host", "cpu_microcode"),
        "gpu_model": _joined(g.get("name") for g in gpus),
        "gpu_count": _get(facts, "gpu_count") if facts is not None else None,
        "vbios": _joined(g.get("vbios") for g in gpus),
        "pcie": _pcie_summary(links),
    }
    if row["gpu_count"] is None and facts is not None:
        row["gpu_count"] = len(gpus)
    row["pcie_gpus"] = ["gpu%s %s" % (link["gpu"], link["state"]) for link in links]
    return row


def _sort_key(value):
    # None sorts last; numbers and strings compare as text so mixed values never raise.
    return (value is None, "" if value is None else str(value))


def summarize_field(values):
    """Most common value of one field over hosts, and the hosts that differ from it.

    ``values`` maps host -> value (None counts as a value: "unknown"). When the two most
    common values are held by the same number of hosts there is no majority: ``majority``
    is None, ``tie`` is true and no host is called an outlier (every value is listed).
    """
    counts = {}
    order = []
    for host in sorted(values):
        value = values[host]
        key = _sort_key(value)
        if key not in counts:
            counts[key] = {"value": value, "count": 0, "hosts": []}
            order.append(key)
        counts[key]["count"] += 1
        counts[key]["hosts"].append(host)
    ranked = sorted((counts[k] for k in order), key=lambda c: (-c["count"], _sort_key(c["value"])))
    total = len(values)
    tie = len(ranked) > 1 and ranked[0]["count"] == ranked[1]["count"]
    majority = None if (tie or not ranked) else ranked[0]
    outliers = {}
    if majority is not None:
        for entry in ranked[1:]:
            for host in entry["hosts"]:
                outliers[host] = entry["value"]
    return {
        "majority": majority["value"] if majority else None,
        "majority_hosts": majority["count"] if majority else 0,
        "hosts": total,
        "share": round(float(majority["count"]) / total, 4) if (majority and total) else 0.0,
        "unanimous": len(ranked) == 1,
        "tie": tie,
        "values": ranked,
        "outliers": outliers,
    }


def _group_members(groups, hosts):
    """Inventory groups (name -> hosts) restricted to the reported hosts; empty groups dropped."""
    members = {}
    for name, group_hosts in sorted((groups or {}).items()):
        if name in SKIPPED_GROUPS or not isinstance(group_hosts, (list, tuple)):
            continue
        inside = sorted(h for h in group_hosts if h in hosts)
        if inside:
            members[name] = inside
    return members


def summarize_group(rows, hosts, fields):
    summary = {}
    outlier_hosts = {}
    for field in fields:
        result = summarize_field({h: rows[h][field] for h in hosts})
        summary[field] = result
        for host in result["outliers"]:
            outlier_hosts.setdefault(host, []).append(field)
    return {"hosts": list(hosts), "fields": summary, "outlier_hosts": outlier_hosts}


def fleet_report(host_facts, groups=None, driver_packages=None, fields=None, acceptance=None, acceptance_rule=None):
    """The fleet report as a dict.

    ``host_facts``: host -> stacktune facts (or an ansible_facts / hostvars entry holding
    them; None for a host whose facts are missing). ``groups``: inventory group -> hosts
    (Ansible's ``groups``). ``driver_packages``: host -> installed driver package versions
    (a list or a string). ``fields``: the fields to compare (default: all of FIELDS).
    ``acceptance``: host -> latest acceptance record (None: not compared);
    ``acceptance_rule``: min_hosts, z, min_deviation for :func:`acceptance_report`.
    """
    if not isinstance(host_facts, dict):
        raise TypeError("fleet_report expects a dict of host -> stacktune facts, got %s" % type(host_facts).__name__)
    fields = list(fields) if fields else list(FIELD_NAMES)
    unknown = [f for f in fields if f not in LABELS]
    if unknown:
        raise ValueError("unknown field(s) %s; known: %s" % (", ".join(unknown), ", ".join(FIELD_NAMES)))
    driver_packages = driver_packages or {}
    rows = {}
    missing = []
    for host in sorted(host_facts):
        facts = stacktune_facts(host_facts[host])
        if facts is None:
            missing.append(host)
            continue
        rows[host] = host_row(facts, driver_packages.get(host))
    hosts = sorted(rows)
    report_groups = {"all": summarize_group(rows, hosts, fields)} if hosts else {}
    for name, members in _group_members(groups, set(hosts)).items():
        report_groups[name] = summarize_group(rows, members, fields)
    for host in hosts:
        rows[host]["groups"] = sorted(n for n, g in report_groups.items() if n != "all" and host in g["hosts"])
    report = {
        "schema_version": SCHEMA_VERSION,
        "fields": fields,
        "host_count": len(hosts),
        "hosts": rows,
        "missing_facts": missing,
        "groups": report_groups,
        "outlier_hosts": sorted(report_groups["all"]["outlier_hosts"]) if hosts else [],
    }
    if acceptance is not None:
        report["acceptance"] = acceptance_report(acceptance, **(acceptance_rule or {}))
    return report


# --------------------------------------------------------------------------- Markdown


def _cell(value):
    text = "unknown" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _group_table(group, fields):
    lines = [
        "| field | most common | hosts | outliers |",
        "| --- | --- | --- | --- |",
    ]
    for field in fields:
        s = group["fields"][field]
        if s["tie"]:
            common = "no majority: " + "; ".join("%s (%d)" % (_cell(v["value"]), v["count"]) for v in s["values"])
            share = "-"
        else:
            common = _cell(s["majority"])
            share = "%d/%d" % (s["majority_hosts"], s["hosts"])
        outliers = ", ".join("%s: %s" % (h, _cell(v)) for h, v in sorted(s["outliers"].items())) or "none"
        lines.append("| %s | %s | %s | %s |" % (LABELS[field], common, share, outliers))
    return lines


def render_markdown(report, title="Fleet report", generated_at=None):
    """The report as Markdown: one table per group (all hosts first), then every host's values."""
    fields = report["fields"]
    lines = ["# %s" % title, ""]
    if generated_at:
        lines += ["Generated %s from `stacktune.gpu.gpu_topology_facts`." % generated_at, ""]
    all_group = report["groups"].get("all")
    lines.append("%d host(s)." % report["host_count"])
    if all_group:
        flagged = all_group["outlier_hosts"]
        if flagged:
            lines.append(
                "Outliers across all hosts: "
                + "; ".join("%s (%s)" % (h, ", ".join(LABELS[f] for f in flagged[h])) for h in sorted(flagged))
                + "."
            )
        else:
            lines.append("Every field agrees across all hosts, or is split with no majority.")
    if report["missing_facts"]:
        lines.append("No facts for: %s." % ", ".join(report["missing_facts"]))
    lines.append("")
    names = ["all"] + sorted(n for n in report["groups"] if n != "all")
    for name in names:
        if name not in report["groups"]:
            continue
        group = report["groups"][name]
        lines.append("## %s (%d host(s))" % ("All hosts" if name == "all" else "Group " + name, len(group["hosts"])))
        lines.append("")
        lines += _group_table(group, fields)
        lines.append("")
    if report["hosts"]:
        lines.append("## Hosts")
        lines.append("")
        lines.append("| host | " + " | ".join(LABELS[f] for f in fields) + " |")
        lines.append("| --- " * (len(fields) + 1) + "|")
        flagged = all_group["outlier_hosts"] if all_group else {}
        for host in sorted(report["hosts"]):
            row = report["hosts"][host]
            cells = []
            for field in fields:
                cell = _cell(row[field])
                cells.append("**%s**" % cell if field in flagged.get(host, []) else cell)
            lines.append("| %s | %s |" % (host, " | ".join(cells)))
        lines.append("")
        degraded = [(h, r["pcie_gpus"]) for h, r in sorted(report["hosts"].items()) if r["pcie"] == "degraded"]
        if degraded:
            lines.append("PCIe links below their maximum:")
            lines.append("")
            for host, links in degraded:
                lines.append("- %s: %s" % (host, ", ".join(link for link in links if "(max" in link)))
            lines.append("")
    if report.get("acceptance"):
        lines += render_acceptance_markdown(report["acceptance"])
    return "\n".join(lines)


# --------------------------------------------------------------------------- acceptance measurements
#
# Each host's latest acceptance record (the journal's acceptance.json, as the acceptance
# role writes it) holds one number per metric for the whole host (its worst GPU or pair).
# Hosts are grouped by GPU model; within a group, a host is an outlier for a metric when
# it is worse than the group's median by at least ``min_deviation`` (relative) AND by at
# least ``z`` robust z-units, where one unit is the median absolute deviation scaled by
# 1.4826 (the standard deviation, for normally distributed values). The relative floor
# keeps identical hosts with a tiny spread from naming each other; the z floor keeps a
# noisy metric from naming its normal spread. Groups smaller than ``min_hosts`` are not
# judged: they say "cannot compare: N hosts".

MAD_SCALE = 1.4826
ACCEPTANCE_DEFAULTS = {"min_hosts": 5, "z": 3.5, "min_deviation": 0.1}


def _num(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def check_acceptance_rule(min_hosts=None, z=None, min_deviation=None):
    """The outlier rule with defaults filled in; ValueError naming the bad setting."""
    rule = dict(ACCEPTANCE_DEFAULTS)
    if min_hosts is not None:
        if isinstance(min_hosts, bool) or not isinstance(min_hosts, int) or min_hosts < 3:
            raise ValueError(
                "acceptance_min_hosts (fleet_report_acceptance_min_hosts) must be a whole number >= 3, got %r"
                % (min_hosts,)
            )
        rule["min_hosts"] = min_hosts
    if z is not None:
        if _num(z) is None or z <= 0:
            raise ValueError("acceptance_z (fleet_report_acceptance_z) must be a number above 0, got %r" % (z,))
        rule["z"] = float(z)
    if min_deviation is not None:
        if _num(min_deviation) is None or not 0 <= min_deviation < 1:
            raise ValueError(
                "acceptance_min_deviation (fleet_report_acceptance_min_deviation) must be from 0 to below 1, got %r"
                % (min_deviation,)
            )
        rule["min_deviation"] = float(min_deviation)
    return rule


def robust_outliers(values, better="higher", min_hosts=5, z=3.5, min_deviation=0.1):
    """Outliers of one metric over hosts of one group.

    ``values``: host -> number. Returns {status, hosts, median, mad, outliers}; status is
    "compared" or "cannot_compare" (fewer than ``min_hosts`` hosts with a value, then
    ``message`` says "cannot compare: N hosts"). Each outlier: value, deviation (relative
    to the median, negative when lower), z (None when the MAD is 0: every other host
    agrees exactly).
    """
    values = {h: _num(v) for h, v in values.items() if _num(v) is not None}
    n = len(values)
    out = {"status": "compared", "hosts": n, "median": None, "mad": None, "outliers": {}}
    if n < min_hosts:
        out["status"] = "cannot_compare"
        out["message"] = "cannot compare: %d host%s" % (n, "" if n == 1 else "s")
        return out
    med = median(values.values())
    mad = median([abs(v - med) for v in values.values()]) * MAD_SCALE
    out["median"] = round(med, 4)
    out["mad"] = round(mad, 4)
    for host in sorted(values):
        value = values[host]
        worse = (med - value) if better == "higher" else (value - med)
        if worse <= 0 or med == 0:
            continue
        relative = worse / abs(med)
        score = worse / mad if mad > 0 else None
        if relative >= min_deviation and (score is None or score >= z):
            out["outliers"][host] = {
                "value": value,
                "deviation": round((value - med) / abs(med), 4),
                "z": round(score, 2) if score is not None else None,
            }
    return out


def _record_of(entry):
    """The acceptance record from a journal record, a slurped file's text, or None."""
    if isinstance(entry, str):
        try:
            entry = json.loads(entry)
        except ValueError:
            return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("metrics"), dict) else None


def acceptance_report(records, min_hosts=None, z=None, min_deviation=None):
    """Compare the hosts' latest acceptance measurements per GPU model.

    ``records``: host -> acceptance record (or its JSON text; None when the host has none).
    Returns {rule, hosts (host -> gpu_name, verdict, time, level), missing (hosts without a
    record), groups (GPU model -> hosts, metrics (metric -> robust_outliers result, with
    better and label), outlier_hosts (host -> metrics)), outlier_hosts (host -> list of
    "model: metric")}.
    """
    if not isinstance(records, dict):
        raise TypeError("acceptance records must be a dict of host -> record, got %s" % type(records).__name__)
    rule = check_acceptance_rule(min_hosts, z, min_deviation)
    hosts, missing, by_model = {}, [], {}
    for host in sorted(records):
        record = _record_of(records[host])
        if record is None:
            missing.append(host)
            continue
        model = record.get("gpu_name") or "unknown"
        hosts[host] = {
            "gpu_name": model,
            "verdict": record.get("verdict"),
            "time": record.get("time"),
            "level": record.get("level"),
            "metrics": record["metrics"],
        }
        by_model.setdefault(model, []).append(host)
    groups = {}
    flagged = {}
    for model, members in sorted(by_model.items()):
        metrics = {}
        outlier_hosts = {}
        for name, better, label in FLEET_METRICS:
            values = {h: hosts[h]["metrics"].get(name) for h in members}
            if not any(_num(v) is not None for v in values.values()):
                continue
            result = robust_outliers(values, better, rule["min_hosts"], rule["z"], rule["min_deviation"])
            result.update({"better": better, "label": label})
            metrics[name] = result
            for host in result["outliers"]:
                outlier_hosts.setdefault(host, []).append(name)
                flagged.setdefault(host, []).append("%s: %s" % (model, name))
        groups[model] = {"hosts": members, "metrics": metrics, "outlier_hosts": outlier_hosts}
    return {"rule": rule, "hosts": hosts, "missing": missing, "groups": groups, "outlier_hosts": flagged}


def _fmt_num(value):
    if value is None:
        return "-"
    return ("%.3f" % value).rstrip("0").rstrip(".") if abs(value) < 1000 else "%.0f" % value


def render_acceptance_markdown(acc):
    """The acceptance comparison as Markdown lines (one table per GPU model)."""
    rule = acc["rule"]
    lines = [
        "## Acceptance measurements",
        "",
        "Per GPU model; an outlier is worse than the median by at least %d%% and %.1f robust z (MAD x %.4f); "
        "groups under %d hosts are not compared."
        % (round(rule["min_deviation"] * 100), rule["z"], MAD_SCALE, rule["min_hosts"]),
        "",
    ]
    if acc["missing"]:
        lines += ["No acceptance record for: %s." % ", ".join(acc["missing"]), ""]
    if not acc["groups"]:
        lines += ["No acceptance measurements.", ""]
    for model, group in sorted(acc["groups"].items()):
        lines += ["### %s (%d host(s))" % (_cell(model), len(group["hosts"])), ""]
        lines += ["| metric | hosts | median | MAD x 1.4826 | outliers |", "| --- | --- | --- | --- | --- |"]
        for result in group["metrics"].values():
            if result["status"] == "cannot_compare":
                lines.append("| %s | %d | - | - | %s |" % (result["label"], result["hosts"], result["message"]))
                continue
            outliers = (
                ", ".join(
                    "%s: %s (%+.1f%%%s)"
                    % (h, _fmt_num(o["value"]), o["deviation"] * 100, ", z %.1f" % o["z"] if o["z"] is not None else "")
                    for h, o in sorted(result["outliers"].items())
                )
                or "none"
            )
            lines.append(
                "| %s | %d | %s | %s | %s |"
                % (result["label"], result["hosts"], _fmt_num(result["median"]), _fmt_num(result["mad"]), outliers)
            )
        lines.append("")
    return lines
