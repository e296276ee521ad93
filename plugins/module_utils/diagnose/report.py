# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The diagnosis as the report's first section (Markdown lines)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import keeping
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.decision import verdict
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.notation import cell_text, number


def _cell(value):
    return cell_text(value)


def _gpu_rows(profile):
    rows = []
    for g in profile.get("gpus") or []:
        events = ", ".join("%s %s%%" % (k, v) for k, v in sorted((g.get("clock_events_pct") or {}).items())) or "none"
        rows.append(
            "| GPU %s | util %s%% (min %s%%), mem busy %s%% | power %s / %s W | SM %s of %s MHz | events: %s | "
            "PCIe rx %s / tx %s GB/s | %s C |"
            % (
                g.get("index"),
                g.get("util_gpu_pct"),
                g.get("util_gpu_min_pct"),
                g.get("util_mem_pct"),
                g.get("power_w"),
                g.get("power_limit_w"),
                g.get("sm_clock_mhz"),
                g.get("sm_clock_max_mhz"),
                _cell(events),
                g.get("pcie_rx_gbs"),
                g.get("pcie_tx_gbs"),
                g.get("temp_c"),
            )
        )
    return rows


def program_words(diagnosis):
    """The program a diagnosis profiled, in words: its command, or ``built-in NAME (live)``."""
    what = (diagnosis or {}).get("program") or {}
    return " ".join(what["command"]) if what.get("command") else "built-in %s (live)" % what.get("workload")


def console_lines(diagnosis):
    """What ``make diagnose`` prints: the verdict line, the program it profiled, which layers can
    move it and which cannot, and the advice outside the stack, a few lines in all."""
    if not isinstance(diagnosis, dict) or not diagnosis:
        return []
    if diagnosis.get("error") or diagnosis.get("none"):
        return [diagnosis.get("line") or "diagnosis: not made: %s" % (diagnosis.get("error") or diagnosis.get("none"))]
    moves = diagnosis.get("moves") or {}
    lines = [diagnosis.get("line") or "diagnosis: %s" % diagnosis.get("title")]
    lines.append("program: %s" % program_words(diagnosis))
    can = sorted((moves.get("can") or {}).items())
    cannot = sorted(moves.get("cannot") or {})
    lines.append(
        "can move it: %s"
        % ("; ".join("%s (%s)" % (name, why) for name, why in can) if can else "no layer of the stack")
    )
    if cannot:
        lines.append("cannot move it: %s (a tune checks these in a short trial)" % ", ".join(cannot))
    lines += ["advice: %s" % words for words in moves.get("outside") or []]
    return lines


def _other_programs(diagnosis, results):
    """The workloads the trials measured that are not the program the diagnosis profiled."""
    what = (diagnosis or {}).get("program") or {}
    profiled = "command" if what.get("command") else what.get("workload")
    seen = []
    for r in results or []:
        gate = (r.get("gate") or {}) if isinstance(r, dict) else {}
        if gate.get("measurable") is False:
            continue
        for w in gate.get("workloads_measured") or ([gate["workload"]] if gate.get("workload") else []):
            if w != profiled and w not in seen:
                seen.append(str(w))
    return seen


def markdown(diagnosis, results=None):
    """Lines of the report's ``## Diagnosis`` section; ``results``: the layers' records, each
    with its ``diagnosis`` (expected, how its trial was sized) and the gate's decision."""
    if not isinstance(diagnosis, dict) or not diagnosis:
        return []
    lines = ["## Diagnosis", ""]
    if diagnosis.get("error") or diagnosis.get("none"):
        lines += ["Not diagnosed: %s" % _cell(diagnosis.get("error") or diagnosis.get("none")), ""]
        return lines
    lines += ["**%s**" % _cell(diagnosis.get("title")), ""]
    ran = program_words(diagnosis)
    prof = diagnosis.get("profile") or {}
    steps = prof.get("steps") or {}
    lines.append(
        "Program: `%s`, profiled %s s in %s snapshots; %s steps, %s/s, p50 %s ms, p99 %s ms."
        % (
            ran,
            number(prof.get("seconds")),
            prof.get("samples"),
            steps.get("count"),
            number(steps.get("per_s")),
            number(steps.get("p50_ms")),
            number(steps.get("p99_ms")),
        )
    )
    other = _other_programs(diagnosis, results)
    if other:
        lines += [
            "",
            "The trials measured %s, not this program: what can or cannot move it is said of the program"
            " profiled here; the layers' verdicts are what the trials saw on theirs." % ", ".join(other),
        ]
    lines += ["", "Evidence:", ""] + ["- %s" % _cell(e) for e in diagnosis.get("evidence") or []]
    for c in diagnosis.get("caveats") or []:
        lines.append("- caveat: %s" % _cell(c))
    moves = diagnosis.get("moves") or {}
    lines += ["", "What can move it (advice, nothing here was changed):", ""]
    for name, why in sorted((moves.get("can") or {}).items()):
        lines.append("- can: %s - %s" % (name, _cell(why)))
    for name, why in sorted((moves.get("cannot") or {}).items()):
        lines.append("- cannot: %s - %s" % (name, _cell(why)))
    for words in moves.get("outside") or []:
        lines.append("- outside the stack: %s" % _cell(words))
    gpus = _gpu_rows(prof)
    if gpus:
        lines += [
            "",
            "| GPU | utilisation | power | clocks | clock events | PCIe | temp |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += gpus
    prog = prof.get("program") or {}
    if prog.get("list"):
        lines += [
            "",
            "| process | pid | cores | runnable | saturated | threads | RSS MB |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in prog["list"][:12]:
            lines.append(
                "| %s %s | %s | %s | %s%% | %s | %s | %s |"
                % (
                    r["role"],
                    _cell(r["comm"]),
                    r["pid"],
                    r["cores"],
                    r.get("runnable_pct"),
                    "yes" if r.get("saturated") else "no",
                    r["threads"],
                    r["rss_mb"],
                )
            )
    rows = [r for r in results or [] if isinstance(r, dict) and isinstance(r.get("diagnosis"), dict)]
    if rows:
        lines += ["", "| layer | the diagnosis expected | measured | verdict |", "| --- | --- | --- | --- |"]
        for r in rows:
            d = r["diagnosis"]
            gate = r.get("gate") or {}
            if not r.get("changed"):
                measured = "no change to measure"
            elif gate.get("measurable") is False:
                why = keeping.UNMEASURED.get(gate.get("unmeasured"), ("",))[0]
                measured = "no: %s" % why if why else "no"
            elif gate.get("method"):
                measured = "yes (%s%s)" % (
                    gate["method"],
                    ", a short %s check" % (gate.get("policy") or "no_regression") if d.get("size") == "check" else "",
                )
            else:
                measured = "no"
            lines.append(
                "| %s | %s | %s | %s |"
                % (
                    _cell(r.get("layer")),
                    _cell(d.get("expected")),
                    _cell(measured),
                    _cell(verdict(gate) if gate else r.get("decision") or "-"),
                )
            )
    lines.append("")
    return lines
