# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's trial: blocks measured in A B B A order until the decision is resolved or the
budget is spent, the futility stop, failed blocks and the workloads a layer is measured on.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.registry import (
    CPU_WORKLOADS,
    DATA_DIR_WORKLOADS,
    GPU_WORKLOADS,
    LIVE_WORKLOADS,
    MIN_GPUS,
)

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import (
    BUDGET_PRESETS,
    DIMENSIONS,
    WORSE_RULES,
    look_confidence,
    planned_looks,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.blocks import judge_blocks
from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import t_ppf
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.wording import (
    headline,
    resolution_words,
    settled_words,
)


# ------------------------------------------------------------------ several workloads


def combine(results, policy, final):
    """One decision for a layer judged on several workloads: ``{workload: judge_blocks result}``.

    Any workload measured worse rolls the layer back. ``improve`` keeps the layer when one
    workload shows a significant improvement and every other one is resolved without a
    regression; ``no_regression`` keeps it when no workload is worse and every one is
    resolved (or on the last look). The primary workload is the one that decided.
    """
    names = list(results)
    worse = [w for w in names if any(v == "worse" for v in results[w]["verdicts"].values())]
    keeps = [w for w in names if results[w]["decision"] == "keep"]
    resolved = all(results[w]["resolved"] for w in names)
    if worse:
        primary, decision, done = worse[0], "rollback", True
    elif policy == "improve":
        if keeps and resolved:
            primary, decision, done = keeps[0], "keep", True
        elif resolved:
            primary, decision, done = names[0], "rollback", True
        elif final:
            primary, decision, done = (keeps[0] if keeps else names[0]), "rollback", False
            if keeps:
                decision = "keep"
        else:
            primary, decision, done = names[0], "inconclusive", False
    elif resolved:
        primary, decision, done = names[0], "keep", True
    else:
        primary, decision, done = names[0], ("keep" if final else "inconclusive"), False
    out = dict(results[primary])
    if len(names) > 1:
        parts = ["%s: %s" % (w, results[w]["reason"]) for w in [primary] + [n for n in names if n != primary]]
        reason = "%s, judged on %s. %s" % (decision, " and ".join(names), " | ".join(parts))
    else:
        reason = "%s (%s)" % (out["reason"], primary)
    summary = out.get("summary") or headline(out)
    if decision != out.get("decision"):
        summary = "%s; %s" % (decision, summary)
    others = [n for n in names if n != primary]
    summary += " on %s%s" % (primary, (" (also judged on %s)" % ", ".join(others)) if others else "")
    out.update(
        summary=summary,
        decision=decision,
        resolved=done,
        final=final,
        workload=primary,
        reason=reason,
        workloads={w: results[w] for w in names},
    )
    return out


def decided_on(result, policy):
    """Whether one workload's trial saw the layer and decided, so that a layer's further
    workloads need not be measured: a resolved keep under either policy, or a rollback for a
    dimension measured worse. A workload that could not decide (its budget spent or futile) or
    could not see the layer (``improve`` rolled back with every dimension resolved and no gain
    in reach) leaves the decision to the next workload."""
    verdicts = (result.get("verdicts") or {}).values()
    if result.get("decision") == "rollback":
        return "worse" in verdicts or bool(result.get("cause"))
    return result.get("decision") == "keep" and bool(result.get("resolved"))


def half_at_budget(dim, half, df_now, df_budget, per_arm, budget, confidence):
    """The interval half-width ``half`` (now, with ``per_arm`` blocks and ``df_now`` degrees of
    freedom) scaled to ``budget`` blocks per arm: the square root of the blocks and the
    Student-t quantile at ``df_budget``. A share in points for stalls, a ratio's relative
    half-width for the other dimensions."""
    q = 0.5 + confidence / 2.0
    scale = math.sqrt(per_arm / float(budget)) * t_ppf(q, df_budget) / t_ppf(q, df_now)
    return half * scale if dim == "stalls" else math.expm1(math.log1p(half) * scale)


# A trial goes on for a lean (the wrong way under no_regression, to a gain under improve) only
# while the rest of the budget would show it at least this often, were the estimate now the
# truth (its conditional power). Replayed on the recorded real blocks (docs/benchmarks.md).
FUTILITY_POWER = 0.2
# Beyond this many blocks per arm the count says nothing more (a bimodal median's needs run to millions).
NEEDED_SAID = 10000


def _normal_cdf(x):
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def conditional_power(lean, at_budget, band, q_budget, per_arm, budget):
    """How often the budget's last look would show a change, were ``lean`` (the estimate now,
    the way that counts, > 0) the true change: the final estimate then lies around ``lean``
    with the spread the blocks still to come leave, ``se_budget * sqrt((budget - per_arm) /
    budget)``, and shows the change when it is beyond both the half-width at the budget and
    the tolerance. All on one scale (log ratios, or points for stalls)."""
    if lean <= 0 or at_budget <= 0 or q_budget <= 0:
        return 0.0
    left = (budget - per_arm) / float(budget)
    if left <= 0:
        return 1.0 if lean > max(at_budget, band) else 0.0
    spread = at_budget / q_budget * math.sqrt(left)
    return 1.0 - _normal_cdf((max(at_budget, band) - lean) / spread)


_DIM_WORDS = {"throughput": "the throughput", "p50": "the median step", "tail": "the tail", "stalls": "the stalls"}


def project(res, gate, per_arm):
    """Each judged dimension's half-width projected to the rest of the budget, from its variance now.

    Returns ``{dim: {...}}`` for the dimensions the blocks gave an interval: ``verdict``,
    ``half`` (now) and ``at_budget`` (at ``max_blocks`` per arm: the square root of the blocks
    and the Student-t quantile at the degrees of freedom then), ``tolerance``, ``reaches``
    (the half-width at the budget is within the tolerance: the budget can resolve it either
    way), ``gain_power`` and ``worse_power`` (the conditional power of the lean now: how often
    the budget's last look would show it better, or worse, were the estimate the truth; a gain
    at the stricter confidence a claim of improvement takes) and ``needed`` (blocks per arm
    for the tolerance). A live trial's windows are its blocks: the same rule for both.
    """
    budget = gate.budget["max_blocks"]
    conf = look_confidence(gate.settings["confidence"], planned_looks(gate.budget["min_blocks"], budget))
    conf_better = 1.0 - (1.0 - conf) / len(DIMENSIONS)
    out = {}
    for dim in DIMENSIONS:
        block = res.get(dim) or {}
        half, df = block.get("resolution"), block.get("df")
        if half is None or not df:
            continue
        band = block.get("tolerance") or 0.0
        df_budget = df + 2 * max(0, budget - per_arm)
        at_budget = half_at_budget(dim, half, df, df_budget, per_arm, budget, conf)
        at_better = half_at_budget(dim, half, df, df_budget, per_arm, budget, conf_better)
        q_budget = t_ppf(0.5 + conf / 2.0, df_budget)
        q_better = t_ppf(0.5 + conf_better / 2.0, df_budget)
        if dim == "stalls":
            gain = -(block.get("difference") or 0.0)  # > 0: fewer stalls
            scale, scale_better, tol = at_budget, at_better, band
        else:
            ratio = block.get("ratio") or 1.0
            gain = math.log(ratio) if dim == "throughput" else -math.log(ratio)
            scale, scale_better, tol = math.log1p(at_budget), math.log1p(at_better), math.log1p(band)
        needed = int(math.ceil(per_arm * (half / band) ** 2)) if band > 0 else None
        out[dim] = {
            "verdict": block.get("verdict"),
            "half": half,
            "at_budget": at_budget,
            "tolerance": band,
            "reaches": at_budget < band,
            "gain_power": max(
                conditional_power(gain, scale_better, tol, q_better, per_arm, budget),
                conditional_power(gain, scale, tol, q_budget, per_arm, budget)
                if block.get("verdict") == "unknown"
                else 0.0,
            ),
            "worse_power": conditional_power(-gain, scale, tol, q_budget, per_arm, budget),
            "needed": needed,
        }
    return out


def _cannot(dim, p, budget):
    needed = p["needed"]
    return "%s to %s (±%s now, ±%s at %d blocks per arm; %s blocks per arm would be needed)" % (
        _DIM_WORDS[dim],
        _span(dim, p["tolerance"]),
        _span(dim, p["half"]),
        _span(dim, p["at_budget"]),
        budget,
        ("about %d" % needed) if needed is not None and needed <= NEEDED_SAID else "over %d" % NEEDED_SAID,
    )


def futility(res, policy, gate, per_arm, detail=None):
    """Why the rest of the budget cannot decide what ``policy`` needs on one workload, or None.

    ``gate``: the checked gate (``settings.check_settings``), its settings and its budget.
    ``detail``: a dict, filled with the projection per dimension (``project``) and which
    dimensions could still decide (``could_decide``) and which stay unresolved.

    The rule is per dimension: the trial stops for futility only when no dimension that could
    decide the policy can do so in the rest of the budget. A dimension could decide a rollback
    when it leans the wrong way with a conditional power of at least ``FUTILITY_POWER``; under
    ``improve`` one could decide a keep when it leans to a gain with that power at the
    confidence a gain takes (a dimension judged ``same`` because its gain is not yet shown at
    that stricter level counts: the median of a bursty loader is often that); under
    ``no_regression`` a keep needs every unknown dimension within its tolerance, so one that
    can never reach it (the stalls of a DataLoader-bound program) makes the keep undecidable
    and the trial stops unless a regression could still be shown. Once a gain is shown, the
    dimensions a keep still needs (the tail, the stalls) that cannot reach their tolerance
    are reported unresolved, not waited for.
    """
    budget = gate.budget["max_blocks"]
    if res.get("resolved") or per_arm >= budget or res.get("blocks_before") is None:
        return None
    proj = project(res, gate, per_arm)
    unknown = [d for d in DIMENSIONS if d in proj and proj[d]["verdict"] == "unknown"]
    hopeless = [d for d in unknown if not proj[d]["reaches"]]
    leaning_worse = [d for d in proj if proj[d]["verdict"] != "worse" and proj[d]["worse_power"] >= FUTILITY_POWER]
    improved = [d for d in DIMENSIONS if (res.get(d) or {}).get("verdict") == "better"]
    gains = [d for d in proj if proj[d]["verdict"] in ("unknown", "same") and proj[d]["gain_power"] >= FUTILITY_POWER]
    words = "; ".join(_cannot(d, proj[d], budget) for d in hopeless)
    could = list(leaning_worse)
    if policy == "no_regression":
        why = "cannot resolve " + words if hopeless and not leaning_worse else None
        if not hopeless:
            could += [d for d in unknown if d not in could]
    elif improved:
        # the improvement is shown; what is left unknown (the tail, mostly) cannot veto it when
        # the budget cannot resolve it: it is reported as unresolved, not taken as worse
        why = None
        if hopeless and not leaning_worse:
            why = "%s shown better; cannot resolve %s" % (" and ".join(_DIM_WORDS[d] for d in improved), words)
        could += [d for d in unknown if d not in hopeless and d not in could]
    else:
        could += [d for d in gains if d not in could]
        why = None
        if unknown and not could:  # all resolved: the judge's own rule ends it (no gain left in reach)
            why = "no improvement of the %s asked for that the budget could show (%s)" % (
                _span("throughput", gate.settings["min_gain"]),
                words or "no dimension leans to a gain",
            )
    if detail is not None:
        detail.update(
            projection={
                d: {k: (sig_round(v) if isinstance(v, float) else v) for k, v in p.items()} for d, p in proj.items()
            },
            could_decide=could,
            unresolved=hopeless,
        )
    return why


def sig_round(value):
    return float("%.4g" % value)


def budget_hint(result, policy, gate):
    """A larger budget by name, when ``improve`` rolled back a gain it leaned to but could not
    show (a 5% gain of a DataLoader-bound program): ``{"preset", "words"}`` or None; ``preset``
    None when the noise so far needs more blocks per arm than even the preset has."""
    if policy != "improve" or result.get("decision") != "rollback" or result.get("resolved"):
        return None
    preset = BUDGET_PRESETS["small_changes"]
    live = gate.budget["max_blocks"] == gate.budget.get("max_windows")  # settings.live_gate
    limit = preset["max_windows" if live else "max_blocks"]
    if gate.budget["max_blocks"] >= limit:
        return None
    per_arm, leans, needed = min((result.get("blocks") or {}).values() or [0]), [], 0
    for dim in ("throughput", "p50"):
        block = result.get(dim) or {}
        ratio = block.get("ratio")
        if not ratio or block.get("verdict") not in ("unknown", "same"):
            continue
        gain = ratio - 1.0 if dim == "throughput" else 1.0 - ratio
        if gain >= gate.settings["min_gain"]:
            leans.append(
                "%s %.1f%% %s" % (_DIM_WORDS[dim], 100.0 * gain, "higher" if dim == "throughput" else "shorter")
            )
            half, band = block.get("resolution"), block.get("tolerance")
            if per_arm and half and band:
                needed = max(needed, int(math.ceil(per_arm * (half / band) ** 2)))
    if not leans:
        return None
    unit = "windows" if live else "blocks"
    if needed > limit:
        words = "a gain of this size (%s) is beyond even stacktune_gate_budget: {preset: small_changes} (%d %s per arm)"
        return {
            "preset": None,
            "words": words % (", ".join(leans), limit, unit) + " here: at this noise about %s %s "
            "per arm would be needed" % (needed if needed <= NEEDED_SAID else "over %d" % NEEDED_SAID, unit),
        }
    return {
        "preset": "small_changes",
        "words": "a gain of this size (%s) needs a longer trial: stacktune_gate_budget: {preset: small_changes} "
        "measures up to %d windows per arm live (a 5%% gain of a DataLoader-bound program: about 2 minutes, "
        "at most 5 minutes) and %d blocks per arm" % (", ".join(leans), preset["max_windows"], preset["max_blocks"]),
    }


def _span(dim, value):
    return "%.2f points" % (value * 100.0) if dim == "stalls" else "%.1f%%" % (value * 100.0)


def block_cost(cost):
    """Where the blocks' time went, per workload and in total: blocks, wall seconds (the whole
    block, start-up included, as the controller saw it), seconds of measured steps, the start-up
    per block and the share measured. A share is None where no wall time was recorded."""
    out = {}
    total = {"blocks": 0, "wall_s": 0.0, "measured_s": 0.0}
    for w, c in sorted(cost.items()):
        for key in total:
            total[key] += c[key]
        out[w] = c
    out["total"] = total
    for c in out.values():
        c["wall_s"], c["measured_s"] = round(c["wall_s"], 2), round(c["measured_s"], 2)
        c["measured_share"] = round(c["measured_s"] / c["wall_s"], 3) if c["wall_s"] > 0 else None
        c["startup_s_per_block"] = (
            round((c["wall_s"] - c["measured_s"]) / c["blocks"], 2) if c["blocks"] and c["wall_s"] > 0 else None
        )
    return out


class WorkloadBroken(Exception):
    """The workload fails without the layer as well as with it: nothing can be judged."""

    def __init__(self, workload, with_layer, without_layer):
        if with_layer == without_layer:
            words = "the workload %s fails with and without the layer: %s" % (workload, with_layer)
        else:
            words = "the workload %s fails with and without the layer (with it: %s; without it: %s)" % (
                workload,
                with_layer,
                without_layer,
            )
        super().__init__(words)
        self.workload = workload
        self.errors = {"with": with_layer, "without": without_layer}


# A flaky workload (it failed without the layer too) is rolled back for its failures only
# when it failed at least this many more times with the layer than without it.
FLAKY_MARGIN = 2


def _failure_words(block):
    """'fails with this layer: <error>' or 'hangs with this layer: <error>'."""
    verb = "hangs" if block.get("failure") == "hang" else "fails"
    return verb, block.get("error") or block.get("failure") or "unknown error"


def failure_decision(workload, policy, failed, confirmed, fails):
    """The decision when a block with the layer failed and the block right after, without
    it, ran: the layer breaks the workload. The layer is off when this is returned."""
    verb, error = _failure_words(failed)
    cause = "the workload %s with this layer: %s" % (verb, error)
    reason = "rollback: %s (%s: block %d with the layer %s, block %d without it ran)" % (
        cause,
        workload,
        failed["position"],
        "hung" if verb == "hangs" else "failed",
        confirmed,
    )
    return {
        "decision": "rollback",
        "policy": policy,
        "method": "blocks",
        "cause": "workload_%s" % ("hangs" if verb == "hangs" else "fails"),
        "resolved": True,
        "final": True,
        "reason": reason,
        "summary": "rollback: %s on %s" % (cause, workload),
        "verdicts": dict.fromkeys(DIMENSIONS, "unknown"),
        "workload": workload,
        "failures": fails,
    }


class Trial:
    """Balanced, sequential measurement of one layer on one or more workloads.

    ``gate``: a checked gate (``settings.check_settings``), its ``settings`` judging every look
    and its ``budget`` bounding the blocks and seconds. ``set_layer(on)`` takes the layer off or
    puts it back through the settings engine;
    ``measure(workload)`` runs one block and returns ``{"samples_ms": [...], "void": bool,
    "throughput": number or None, "reason": str}``, or ``{"failed": True, "failure": str,
    "error": str}`` when the workload did not run to the end (a crash, a non-zero exit, a
    hang). The layer is on when the trial starts (its role has just applied it) and is on
    again when it ends: blocks run in the order on, off, off, on, on, off, off, on ... and
    the gate looks after every quad once both arms have ``min_blocks``, until the decision
    is resolved or the budget is spent.

    A failed block is a measurement. When a block with the layer fails, one block without
    it runs at once: if that one runs, the layer breaks the workload and is rolled back
    (``failure_decision``); if it fails too before any block ever ran, the workload itself
    is broken (``WorkloadBroken``: nothing is judged). A workload that also fails without
    the layer is flaky: it is judged on the blocks that ran, and the decision says how often
    it failed in each arm (rolled back when it failed ``FLAKY_MARGIN`` more times with it).
    """

    ORDER = ("on", "off", "off", "on")
    MIRROR = ("off", "on", "on", "off")

    def __init__(self, workloads, set_layer, measure, policy, gate, clock, stop_early=True, worse_rule=None, rng=None):
        if not workloads:
            raise ValueError("a trial needs at least one workload")
        self.stop_early = stop_early  # False: spend the budget although it cannot decide (benchmarks)
        self.worse_rule = worse_rule or WORSE_RULES[0]
        self.workloads = list(workloads)
        self.set_layer = set_layer
        self.measure = measure
        self.policy = policy
        self.gate = gate  # a checked gate (settings.check_settings): its settings and its budget
        self.clock = clock
        self.looks = planned_looks(gate.budget["min_blocks"], gate.budget["max_blocks"])
        self.data = None
        self.on = True
        # with ``rng`` (a live trial), each quad is A B B A or B A A B, drawn at random: a
        # rhythm of the host (a periodic job, a clock governor) cannot line up with the arms
        self.rng = rng

    def samples(self, workload):
        """Every step of one workload per arm, pooled (for plots; the gate judges blocks)."""
        arms = (self.data or {}).get(workload) or {"on": {"blocks": []}, "off": {"blocks": []}}
        return {
            "without": [v for block in arms["off"]["blocks"] for v in block],
            "with": [v for block in arms["on"]["blocks"] for v in block],
        }

    def _switch(self, want):
        if want != self.on:
            self.set_layer(want)
            self.on = want
            return 1
        return 0

    def _judge(self, data, final):
        results = {}
        for w in self.workloads:
            arms = data[w]
            try:
                results[w] = judge_blocks(
                    {k: v for k, v in arms["off"].items() if v is not None},
                    {k: v for k, v in arms["on"].items() if v is not None},
                    policy=self.policy,
                    **self.gate.settings,
                    final=final,
                    looks=self.looks,
                    worse_rule=self.worse_rule,
                )
            except ValueError as exc:
                results[w] = {
                    "decision": "keep" if self.policy == "no_regression" else "rollback",
                    "resolved": False,
                    "reason": "not judged: %s" % exc,
                    "verdicts": dict.fromkeys(DIMENSIONS, "unknown"),
                    "policy": self.policy,
                }
        return combine(results, self.policy, final)

    @staticmethod
    def _flaky(result, fails, runs):
        """Say how often a flaky workload failed; roll back when it failed clearly more with the layer."""
        parts, worse = [], []
        for w, arms in sorted(fails.items()):
            n_on, n_off = len(arms["on"]), len(arms["off"])
            if not n_on and not n_off:
                continue
            last = (arms["on"] + arms["off"])[-1]
            parts.append(
                "%s failed in %d of %d blocks with the layer and %d of %d without (last: %s)"
                % (w, n_on, runs[w]["on"], n_off, runs[w]["off"], _failure_words(last)[1])
            )
            if n_on >= n_off + FLAKY_MARGIN:
                worse.append(w)
        if not parts:
            return result
        note = "the workload is flaky: " + "; ".join(parts)
        if worse and result["decision"] != "rollback":
            result.update(
                decision="rollback",
                cause="workload_fails",
                reason="rollback: the workload fails more often with this layer: %s. Judged on the blocks that ran: %s"
                % (note, result["reason"]),
                summary="rollback: the workload fails more often with this layer (%s)" % note,
            )
        else:
            result["reason"] = "%s; %s" % (result["reason"], note)
            result["summary"] = "%s; %s" % (result["summary"], note)
        result["flaky"] = True
        return result

    def _drop_futile(self, judged, active, futile, stop_rule, per_arm):
        """Calibrate, then tune: a workload the budget cannot resolve stops taking blocks (out
        of ``active``, its reason in ``futile``; the stop rule's numbers in ``stop_rule``)."""
        per = judged.get("workloads") or {self.workloads[0]: judged}
        for w in list(active):
            detail = {}
            why = futility(per.get(w) or {}, self.policy, self.gate, per_arm, detail)
            stop_rule[w] = detail
            if why:
                futile[w] = why
                active.remove(w)

    @staticmethod
    def _stopped_early(result, futile, stop_rule, per_arm):
        """Say which workloads stopped taking blocks early and why (``futility``), and the stop
        rule's numbers per workload."""
        if futile:
            result["futility"] = futile
            words = "; ".join("%s on %s" % (why, w) for w, why in sorted(futile.items()))
            result["reason"] = "%s; stopped early after %d+%d blocks: %s" % (
                result["reason"],
                per_arm["on"],
                per_arm["off"],
                words,
            )
            result["summary"] = "%s; stopped early: %s" % (result["summary"], words)
        if stop_rule:
            result["stop_rule"] = stop_rule

    def _explain(self, result):
        """The budget that would have resolved more, and which dimensions decided."""
        hint = budget_hint(result, self.policy, self.gate)
        if hint:
            if hint["preset"]:
                result["budget_hint"] = hint["preset"]
            result["reason"] = "%s; %s" % (result["reason"], hint["words"])
            result["summary"] = "%s; %s" % (result["summary"], hint["words"])
        decided, left = settled_words(result)
        result["decided_by"], result["left_unresolved"] = decided, left
        if decided or left:
            result["reason"] = "%s; %s" % (result["reason"], resolution_words(decided, left))

    @staticmethod
    def _cost(result, cost):
        """Where the blocks' time went, and the measured share in the summary."""
        result["cost"] = block_cost(cost)
        share = result["cost"]["total"].get("measured_share")
        if share is not None:
            result["summary"] = "%s; steps were %d%% of the blocks' %.0f s" % (
                result["summary"],
                round(share * 100.0),
                result["cost"]["total"]["wall_s"],
            )

    def run(self):
        data = {w: {"on": {"blocks": [], "at": []}, "off": {"blocks": [], "at": []}} for w in self.workloads}
        tps = {w: {"on": [], "off": []} for w in self.workloads}
        fails = {w: {"on": [], "off": []} for w in self.workloads}
        runs = {w: {"on": 0, "off": 0} for w in self.workloads}
        per_arm = {"on": 0, "off": 0}
        order, voids = [], []
        toggles, position, quads = 0, 0, 0
        cost = {}  # per workload: blocks, their wall time and the time of their measured steps
        start = self.clock()
        result = None

        def block(w, arm):
            nonlocal position
            out = self.measure(w)
            position += 1
            runs[w][arm] += 1
            order.append(arm)
            spent = cost.setdefault(w, {"blocks": 0, "wall_s": 0.0, "measured_s": 0.0})
            spent["blocks"] += 1
            spent["wall_s"] += out.get("wall_s") or 0.0
            spent["measured_s"] += out.get("measured_s") or 0.0
            if out.get("failed"):
                fails[w][arm].append({"position": position, "failure": out.get("failure"), "error": out.get("error")})
                return out
            if out.get("void"):
                voids.append({"workload": w, "arm": arm, "position": position, "reason": out.get("reason")})
                return out
            data[w][arm]["blocks"].append(out["samples_ms"])
            data[w][arm]["at"].append(position)
            tps[w][arm].append(out.get("throughput"))
            return out

        def ran(w):
            return bool(data[w]["on"]["blocks"] or data[w]["off"]["blocks"] or voids)

        active = list(self.workloads)  # workloads still measured; futile ones stop early
        futile, stop_rule = {}, {}
        while result is None:
            quad = self.MIRROR if self.rng is not None and self.rng.random() < 0.5 else self.ORDER
            for arm in quad:
                toggles += self._switch(arm == "on")
                for w in active:
                    out = block(w, arm)
                    if not out.get("failed") or arm != "on" or any(fails[x]["off"] for x in self.workloads):
                        continue
                    # a block with the layer failed: does the workload run without it?
                    toggles += self._switch(False)
                    confirm = block(w, "off")
                    if not confirm.get("failed"):
                        result = failure_decision(w, self.policy, fails[w]["on"][-1], position, fails)
                        per_arm["on"] += 1
                        per_arm["off"] += 1
                        break
                    if not ran(w):
                        raise WorkloadBroken(w, _failure_words(out)[1], _failure_words(confirm)[1])
                    toggles += self._switch(True)  # flaky: back to the schedule
                if result is not None:
                    break
                per_arm[arm] += 1
            if result is not None:
                break
            quads += 1
            elapsed = self.clock() - start
            per_quad = elapsed / quads
            budget = self.gate.budget
            last = per_arm["on"] + 2 > budget["max_blocks"] or elapsed + per_quad > budget["max_seconds"]
            if per_arm["on"] < budget["min_blocks"] and not last:
                continue
            for w in self.workloads:
                for arm in ("on", "off"):
                    vals = tps[w][arm]
                    given = vals and all(v is not None for v in vals)
                    data[w][arm]["throughput"] = list(vals) if given else None
            judged = self._judge(data, final=last)
            if self.stop_early and not (judged["resolved"] or last):
                self._drop_futile(judged, active, futile, stop_rule, per_arm["on"])
                if not active:
                    judged = self._judge(data, final=True)
                    last = True
            if judged["resolved"] or last:
                result = self._flaky(judged, fails, runs)
        self._stopped_early(result, futile, stop_rule, per_arm)
        self._explain(result)
        self.data = data
        self._cost(result, cost)
        if any(fails[w]["on"] or fails[w]["off"] for w in self.workloads):
            result["failures"] = fails
        result.update(
            blocks={"with": per_arm["on"], "without": per_arm["off"]},
            seconds=round(self.clock() - start, 1),
            toggles=toggles,
            order=order,
            void_blocks=voids,
            layer_on=self.on,
        )
        return result


def run_staged(workloads, make_trial, policy, clock, max_seconds):
    """One trial per workload, one after the other, the next only while the ones before could
    not decide (``decided_on``): under ``improve`` a layer's second workload costs time only
    where the first cannot see the layer or cannot decide. ``make_trial(workload, seconds_left)``
    returns a ``Trial`` of that one workload. Returns the combined decision (final: nothing more
    will be measured) and the trials by workload."""
    started = clock()
    results, trials = {}, {}
    for w in workloads:
        left = max(1, int(max_seconds - (clock() - started)))
        trials[w] = make_trial(w, left)
        results[w] = trials[w].run()
        if decided_on(results[w], policy) or clock() - started >= max_seconds:
            break
    measured = list(results)
    skipped = [w for w in workloads if w not in results]
    if skipped:
        results[measured[-1]]["reason"] = "%s; not measured on %s: %s decided" % (
            results[measured[-1]]["reason"],
            ", ".join(skipped),
            measured[-1],
        )
    decision = combine(results, policy, True) if len(results) > 1 else dict(results[measured[0]])
    cost = {}
    for w in measured:
        cost.update({k: v for k, v in (results[w].get("cost") or {}).items() if k != "total"})
    decision.update(
        workloads_measured=measured,
        cost=block_cost(cost),
        blocks={
            "with": max(r["blocks"]["with"] for r in results.values()),
            "without": max(r["blocks"]["without"] for r in results.values()),
        },
        toggles=sum(r["toggles"] for r in results.values()),
        order=[arm for w in measured for arm in results[w]["order"]],
        void_blocks=[v for w in measured for v in results[w]["void_blocks"]],
        layer_on=results[measured[-1]]["layer_on"],
        seconds=round(clock() - started, 1),
    )
    return decision, trials


# ------------------------------------------------------------------ which workloads


def resolve_workloads(candidates, gpu_count, override=None, data_dir=None):
    """The workloads that measure a layer on this host.

    ``candidates``: the layer's entry of ``stacktune_gate_workloads`` (workloads that can see
    the layer, in order). ``override``: ``stacktune_bench_workload`` when it is not ``auto``
    (the user's own ``command``, or one built-in workload for every layer). GPU workloads
    run where there are enough GPUs (all-reduce needs 2); the CPU ones only where none of the
    GPU ones can; the ones that read files (``file_dataloader``) only with a ``data_dir``
    (``stacktune_bench_data_dir``). An empty list means the layer is not measurable here.
    """
    if override not in (None, "", "auto"):
        return [override]
    known = set(GPU_WORKLOADS) | set(CPU_WORKLOADS) | {"auto", "command"}
    for name in candidates:
        if name not in known:
            raise ValueError("unknown workload %r (known: %s)" % (name, ", ".join(sorted(known))))
    gpu = [w for w in candidates if w in GPU_WORKLOADS and gpu_count >= MIN_GPUS.get(w, 1)]
    if gpu:
        return gpu
    if "auto" in candidates:
        return ["auto"]
    return [w for w in candidates if w in CPU_WORKLOADS and (data_dir or w not in DATA_DIR_WORKLOADS)]


def unmeasurable_reason(candidates, data_dir=None):
    """Why none of ``candidates`` runs here, in words for the report."""
    why = "none of the workloads that can see this layer (%s) runs here" % (", ".join(candidates) or "none declared")
    needs = [w for w in candidates if w in DATA_DIR_WORKLOADS]
    if needs and not data_dir:
        why += (
            "; %s reads files from stacktune_bench_data_dir, which is not set: set it to a directory on the disk "
            "that holds the training data" % ", ".join(needs)
        )
    return why


# ------------------------------------------------------------------ live trials

# Steps dropped after a switch of the layer besides the kinds' settling time: the step that
# spanned the switch and the one after it (docs/gate.md, "Live trials").
LIVE_DROP_STEPS = 2


def live_plan(changes, workloads, bench, wanted=True):
    """Whether one running workload process can measure this layer: ``(True, drop_s)`` or
    ``(False, why)``.

    A live trial switches the layer inside ONE process of the workload and judges windows of
    its steps. It is sound only when that process sees every change the layer wrote (each
    written row seen ``now`` says ``seen_running``: its kind's answer or the layer's policy)
    and every workload can run for a whole trial (the built-in ones of ``LIVE_WORKLOADS``, or
    the user's program when ``bench.live_command`` says how to start it streaming). ``drop_s``
    is the longest settling time of the changes (``settle_s``): the steps of that many seconds
    after each switch are dropped.
    """
    if not wanted:
        return False, "live trials are off (stacktune_gate_live)"
    if bench.get("runner") is False:
        return False, "the block runner is off"
    now = [r for r in changes or [] if isinstance(r, dict) and r.get("changed") and r.get("effect") in (None, "now")]
    if not now:
        return False, "no change of the layer says whether a running process sees it"
    blind = [r.get("id") or "?" for r in now if r.get("seen_running") is not True]
    if blind:
        return False, "a running process does not see %s; every block starts a process of its own" % ", ".join(blind)
    for w in workloads:
        if w == "command" and not bench.get("live_command"):
            return False, "the user's program runs per block (stacktune_bench_live_command is not set)"
        if w not in LIVE_WORKLOADS and w not in ("command", "auto"):
            return False, "workload %s cannot run for a whole trial" % w
    return True, max(float(r.get("settle_s") or 0.0) for r in now)
