# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Preflight: decide from ``ansible_facts.stacktune`` whether a host is healthy enough to
tune or accept. Pure logic, stdlib only.

``run_preflight(facts, policy, kernel_log=None)`` returns
``{"ok": bool, "findings": [...], "checks": [...]}``: every finding has id, severity
(info | warning | critical), subject, message and evidence; every check has name,
status (pass | fail | skip) and why. ``ok`` is false when any finding is critical; the
caller decides from ``fail_on`` whether warnings also stop the run.

Facts are consumed as the facts schema (schema_version 1) defines them. PCIe link
degradation, driver/NVML/kernel-module disagreement and NVML availability are taken from
``facts.findings`` as the facts module reported them, not recomputed here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import numbers

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import compat as _compat
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import health as _health
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.findings import finding

SEVERITIES = ("info", "warning", "critical")
FAIL_ON_CHOICES = ("critical", "warning", "never")
POWER_LIMIT_SOURCES = ("limit", "max")

# Policy key -> the variable a user sets (used in error messages). The module passes its
# own option names instead.
DEFAULT_NAMES = {
    "expected_gpu_count": "stacktune_expected_gpu_count",
    "psu_capacity_watts": "stacktune_psu_capacity_watts",
    "platform_watts": "stacktune_platform_watts",
    "power_headroom_percent": "preflight_power_headroom_percent",
    "power_limit_source": "preflight_power_limit_source",
    "driver_denylist": "preflight_driver_denylist",
    "use_default_denylist": "preflight_use_default_denylist",
    "minor_compat_majors": "preflight_cuda_minor_compat_majors",
    "fail_on": "preflight_fail_on",
}

DEFAULT_POLICY = {
    "expected_gpu_count": None,
    "psu_capacity_watts": None,
    "platform_watts": None,
    "power_headroom_percent": 10,
    "power_limit_source": "limit",
    "driver_denylist": [],
    "use_default_denylist": True,
    "minor_compat_majors": list(_compat.DEFAULT_MINOR_COMPAT_MAJORS),
    "fail_on": "critical",
}

# Finding ids reused from the facts module, by check.
FACTS_PCIE_IDS = ("pcie_link_degraded",)
FACTS_DRIVER_MISMATCH_IDS = ("driver_version_mismatch",)
FACTS_ECC_IDS = ("ecc_uncorrected_errors", "remapped_rows_pending", "remapped_rows_failure")
FACTS_NVML_IDS = ("nvml_unavailable",)


def _is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _as_number(v):
    """Numbers and numeric strings (Ansible templating yields strings) -> float; else None."""
    if _is_number(v):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


