# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's words: the one-line headline of a verdict and the reason for a decision,
per dimension, in the terms a user reads in the report.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.stacktune.gpu.plugins.module_utils.gate.verdicts import (
    ms,
)

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import DIMENSIONS, TAIL_DIMENSIONS


# ------------------------------------------------------------------------ the judge


def seconds_words(seconds):
    """A span of time as a reader takes it in: seconds from a tenth of one, milliseconds below
    (the steps of a block of microsecond steps read "0.00 s" otherwise)."""
    if seconds >= 0.1:
        return "%.2f s" % seconds
    return "%s ms" % ms(seconds * 1000.0)


def _pct(x):
    return "%+.1f%%" % (x * 100.0)


def can_still_improve(dim, block):
    """False when the interval already rules out a gain of the band in this dimension."""
    ci = block.get("ratio_ci")
    if ci is None:
        return True
    band = block["tolerance"]
    if dim == "throughput":
        return ci[1] >= 1.0 + band
    return ci[0] <= 1.0 - band


def dim_phrase(dim, block, confidence):
    if dim == "stalls":
        if block.get("difference_ci") is None:
            return "stalls: too few blocks"
        return "stalled steps %.2f%% -> %.2f%% (%s points, %.3g%% CI %s to %s)" % (
            block["before"] * 100.0,
            block["after"] * 100.0,
            _pct(block["difference"]).rstrip("%"),
            confidence * 100.0,
            _pct(block["difference_ci"][0]).rstrip("%"),
            _pct(block["difference_ci"][1]).rstrip("%"),
        )
    if block.get("ratio_ci") is None:
        return "%s: too few blocks" % block["label"]
    if dim == "throughput":
        r = block["ratio"]
        return "throughput %s %.1f%% (%.3g%% CI %s to %s)" % (
            "rose" if r >= 1 else "fell",
            abs(r - 1.0) * 100.0,
            confidence * 100.0,
            _pct(block["ratio_ci"][0] - 1.0),
            _pct(block["ratio_ci"][1] - 1.0),
        )
    return "%s %s -> %s ms (x%.3g, %.3g%% CI x%.3g-x%.3g)" % (
        block["label"],
        ms(block["before"]),
        ms(block["after"]),
        block["ratio"],
        confidence * 100.0,
        block["ratio_ci"][0],
        block["ratio_ci"][1],
    )


def unknown_phrase(dim, block):
    res = block.get("resolution")
    if res is None:
        return "%s: too few blocks to judge" % (block["label"] if dim != "stalls" else "stalls")
    if dim == "stalls":
        return "stalls: within block-to-block noise, ±%.2f points" % (res * 100.0)
    return "%s: within block-to-block noise, ±%.1f%%" % (block["label"], res * 100.0)


_SHORT_NAMES = {"throughput": "throughput", "p50": "median step", "tail": "tail"}


def headline(result):
    """The decision in one line: its cause and each dimension's measured change, no intervals.

    ``reason`` keeps the intervals for the report; this is what a run prints. A change the
    blocks could not tell from their noise carries the noise band, so that a point estimate
    is not read as a measured effect. The cause is the reason's first clause (every reason starts
    ``<decision>: <cause>`` followed by ``:`` or `` (``).
    """
    reason = result.get("reason") or ""
    decision = result.get("decision") or "inconclusive"
    if reason.startswith(decision + ": "):
        cause = reason.split(": ", 1)[1]
        for stop in (": ", " ("):
            cause = cause.split(stop, 1)[0]
    else:  # a reason of another form ("not judged: <why>") is kept whole
        cause = reason
    verdicts = result.get("verdicts") or {}
    changes = []
    for dim in ("throughput", "p50", "tail"):
        block = result.get(dim) or {}
        if block.get("ratio") is not None:
            change = "%s %+.1f%%" % (_SHORT_NAMES[dim], (block["ratio"] - 1.0) * 100.0)
            if verdicts.get(dim) == "unknown" and block.get("resolution") is not None:
                change += " (noise ±%.1f%%)" % (block["resolution"] * 100.0)
            changes.append(change)
    stalls = result.get("stalls") or {}
    if stalls.get("difference") and abs(stalls["difference"]) >= 0.0005:
        change = "stalled steps %+.1f points" % (stalls["difference"] * 100.0)
        if verdicts.get("stalls") == "unknown" and stalls.get("resolution") is not None:
            change += " (noise ±%.1f)" % (stalls["resolution"] * 100.0)
        changes.append(change)
    line = "%s: %s" % (decision, cause.strip())
    if changes:
        line += " (%s)" % ", ".join(changes)
    if result.get("blocks_before") is not None:
        line += " [%d+%d blocks]" % (result["blocks_before"], result.get("blocks_after") or 0)
    return line


