# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Calibration (``make calibrate``): a host's block-to-block noise, what the gate's budget can
resolve on it, and the steps per block that resolve the most per second.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.verdicts import (
    sig,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import mean, quantile, t_ppf

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import (
    DIMENSIONS,
    look_confidence,
    planned_looks,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.blocks import block_statistics, judge_blocks
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import half_at_budget


# ------------------------------------------------------------------------ calibration


def _sd(values):
    if len(values) < 2:
        return None
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


STEPS_BOUNDS = (20, 5000)
BATCHES = 10  # consecutive batches per block whose means estimate the noise inside a block


def steps_for_noise(blocks, startup_s, steps):
    """Steps per block that resolve the throughput best per second of wall time.

    ``blocks``: lists of step ms (one workload, no change between them); ``startup_s``: the
    start-up a block costs besides its steps; ``steps``: the steps they were measured with.
    The variance of a block's log throughput splits into a part between blocks (what changes
    from process to process) and a part inside one, estimated from the means of
    :data:`BATCHES` consecutive batches of steps (so steps that drift or come in bursts are
    counted as they are). With ``k`` steps of ``t`` seconds a block costs ``c + k t`` seconds,
    and the interval after a budget of seconds narrows with ``(c + k t) (between + inside *
    steps / k)``, least at ``k = sqrt(c * inside * steps / (t * between))``: where between-block
    noise dominates, more and shorter blocks; where the noise inside a block does, longer ones.
    The choice is kept between the steps whose time equals the start-up (half of every block
    measured) and three times that, no shorter than half the steps measured (a prediction of
    shorter blocks is checked by calibrating again there), and within :data:`STEPS_BOUNDS`.
    Returns None with fewer than 4 blocks.
    """
    usable = [b for b in blocks if len(b) >= 2 * BATCHES]
    if len(usable) < 4:
        return None
    level = [math.log(mean(b)) for b in usable]
    observed = _sd(level) ** 2
    inside = []
    for b in usable:
        size = len(b) // BATCHES
        means = [math.log(mean(b[i * size : (i + 1) * size])) for i in range(BATCHES)]
        inside.append(_sd(means) ** 2 / BATCHES)
    inside = mean(inside) * len(usable[0]) / float(steps)  # per block of ``steps`` steps
    between = max(observed - inside, 0.0)
    step_s = quantile(sorted(mean(b) for b in usable), 0.5) / 1000.0
    startup = max(float(startup_s), 0.0)
    # Shorter blocks are a prediction from inside one: on the one-H200 host 80-step DataLoader
    # blocks varied far more than ten 40-step batches of 400-step ones had said (the workers'
    # bursts span batches), so one calibration halves the steps at most; measure again there.
    low = max(STEPS_BOUNDS[0], int(math.ceil(startup / step_s)), steps // 2)
    high = min(STEPS_BOUNDS[1], max(low, int(math.ceil(3.0 * startup / step_s))))
    if between <= 0.0 or inside <= 0.0:
        best = None if between <= 0.0 else 0
    else:
        best = int(round(math.sqrt(startup * inside * steps / (step_s * between))))
    chosen = int(min(high, max(low, high if best is None else best)))
    if chosen < steps:
        why = "blocks differ more than the steps inside one: more, shorter blocks"
        if best is not None and best < low:
            why += " (the noise asks for %d: at most half as many per calibration, none below the start-up)" % best
    elif chosen == steps:
        why = "as measured"
    elif best is None or best > high:
        why = "blocks hardly differ from each other: longer blocks (up to three times the start-up)"
    elif best < low:
        why = "longer blocks than the noise asks for (%d steps), so that half of every block is measured" % best
    else:
        why = "the steps inside a block vary more than blocks do: fewer, longer blocks"
    return {
        "steps": chosen,
        "measured_with": steps,
        "between_sd": sig(math.sqrt(between), 3),
        "inside_sd": sig(math.sqrt(inside), 3),
        "step_ms": sig(step_s * 1000.0, 4),
        "startup_s": sig(startup, 3),
        "measured_share": sig(chosen * step_s / (startup + chosen * step_s), 3),
        "unbounded": best,
        "why": why,
    }


def calibrate(workloads, measure, gate, blocks, clock):
    """Identical blocks per workload: the block-to-block noise per dimension and what the budget resolves.

    Blocks of the workloads are interleaved; each workload's blocks are split into two arms in
    the A B B A order the gate uses and judged as an A/A pair. Per dimension it returns the
    spread between blocks (standard deviation of the per-block statistic, as a percentage of
    its level, or in points for stalls), the interval the A/A pair gave, and the smallest
    change the gate can resolve at its budget (``max_blocks`` per arm, with the confidence of
    one of its planned looks). ``gate``: the checked gate (``settings.check_settings``), its
    settings and its budget.
    """
    data = {w: [] for w in workloads}
    seconds = dict.fromkeys(workloads, 0.0)
    measured = dict.fromkeys(workloads, 0.0)
    voids = dict.fromkeys(workloads, 0)
    for _i in range(blocks):
        for w in workloads:
            t0 = clock()
            block = measure(w)
            seconds[w] += clock() - t0
            measured[w] += sum(block.get("samples_ms") or []) / 1000.0
            if block.get("void"):
                voids[w] += 1
                continue
            data[w].append(block)
    settings, budget = gate
    looks = planned_looks(budget["min_blocks"], budget["max_blocks"])
    conf = look_confidence(settings["confidence"], looks)
    out = {}
    for w in workloads:
        got = data[w]
        entry = {
            "blocks": len(got),
            "void_blocks": voids[w],
            "seconds_per_block": sig(seconds[w] / blocks, 3),
            "measured_seconds_per_block": sig(measured[w] / blocks, 3),
        }
        out[w] = entry
        if len(got) < 4:
            entry["error"] = "fewer than 4 usable blocks"
            continue
        order = [("on", "off", "off", "on")[i % 4] for i in range(len(got))]
        arms = {"on": {"blocks": [], "at": []}, "off": {"blocks": [], "at": []}}
        for i, (arm, block) in enumerate(zip(order, got)):
            arms[arm]["blocks"].append(block["samples_ms"])
            arms[arm]["at"].append(i + 1)
        res = judge_blocks(
            arms["off"],
            arms["on"],
            policy="no_regression",
            **settings,
            final=True,
            looks=looks,
        )
        q = settings["tail_quantile"]
        stall_ms = res["stall_ms"]
        stats = [block_statistics(sorted(b["samples_ms"]), q, stall_ms) for b in got]
        per_arm = len(got) // 2
        dims = {}
        for dim in DIMENSIONS + ("p99",):
            vals = [st[dim] for st in stats]
            if dim == "stalls":
                spread = _sd(vals)
                level = mean(vals)
            else:
                spread = _sd([math.log(v) for v in vals])
                level = math.exp(mean([math.log(v) for v in vals]))
            block = res[dim]
            half_now = block.get("resolution")
            at_budget = None
            df_now = block.get("df")
            if half_now is not None and df_now:
                df_budget = 2 * budget["max_blocks"] - (3 if block.get("drift_fitted", True) else 2)
                at_budget = half_at_budget(dim, half_now, df_now, df_budget, per_arm, budget["max_blocks"], conf)
            dims[dim] = {
                "level": sig(level, 4),
                "spread_between_blocks": sig(spread, 3),
                "min": sig(min(vals), 4),
                "max": sig(max(vals), 4),
                "aa_verdict": block["verdict"],
                "resolvable_now": half_now,
                "resolvable_at_budget": sig(at_budget, 3),
            }
        entry.update(dimensions=dims, aa_decision=res["decision"], aa_reason=res["reason"])
        startup = (seconds[w] - measured[w]) / blocks
        entry["steps"] = steps_for_noise([b["samples_ms"] for b in got], startup, len(got[0]["samples_ms"]))
    return {
        "workloads": out,
        "table": calibration_table(out, budget),
        "confidence_per_look": sig(conf),
        "looks": looks,
        "budget": {k: budget[k] for k in ("min_blocks", "max_blocks", "max_seconds")},
    }


def calibration_table(workloads, budget):
    """Lines for people: per workload and dimension, the noise and what the gate resolves."""
    head = "%-14s %-10s %12s %14s %-8s %12s %12s" % (
        "workload",
        "dimension",
        "level",
        "block spread",
        "A/A",
        "resolves now",
        "at budget",
    )
    lines = [head, "-" * len(head)]
    for w, entry in workloads.items():
        if "dimensions" not in entry:
            lines.append("%-14s %s (%d usable blocks)" % (w, entry.get("error", "not measured"), entry["blocks"]))
            continue
        for dim in DIMENSIONS + ("p99",):
            d = entry["dimensions"][dim]
            if dim == "stalls":
                level = "%.2f%%" % (d["level"] * 100.0)
                spread = "%.2f pts" % ((d["spread_between_blocks"] or 0.0) * 100.0)
                now = "-" if d["resolvable_now"] is None else "±%.2f pts" % (d["resolvable_now"] * 100.0)
                later = "-" if d["resolvable_at_budget"] is None else "±%.2f pts" % (d["resolvable_at_budget"] * 100.0)
            else:
                level = ("%.4g" % d["level"]) + ("/s" if dim == "throughput" else " ms")
                spread = "%.1f%%" % ((d["spread_between_blocks"] or 0.0) * 100.0)
                now = "-" if d["resolvable_now"] is None else "±%.1f%%" % (d["resolvable_now"] * 100.0)
                later = "-" if d["resolvable_at_budget"] is None else "±%.1f%%" % (d["resolvable_at_budget"] * 100.0)
            lines.append(
                "%-14s %-10s %12s %14s %-8s %12s %12s"
                % (w if dim == "throughput" else "", dim, level, spread, d["aa_verdict"], now, later)
            )
        lines.append(
            "%-14s %d blocks (%d void), %.1f s per block of which %.2f s measured steps; budget %d-%d blocks per "
            "arm, %d s per layer"
            % (
                "",
                entry["blocks"],
                entry["void_blocks"],
                entry["seconds_per_block"],
                entry.get("measured_seconds_per_block") or 0.0,
                budget["min_blocks"],
                budget["max_blocks"],
                budget["max_seconds"],
            )
        )
        steps = entry.get("steps")
        if steps:
            lines.append(
                "%-14s steps per block: %d would resolve the most per second (%d measured; %s; between blocks "
                "±%.2f%%, inside one ±%.2f%%, start-up %.2f s, %d%% of a block measured)"
                % (
                    "",
                    steps["steps"],
                    steps["measured_with"],
                    steps["why"],
                    steps["between_sd"] * 100.0,
                    steps["inside_sd"] * 100.0,
                    steps["startup_s"],
                    round(steps["measured_share"] * 100.0),
                )
            )
    chosen = {w: e["steps"]["steps"] for w, e in workloads.items() if e.get("steps")}
    if chosen:
        lines.append(
            "to measure with these steps: -e '{\"stacktune_bench_steps_by_workload\": %s}'"
            % json.dumps(chosen, sort_keys=True)
        )
    return lines


# ------------------------------------------------------------------ live windows sized to the noise

# A live trial's window length is chosen within these seconds (the first windows are measured at
# the budget's window_s); a window at least this many times the overhead of a window
WINDOW_BOUNDS = (1.0, 12.0)
WINDOW_CANDIDATES = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0)
MIN_CHUNKS = 6  # pieces of the first windows that estimate one length's variance directly
# the judged statistics a window's length is sized for: its mean step (throughput) and its median step
WINDOW_STATISTICS = {"throughput": "mean", "p50": "median"}


def _cut(windows, seconds, arms=None):
    """The windows' steps (in arrival order) cut into consecutive pieces of ``seconds`` each,
    with the arm of the window each came from; a piece never spans two windows (a switch lies
    between them)."""
    out = []
    for i, steps in enumerate(windows):
        arm = arms[i] if arms else None
        piece, spent = [], 0.0
        for v in steps:
            piece.append(v)
            spent += v
            if spent >= seconds * 1000.0:
                out.append((arm, piece))
                piece, spent = [], 0.0
    return out


def _log_stat(steps, how):
    if how == "mean":
        return math.log(mean(steps))
    return math.log(quantile(sorted(steps), 0.5))


def lag1_autocorrelation(windows):
    """The lag-1 autocorrelation of the step times inside the windows (each window's own mean
    taken out): near 0 for independent steps, high for a loader that stalls in runs."""
    num = den = 0.0
    for steps in windows:
        if len(steps) < 3:
            continue
        m = mean(steps)
        dev = [v - m for v in steps]
        num += math.fsum(a * b for a, b in zip(dev, dev[1:]))
        den += math.fsum(d * d for d in dev)
    return num / den if den > 0 else None


def window_bounds(first_s):
    """The lengths a live trial's windows may be sized to after its first windows of ``first_s``:
    never shorter (a bursty loader's median jumps between its modes in short windows, which the
    first few windows may not show), at most four times as long and :data:`WINDOW_BOUNDS`."""
    return max(WINDOW_BOUNDS[0], first_s), max(first_s, min(WINDOW_BOUNDS[1], 4.0 * first_s))


def _pooled_var(pairs):
    """The variance of values about their own arm's mean, pooled over the arms; None with too few."""
    groups = {}
    for arm, v in pairs:
        groups.setdefault(arm, []).append(v)
    ss = math.fsum((v - mean(vs)) ** 2 for vs in groups.values() for v in vs)
    df = len(pairs) - len(groups)
    return ss / df if df > 0 else None


def window_plan(windows, overhead_s, bounds=WINDOW_BOUNDS, candidates=WINDOW_CANDIDATES, arms=None, budget_s=None):
    """The window length that resolves the judged statistics best per second of measuring.

    ``windows``: the first windows' step times (ms, in arrival order); ``arms``: the arm of each
    (each statistic varies about its own arm's mean: a change between them is not noise);
    ``overhead_s``: the seconds a window costs besides its steps
    (settling dropped after switches, the request), on average per window. Per candidate
    length ``L`` within ``bounds`` and per judged statistic (a window's mean step for the
    throughput, its median step for the median), the variance of the statistic's log over
    pieces of that length is estimated from the windows cut into pieces (at least
    :data:`MIN_CHUNKS`); a length longer than the windows allow is extrapolated from the
    longest two measured ones by the slope of log variance on log length (kept between 0, a
    drift no length averages away, and -1, independent steps): that slope is the steps'
    autocorrelation at work. A window of ``L`` costs ``L + overhead_s`` seconds, so the
    interval after a fixed time narrows with ``V(L) (L + overhead_s)``, times the square of the
    Student-t quantile at the degrees of freedom the windows of ``budget_s`` seconds per arm
    leave at that length (fewer, longer windows: a wider quantile); the plan takes the
    length where the statistic that resolves best (the least of those products over the
    candidates) is least. Returns None when the windows give too few pieces for two lengths.
    """
    lo, hi = bounds
    lengths = sorted(set([c for c in candidates if lo <= c <= hi] + [lo]))
    longest = max(sum(steps) for steps in windows) / 1000.0 if windows else 0.0
    # the variance is measured on pieces of the windows shorter than they are; its fall with the
    # length (the slope) is the steps' autocorrelation, and carries it to the lengths asked
    probes = sorted({round(longest * f, 3) for f in (0.125, 0.25, 1.0 / 3.0, 0.5, 1.0)})
    per_stat = {}
    for dim, how in sorted(WINDOW_STATISTICS.items()):
        measured = []
        for length in probes:
            pieces = _cut(windows, length, arms) if length > 0 else []
            if len(pieces) < MIN_CHUNKS:
                continue
            var = _pooled_var([(arm, _log_stat(p, how)) for arm, p in pieces])
            if var is None:
                continue
            measured.append((length, max(var, 1e-12)))
        if len(measured) < 2:
            return None
        xs = [math.log(x) for x, _v in measured]
        ys = [math.log(v) for _x, v in measured]
        xbar, ybar = mean(xs), mean(ys)
        sxx = math.fsum((x - xbar) ** 2 for x in xs)
        slope = math.fsum((x - xbar) * (y - ybar) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
        slope = max(-1.0, min(0.0, slope))
        l2, v2 = measured[-1]
        rows = {}
        for length in lengths:
            var = v2 * (length / l2) ** slope
            score = var * (length + overhead_s)
            if budget_s:
                # fewer, longer windows leave fewer degrees of freedom: the interval's quantile grows
                n = max(2.0, budget_s / (length + overhead_s))
                score *= t_ppf(0.995, max(1, int(2 * n - 3))) ** 2
            rows[length] = {"variance": var, "score": score}
        best = min(rows, key=lambda k: rows[k]["score"])
        per_stat[dim] = {"statistic": how, "slope": round(slope, 3), "rows": rows, "best_s": best}
    # the statistic that resolves best per second decides the length
    deciding = min(per_stat, key=lambda d: per_stat[d]["rows"][per_stat[d]["best_s"]]["score"])
    chosen = per_stat[deciding]["best_s"]
    return {
        "window_s": chosen,
        "decided_by": deciding,
        "statistic": per_stat[deciding]["statistic"],
        "overhead_s": round(overhead_s, 3),
        "lag1_autocorrelation": sig(lag1_autocorrelation(windows) or 0.0),
        "per_statistic": {
            d: {
                "statistic": p["statistic"],
                "best_s": p["best_s"],
                "slope": p["slope"],
                "cv_pct": {str(k): round(100.0 * math.sqrt(r["variance"]), 2) for k, r in sorted(p["rows"].items())},
            }
            for d, p in per_stat.items()
        },
    }


def window_words(plan, measured_s):
    """The plan in one line for the run's output and the decision."""
    if plan is None:
        return "windows kept at %g s (too few steps to size them)" % measured_s
    p = plan["per_statistic"][plan["decided_by"]]
    return (
        "windows of %g s (sized from the first windows of %g s: a window's %s varies %.1f%% at %g s; "
        "lag-1 autocorrelation of the steps %.2f)"
        % (
            plan["window_s"],
            measured_s,
            plan["statistic"],
            p["cv_pct"][str(plan["window_s"])],
            plan["window_s"],
            plan["lag1_autocorrelation"],
        )
    )