def validate_policy(policy, names=None):
    """Return a complete, normalized policy; raise ValueError naming the variable at fault."""
    nm = dict(DEFAULT_NAMES)
    nm.update(names or {})
    if policy is None:
        policy = {}
    if not isinstance(policy, dict):
        raise ValueError("policy must be a mapping")
    unknown = set(policy) - set(DEFAULT_POLICY)
    if unknown:
        raise ValueError("unknown policy key(s): %s" % ", ".join(sorted(unknown)))
    out = dict(DEFAULT_POLICY)
    for k, v in policy.items():
        if v is not None or k in ("expected_gpu_count", "psu_capacity_watts", "platform_watts"):
            out[k] = v

    v = out["expected_gpu_count"]
    if v is not None:
        n = _as_number(v)
        if n is None or n != int(n) or n < 0:
            raise ValueError("%s must be a whole number >= 0, got %r" % (nm["expected_gpu_count"], v))
        out["expected_gpu_count"] = int(n)

    v = out["psu_capacity_watts"]
    if v is not None:
        n = _as_number(v)
        if n is None or n <= 0:
            raise ValueError("%s must be a positive number (watts), got %r" % (nm["psu_capacity_watts"], v))
        out["psu_capacity_watts"] = n

    v = out["platform_watts"]
    if v is not None:
        n = _as_number(v)
        if n is None or n < 0:
            raise ValueError("%s must be a number >= 0 (watts), got %r" % (nm["platform_watts"], v))
        out["platform_watts"] = n

    v = out["power_headroom_percent"]
    n = _as_number(v)
    if n is None or not 0 <= n < 100:
        raise ValueError("%s must be a number from 0 to below 100, got %r" % (nm["power_headroom_percent"], v))
    out["power_headroom_percent"] = n

    if out["power_limit_source"] not in POWER_LIMIT_SOURCES:
        raise ValueError(
            "%s must be one of %s, got %r"
            % (nm["power_limit_source"], ", ".join(POWER_LIMIT_SOURCES), out["power_limit_source"])
        )

    if not isinstance(out["use_default_denylist"], bool):
        raise ValueError("%s must be a boolean, got %r" % (nm["use_default_denylist"], out["use_default_denylist"]))

    dl = out["driver_denylist"]
    if not isinstance(dl, (list, tuple)):
        raise ValueError("%s must be a list of {version|prefix|min/max, reason} entries" % nm["driver_denylist"])
    out["driver_denylist"] = list(dl)
    # raises ValueError naming the variable and the entry index
    _compat.build_denylist(out["driver_denylist"], use_default=False, where=nm["driver_denylist"])

    majors = out["minor_compat_majors"]
    if not isinstance(majors, (list, tuple)):
        raise ValueError("%s must be a list of CUDA major versions" % nm["minor_compat_majors"])
    clean = []
    for m in majors:
        n = _as_number(m)
        if n is None or n != int(n) or n < 1:
            raise ValueError(
                "%s must hold CUDA major versions (11, 12, 13 ...), got %r" % (nm["minor_compat_majors"], m)
            )
        clean.append(int(n))
    out["minor_compat_majors"] = clean

    if out["fail_on"] not in FAIL_ON_CHOICES:
        raise ValueError("%s must be one of %s, got %r" % (nm["fail_on"], ", ".join(FAIL_ON_CHOICES), out["fail_on"]))
    return out


class _Run:
    def __init__(self):
        self.findings = []
        self.checks = []

    def check(self, name, findings, skip_why=None, pass_why=""):
        """Record a check: skip when skip_why, fail when a finding is warning or worse."""
        self.findings.extend(findings)
        if skip_why is not None:
            self.checks.append({"name": name, "status": "skip", "why": skip_why})
            return
        bad = [f for f in findings if f["severity"] in ("warning", "critical")]
        if bad:
            why = "; ".join(f["message"] for f in bad)
            self.checks.append({"name": name, "status": "fail", "why": why})
        else:
            self.checks.append({"name": name, "status": "pass", "why": pass_why})


def _facts_findings(facts, ids):
    return [dict(f) for f in (facts.get("findings") or []) if isinstance(f, dict) and f.get("id") in ids]


def _gpu_subject(gpu):
    return "gpu%s" % gpu.get("index")


def _check_nvml(run, facts, policy):
    gpus = facts.get("gpus") or []
    expected = policy["expected_gpu_count"]
    reused = _facts_findings(facts, FACTS_NVML_IDS)
    unavailable = bool(reused) or (not gpus and facts.get("reason"))
    if not unavailable:
        run.check("nvml", [], pass_why="NVML answered for %d GPU(s)" % len(gpus))
        return
    reason = facts.get("reason") or (reused[0]["message"] if reused else "no GPU reported")
    if expected:
        f = reused or [finding("nvml_unavailable", "critical", "host", "NVML unavailable: %s" % reason, {})]
        for x in f:
            x["severity"] = "critical"
            x["message"] = "%s; %d GPU(s) expected" % (x["message"], expected)
            x.setdefault("evidence", {})["expected_gpu_count"] = expected
        run.check("nvml", f)
        return
    for x in reused:
        x["severity"] = "info"
    run.check("nvml", reused, pass_why="no GPU expected on this host (%s)" % reason)


