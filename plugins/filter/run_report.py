# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a tune run tells its user: the plan, the outcome per layer, the next commands and the
host's Markdown report.

Documentation lives next to this file in plan_lines.yml, outcome_lines.yml, next_commands.yml
and report_markdown.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter.layers import layer_name
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain

# The commands that follow a run: from a checkout the Makefile's targets, once installed the playbooks.
COMMANDS = {
    True: {"tune": "make tune", "verify": "make verify", "drift": "make drift", "rollback": "make rollback"},
    False: {
        "tune": "ansible-playbook stacktune.gpu.tune",
        "verify": "ansible-playbook stacktune.gpu.verify",
        "drift": "ansible-playbook stacktune.gpu.drift",
        "rollback": "ansible-playbook stacktune.gpu.rollback",
    },
}

# A cell of the report is cut to this many characters (and a few more before it is cut).
CELL = 40
CELL_LEEWAY = 5


def _results(results, name):
    results = plain(results)
    if not isinstance(results, list) or not all(isinstance(r, dict) and "layer" in r for r in results):
        raise AnsibleFilterError("%s expects stacktune_results, a list of layer outcomes" % name)
    return results


def _changed(rows):
    return [row for row in rows or [] if row.get("changed")]


def plan_lines(layers, plans):
    """One line per layer (what it will change, and its notes), one more per setting another file
    overrides and per setting the host does not support (with why)."""
    layers, plans = plain(layers), plain(plans)
    if not isinstance(layers, list) or not isinstance(plans, list) or len(layers) != len(plans):
        raise AnsibleFilterError("plan_lines expects the list of layers and, in the same order, each layer's plan")
    out = []
    for ref, found in zip(layers, plans):
        plan = found if isinstance(found, dict) else {}
        rows = plan.get("settings") or []
        changes = [str(row.get("id")) for row in _changed(rows)]
        notes = plan.get("notes") or []
        line = "%s: %s" % (
            layer_name(ref),
            "%d to change (%s)" % (len(changes), ", ".join(changes)) if changes else "nothing to change",
        )
        if notes:
            line += " - " + "; ".join(str(n) for n in notes)
        out.append(line)
        out += [
            "  %s overridden: %s" % (row.get("id"), row.get("reason"))
            for row in rows
            if row.get("status") == "overridden"
        ]
        out += [
            "  %s not supported on this host: %s" % (row.get("id"), _why_unsupported(row))
            for row in rows
            if row.get("status") == "unsupported"
        ]
    return out


def _why_unsupported(row):
    """The reason without its last clause when that clause only repeats the setting's path."""
    reason = str(row.get("reason") or "")
    path = str(row.get("id") or "").partition(":")[2]
    head, sep, tail = reason.rpartition(": ")
    return head if sep and path and path in tail else reason


def next_commands(checkout, check_mode=False):
    """What to run after this run: tune for real after --check, else verify, drift and rollback."""
    cmd = COMMANDS[bool(checkout)]
    if check_mode:
        return ["tune for real: %s (without --check)" % cmd["tune"]]
    return [
        "check what is applied: " + cmd["verify"],
        "find and fix drift later (cron/AWX): " + cmd["drift"],
        "undo everything stacktune changed: " + cmd["rollback"],
    ]


def _gate_summary(gate):
    return gate["summary"] if "summary" in gate else gate.get("reason", "")


def _outcome(r, check_mode, gated):
    n = len(_changed(r.get("settings")))
    gate = r.get("gate")
    if check_mode:
        line = "%s: %s (check mode: nothing changed or measured)" % (
            r["layer"],
            "would change %d setting(s)" % n if n else "nothing to change",
        )
    elif r.get("decision") == "rollback":
        line = "%s: ROLLED BACK (%d setting(s) restored) - %s" % (r["layer"], n, _gate_summary(gate or {}))
    elif r.get("decision") == "keep" and gate:
        line = "%s: kept (%d setting(s)) - %s" % (r["layer"], n, _gate_summary(gate))
    elif n:
        line = "%s: kept (%d setting(s)), not measured%s" % (r["layer"], n, "" if gated else " (gate off)")
    else:
        line = "%s: nothing to change" % r["layer"]
    if r.get("pending_reboot"):
        line += " ; pending reboot: " + ", ".join(str(p) for p in r["pending_reboot"])
    return line


def outcome_lines(results, check_mode=False, gate=True, report=None, next_steps=None):
    """One line per layer (kept, rolled back, not measured ...), then where the report is and what to run next."""
    out = [_outcome(r, bool(check_mode), bool(gate)) for r in _results(results, "outcome_lines")]
    out.append("report: %s" % report)
    out += ["next: %s" % step for step in plain(next_steps) or []]
    return out


# --------------------------------------------------------------------------- Markdown report


def _text(value):
    """A value as a template prints it: None as nothing."""
    return "" if value is None else str(value)


def _cut(value):
    """str(value), cut at a word to about CELL characters with '...'."""
    text = str(value)
    if len(text) <= CELL + CELL_LEEWAY:
        return text
    return text[: CELL - 3].rsplit(" ", 1)[0] + "..."


