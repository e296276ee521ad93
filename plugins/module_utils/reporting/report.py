# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run's report and its lines, rendered from the run's record and nothing else.

A run's record is what the report JSON holds: the layers' outcomes (``stacktune_results``),
the facts, the acceptance, the plot, the budget, the lease and the diagnosis. Every number,
sign, count and block count the Markdown report and the run's closing lines say is read
here from that record (the gate's decisions through ``reporting.decision``), never recomputed
on the way; the filters in plugins/filter/run_report.py are thin wrappers of this module.
Input that is not a record raises ``ValueError`` naming what was expected.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib

from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.decision import budget_words, details, verdict
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.notation import cell_text, cut, show_value

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


def check_results(results, name):
    """``results`` when it is stacktune_results (a list of layer outcomes), else ValueError."""
    if not isinstance(results, list) or not all(isinstance(r, dict) and "layer" in r for r in results):
        raise ValueError("%s expects stacktune_results, a list of layer outcomes" % name)
    return results


def changed_rows(rows):
    """The rows of a layer's settings that it changed."""
    return [row for row in rows or [] if row.get("changed")]


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


def verdict_line(r):
    """The layer's gate decision in one line (its outcome's decision when the gate's lacks one)."""
    gate = dict(r.get("gate") or {})
    gate.setdefault("decision", r.get("decision"))
    return verdict(gate)


def _persisted_only(r):
    """The changed settings whose live value was already set: only their persistence was written."""
    return [s for s in changed_rows(r.get("settings")) if not _live_changed(s)]


def _changed_words(r):
    """How many settings a kept layer changed, live and only persisted: "3 setting(s) changed",
    "nothing changed live, 8 setting(s) already set persisted", or both."""
    n = len(changed_rows(r.get("settings")))
    persisted = len(_persisted_only(r))
    if not persisted:
        return "%d setting(s) changed" % n
    if persisted == n:
        return "nothing changed live, %d setting(s) already set persisted" % n
    return "%d setting(s) changed, %d more already set persisted" % (n - persisted, persisted)


def _outcome(r, check_mode, gated):
    n = len(changed_rows(r.get("settings")))
    gate = r.get("gate")
    if check_mode:
        line = "%s: %s (check mode: nothing changed or measured)" % (
            r["layer"],
            "would change %d setting(s)" % n if n else "nothing to change",
        )
    elif r.get("decision") == "rollback" and (gate or {}).get("method") == "search":
        # a search that found nothing better than what the host had: the candidates it tried
        # (if one was still in place) were put back
        line = "%s: searched, the host's own value stays (%s) - %s" % (
            r["layer"],
            "the candidates tried, %s" % put_back_words(r, named=False) if restored_ids(r) else "nothing changed",
            verdict_line(r),
        )
    elif r.get("decision") == "rollback":
        line = "%s: ROLLED BACK (%s) - %s" % (r["layer"], put_back_words(r, named=False), verdict_line(r))
    elif r.get("decision") == "keep" and (gate or {}).get("method") == "search":
        # the value the search put in place (the layer's own rows are those of its first candidate)
        found = gate.get("search") or {}
        line = "%s: kept %s = %s, found by a search - %s" % (
            r["layer"],
            found.get("variable", "the searched value"),
            found.get("chosen"),
            verdict_line(r),
        )
    elif r.get("decision") == "keep" and gate:
        line = "%s: kept (%s) - %s" % (r["layer"], _changed_words(r), verdict_line(r))
    elif n:
        line = "%s: kept (%s), not measured%s" % (r["layer"], _changed_words(r), "" if gated else " (gate off)")
    else:
        line = "%s: nothing to change" % r["layer"]
    if r.get("pending_reboot"):
        line += " ; pending reboot: " + ", ".join(str(p) for p in r["pending_reboot"])
    return line


def outcome_lines(results, check_mode=False, gate=True, report=None, next_steps=None):
    """One line per layer (kept, rolled back, not measured ...), then where the report is and what to run next."""
    out = [_outcome(r, bool(check_mode), bool(gate)) for r in check_results(results, "outcome_lines")]
    out.append("report: %s" % report)
    out += ["next: %s" % step for step in (next_steps) or []]
    return out


# --------------------------------------------------------------------------- Markdown report

HOW_TO_READ = [
    "How to read it: each layer was applied, measured in blocks (one process run of a workload",
    "each) with and without it in the order A B B A ..., and kept only when its policy was met",
    "(docs/gate.md). A change reads `+` for more throughput and for longer step times (the median",
    "step, the tail: the mean of each block's slowest 1%); `±` is its noise, the half-width of its",
    "interval. Every number behind a decision is under the layer's details below and in the JSON.",
]
# Added under HOW_TO_READ when a layer of the run was measured in a live trial.
HOW_TO_READ_LIVE = [
    "A layer measured in *windows of one running process* had a live trial: one process of each",
    "workload ran throughout, the layer was switched on and off between windows of its steps, and",
    "each window counts as a block above (docs/gate.md, Live trials).",
]


def _text(value):
    """A value as a template prints it: None as nothing."""
    return "" if value is None else str(value)


def note_words(note):
    """A layer's note in words: a finding (bios: id, severity, subject, note, remediation) as
    "[warning] subject id: note => remediation", any other dict as its key: value pairs."""
    if not isinstance(note, dict):
        return _text(note)
    if "note" in note:
        head = "[%s] " % note["severity"] if note.get("severity") else ""
        subject = " ".join(_text(note.get(k)) for k in ("subject", "id") if note.get(k))
        line = head + (subject + ": " if subject else "") + _text(note["note"])
        return line + (" => %s" % note["remediation"] if note.get("remediation") else "")
    return "; ".join("%s: %s" % (k, _text(v)) for k, v in note.items())


def cut_value(value):
    """str(value), cut at a word to about CELL characters with '...'."""
    text = str(value)
    return text if len(text) <= CELL + CELL_LEEWAY else cut(text, CELL)


def _cell(value):
    """Text in a table cell (notation.cell_text: no '|' or newline, at most 300 characters)."""
    return cell_text(value)


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _host_lines(facts, check_mode, acceptance):
    """The host under the layers' table: its GPUs, its kernel and its last acceptance."""
    gpu_count = facts.get("gpu_count")
    if _int(gpu_count) > 0:
        gpus = ": " + ", ".join(str(g.get("name") if isinstance(g, dict) else g) for g in facts.get("gpus") or [])
    else:
        gpus = " (%s)" % _text(facts.get("reason"))
    kernel = facts["kernel"] if "kernel" in facts else (facts.get("host") or {}).get("kernel_release")
    lines = [
        "%s GPU(s)%s," % (_text(gpu_count), gpus),
        "kernel %s%s."
        % (
            _text(kernel),
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
    return lines + [""]


def measured_any(results):
    """Whether a layer of the run has a trial's figures (a plot and the words on reading it)."""
    return any(
        (r.get("gate") or {}).get("measurable") is not False
        and (r.get("gate") or {}).get("method") != "search"
        and bool((r.get("gate") or {}).get("blocks") or (r.get("gate") or {}).get("workloads"))
        for r in results
    )


def plot_lines(host, plot, check_mode, results):
    """The step-time plot and the words on reading it; one line when there is none."""
    lines = ["## Step times", ""]
    if plot.get("skipped", True) is False and plot.get("panels", True):
        lines += [
            "Step times without and with each measured layer, one panel per workload it was judged on:",
            "",
            "![step times without and with each measured layer](%s.png)" % host,
        ]
    else:
        lines.append("No step-time plot: %s." % _text(plot.get("reason") or "no layer was measured"))
    if plot.get("skipped", True) is False and plot.get("searches"):
        lines += [
            "",
            "Throughput, p99 and energy per step against the candidate value of each search:",
            "",
            "![throughput, p99 and energy per step against the candidate value](%s-search.png)" % host,
        ]
    lines.append("")
    if check_mode or not measured_any(results):
        return lines
    lines += HOW_TO_READ + [""]
    if any((r.get("gate") or {}).get("method") == "live" for r in results):
        lines += HOW_TO_READ_LIVE + [""]
    return lines


def restored_ids(r):
    """What a rollback put back: the ids the engine's restore names (the journal's count), or,
    for a decision that does not carry them, the settings whose live value the layer changed."""
    gate = r.get("gate") or {}
    if isinstance(gate.get("restored"), list):
        return [str(x) for x in gate["restored"]]
    return [str(s.get("id")) for s in r.get("settings") or [] if s.get("changed") and _live_changed(s)]


def put_back(r):
    """What a rollback put back, split the way the settings table shows it: the settings (the
    layer's rows, and any other setting the restore names), and the drop-in files that persisted
    them (``dropin:`` ids that are not rows of the table)."""
    rows = {str(s.get("id")) for s in r.get("settings") or []}
    ids = restored_ids(r)
    files = [i for i in ids if i not in rows and i.startswith("dropin:")]
    return [i for i in ids if i not in files], files


def put_back_words(r, named=True):
    """``3 setting(s) (a, b, c) and 1 persisting file (d) put back``; without ``named``, the
    counts alone."""
    values, files = put_back(r)
    parts = []
    if values:
        parts.append("%d setting(s)%s" % (len(values), " (%s)" % ", ".join(values) if named else ""))
    if files:
        parts.append(
            "%d persisting file%s%s"
            % (len(files), "" if len(files) == 1 else "s", " (%s)" % ", ".join(files) if named else "")
        )
    return " and ".join(parts) + " put back" if parts else "nothing to put back"


def _same(a, b):
    return _text(a).strip() == _text(b).strip()


def _expected_text(s):
    expected = s.get("expected")
    if isinstance(expected, dict) and "text" in expected:
        return expected["text"]
    return expected


def _live_changed(s):
    """Whether the layer changed the live value (not only its line in a file that persists it)."""
    if "live_before" not in s:
        return bool(s.get("changed"))
    return not _same(s.get("live_before"), _expected_text(s))


def _is_file(s):
    value = _expected_text(s)
    return str(s.get("id", "")).startswith("file:") or (isinstance(value, str) and "\n" in value.rstrip("\n"))


def _show(value):
    return show_value(value, width=CELL)


def _setting_rows(r, check_mode):
    """(cells, diff) per setting: the setting, before, set to, now, what changed."""
    rolled_back = r.get("decision") == "rollback"
    restored = set(restored_ids(r)) if rolled_back else set()
    out = []
    for s in r.get("settings") or []:
        sid = _text(s.get("id"))
        target = _expected_text(s)
        before = s["live_before"] if "live_before" in s else (s.get("live") if check_mode else None)
        known_before = "live_before" in s or check_mode
        if check_mode:
            now = s.get("live")
            what = "would change" if s.get("changed") else "no change"
        elif not s.get("changed"):
            now = s.get("live")
            what = "no change" + (" (%s)" % s["status"] if s.get("status") not in (None, "ok") else "")
        elif not _live_changed(s):
            now = s.get("live")
            what = "already set live; " + ("its persisted line put back" if rolled_back else "persisted")
        elif rolled_back:
            now = before
            what = "changed, put back" if (sid in restored or not restored) else "changed, then rolled back"
        else:
            now = s.get("live")
            what = "changed"
        if s.get("status") not in (None, "ok", "changed") and s["status"] not in what:
            what += "; %s" % s["status"]
        diff = None
        if _is_file(s):
            cells = [
                sid,
                _file_summary(before, known_before),
                _file_summary(target, True),
                "same as set" if _same(now, target) else _file_summary(now, known_before or not rolled_back),
                what,
            ]
            diff = _diff(sid, before, target) if known_before and not _same(before, target) else None
        else:
            cells = [sid, _show(before) if known_before else "?", _show(target), _show(now), what]
        out.append(([_cell(c) for c in cells], diff, s))
    return out


def _file_summary(text, known):
    if not known:
        return "?"
    if text is None or text == "":
        return "no file"
    n = len(str(text).rstrip("\n").split("\n"))
    return "%d line%s" % (n, "" if n == 1 else "s")


def _diff(sid, before, after):
    lines = list(
        difflib.unified_diff(
            _text(before).splitlines(),
            _text(after).splitlines(),
            fromfile="%s before" % sid,
            tofile="%s as set" % sid,
            lineterm="",
        )
    )
    return lines or None


def _settings_table(r, check_mode):
    rows = _setting_rows(r, check_mode)
    lines = []
    if r.get("decision") == "rollback" and not check_mode:
        if (r.get("gate") or {}).get("method") == "search":
            head = "The search kept the host's own value: the candidates tried, %s" % put_back_words(r)
        else:
            head = "The gate rolled this layer back: %s" % put_back_words(r)
        lines += [head + "; `now` is the value after the rollback.", ""]
    lines += [
        "| setting | before | set to | now | what changed |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += ["| %s |" % " | ".join(cells) for cells, _d, _s in rows]
    reasons = [(s.get("id"), s.get("reason")) for _c, _d, s in rows if s.get("reason")]
    if reasons:
        lines.append("")
        lines += ["- %s: %s" % (_text(sid), _text(why)) for sid, why in reasons]
    return lines, [(cells[0], diff) for cells, diff, _s in rows if diff]


def outcome_word(r, check_mode=False):
    """keep, rolled back, not measured (kept), nothing to change, would change ..."""
    n = len(changed_rows(r.get("settings")))
    gate = r.get("gate")
    if check_mode:
        return "would change" if n else "nothing to change"
    if r.get("decision") == "rollback" and (gate or {}).get("method") == "search":
        return "searched: the host's value stays"
    if r.get("decision") == "rollback":
        return "rolled back"
    if gate and gate.get("measurable") is False:
        return "not measured, kept" if r.get("decision") == "keep" else "not measured"
    if r.get("decision") == "keep" and gate:
        return "kept"
    if n:
        return "kept, not measured"
    return "nothing to change"


def _changed_cell(r):
    n, persisted = len(changed_rows(r.get("settings"))), len(_persisted_only(r))
    return "%d (%d only persisted)" % (n, persisted) if persisted else str(n)


def _layer_row(r, check_mode):
    gate = r.get("gate")
    if check_mode:
        verdict_text = "check mode: nothing measured"
    elif gate:
        verdict_text = verdict_line(r)
    elif r.get("changed"):
        verdict_text = "not measured (the gate is off)"
    else:
        verdict_text = "no change"
    measured = "-"
    if gate and gate.get("measurable") is not False:
        measured = ", ".join(str(w) for w in gate.get("workloads_measured") or [gate.get("workload")] if w) or "-"
    cells = [
        _text(r["layer"]),
        "**%s**" % outcome_word(r, check_mode),
        _changed_cell(r),
        str(len(r.get("pending_reboot") or [])),
        _text(r.get("policy")) if gate else "-",
        _cell(measured),
        _cell(verdict_text),
    ]
    return "| %s |" % " | ".join(cells)


def _details(r, budget):
    gate = r.get("gate")
    lines = []
    if gate:
        measured = gate.get("measurable") is not False
        said = budget_words(budget, gate.get("workloads_measured"), live=gate.get("method") == "live")
        lines += details(gate, said if budget and measured else None)
    return lines


def _lease_lines(lease, run_id):
    """What the report says first when its run no longer held the host (run_lock's lease_ended)."""
    ended = lease.get("lease_ended")
    if not ended:
        return []
    return [
        "**This run no longer held the host when it wrote this report**: %s. Run %s stopped there; the"
        % (_text(ended), _text(run_id)),
        "outcomes below are what it knew when it lost the host, not necessarily the host's state now",
        "(the verify playbook shows that).",
    ]


def record_markdown(record, diagnosis=None):
    """The report of a run's record (the host's JSON: host, run_id, check_mode, facts_summary,
    acceptance, plot, budget, lease, layers), the diagnosis' section given as its lines; what
    the role writes as the host's Markdown is this rendering of the JSON it writes beside it."""
    if not isinstance(record, dict) or "layers" not in record:
        raise ValueError("report_markdown: a run's record is a dict with its layers, got %r" % (record,))
    return markdown(
        record["layers"],
        record.get("host"),
        record.get("run_id"),
        record.get("facts_summary") or {},
        check_mode=record.get("check_mode"),
        acceptance=record.get("acceptance") or {},
        plot=record.get("plot") or {},
        budget=record.get("budget"),
        lease=record.get("lease") or {},
        diagnosis=diagnosis,
    )


def markdown(
    results, host, run_id, facts, check_mode=False, acceptance=None, plot=None, budget=None, lease=None, diagnosis=None
):
    """The host's report of one run as Markdown: the host, the acceptance, one row per layer, then
    per layer its settings (before, set to, now) and the details: the statistics, the file diffs."""
    results = check_results(results, "report_markdown")
    if not isinstance(facts, dict):
        raise ValueError("report_markdown: facts must be ansible_facts.stacktune, got %s" % type(facts).__name__)
    acceptance, plot, lease = acceptance or {}, plot or {}, lease or {}
    check_mode = bool(check_mode)
    lines = ["# stacktune run %s on %s" % (_text(run_id), _text(host)), ""]
    if lease.get("lease_ended"):
        lines += _lease_lines(lease, run_id) + [""]
    # the answer first: one row per layer, what changed, what stayed and why
    lines += [
        "## Layers",
        "",
        "| layer | outcome | settings changed | pending reboot | policy | measured on | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [_layer_row(r, check_mode) for r in results]
    lines.append("")
    lines += _host_lines(facts, check_mode, acceptance)
    lines += list(diagnosis or [])
    lines += plot_lines(host, plot, check_mode, results)
    for r in results:
        detail = [] if check_mode else _details(r, budget)
        if not r.get("settings") and not detail and not r.get("notes"):
            continue
        lines += ["## %s" % _text(r["layer"]), ""]
        diffs = []
        if r.get("settings"):
            table, diffs = _settings_table(r, check_mode)
            lines += table + [""]
        for note in r.get("notes") or []:
            lines.append("Note: %s" % note_words(note))
        if r.get("notes"):
            lines.append("")
        if detail or diffs:
            lines += ["### %s: details" % _text(r["layer"]), ""] + detail
        for sid, diff in diffs:
            lines += ["%s:" % sid, "", "```diff"] + diff + ["```", ""]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"