def _check_gpu_count(run, facts, policy):
    expected = policy["expected_gpu_count"]
    if expected is None:
        run.check("gpu_count", [], skip_why="expected GPU count not declared")
        return
    found = facts.get("gpu_count")
    if found is None:
        found = len(facts.get("gpus") or [])
    if found == expected:
        run.check("gpu_count", [], pass_why="%d GPU(s) as expected" % found)
        return
    sev = "critical" if found < expected else "warning"
    msg = "%d GPU(s) found, %d expected" % (found, expected)
    if found < expected:
        msg += " (a GPU may have fallen off the bus or be hidden from the driver)"
    run.check(
        "gpu_count",
        [
            finding(
                "gpu_count_mismatch",
                sev,
                "host",
                msg,
                {
                    "found": found,
                    "expected": expected,
                    "pci_bus_ids": [g.get("pci_bus_id") for g in facts.get("gpus") or []],
                },
            )
        ],
    )


def _check_driver_cuda(run, facts, policy):
    driver = facts.get("driver") or {}
    libs = facts.get("libraries") or {}
    drv = driver.get("nvml_version") or driver.get("kernel_module_version")
    runtime = libs.get("cuda_runtime")
    dcuda = driver.get("cuda_driver_version")
    if not drv:
        run.check("driver_cuda_compat", [], skip_why="driver version unknown")
        return
    if not runtime:
        run.check(
            "driver_cuda_compat",
            [],
            skip_why="no CUDA runtime library found on the host (driver %s provides CUDA %s)" % (drv, dcuda),
        )
        return
    res = _compat.cuda_driver_compat(drv, runtime, dcuda, policy["minor_compat_majors"])
    evidence = {
        "driver": drv,
        "cuda_runtime": runtime,
        "driver_cuda_version": dcuda,
        "required_driver": res["required_driver"],
        "table_row": res["table_row"],
        "minor_compat_floor": res["minor_compat_floor"],
        "source": (libs.get("sources") or {}).get("cuda_runtime"),
    }
    if res["status"] == "ok":
        run.check("driver_cuda_compat", [], pass_why=res["reason"])
    elif res["status"] == "minor_compat":
        run.check(
            "driver_cuda_compat",
            [finding("driver_cuda_minor_compat", "info", "host", res["reason"], evidence)],
            pass_why=res["reason"],
        )
    elif res["status"] == "incompatible":
        run.check(
            "driver_cuda_compat",
            [finding("driver_cuda_incompatible", "critical", "host", res["reason"], evidence)],
        )
    else:
        run.check("driver_cuda_compat", [], skip_why=res["reason"])


def _check_libraries(run, facts):
    libs = facts.get("libraries") or {}
    cuda = libs.get("cuda_runtime") or (facts.get("driver") or {}).get("cuda_driver_version")
    if not cuda or not (libs.get("cudnn") or libs.get("nccl")):
        run.check("library_versions", [], skip_why="CUDA, cuDNN and NCCL versions not all known")
        return
    problems = _compat.check_library_expectations(cuda, libs.get("cudnn"), libs.get("nccl"))
    findings = []
    for p in problems:
        ev = dict(p)
        ev["source"] = (libs.get("sources") or {}).get(p["library"])
        findings.append(finding("library_version_mismatch", "warning", "host", p["message"], ev))
    run.check(
        "library_versions",
        findings,
        pass_why="cuDNN %s / NCCL %s match CUDA %s" % (libs.get("cudnn"), libs.get("nccl"), cuda),
    )


