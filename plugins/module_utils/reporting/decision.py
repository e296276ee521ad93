# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A gate decision in the two registers a person reads it in.

``verdict`` is the one line a run prints, the outcome lists and the report's table shows:
the word (keep, rolled back, not measured), why in a few words, each dimension's change
with its noise, and where it was measured. ``details`` is the rest, every number the
decision carries, as Markdown for the report's per-layer section. Both read the decision's
fields defensively: a decision of another trial (more fields, fewer fields, ``mode``,
``windows``) is worded from what it has, never refused.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.notation import change, ms, number

WORDS = {"keep": "keep", "rollback": "rolled back", "inconclusive": "inconclusive"}
NAMES = {"throughput": "throughput", "p50": "median step", "tail": "tail", "stalls": "stalled steps"}
LONG_NAMES = {
    "throughput": "throughput (higher is better)",
    "p50": "median step time (lower is better)",
    "tail": "tail step time (lower is better)",
    "stalls": "share of stalled steps (lower is better)",
}
EFFECTS = {"next_login": "the next login", "next_boot": "the next boot"}
ERROR_CHARS = 100


def _dict(value):
    return value if isinstance(value, dict) else {}


def _num(value):
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _pct(x):
    return change(x)


def _short(text, limit=ERROR_CHARS):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def tolerance_words(dim, decision):
    """What a dimension is allowed to move before it counts: ``5%`` or ``0.5 points``."""
    tol = _dict(decision.get("tolerances"))
    value = _num(tol.get("min_gain" if dim == "throughput" else dim))
    if value is None:
        value = _num(_dict(decision.get(dim)).get("tolerance"))
    if value is None:
        return None
    return "%g points" % (value * 100.0) if dim == "stalls" else "%g%%" % (value * 100.0)


def change_words(dim, block):
    """One dimension's change and its noise: ``tail +12.0% ±3.1%``; None when not measured."""
    block = _dict(block)
    noise = _num(block.get("resolution"))
    if dim == "stalls":
        diff = _num(block.get("difference"))
        if diff is None:
            return None
        text = "%s %+.1f points" % (NAMES[dim], diff * 100.0)
        return text + (" ±%.1f" % (noise * 100.0) if noise is not None else "")
    ratio = _num(block.get("ratio"))
    if ratio is None:
        return None
    text = "%s %s" % (NAMES.get(dim, dim), _pct(ratio - 1.0))
    return text + (" ±%.1f%%" % (noise * 100.0) if noise is not None else " (noise not known)")


def _stalls_worth_saying(block, verdict):
    diff = _num(_dict(block).get("difference"))
    return verdict in ("worse", "better") or (diff is not None and abs(diff) >= 0.0005)


def _dims(decision):
    return [d for d in ("throughput", "p50", "tail", "stalls") if d in decision]


def _cause(decision, word):
    verdicts = _dict(decision.get("verdicts"))
    worse = [d for d in _dims(decision) if verdicts.get(d) == "worse"]
    better = [d for d in _dims(decision) if verdicts.get(d) == "better"]
    cause = str(decision.get("cause") or "")
    if cause.startswith("workload_"):
        return None
    if worse:
        return "worse than allowed: " + ", ".join(
            "%s (%s)" % (NAMES.get(d, d), tolerance_words(d, decision) or "its tolerance") for d in worse
        )
    known = [d for d in _dims(decision) if verdicts.get(d) in ("better", "same", "worse")]
    if word == "keep" and better:
        return "better: %s; nothing worse" % ", ".join(NAMES.get(d, d) for d in better)
    if word == "keep" and decision.get("basis") == "no_harm":
        # a layer kept with nothing shown better: it stays because the trial showed it harmless
        return "checked: no harm, nothing measured worse" + ("" if known else " (every change within the noise)")
    if word == "keep":
        return "nothing measured worse" + ("" if known else " (every change within the noise)")
    if word == "rolled back" and decision.get("policy") == "improve":
        return "no gain of the %s asked for shown" % (tolerance_words("throughput", decision) or "gain")
    if word == "inconclusive":
        return "not decided yet"
    return None


def _arms(res, unit):
    """``8 blocks per arm`` or ``8 blocks with the layer, 6 without``; '' when not recorded."""
    blocks = _dict(res.get("blocks"))
    with_, without = blocks.get("with"), blocks.get("without")
    if with_ is None and res.get("blocks_before") is not None:
        with_, without = res.get("blocks_after"), res.get("blocks_before")
    if with_ is None:
        return ""
    if with_ == without:
        return "%s %s per arm" % (with_, unit)
    return "%s %s with the layer, %s without" % (with_, unit, without)