def decide(result, conf):
    result = decide_reason(result, conf)
    result["summary"] = headline(result)
    return result


def decide_reason(result, conf):
    v = result["verdicts"]
    policy, final = result["policy"], result["final"]
    dims = {d: result[d] for d in DIMENSIONS}
    worse = [d for d in DIMENSIONS if v[d] == "worse"]
    unknown = [d for d in DIMENSIONS if v[d] == "unknown"]
    result["unresolved"] = [unknown_phrase(d, dims[d]) for d in unknown]
    measured = "; ".join(dim_phrase(d, dims[d], conf) for d in DIMENSIONS)
    blocks = "%d+%d blocks" % (result["blocks_before"], result["blocks_after"])
    if worse:
        tp = dims["throughput"]
        note = ""
        if (
            "throughput" not in worse
            and tp.get("ratio") is not None
            and tp["ratio"] > 1.0
            and v["throughput"] != "unknown"
        ):
            note = ", although throughput rose %.1f%%" % ((tp["ratio"] - 1.0) * 100.0)
        first = worse[0]
        names = {
            "throughput": "throughput fell",
            "p50": "the median step time rose",
            "tail": "the tail rose",
            "stalls": "more steps stalled",
        }
        result.update(
            decision="rollback",
            resolved=True,
            reason="rollback: %s beyond the %g%% tolerance (%s)%s [%s]"
            % (
                " and ".join(names[d] for d in worse),
                (result["tolerances"]["min_gain" if first == "throughput" else first] * 100.0),
                "; ".join(dim_phrase(d, dims[d], conf) for d in worse),
                note,
                blocks,
            ),
        )
        return result
    tail_ok = all(v[d] in ("better", "same") for d in TAIL_DIMENSIONS)
    all_unknown = len(unknown) == len(DIMENSIONS)
    noisy = " (no dimension could be resolved with %s)" % blocks if all_unknown else ""
    unresolved = "; unresolved: %s" % "; ".join(result["unresolved"]) if unknown else ""
    if policy == "improve":
        improved = [d for d in DIMENSIONS if v[d] == "better"]
        others_ok = all(v[d] != "unknown" for d in ("throughput", "p50"))
        if improved and tail_ok and (others_ok or v["throughput"] == "better"):
            result.update(
                decision="keep",
                resolved=True,
                reason="keep: significant improvement in %s and the tail is not worse: %s [%s]"
                % (", ".join(improved), measured, blocks),
            )
            return result
        if improved and final:
            # the budget is spent: the tail was not resolved, but nothing was measured worse
            result.update(
                decision="keep",
                reason="keep: significant improvement in %s and nothing measured worse: %s%s [%s]"
                % (", ".join(improved), measured, unresolved, blocks),
            )
            return result
        if not improved and not any(can_still_improve(d, dims[d]) for d in ("throughput", "p50", "tail")):
            result.update(
                decision="rollback",
                resolved=True,
                reason="rollback: no improvement of the %g%% asked for in any dimension: %s [%s]"
                % (result["tolerances"]["min_gain"] * 100.0, measured, blocks),
            )
            return result
        if final:
            result.update(
                decision="rollback",
                reason="rollback: no significant improvement shown%s: %s%s [%s]"
                % (noisy, measured, unresolved, blocks),
            )
        else:
            result["reason"] = "inconclusive: no improvement shown yet: %s%s [%s]" % (measured, unresolved, blocks)
        return result
    if not unknown:
        result.update(
            decision="keep",
            resolved=True,
            reason="keep: nothing is worse: %s [%s]" % (measured, blocks),
        )
        return result
    if final:
        result.update(
            decision="keep",
            reason="keep: no regression shown%s: %s%s [%s]" % (noisy, measured, unresolved, blocks),
        )
    else:
        result["reason"] = "inconclusive: a regression within the noise is not ruled out yet: %s%s [%s]" % (
            measured,
            unresolved,
            blocks,
        )
    return result


_DIM_NAMES = {"throughput": "throughput", "p50": "median step", "tail": "tail", "stalls": "stalled steps"}


