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
from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import mean, quantile

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
                now = "-" if d["resolvable_now"] is None else "+-%.2f pts" % (d["resolvable_now"] * 100.0)
                later = "-" if d["resolvable_at_budget"] is None else "+-%.2f pts" % (d["resolvable_at_budget"] * 100.0)
            else:
                level = ("%.4g" % d["level"]) + ("/s" if dim == "throughput" else " ms")
                spread = "%.1f%%" % ((d["spread_between_blocks"] or 0.0) * 100.0)
                now = "-" if d["resolvable_now"] is None else "+-%.1f%%" % (d["resolvable_now"] * 100.0)
                later = "-" if d["resolvable_at_budget"] is None else "+-%.1f%%" % (d["resolvable_at_budget"] * 100.0)
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
                "+-%.2f%%, inside one +-%.2f%%, start-up %.2f s, %d%% of a block measured)"
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