def _where(decision):
    """``on train_step, 4 blocks per arm``, and per other workload judged its own blocks and
    whether it stopped early: ``on cpu_dataloader, 8 blocks per arm (also judged on
    shm_pingpong, 4 blocks per arm, stopped early)``; or what of it is known."""
    parts = []
    unit = "windows of one running process" if decision.get("method") == "live" else "blocks"
    primary = decision.get("workload")
    per = _dict(decision.get("workloads"))
    measured = [str(w) for w in decision.get("workloads_measured") or list(per)]
    others = [w for w in measured if w != primary]
    early = _dict(decision.get("futility"))

    def stopped(w, res):
        return bool(res.get("futility") or early.get(w))

    if primary:
        res = _dict(per.get(primary)) or decision
        head = ", ".join(x for x in ["on %s" % primary, _arms(res, unit)] if x)
        if stopped(primary, res):
            head += ", stopped early"
        if others:
            head += " (also judged on %s)" % "; ".join(
                ", ".join(
                    x
                    for x in [
                        w,
                        _arms(_dict(per.get(w)), unit),
                        "stopped early" if stopped(w, _dict(per.get(w))) else "",
                    ]
                    if x
                )
                for w in others
            )
        parts.append(head)
    else:
        if measured:
            parts.append("on " + ", ".join(measured))
        arms = _arms(decision, unit)
        if arms:
            parts.append(arms)
        if decision.get("futility"):
            parts.append("stopped early")
    if decision.get("windows") is not None:
        windows = decision["windows"]
        parts.append(("%s windows" % len(windows)) if isinstance(windows, (list, dict)) else "%s windows" % windows)
    if decision.get("flaky"):
        parts.append("the workload is flaky")
    return ", ".join(parts)


def not_measured_why(decision):
    """Why a layer was not measured, in a few words."""
    later = [x for x in decision.get("seen_later") or [] if isinstance(x, dict)]
    if later:
        whens = sorted({EFFECTS.get(x.get("effect"), str(x.get("effect"))) for x in later})
        return "%d change(s) take effect only at %s" % (len(later), " or ".join(whens))
    reason = str(decision.get("reason") or "")
    if "not measurable on this host" in reason:
        return "no workload that sees this layer runs on this host"
    return _short(reason.split(": ", 1)[-1]) if reason else "nothing to measure"


def verdict(decision):
    """The decision in one line: the word, why, each change with its noise, and where.

    ``keep: better: throughput; nothing worse; throughput +8.3% ±1.2%, median step -7.6% ±1.0%,
    tail -8.0% ±2.1%; on train_step, 6+6 blocks``. The noise is the half-width of the change's
    interval at the confidence the gate judged with (the details section has the intervals).
    """
    d = _dict(decision)
    if not d:
        return "not measured"
    name = d.get("decision")
    word = WORDS.get(name, str(name or "not decided"))
    if d.get("measurable") is False:
        kept = "kept" if name == "keep" else ("rolled back" if name == "rollback" else word)
        return "not measured, %s: %s" % (kept, not_measured_why(d))
    if d.get("method") == "search" and d.get("summary"):
        return "%s: %s" % (word, d["summary"])  # the search's choice in one line
    cause = str(d.get("cause") or "")
    if cause.startswith("workload_"):
        failed = d.get("failures") or {}
        error = ""
        for w in [d.get("workload")] + sorted(failed):
            arms = _dict(failed.get(w))
            blocks = arms.get("on") or []
            if blocks and isinstance(blocks[-1], dict):
                error = blocks[-1].get("error") or blocks[-1].get("failure") or ""
                break
        verb = "hangs" if cause == "workload_hangs" else "fails"
        head = "the workload %s with this layer" % (verb if not d.get("flaky") else verb + " more often")
        line = "%s: %s%s" % (word, head, (": " + _short(error)) if error else "")
        where = _where(d)
        return line + ("; " + where if where else "")
    parts = []
    why = _cause(d, word)
    if why:
        parts.append(why)
    verdicts = _dict(d.get("verdicts"))
    changes = []
    for dim in _dims(d):
        if dim == "stalls" and not _stalls_worth_saying(d.get(dim), verdicts.get(dim)):
            continue
        words = change_words(dim, d.get(dim))
        if words:
            changes.append(words)
    if changes:
        parts.append(", ".join(changes))
    elif not why:
        reason = str(d.get("reason") or "")
        parts.append(_short(reason.split(": ", 1)[-1]) if reason else "no figures recorded")
    where = _where(d)
    if where:
        parts.append(where)
    return "%s: %s" % (word, "; ".join(parts))