def _dim_number(dim, block):
    """One dimension's change and its noise in numbers: ``x0.894 ±8.1%`` or ``+2.0 points ±7.33``."""
    if dim == "stalls":
        if block.get("difference") is None:
            return "too few blocks"
        text = "%+.2f points" % (block["difference"] * 100.0)
        if block.get("resolution") is not None:
            text += " ±%.2f" % (block["resolution"] * 100.0)
        return text
    if block.get("ratio") is None:
        return "too few blocks"
    text = "x%.3g" % block["ratio"]
    if block.get("resolution") is not None:
        text += " ±%.1f%%" % (block["resolution"] * 100.0)
    return text


def settled_words(result):
    """What decided and what stayed unresolved, per dimension, in numbers: two lists of
    ``{"dimension", "verdict", "change"}`` (and the tolerance and the half-width at the budget for
    an unresolved one, where the stop rule projected it). The dimensions that decide are the worse
    ones of a rollback, the better ones of a keep; a policy's decision at the budget or on a
    stop is decided by what was resolved, and says so."""
    verdicts = result.get("verdicts") or {}
    decision = result.get("decision")
    if decision == "rollback" and "worse" in verdicts.values():
        deciding = [d for d in DIMENSIONS if verdicts.get(d) == "worse"]
    elif decision == "keep" and "better" in verdicts.values():
        deciding = [d for d in DIMENSIONS if verdicts.get(d) == "better"]
    else:
        deciding = [d for d in DIMENSIONS if verdicts.get(d) in ("same", "better", "worse")]
    projected = {}
    for rule in (result.get("stop_rule") or {}).values():
        projected.update(rule.get("projection") or {})
    decided, left = [], []
    for dim in DIMENSIONS:
        block = result.get(dim) or {}
        if not block:
            continue
        row = {"dimension": dim, "verdict": verdicts.get(dim), "change": _dim_number(dim, block)}
        if dim in deciding:
            decided.append(row)
        elif verdicts.get(dim) == "unknown":
            p = projected.get(dim)
            if p:
                row["tolerance"] = p["tolerance"]
                row["at_budget"] = p["at_budget"]
            left.append(row)
    return decided, left


def resolution_words(decided, left):
    """``decided by the median step (better, x0.894 ±8.1%); unresolved: stalled steps (+2.0 points
    ±7.33; ±5.20 at the budget, tolerance 0.50)``."""
    parts = []
    if decided:
        parts.append(
            "decided by %s"
            % ", ".join("the %s (%s, %s)" % (_DIM_NAMES[r["dimension"]], r["verdict"], r["change"]) for r in decided)
        )
    if left:
        words = []
        for r in left:
            text = "%s (%s" % (_DIM_NAMES[r["dimension"]], r["change"])
            if r.get("at_budget") is not None:
                stalls = r["dimension"] == "stalls"
                text += "; ±%s at the budget, tolerance %s" % (
                    ("%.2f" % (r["at_budget"] * 100.0)) if stalls else ("%.1f%%" % (r["at_budget"] * 100.0)),
                    ("%.2f points" % (r["tolerance"] * 100.0)) if stalls else ("%.1f%%" % (r["tolerance"] * 100.0)),
                )
            words.append(text + ")")
        parts.append("unresolved: %s" % ", ".join(words))
    return "; ".join(parts)


_EFFECT_WORDS = {"next_login": "at the next login", "next_boot": "at the next boot"}


def changes_seen_later(changes):
    """The layer's changes when none of them is seen by a process started now, else None.

    ``changes``: the rows of the layer's apply (``host_settings``); each written row says when
    a newly started process sees it (``effect``). A row written without ``effect`` counts as
    seen now, and so does an empty list (nothing said): such a layer is measured.
    """
    written = [r for r in changes or [] if isinstance(r, dict) and r.get("changed")]
    if not written or any(r.get("effect") in (None, "now") for r in written):
        return None
    return [(r.get("id") or "?", r["effect"]) for r in written]


def unseen_reason(later):
    """Why a layer whose changes are all seen later is not measured, in words for the report."""
    parts = ["%s %s" % (sid, _EFFECT_WORDS.get(effect, effect)) for sid, effect in later]
    return (
        "nothing a block started now can see changed (%s); the gate measures a layer only while its "
        "change is live" % "; ".join(parts)
    )