def _cell(value):
    """Text in a table cell: a '|' would end the cell."""
    return str(value).replace("|", "/")


def _head(host, run_id, facts, check_mode, acceptance, plot):
    gpu_count = facts.get("gpu_count")
    if _int(gpu_count) > 0:
        gpus = ": " + ", ".join(str(g.get("name")) for g in facts.get("gpus") or [])
    else:
        gpus = " (%s)" % _text(facts.get("reason"))
    lines = [
        "# stacktune run %s on %s" % (_text(run_id), _text(host)),
        "",
        "%s GPU(s)%s," % (_text(gpu_count), gpus),
        "kernel %s%s."
        % (
            _text((facts.get("host") or {}).get("kernel_release")),
            ", check mode: nothing was changed" if check_mode else "",
        ),
    ]
    if "verdict" in acceptance:
        lines.append(
            "Last acceptance of this host: **%s** (%s, %s): %s"
            % tuple(_text(acceptance.get(k)) for k in ("verdict", "level", "time", "summary"))
        )
    else:
        lines.append("No acceptance recorded on this host (playbooks/acceptance.yml).")
    lines.append("")
    if plot.get("skipped", True) is False:
        lines.append("Step-time distributions without and with each gated layer: [%s.png](%s.png)" % (host, host))
    else:
        lines.append("No step-time plot: %s." % _text(plot.get("reason", "no layer was measured")))
    return lines + [
        "",
        "Each gated layer was measured in blocks (one process run of a workload each), with and",
        "without the layer in the order A B B A ..., and judged over blocks (docs/gate.md).",
        "",
    ]


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _layer_row(r):
    gate = r.get("gate")
    measured = blocks = seconds = share = ""
    if gate:
        measured = ", ".join(str(w) for w in gate.get("workloads_measured", []))
        if "blocks" in gate:
            blocks = "%s/%s" % (gate["blocks"]["with"], gate["blocks"]["without"])
        seconds = _text(gate.get("seconds", ""))
        if "cost" in gate and gate["cost"]["total"]["measured_share"] is not None:
            total = gate["cost"]["total"]
            share = "%d%% of %.0f s" % (round(total["measured_share"] * 100, 0), total["wall_s"])
        why = gate.get("reason")
    else:
        why = "no change" if not r.get("changed") else ""
    cells = [
        _text(r["layer"]),
        _text(r.get("policy")),
        "**%s**" % _text(r.get("decision")),
        str(len(_changed(r.get("settings")))),
        str(len(r.get("pending_reboot") or [])),
        measured,
        blocks,
        seconds,
        share,
        _cell(why),
    ]
    return "| %s |" % " | ".join(cells)


def _settings_table(r, check_mode):
    if r.get("decision") == "rollback":
        lines = [
            "The gate rolled this layer back: every setting below is back to its value before the run",
            "(`before` columns); `tuned` is what was measured and rejected.",
            "",
            "| setting | tuned | before (restored) | status | reason |",
            "| --- | --- | --- | --- | --- |",
        ]
        for s in r["settings"]:
            cells = [
                _text(s.get("id")),
                _cut(s.get("expected")),
                _cut(s["live_before"] if "live_before" in s else s.get("live")),
                "rolled back" if s.get("changed") else _text(s.get("status")),
                _cell(s.get("reason") or ""),
            ]
            lines.append("| %s |" % " | ".join(cells))
        return lines
    lines = [
        "| setting | expected | live | persisted | status | reason |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in r["settings"]:
        status = ("would change" if s.get("changed") else s.get("status")) if check_mode else s.get("status")
        cells = [
            _text(s.get("id")),
            _cut(s.get("expected")),
            _cut(s.get("live")),
            _cut(s.get("persisted")),
            _text(status),
            _cell(s.get("reason") or ""),
        ]
        lines.append("| %s |" % " | ".join(cells))
    return lines


def report_markdown(results, host, run_id, facts, check_mode=False, acceptance=None, plot=None):
    """The host's report of one run as Markdown: the host, the acceptance, one row per layer, one table per layer."""
    results = _results(results, "report_markdown")
    facts = plain(facts)
    if not isinstance(facts, dict):
        raise AnsibleFilterError(
            "report_markdown: facts must be ansible_facts.stacktune, got %s" % type(facts).__name__
        )
    acceptance = plain(acceptance) if hasattr(acceptance, "keys") else {}
    plot = plain(plot) if hasattr(plot, "keys") else {}
    lines = _head(host, run_id, facts, bool(check_mode), acceptance, plot)
    lines += [
        "| layer | policy | decision | changed settings | pending reboot | measured on | blocks with/without"
        " | seconds | steps measured | why |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [_layer_row(r) for r in results]
    lines.append("")
    for r in results:
        if r.get("settings"):
            lines += ["## %s" % _text(r["layer"]), ""] + _settings_table(r, bool(check_mode))
    return "\n".join(lines) + "\n"


class FilterModule:
    """stacktune.gpu run report filters."""

    def filters(self):
        return {
            "plan_lines": plan_lines,
            "outcome_lines": outcome_lines,
            "next_commands": next_commands,
            "report_markdown": report_markdown,
        }
