# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a tune run tells its user: the plan, the outcome per layer, the next commands and the
host's Markdown and HTML report. The words come from plugins/module_utils/reporting/report.py
(rendered from the run's record); these filters hand it plain data and name bad input.

Documentation lives next to this file in plan_lines.yml, outcome_lines.yml, next_commands.yml
and report_markdown.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter.layers import layer_name
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.report import markdown as diagnosis_markdown
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting import report as rendering
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.decision import verdict
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.html import embedded, to_html
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain

HOW_TO_READ_LIVE = rendering.HOW_TO_READ_LIVE


def _cut(value):
    return rendering.cut_value(value)


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
        changes = [str(row.get("id")) for row in rendering.changed_rows(rows)]
        notes = plan.get("notes") or []
        line = "%s: %s" % (
            layer_name(ref),
            "%d to change (%s)" % (len(changes), ", ".join(changes)) if changes else "nothing to change",
        )
        if notes:
            line += " - " + "; ".join(rendering.note_words(n) for n in notes)
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
    return rendering.next_commands(checkout, check_mode)


def outcome_lines(results, check_mode=False, gate=True, report=None, next_steps=None):
    """One line per layer (kept, rolled back, not measured ...), then where the report is and what to run next."""
    try:
        return rendering.outcome_lines(plain(results), check_mode, gate, report, plain(next_steps))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def outcome_words(results, check_mode=False):
    """``{layer: outcome}``: the outcome column of the report's layers table, by layer name."""
    try:
        results = rendering.check_results(plain(results), "outcome_words")
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return {str(r["layer"]): rendering.outcome_word(r, bool(check_mode)) for r in results}


def report_markdown(
    results, host, run_id, facts, check_mode=False, acceptance=None, plot=None, budget=None, lease=None, diagnosis=None
):
    """The host's report of one run as Markdown (reporting/report.py), the diagnosis' section
    from the diagnosis (diagnose/report.py)."""
    results, facts = plain(results), plain(facts)
    try:
        rendering.check_results(results, "report_markdown")
        diagnosed = plain(diagnosis) if hasattr(diagnosis, "keys") else {}
        return rendering.markdown(
            results,
            host,
            run_id,
            facts,
            check_mode=check_mode,
            acceptance=plain(acceptance) if hasattr(acceptance, "keys") else {},
            plot=plain(plot) if hasattr(plot, "keys") else {},
            budget=plain(budget) if hasattr(budget, "keys") else None,
            lease=plain(lease) if hasattr(lease, "keys") else {},
            diagnosis=diagnosis_markdown(diagnosed, results),
        )
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def report_html(markdown, title=None, directory=None):
    """The Markdown report as one HTML page; with ``directory`` (the report's folder) its plots are
    embedded, so the page stands alone."""
    if not isinstance(markdown, str):
        raise AnsibleFilterError("report_html expects the Markdown text of report_markdown")
    return to_html(markdown, title, embedded(markdown, directory) if directory else None)


def gate_verdict(decision):
    """The one-line verdict of a gate decision (keep / rolled back / not measured, the changes
    with their noise, where it was measured)."""
    decision = plain(decision)
    if decision is not None and not isinstance(decision, dict):
        raise AnsibleFilterError("gate_verdict expects a gate decision (a dict), got %s" % type(decision).__name__)
    return verdict(decision or {})


class FilterModule:
    """stacktune.gpu run report filters."""

    def filters(self):
        return {
            "plan_lines": plan_lines,
            "outcome_lines": outcome_lines,
            "outcome_words": outcome_words,
            "next_commands": next_commands,
            "report_markdown": report_markdown,
            "report_html": report_html,
            "gate_verdict": gate_verdict,
        }