# a block whose measured steps are less than this share of its wall time is named: its
# program's start-up, not its steps, is what the measurement paid for
STARTUP_SHARE = 0.5


def startup_words(decision):
    """``steps were 15% of the blocks' time (start-up 9.1 s a block)`` where start-up dominated
    the blocks, else ''."""
    total = _dict(_dict(decision.get("cost")).get("total"))
    share = _num(total.get("measured_share"))
    if decision.get("method") == "live" or share is None or share >= STARTUP_SHARE:
        return ""
    per = _num(total.get("startup_s_per_block"))
    return "steps were %d%% of the blocks' time%s" % (
        round(share * 100.0),
        " (start-up %.1f s a block)" % per if per is not None else "",
    )


# --------------------------------------------------------------------------- the details


def _ci_words(dim, block):
    block = _dict(block)
    if dim == "stalls":
        ci = block.get("difference_ci")
        if not ci:
            return "-"
        return "%+.2f to %+.2f points" % (ci[0] * 100.0, ci[1] * 100.0)
    ci = block.get("ratio_ci")
    if not ci:
        return "-"
    return "%s to %s" % (_pct(ci[0] - 1.0), _pct(ci[1] - 1.0))


def _value(dim, value):
    v = _num(value)
    if v is None:
        return "-"
    if dim == "stalls":
        return "%s%%" % number(v * 100.0)
    if dim == "throughput":
        return number(v)
    return ms(v)


# a workload whose measured steps were less than this share of its wall time, or a dimension
# whose noise is more than this (a ratio's half-width; stalls in points / 100), gives an interval
# that means nothing: the report says so in words instead of printing it
UNRESOLVABLE_SHARE = 0.10
UNRESOLVABLE_HALF = {"stalls": 0.10}
UNRESOLVABLE_RATIO_HALF = 1.0


def unresolvable_words(workload, share):
    """``not resolvable here: shm_pingpong measured 1% of its wall time`` when too little of
    the workload's time was its steps, else ''."""
    share = _num(share)
    if share is None or share >= UNRESOLVABLE_SHARE:
        return ""
    return "not resolvable here: %s measured %d%% of its wall time" % (workload, round(share * 100.0))


def _too_noisy(dim, block):
    half = _num(_dict(block).get("resolution"))
    return half is not None and half >= UNRESOLVABLE_HALF.get(dim, UNRESOLVABLE_RATIO_HALF)


def _noise(dim, block):
    half = _num(_dict(block).get("resolution"))
    return "±%s points" % number(half * 100.0) if dim == "stalls" else "±%s%%" % number(half * 100.0)


