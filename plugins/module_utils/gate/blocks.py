# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The block-aware gate: one process run (a block) is the unit of noise.

Measured on real GPU hosts, identical blocks differ far more from each other than the steps
inside one block do (start-up, clocks, allocator and NCCL set-up, drift of the machine).
Pooling steps as if they were independent makes every interval too narrow: noise is then
taken for an effect. So every dimension is reduced to one statistic per block, and the
inference is over blocks:

* throughput: log(throughput) of the block (given, or 1000 / mean step ms);
* p50: log of the block's median step time;
* tail: log of the mean of the block's slowest (1 - q) share of steps (at least one step):
  what stalls cost, stable where the p99 of a few hundred steps rests on four samples;
* stalls: the share of the block's steps slower than ``stall_factor`` x the median step of
  the blocks without the change (an absolute difference, in percentage points);
* p99 (the ``tail_quantile``): reported with its interval, not deciding.

The effect of the change is the coefficient of the arm in a least-squares fit
``y = mu + delta * arm + beta * t`` over the blocks, where ``t`` is the block's position in
the measuring order: slow linear drift of the host is fitted, not taken for an effect. The
interval is Student's t with the residual degrees of freedom. Blocks are measured in a
balanced A B B A order, which makes the arm orthogonal to a linear trend and gives both arms
the same count, where the pooled-variance interval is robust to unequal variances.

Measurement is sequential: after the first ``min_blocks`` per arm, and after every further
A B B A quad, the gate looks; it stops as soon as every dimension its policy needs is
resolved, or at the budget. The error rate stays valid under that optional stopping by
alpha spending: each of the K planned looks uses 1 - (1 - confidence) / K (Bonferroni over
the looks), so the chance of a wrong call over the whole sequence is at most 1 - confidence.