def _check_denylist(run, facts, policy):
    driver = facts.get("driver") or {}
    versions = []
    for key in ("nvml_version", "kernel_module_version"):
        v = driver.get(key)
        if v and v not in versions:
            versions.append(v)
    if not versions:
        run.check("driver_denylist", [], skip_why="driver version unknown")
        return
    dl = _compat.build_denylist(policy["driver_denylist"], policy["use_default_denylist"])
    if not dl:
        run.check("driver_denylist", [], skip_why="deny-list is empty (default list disabled, none given)")
        return
    findings = []
    for v in versions:
        for e in _compat.denylist_hits(v, dl):
            match = {k: e[k] for k in ("version", "prefix", "min", "max") if k in e}
            findings.append(
                finding(
                    "driver_denylisted",
                    "critical",
                    "host",
                    "driver %s is deny-listed: %s" % (v, e["reason"]),
                    {"driver": v, "entry": match, "reason": e["reason"], "list": e["source"]},
                )
            )
    run.check(
        "driver_denylist",
        findings,
        pass_why="driver %s matches none of %d deny-list entries" % (", ".join(versions), len(dl)),
    )


def _check_driver_agreement(run, facts):
    driver = facts.get("driver") or {}
    reused = _facts_findings(facts, FACTS_DRIVER_MISMATCH_IDS)
    if not reused and driver.get("agree") is False:
        reused = [
            finding(
                "driver_version_mismatch",
                "critical",
                "host",
                "loaded kernel module %s and NVML %s disagree"
                % (driver.get("kernel_module_version"), driver.get("nvml_version")),
                {k: driver.get(k) for k in ("kernel_module_version", "nvml_version")},
            )
        ]
    for f in reused:
        if f.get("severity") == "info":
            f["severity"] = "warning"
    if not reused and driver.get("agree") is None:
        run.check("driver_agreement", [], skip_why="kernel module or NVML version unknown")
        return
    run.check("driver_agreement", reused, pass_why="kernel module and NVML report the same driver")


def _check_pcie(run, facts):
    if not facts.get("gpus"):
        run.check("pcie_links", [], skip_why="no GPU")
        return
    run.check("pcie_links", _facts_findings(facts, FACTS_PCIE_IDS), pass_why="no degraded PCIe link reported")


def _check_ecc(run, facts):
    gpus = facts.get("gpus") or []
    if not gpus:
        run.check("ecc", [], skip_why="no GPU")
        return
    findings = _facts_findings(facts, FACTS_ECC_IDS)
    seen = {(f["id"], f.get("subject")) for f in findings}
    known = False
    for g in gpus:
        ecc = g.get("ecc") or {}
        subj = _gpu_subject(g)
        if any(ecc.get(k) is not None for k in ecc):
            known = True
        vol = ecc.get("volatile_uncorrected")
        agg = ecc.get("aggregate_uncorrected")
        if (vol or agg) and ("ecc_uncorrected_errors", subj) not in seen:
            sev = "critical" if vol else "warning"
            findings.append(
                finding(
                    "ecc_uncorrected_errors",
                    sev,
                    subj,
                    "GPU %s (%s) has uncorrected ECC errors: %s since boot, %s lifetime"
                    % (g.get("index"), g.get("pci_bus_id"), vol, agg),
                    {"volatile_uncorrected": vol, "aggregate_uncorrected": agg, "pci_bus_id": g.get("pci_bus_id")},
                )
            )
        if ecc.get("remapped_rows_pending") and ("remapped_rows_pending", subj) not in seen:
            findings.append(
                finding(
                    "remapped_rows_pending",
                    "critical",
                    subj,
                    "GPU %s (%s) has row remappings pending: reset the GPU before use"
                    % (g.get("index"), g.get("pci_bus_id")),
                    {"pci_bus_id": g.get("pci_bus_id")},
                )
            )
        if ecc.get("remapped_rows_failure") and ("remapped_rows_failure", subj) not in seen:
            findings.append(
                finding(
                    "remapped_rows_failure",
                    "critical",
                    subj,
                    "GPU %s (%s) failed a row remapping: the GPU needs service" % (g.get("index"), g.get("pci_bus_id")),
                    {"pci_bus_id": g.get("pci_bus_id")},
                )
            )
    for f in findings:
        if f["id"] in ("remapped_rows_pending", "remapped_rows_failure"):
            f["severity"] = "critical"
    if not known and not findings:
        run.check("ecc", [], skip_why="ECC counters not reported (ECC unsupported or disabled)")
        return
    run.check("ecc", findings, pass_why="no uncorrected ECC errors, no pending or failed row remapping")