def statistics_table(decision, unresolvable=""):
    """Markdown rows, one per dimension: without, with, change, interval, allowed, verdict. With
    ``unresolvable`` (unresolvable_words) or a dimension's noise over 100% (10 points for the
    stalls), the interval is said in words, not printed."""
    d = _dict(decision)
    rows = [
        "| dimension | statistic | without the layer | with it | change | interval | allowed | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    verdicts = _dict(d.get("verdicts"))
    for dim in _dims(d) + (["p99"] if "p99" in d else []):
        block = _dict(d.get(dim))
        kind = "stalls" if dim == "stalls" else dim
        if dim == "stalls":
            change_text = (
                "%+.2f points" % (block["difference"] * 100.0) if _num(block.get("difference")) is not None else "-"
            )
        else:
            ratio = _num(block.get("ratio"))
            change_text = _pct(ratio - 1.0) if ratio is not None else "-"
        label = LONG_NAMES.get(dim, "%s (reported, not judged)" % block.get("label", dim))
        if dim == "tail" and block.get("label"):
            label = "tail: mean of each block's %s (lower is better)" % block["label"]
        said = str(verdicts.get(dim) or block.get("verdict") or "-")
        interval = _ci_words(kind, block)
        if unresolvable:
            interval, said = "not resolvable here", "not resolvable" if said == "unknown" else said
        elif _too_noisy(kind, block):
            interval = "not resolvable: noise %s" % _noise(kind, block)
            said = "not resolvable" if said == "unknown" else said
        elif said == "unknown":
            said = "not resolved"
        rows.append(
            "| %s |"
            % " | ".join(
                [
                    label,
                    str(block.get("statistic") or "-"),
                    _value(kind, block.get("before")),
                    _value(kind, block.get("after")),
                    change_text,
                    interval,
                    (tolerance_words(dim, d) or "-") if dim != "p99" else "-",
                    said,
                ]
            )
        )
    return rows


def confidence_words(decision):
    """What the interval's confidence is, in words (the 98.3% of a 95% gate with 3 looks)."""
    d = _dict(decision)
    conf, per_look, looks = _num(d.get("confidence")), _num(d.get("confidence_per_look")), d.get("looks")
    if per_look is None:
        return None
    text = "Intervals are %.3g%% confidence intervals of the change between blocks with and without the layer" % (
        per_look * 100.0
    )
    if conf is not None and looks:
        text += (
            ": the gate's %.3g%% confidence spread over the %s looks its budget plans (it looks after the first"
            " blocks and again every 2 more per arm, so each look is held to 1 - %.3g/%s)"
            % (conf * 100.0, looks, 1.0 - conf, looks)
        )
    better = _num(d.get("confidence_better"))
    if better is not None:
        text += "; a gain counts as better only at %.3g%% (one claim per dimension)" % (better * 100.0)
    return text + "."


def cost_rows(decision):
    cost = _dict(_dict(decision).get("cost"))
    if not cost:
        return []
    rows = [
        "| workload | blocks | wall s | measured steps s | share of the wall time that was measured steps"
        " | start-up s per block |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for w in sorted(k for k in cost if k != "total") + (["total"] if "total" in cost else []):
        c = _dict(cost[w])
        share = _num(c.get("measured_share"))
        rows.append(
            "| %s | %s | %s | %s | %s | %s |"
            % (
                w,
                c.get("blocks", "-"),
                number(c.get("wall_s")),
                number(c.get("measured_s")),
                "%d%%" % round(share * 100.0) if share is not None else "-",
                number(c.get("startup_s_per_block")),
            )
        )
    return rows


def _cell(value):
    return str(value).replace("|", "/").replace("\n", " ")


def details(decision, budget=None):
    """Markdown lines with every number of a decision: the verdict, the reason in full, per
    workload a table of its dimensions, the intervals' confidence, the budget and the cost."""
    d = _dict(decision)
    if not d:
        return []
    lines = ["Verdict: %s" % verdict(d), ""]
    if d.get("mode"):
        lines += ["Trial: %s." % d["mode"], ""]
    for later in d.get("seen_later") or []:
        if isinstance(later, dict):
            lines.append(
                "- %s takes effect at %s" % (later.get("id"), EFFECTS.get(later.get("effect"), later.get("effect")))
            )
    if d.get("seen_later"):
        lines.append("")
    per = _dict(d.get("workloads"))
    judged = per if per else ({d.get("workload") or "the workload": d} if _dims(d) else {})
    for w, raw in judged.items():
        res = _dict(raw)
        if not _dims(res):
            if res.get("reason"):
                lines += ["On %s: %s" % (w, _cell(res["reason"])), ""]
            continue
        head = "On %s: **%s**" % (w, res.get("decision", "-"))
        if res.get("blocks_before") is not None:
            head += ", %s blocks without the layer and %s with it (%s and %s steps)" % (
                res.get("blocks_before"),
                res.get("blocks_after"),
                res.get("n_before", "-"),
                res.get("n_after", "-"),
            )
        share = _dict(_dict(d.get("cost")).get(w)).get("measured_share")
        unresolvable = unresolvable_words(w, share)
        lines += [head + ".", ""] + statistics_table(res, unresolvable) + [""]
        if unresolvable:
            lines += [
                "Its intervals are %s: the blocks paid for the program's start-up, not its steps, so no"
                " change of this layer shows on it." % unresolvable,
                "",
            ]
        unresolved = res.get("unresolved") or []
        if unresolved:
            lines += ["Not resolved: %s." % "; ".join(str(u) for u in unresolved), ""]
        if res.get("stall_ms") is not None:
            lines += [
                "A stalled step is one slower than %s (the stall factor times the median)." % ms(res["stall_ms"]),
                "",
            ]
    words = confidence_words(d if d.get("confidence_per_look") is not None else next(iter(judged.values()), {}))
    if words:
        lines += [words, ""]
    early = dict(_dict(d.get("futility")))
    for w, raw in per.items():
        if _dict(raw).get("futility") and w not in early:
            early[w] = _dict(raw)["futility"]
    for w, why in sorted(early.items()):
        lines += ["Stopped early on %s: %s." % (w, _cell(why)), ""]
    if budget:
        lines += [budget, ""]
    rows = cost_rows(d)
    if rows:
        lines += ["Where the measuring time went:", ""] + rows + [""]
    startup = startup_words(d)
    if startup:
        lines += [
            "Start-up dominated the blocks: %s; a live trial (stacktune_bench_live_command) measures the "
            "program's steps without starting it per block." % startup,
            "",
        ]
    lines += search_rows(d)
    if d.get("seconds") is not None:
        toggles = "" if d.get("toggles") is None else "; the layer was switched %s time(s)" % d["toggles"]
        lines += ["Measuring took %s s%s." % (number(d["seconds"]), toggles), ""]
    if d.get("reason"):
        lines += ["The gate's reason, as the JSON records it:", "", "> %s" % _cell(d["reason"]), ""]
    return lines


def _noisy(value, half):
    if value is None:
        return "not measured"
    return number(value) + ((" ±" + number(half)) if half is not None else "")


def search_rows(decision):
    """Markdown lines of a search (``decision["search"]``, gate/search.py): one row per
    candidate and the host's own value, with throughput, median, p99, stalls, energy per step
    and watts (each with its noise where it has one), and whether it was dropped or chosen and
    why. Empty for a decision without a search."""
    found = _dict(_dict(decision).get("search"))
    rows = found.get("rows") or []
    if not rows:
        return []
    lines = [
        "Search of %s (objective %s%s): %s rounds, %s windows, stopped: %s."
        % (
            found.get("variable", "the setting"),
            found.get("objective"),
            ", max_slowdown %s" % found["max_slowdown"] if found.get("max_slowdown") is not None else "",
            found.get("rounds"),
            found.get("windows"),
            found.get("stop"),
        ),
        "",
        "| value | throughput (steps/s) | median ms | p99 ms | stalls | J/step | W | outcome |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for raw in rows:
        r = _dict(raw)
        shown = "as found" if r.get("value") is None else r.get("value")
        value = "%s (the host's own)" % shown if r.get("arm") == "host" else str(shown)
        outcome = str(r.get("status") or "-") + (": %s" % _cell(r["why"]) if r.get("why") else "")
        lines.append(
            "| %s | %s | %s | %s | %s | %s | %s | %s |"
            % (
                _cell(value),
                _noisy(r.get("throughput"), r.get("throughput_half")) if r.get("windows") else "-",
                number(r.get("p50_ms")),
                number(r.get("p99_ms")),
                "%s%%" % number(100.0 * r["stalls"]) if r.get("stalls") is not None else "-",
                _noisy(r.get("j_per_step"), r.get("j_per_step_half")),
                _noisy(r.get("watts"), r.get("watts_half")),
                outcome,
            )
        )
    return [*lines, "", "Choice: %s" % _cell(found.get("reason") or "-"), ""]


def budget_words(budget, workloads, live=False):
    """The budget per arm and per workload, and what it adds up to; with ``live``, a live
    trial's (windows of one running process per workload)."""
    budget = _dict(budget)
    n = len(workloads or []) or 1
    most, first = budget.get("max_windows" if live else "max_blocks"), budget.get("min_blocks")
    if most is None:
        return None
    if live:
        return (
            "Budget: a live trial, one running process per workload; at most %s windows of %s s per arm (with the"
            " layer, and without it) on each of %d workload(s)%s%s."
            % (
                most,
                budget.get("window_s"),
                n,
                "; the first look after %s per arm" % first if first is not None else "",
                "; at most %s s of measuring" % budget["max_seconds"] if budget.get("max_seconds") is not None else "",
            )
        )
    try:
        total = 2 * int(most) * n
    except (TypeError, ValueError):
        return None
    return (
        "Budget: at most %s blocks per arm (with the layer, and without it) on each of %d workload(s), so at most"
        " %d blocks in all%s%s."
        % (
            most,
            n,
            total,
            "; the first look after %s per arm" % first if first is not None else "",
            "; at most %s s of measuring" % budget["max_seconds"] if budget.get("max_seconds") is not None else "",
        )
    )