Verdicts per dimension follow the same bands as the step-level gate (``gate/steps.py``): ``worse``
when the whole interval lies beyond the tolerance, ``better`` when it excludes no change and
the estimate reaches the band, ``same`` when it rules out a worsening beyond the band, else
``unknown``, reported with the smallest change the blocks could have seen (the interval's
half-width). An unknown dimension never blinds the others: a throughput collapse is a
rollback whatever the tail could or could not show.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import numbers

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.verdicts import (
    POLICIES,
    latency_verdict,
    quantile_label,
    sig,
    throughput_verdict,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import mean, quantile

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import (
    DIMENSIONS,
    MIN_BLOCKS_PER_ARM,
    WORSE_RULES,
    gate_settings,
    look_confidence,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import t_ppf
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.wording import decide

# ------------------------------------------------------------------- the fit over blocks


def _solve(matrix, vector):
    """Solve a small linear system by Gaussian elimination; None when singular."""
    n = len(vector)
    a = [list(row) + [vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                for c in range(col, n + 1):
                    a[r][c] -= f * a[col][c]
    return [a[i][n] / a[i][i] for i in range(n)]


def arm_effect(ys_before, ys_after, at_before=None, at_after=None, confidence=0.95):
    """Effect of the arm on a per-block statistic, with a Student-t interval.

    Returns ``{"delta", "se", "df", "half", "lo", "hi", "trend"}`` or None when the blocks
    cannot give an interval (fewer than 2 per arm). The drift term is fitted when positions
    are given and leave at least 2 residual degrees of freedom.
    """
    nb, na = len(ys_before), len(ys_after)
    if nb < MIN_BLOCKS_PER_ARM or na < MIN_BLOCKS_PER_ARM:
        return None
    ys = list(ys_before) + list(ys_after)
    arms = [0.0] * nb + [1.0] * na
    rows = [[1.0, x] for x in arms]
    trend = False
    if at_before is not None and at_after is not None and nb + na - 3 >= 2:
        ts = [float(t) for t in list(at_before) + list(at_after)]
        tbar = mean(ts)
        if any(abs(t - tbar) > 1e-12 for t in ts):
            rows = [r + [t - tbar] for r, t in zip(rows, ts)]
            trend = True
    p = len(rows[0])
    xtx = [[sum(r[i] * r[j] for r in rows) for j in range(p)] for i in range(p)]
    xty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(p)]
    beta = _solve(xtx, xty)
    if beta is None and trend:
        rows = [r[:2] for r in rows]
        p, trend = 2, False
        xtx = [[sum(r[i] * r[j] for r in rows) for j in range(p)] for i in range(p)]
        xty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(p)]
        beta = _solve(xtx, xty)
    if beta is None:
        return None
    df = len(ys) - p
    resid = [y - sum(b * x for b, x in zip(beta, r)) for r, y in zip(rows, ys)]
    sigma2 = math.fsum(e * e for e in resid) / df
    unit = [1.0 if i == 1 else 0.0 for i in range(p)]
    inv_col = _solve(xtx, unit)
    se = math.sqrt(max(0.0, sigma2 * inv_col[1]))
    half = t_ppf(0.5 + confidence / 2.0, df) * se
    delta = beta[1]
    return {"delta": delta, "se": se, "df": df, "half": half, "lo": delta - half, "hi": delta + half, "trend": trend}


# ------------------------------------------------------------------------- inputs


def is_blocks(value):
    """True for block input: a list of lists of step ms, or a dict with ``blocks``."""
    if hasattr(value, "get") and hasattr(value, "keys"):
        return "blocks" in value
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(b, (list, tuple)) for b in value)


def _positive_number(raw, label):
    if isinstance(raw, bool) or not isinstance(raw, numbers.Real):
        raise ValueError("%s is not a number: %r" % (label, raw))
    v = float(raw)
    if math.isnan(v) or math.isinf(v) or v <= 0:
        raise ValueError("%s must be a positive finite number, got %r" % (label, raw))
    return v


def normalise_side(value, name):
    """One arm as ``{"blocks": [sorted step lists], "throughput": [...] or None, "at": [...] or None}``."""
    throughput = at = None
    if hasattr(value, "get") and hasattr(value, "keys"):
        blocks = value.get("blocks")
        throughput = value.get("throughput")
        at = value.get("at")
        label = "%s.blocks" % name
    else:
        blocks, label = value, name
    if isinstance(blocks, (str, bytes)) or not isinstance(blocks, (list, tuple)) or not blocks:
        raise ValueError("%s must be a non-empty list of blocks (lists of step times in ms)" % label)
    out = []
    for i, block in enumerate(blocks):
        if isinstance(block, (str, bytes)) or not isinstance(block, (list, tuple)) or not block:
            raise ValueError("%s[%d] must be a non-empty list of step times in ms" % (label, i))
        out.append(sorted(_positive_number(v, "%s[%d][%d]" % (label, i, j)) for j, v in enumerate(block)))
    for key, seq in (("throughput", throughput), ("at", at)):
        if seq is None:
            continue
        if not isinstance(seq, (list, tuple)) or len(seq) != len(out):
            raise ValueError("%s.%s must be a list with one number per block (%d)" % (name, key, len(out)))
    if throughput is not None:
        throughput = [_positive_number(v, "%s.throughput[%d]" % (name, i)) for i, v in enumerate(throughput)]
    if at is not None:
        for i, v in enumerate(at):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ValueError("%s.at[%d] must be a number (the block's position in time), got %r" % (name, i, v))
        at = [float(v) for v in at]
    return {"blocks": out, "throughput": throughput, "at": at}


def tail_mean(sorted_steps, q):
    """Mean of the slowest floor(n * (1 - q)) steps of one block, at least the slowest one."""
    m = max(1, int(math.floor(len(sorted_steps) * (1.0 - q) + 1e-9)))
    return math.fsum(sorted_steps[-m:]) / m


def block_statistics(sorted_steps, q, stall_ms, throughput=None):
    """The per-block statistics the gate infers on (see the module docstring)."""
    m = mean(sorted_steps)
    tp = throughput if throughput is not None else 1000.0 / m
    stalls = sum(1 for v in sorted_steps if v > stall_ms) / float(len(sorted_steps))
    return {
        "throughput": tp,
        "p50": quantile(sorted_steps, 0.5),
        "tail": tail_mean(sorted_steps, q),
        "p99": quantile(sorted_steps, q),
        "stalls": stalls,
        "steps": len(sorted_steps),
    }


def _strictly_better(eff, better_conf, sign):
    """Whether the effect is an improvement at ``better_conf``: ``sign`` -1 when lower is better."""
    half = t_ppf(0.5 + better_conf / 2.0, eff["df"]) * eff["se"]
    return eff["delta"] + half < 0.0 if sign < 0 else eff["delta"] - half > 0.0


def _ratio_dim(name, label, bs, as_, at_b, at_a, confidence, band, better_conf=None):
    ys_b = [math.log(v) for v in bs]
    ys_a = [math.log(v) for v in as_]
    eff = arm_effect(ys_b, ys_a, at_b, at_a, confidence)
    before = math.exp(mean(ys_b))
    after = math.exp(mean(ys_a))
    out = {
        "label": label,
        "before": sig(before),
        "after": sig(after),
        "before_blocks": [sig(v, 5) for v in bs],
        "after_blocks": [sig(v, 5) for v in as_],
        "tolerance": sig(band),
        "statistic": "geometric mean over blocks",
    }
    if eff is None:
        out.update(ratio=sig(after / before), ratio_ci=None, verdict="unknown", resolution=None)
        return out, None
    ratio = math.exp(eff["delta"])
    ci = (math.exp(eff["lo"]), math.exp(eff["hi"]))
    verdict = (throughput_verdict if name == "throughput" else latency_verdict)(ratio, ci, band)
    sign = 1 if name == "throughput" else -1
    if verdict == "better" and better_conf is not None and not _strictly_better(eff, better_conf, sign):
        verdict = "same"
    beyond = ratio <= 1.0 - band if name == "throughput" else ratio >= 1.0 + band
    if verdict != "worse" and better_conf is not None and beyond and _strictly_better(eff, better_conf, -sign):
        # the same rule as "better", the other way: a significant change beyond the tolerance
        verdict = "worse"
        out["worse_by"] = "significance"
    elif verdict == "worse":
        out["worse_by"] = "whole interval"
    out.update(
        ratio=sig(ratio),
        ratio_ci=[sig(ci[0]), sig(ci[1])],
        verdict=verdict,
        resolution=sig(math.exp(eff["half"]) - 1.0, 3),
        df=eff["df"],
        drift_fitted=eff["trend"],
    )
    if name == "throughput":
        out["ci"] = out["ratio_ci"]
    return out, eff


def _stall_dim(bs, as_, at_b, at_a, confidence, band, factor, better_conf=None):
    eff = arm_effect(bs, as_, at_b, at_a, confidence)
    out = {
        "label": "steps beyond %gx the median" % factor,
        "before": sig(mean(bs)),
        "after": sig(mean(as_)),
        "before_blocks": [sig(v, 4) for v in bs],
        "after_blocks": [sig(v, 4) for v in as_],
        "tolerance": sig(band),
        "statistic": "share of steps per block; difference in percentage points",
    }
    if eff is None:
        out.update(difference=sig(mean(as_) - mean(bs)), difference_ci=None, verdict="unknown", resolution=None)
        return out
    lo, hi, d = eff["lo"], eff["hi"], eff["delta"]
    if lo > band:
        verdict = "worse"
        out["worse_by"] = "whole interval"
    elif d >= band and better_conf is not None and _strictly_better(eff, better_conf, 1):
        # more stalls, significantly, beyond the tolerance (the rule "better" follows, the other way)
        verdict = "worse"
        out["worse_by"] = "significance"
    elif hi < 0.0 and d <= -band and band > 0 and (better_conf is None or _strictly_better(eff, better_conf, -1)):
        verdict = "better"
    elif hi <= band:
        verdict = "same"
    else:
        verdict = "unknown"
    out.update(
        difference=sig(d),
        difference_ci=[sig(lo), sig(hi)],
        verdict=verdict,
        resolution=sig(eff["half"], 3),
        df=eff["df"],
    )
    return out


def judge_blocks(before, after, policy="improve", final=False, looks=1, worse_rule="significance", **settings):
    """Judge one change from blocks of step times (see the module docstring).

    ``before``/``after``: a list of blocks (each a list of step ms) or a dict
    ``{"blocks": [...], "throughput": [per block], "at": [position of each block]}``.
    ``looks``: how many looks the sequential design plans; each uses
    ``1 - (1 - confidence) / looks``. ``settings``: the gate's settings by name
    (``gate.settings.SETTINGS``: tail_quantile, tail_tolerance, min_gain, confidence,
    stall_factor, stall_tolerance), the defaults for those not given. ``worse_rule``:
    ``significance`` (a dimension is worse when it is significantly worse beyond its
    tolerance, at the confidence "better" takes) or
    ``whole_interval`` (only when the whole interval is beyond the tolerance: the gate's rule
    before the symmetric one, kept so that its benchmark can show both on the same blocks).
    Returns the decision record; raises ValueError naming the offending argument.
    """
    if worse_rule not in WORSE_RULES:
        raise ValueError("worse_rule must be one of %s, got %r" % (", ".join(WORSE_RULES), worse_rule))
    if policy not in POLICIES:
        raise ValueError("policy must be one of %s, got %r" % (", ".join(POLICIES), policy))
    s = gate_settings(settings, "judge_blocks")
    if not isinstance(final, bool):
        raise ValueError("final must be a boolean, got %r" % (final,))
    if isinstance(looks, bool) or not isinstance(looks, int) or looks < 1:
        raise ValueError("looks must be a positive integer, got %r" % (looks,))
    b = normalise_side(before, "before")
    a = normalise_side(after, "after")
    q = s["tail_quantile"]
    conf_look = look_confidence(s["confidence"], looks)
    stall_ms = s["stall_factor"] * quantile(sorted(quantile(x, 0.5) for x in b["blocks"]), 0.5)
    sb = [
        block_statistics(x, q, stall_ms, None if b["throughput"] is None else b["throughput"][i])
        for i, x in enumerate(b["blocks"])
    ]
    sa = [
        block_statistics(x, q, stall_ms, None if a["throughput"] is None else a["throughput"][i])
        for i, x in enumerate(a["blocks"])
    ]

    def col(stats, key):
        return [st[key] for st in stats]

    at_b, at_a = b["at"], a["at"]
    tail_label = "slowest %s%%" % ("%g" % ((1.0 - q) * 100.0))
    dims = {}
    # "better" in any one of the dimensions keeps a layer under improve: each claim of an
    # improvement is held to 1 - (1 - confidence_per_look) / dimensions, so that noise is
    # no likelier to be kept as a gain than to be rolled back as a loss.
    conf_better = 1.0 - (1.0 - conf_look) / len(DIMENSIONS)
    dims["throughput"], _e = _ratio_dim(
        "throughput",
        "throughput",
        col(sb, "throughput"),
        col(sa, "throughput"),
        at_b,
        at_a,
        conf_look,
        s["min_gain"],
        conf_better,
    )
    dims["p50"], _e = _ratio_dim(
        "p50", "p50", col(sb, "p50"), col(sa, "p50"), at_b, at_a, conf_look, s["min_gain"], conf_better
    )
    dims["tail"], _e = _ratio_dim(
        "tail", tail_label, col(sb, "tail"), col(sa, "tail"), at_b, at_a, conf_look, s["tail_tolerance"], conf_better
    )
    dims["stalls"] = _stall_dim(
        col(sb, "stalls"),
        col(sa, "stalls"),
        at_b,
        at_a,
        conf_look,
        s["stall_tolerance"],
        s["stall_factor"],
        conf_better,
    )
    p99, _e = _ratio_dim(
        "p99", quantile_label(q), col(sb, "p99"), col(sa, "p99"), at_b, at_a, conf_look, s["tail_tolerance"]
    )
    p99["decides"] = False
    if worse_rule == "whole_interval":
        for dim in DIMENSIONS:
            if dims[dim].pop("worse_by", None) == "significance":
                dims[dim]["verdict"] = "unknown"
    dims["tail"]["quantile"] = q
    dims["tail"]["p99_before"] = p99["before"]
    dims["tail"]["p99_after"] = p99["after"]
    verdicts = {d: dims[d]["verdict"] for d in DIMENSIONS}
    result = {
        "decision": "inconclusive",
        "reason": "",
        "policy": policy,
        "final": final,
        "method": "blocks",
        "blocks_before": len(b["blocks"]),
        "blocks_after": len(a["blocks"]),
        "n_before": sum(len(x) for x in b["blocks"]),
        "n_after": sum(len(x) for x in a["blocks"]),
        "confidence": s["confidence"],
        "looks": looks,
        "confidence_per_look": sig(conf_look),
        "confidence_better": sig(conf_better),
        "stall_ms": sig(stall_ms),
        "tolerances": {
            "tail": s["tail_tolerance"],
            "min_gain": s["min_gain"],
            "p50": s["min_gain"],
            "stalls": s["stall_tolerance"],
        },
        "throughput": dims["throughput"],
        "p50": dims["p50"],
        "tail": dims["tail"],
        "stalls": dims["stalls"],
        "p99": p99,
        "verdicts": verdicts,
        "unresolved": [],
        "resolved": False,
    }
    return decide(result, conf_look)