def _check_throttle(run, facts):
    gpus = facts.get("gpus") or []
    if not gpus:
        run.check("throttle", [], skip_why="no GPU")
        return
    findings = []
    for g in gpus:
        reasons = g.get("throttle_reasons") or []
        classified = [_health.classify_throttle_reason(r) for r in reasons]
        worst = _health.worst_severity(c[1] for c in classified)
        if worst in ("warning", "critical"):
            names = [c[0] for c in classified if c[1] in ("warning", "critical")]
            findings.append(
                finding(
                    "gpu_throttled",
                    worst,
                    _gpu_subject(g),
                    "GPU %s (%s) clocks held down by %s" % (g.get("index"), g.get("pci_bus_id"), ", ".join(names)),
                    {
                        "throttle_reasons": list(reasons),
                        "temperature_c": g.get("temperature_c"),
                        "power": g.get("power"),
                    },
                )
            )
    run.check("throttle", findings, pass_why="no hardware or thermal slowdown reported")


def _gpu_power_w(gpu, source):
    p = gpu.get("power") or {}
    order = (
        ("max_limit_w", "limit_w", "enforced_limit_w")
        if source == "max"
        else ("limit_w", "enforced_limit_w", "max_limit_w")
    )
    for k in order:
        v = _as_number(p.get(k))
        if v is not None:
            return v, k
    return None, None


def _check_power(run, facts, policy):
    cap = policy["psu_capacity_watts"]
    if cap is None:
        run.check(
            "power_budget",
            [],
            skip_why="PSU/PDU capacity not declared (set stacktune_psu_capacity_watts to check the power budget)",
        )
        return
    gpus = facts.get("gpus") or []
    per_gpu = []
    unknown = []
    for g in gpus:
        w, key = _gpu_power_w(g, policy["power_limit_source"])
        if w is None:
            unknown.append(_gpu_subject(g))
        else:
            per_gpu.append({"gpu": g.get("index"), "watts": w, "from": key})
    if not per_gpu:
        run.check("power_budget", [], skip_why="no GPU reports a power limit" if gpus else "no GPU")
        return
    platform = policy["platform_watts"]
    gpu_total = sum(p["watts"] for p in per_gpu)
    total = gpu_total + (platform or 0.0)
    headroom = policy["power_headroom_percent"]
    usable = cap * (1.0 - headroom / 100.0)
    evidence = {
        "gpu_watts": per_gpu,
        "gpu_total_w": gpu_total,
        "platform_w": platform,
        "total_w": total,
        "capacity_w": cap,
        "headroom_percent": headroom,
        "usable_w": usable,
        "limit_source": policy["power_limit_source"],
    }
    findings = []
    if platform is None:
        findings.append(
            finding(
                "power_platform_undeclared",
                "info",
                "host",
                "platform (CPU, memory, fans, NICs) watts not declared; counted as 0",
                {},
            )
        )
    if unknown:
        findings.append(
            finding(
                "power_limit_unknown",
                "warning",
                "host",
                "power limit unknown for %s; the budget counts only the others" % ", ".join(unknown),
                {"gpus": unknown},
            )
        )
    if total > usable:
        findings.append(
            finding(
                "power_budget_exceeded",
                "critical",
                "host",
                "%.0f W of GPU limits + %.0f W platform = %.0f W exceeds %.0f W (%.0f W capacity less %g%% headroom)"
                % (gpu_total, platform or 0.0, total, usable, cap, headroom),
                evidence,
            )
        )
    run.check(
        "power_budget",
        findings,
        pass_why="%.0f W needed <= %.0f W usable of %.0f W" % (total, usable, cap),
    )


