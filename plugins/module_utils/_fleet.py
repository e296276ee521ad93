# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fleet version report: what each host runs, the most common value per field, and the outliers.

Input is the facts of many hosts as :mod:`_topology` builds them (``ansible_facts['stacktune']``),
optionally with each host's installed driver package versions (the driver role's result).
Per inventory group, and for all hosts together, every field (kernel, driver package /
module / NVML, CUDA, cuDNN, NCCL, BIOS, CPU microcode, GPU VBIOS, GPU count, PCIe state ...)
gets its most common value and the hosts that differ from it. Nothing here touches a host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

SCHEMA_VERSION = 1

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


def fleet_report(host_facts, groups=None, driver_packages=None, fields=None):
    """The fleet report as a dict.

    ``host_facts``: host -> stacktune facts (or an ansible_facts / hostvars entry holding
    them; None for a host whose facts are missing). ``groups``: inventory group -> hosts
    (Ansible's ``groups``). ``driver_packages``: host -> installed driver package versions
    (a list or a string). ``fields``: the fields to compare (default: all of FIELDS).
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
    return {
        "schema_version": SCHEMA_VERSION,
        "fields": fields,
        "host_count": len(hosts),
        "hosts": rows,
        "missing_facts": missing,
        "groups": report_groups,
        "outlier_hosts": sorted(report_groups["all"]["outlier_hosts"]) if hosts else [],
    }


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
    return "\n".join(lines)