def _check_kernel_log(run, facts, kernel_log):
    if kernel_log is None:
        run.check("kernel_xid", [], skip_why="kernel log not read (kernel_log disabled)")
        return
    source = kernel_log.get("source")
    if kernel_log.get("error") and not kernel_log.get("text"):
        run.check(
            "kernel_xid",
            [
                finding(
                    "kernel_log_unreadable",
                    "info",
                    "host",
                    "kernel log not readable: %s" % kernel_log["error"],
                    {"tried": kernel_log.get("tried") or [], "source": source},
                )
            ],
            skip_why="kernel log not readable: %s" % kernel_log["error"],
        )
        return
    events = _health.parse_xid_lines(kernel_log.get("text") or "")
    by_bus = {}
    for g in facts.get("gpus") or []:
        if g.get("pci_bus_id"):
            by_bus[_health.normalize_bus_id(g["pci_bus_id"])] = g.get("index")
    findings = []
    for grp in _health.summarize_xids(events):
        idx = by_bus.get(grp["pci_bus_id"])
        subject = "gpu%s" % idx if idx is not None else "pci:%s" % grp["pci_bus_id"]
        ev = dict(grp)
        ev["source"] = source
        findings.append(
            finding(
                "kernel_xid",
                grp["severity"],
                subject,
                "XID %d x%d on %s: %s" % (grp["xid"], grp["count"], grp["pci_bus_id"], grp["description"]),
                ev,
            )
        )
    run.check("kernel_xid", findings, pass_why="no XID error in %s" % source)


def _check_other_writers(run, writers):
    findings = [
        finding("other_writer_" + w["tool"].replace("-", "_").replace(".", "_"), "info", w["tool"], w["message"])
        for w in writers
    ]
    run.check(
        "other_writers",
        findings,
        skip_why="not looked for" if writers is None else None,
        pass_why="no other tool or drop-in rewrites what stacktune manages"
        if not findings
        else "%d other writer(s): %s" % (len(findings), "; ".join(f["message"] for f in findings)),
    )


def run_preflight(facts, policy=None, kernel_log=None, other_writers=None):
    """Run every preflight check over the facts. ``policy`` is validated first (ValueError
    names the variable). ``kernel_log``: None (not read) or a dict with source, text,
    error, tried. ``other_writers``: None (not looked for) or ``writers.host_writers()``."""
    if not isinstance(facts, dict):
        raise ValueError("facts must be the ansible_facts.stacktune mapping")
    policy = validate_policy(policy)
    run = _Run()
    sv = facts.get("schema_version")
    if sv != 1:
        run.check(
            "facts_schema",
            [
                finding(
                    "facts_schema_unknown",
                    "warning",
                    "host",
                    "facts schema_version %r; this preflight reads schema_version 1" % (sv,),
                    {"schema_version": sv},
                )
            ],
        )
    else:
        run.check("facts_schema", [], pass_why="schema_version 1")
    _check_nvml(run, facts, policy)
    _check_gpu_count(run, facts, policy)
    _check_driver_cuda(run, facts, policy)
    _check_libraries(run, facts)
    _check_denylist(run, facts, policy)
    _check_driver_agreement(run, facts)
    _check_pcie(run, facts)
    _check_ecc(run, facts)
    _check_throttle(run, facts)
    _check_power(run, facts, policy)
    _check_kernel_log(run, facts, kernel_log)
    if other_writers is not None:
        _check_other_writers(run, other_writers)
    ok = not any(f["severity"] == "critical" for f in run.findings)
    return {"ok": ok, "findings": run.findings, "checks": run.checks}


def findings_at_or_above(findings, fail_on):
    """Findings whose severity is at or above ``fail_on`` (critical | warning); none for never."""
    if fail_on == "never":
        return []
    floor = _health.SEVERITY_RANK[fail_on]
    return [f for f in findings if _health.SEVERITY_RANK.get(f.get("severity"), 2) >= floor]
