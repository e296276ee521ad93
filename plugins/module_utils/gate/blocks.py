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

Verdicts per dimension follow the same bands as the step-level gate (``_gate``): ``worse``
when the whole interval lies beyond the tolerance, ``better`` when it excludes no change and
the estimate reaches the band, ``same`` when it rules out a worsening beyond the band, else
``unknown``, reported with the smallest change the blocks could have seen (the interval's
half-width). An unknown dimension never blinds the others: a throughput collapse is a
rollback whatever the tail could or could not show.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import numbers

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.verdicts import (
    POLICIES,
    check_unit_interval,
    latency_verdict,
    ms,
    quantile_label,
    sig,
    throughput_verdict,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.stats import mean, quantile
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.base import CPU_WORKLOADS, GPU_WORKLOADS

DIMENSIONS = ("throughput", "p50", "tail", "stalls")
TAIL_DIMENSIONS = ("tail", "stalls")
MIN_BLOCKS_PER_ARM = 2

# One home for the gate's settings: name -> (default, low, high, low_open, high_open, meaning).
# The playbooks' variables are stacktune_gate_<name>; validate.yml and the action plugin check
# them here, before anything on the host changes.
SETTINGS = {
    "tail_quantile": (0.99, 0.5, 1.0, True, True, "tail quantile judged"),
    "tail_tolerance": (0.05, 0.0, 1.0, False, True, "how much slower the tail may get"),
    "min_gain": (0.02, 0.0, 1.0, False, True, "smallest change that counts"),
    "confidence": (0.95, 0.5, 1.0, True, True, "confidence over the whole sequence of looks"),
    "stall_factor": (3.0, 1.0, 100.0, True, False, "a step this many times the median is a stall"),
    "stall_tolerance": (0.005, 0.0, 1.0, False, True, "rise of the share of stalled steps tolerated"),
}
BUDGET = {
    "min_blocks": (4, 2, 50, "blocks per arm before the first look"),
    "max_blocks": (8, 2, 200, "blocks per arm at most"),
    "max_seconds": (1800, 1, 86400, "seconds of measuring per layer at most"),
}


class GateSettingError(ValueError):
    """A gate setting or budget is out of range; the message names the variable."""


def _budget_value(name, value, low, high):
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise GateSettingError("%s must be an integer in %d..%d, got %r" % (name, low, high, value))
    return value


def _number_value(name, value, low, high, low_open, high_open):
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise GateSettingError("%s must be a number, got %r" % (name, value)) from None
    try:
        return check_unit_interval(name, value, low, high, low_open, high_open)
    except ValueError as exc:
        raise GateSettingError(str(exc)) from None


WORSE_RULES = ("significance", "whole_interval")


def check_settings(
    settings,
    budget=None,
    workloads=None,
    prefix="stacktune_gate_",
    budget_name="stacktune_gate_budget",
    workloads_name="stacktune_gate_workloads",
):
    """Validate the gate's settings, its budget and its workload table; fill in defaults.

    ``settings``: keys of ``SETTINGS`` (and, when ``budget`` is None, of ``BUDGET`` too, as
    the gate_layer action takes them). ``budget``: keys of ``BUDGET``. ``workloads``: the
    layer -> workload list table. Returns one flat dict; raises GateSettingError naming the
    variable (``<prefix><key>``, ``<budget_name>.<key>``, ``<workloads_name>.<layer>``).
    """
    settings = dict(settings or {})
    if budget is None:
        budget = {k: settings.pop(k) for k in list(settings) if k in BUDGET}
        budget_label = prefix
    else:
        budget_label = budget_name + "."
        if not hasattr(budget, "items"):
            raise GateSettingError("%s must be a dict of %s" % (budget_name, ", ".join(BUDGET)))
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise GateSettingError("unknown gate setting(s): %s" % ", ".join(prefix + k for k in unknown))
    unknown = sorted(set(budget) - set(BUDGET))
    if unknown:
        raise GateSettingError(
            "%s: unknown key(s) %s (known: %s)" % (budget_name, ", ".join(unknown), ", ".join(BUDGET))
        )
    out = {}
    for key, (default, low, high, low_open, high_open, _meaning) in SETTINGS.items():
        value = settings.get(key)
        out[key] = _number_value(prefix + key, default if value is None else value, low, high, low_open, high_open)
    for key, (default, low, high, _meaning) in BUDGET.items():
        value = budget.get(key)
        out[key] = _budget_value(budget_label + key, default if value is None else value, low, high)
    if out["max_blocks"] < out["min_blocks"]:
        raise GateSettingError(
            "%smax_blocks (%d) must be at least %smin_blocks (%d)"
            % (budget_label, out["max_blocks"], budget_label, out["min_blocks"])
        )
    if workloads is not None:
        if not hasattr(workloads, "items"):
            raise GateSettingError("%s must be a dict: layer -> list of workloads" % workloads_name)
        known = set(GPU_WORKLOADS) | set(CPU_WORKLOADS) | {"auto"}
        for layer, names in workloads.items():
            if isinstance(names, str) or not isinstance(names, (list, tuple)):
                raise GateSettingError("%s.%s must be a list of workloads, got %r" % (workloads_name, layer, names))
            bad = [n for n in names if n not in known]
            if bad:
                raise GateSettingError(
                    "%s.%s: unknown workload(s) %s (known: %s)"
                    % (workloads_name, layer, ", ".join(map(str, bad)), ", ".join(sorted(known)))
                )
    return out


def planned_looks(min_blocks, max_blocks):
    """Looks of the sequential design: at min_blocks per arm, then every 2 more (one A B B A quad)."""
    return 1 + max(0, (max_blocks - min_blocks + 1) // 2)


def look_confidence(confidence, looks):
    """Per-look confidence that keeps the whole sequence at ``confidence`` (Bonferroni)."""
    return 1.0 - (1.0 - confidence) / looks


# --------------------------------------------------------------------------- Student's t


def _betacf(a, b, x):
    """Continued fraction of the regularised incomplete beta (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-13:
            break
    return h


def _betainc(a, b, x):
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """CDF of Student's t with ``df`` degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


_T_PPF_CACHE = {}


def t_ppf(p, df):
    """Quantile of Student's t (bisection on the CDF; exact to about 1e-10)."""
    key = (p, df)
    if key not in _T_PPF_CACHE:
        _T_PPF_CACHE[key] = _t_ppf(p, df)
    return _T_PPF_CACHE[key]


def _t_ppf(p, df):
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1), got %r" % (p,))
    if p < 0.5:
        return -_t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _unused in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


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


# ------------------------------------------------------------------------ the judge


def _pct(x):
    return "%+.1f%%" % (x * 100.0)


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


def _can_still_improve(dim, block):
    """False when the interval already rules out a gain of the band in this dimension."""
    ci = block.get("ratio_ci")
    if ci is None:
        return True
    band = block["tolerance"]
    if dim == "throughput":
        return ci[1] >= 1.0 + band
    return ci[0] <= 1.0 - band


def _dim_phrase(dim, block, confidence):
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


def _unknown_phrase(dim, block):
    res = block.get("resolution")
    if res is None:
        return "%s: too few blocks to judge" % (block["label"] if dim != "stalls" else "stalls")
    if dim == "stalls":
        return "stalls: within block-to-block noise, +-%.2f points" % (res * 100.0)
    return "%s: within block-to-block noise, +-%.1f%%" % (block["label"], res * 100.0)


def judge_blocks(
    before,
    after,
    policy="improve",
    tail_quantile=0.99,
    tail_tolerance=0.05,
    min_gain=0.02,
    confidence=0.95,
    stall_factor=3.0,
    stall_tolerance=0.005,
    final=False,
    looks=1,
    worse_rule="significance",
):
    """Judge one change from blocks of step times (see the module docstring).

    ``before``/``after``: a list of blocks (each a list of step ms) or a dict
    ``{"blocks": [...], "throughput": [per block], "at": [position of each block]}``.
    ``looks``: how many looks the sequential design plans; each uses
    ``1 - (1 - confidence) / looks``. ``worse_rule``: ``significance`` (a dimension is worse
    when it is significantly worse beyond its tolerance, at the confidence "better" takes) or
    ``whole_interval`` (only when the whole interval is beyond the tolerance: the gate's rule
    before the symmetric one, kept so that its benchmark can show both on the same blocks).
    Returns the decision record; raises ValueError naming the offending argument.
    """
    if worse_rule not in WORSE_RULES:
        raise ValueError("worse_rule must be one of %s, got %r" % (", ".join(WORSE_RULES), worse_rule))
    if policy not in POLICIES:
        raise ValueError("policy must be one of %s, got %r" % (", ".join(POLICIES), policy))
    s = check_settings(
        {
            "tail_quantile": tail_quantile,
            "tail_tolerance": tail_tolerance,
            "min_gain": min_gain,
            "confidence": confidence,
            "stall_factor": stall_factor,
            "stall_tolerance": stall_tolerance,
        },
        prefix="",
    )
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
    return _decide(result, conf_look)


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
                change += " (noise +-%.1f%%)" % (block["resolution"] * 100.0)
            changes.append(change)
    stalls = result.get("stalls") or {}
    if stalls.get("difference") and abs(stalls["difference"]) >= 0.0005:
        change = "stalled steps %+.1f points" % (stalls["difference"] * 100.0)
        if verdicts.get("stalls") == "unknown" and stalls.get("resolution") is not None:
            change += " (noise +-%.1f)" % (stalls["resolution"] * 100.0)
        changes.append(change)
    line = "%s: %s" % (decision, cause.strip())
    if changes:
        line += " (%s)" % ", ".join(changes)
    if result.get("blocks_before") is not None:
        line += " [%d+%d blocks]" % (result["blocks_before"], result.get("blocks_after") or 0)
    return line


def _decide(result, conf):
    result = _decide_reason(result, conf)
    result["summary"] = headline(result)
    return result


def _decide_reason(result, conf):
    v = result["verdicts"]
    policy, final = result["policy"], result["final"]
    dims = {d: result[d] for d in DIMENSIONS}
    worse = [d for d in DIMENSIONS if v[d] == "worse"]
    unknown = [d for d in DIMENSIONS if v[d] == "unknown"]
    result["unresolved"] = [_unknown_phrase(d, dims[d]) for d in unknown]
    measured = "; ".join(_dim_phrase(d, dims[d], conf) for d in DIMENSIONS)
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
                "; ".join(_dim_phrase(d, dims[d], conf) for d in worse),
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
        if not improved and not any(_can_still_improve(d, dims[d]) for d in ("throughput", "p50", "tail")):
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


def half_at_budget(dim, half, df_now, df_budget, per_arm, budget, confidence):
    """The interval half-width ``half`` (now, with ``per_arm`` blocks and ``df_now`` degrees of
    freedom) scaled to ``budget`` blocks per arm: the square root of the blocks and the
    Student-t quantile at ``df_budget``. A share in points for stalls, a ratio's relative
    half-width for the other dimensions."""
    q = 0.5 + confidence / 2.0
    scale = math.sqrt(per_arm / float(budget)) * t_ppf(q, df_budget) / t_ppf(q, df_now)
    return half * scale if dim == "stalls" else math.expm1(math.log1p(half) * scale)


_DIM_WORDS = {"throughput": "the throughput", "p50": "the median step", "tail": "the tail", "stalls": "the stalls"}


def futility(res, policy, settings, per_arm):
    """Why the rest of the budget cannot resolve what ``policy`` needs on one workload, or None.

    At a look before the last: per dimension still unknown, the interval's half-width now is
    scaled to the budget (``max_blocks`` per arm: the square root of the blocks and the
    Student-t quantile at the degrees of freedom then). ``no_regression`` needs every
    dimension resolved within its tolerance; when one cannot be, more blocks buy nothing,
    unless the estimate leans beyond its tolerance the wrong way, with half of its present
    half-width, by more than the budget's half-width (then blocks may still show the
    regression, and measuring goes on). ``improve`` needs one dimension shown better;
    when none leans to a gain the budget could show, it stops.
    """
    budget = settings["max_blocks"]
    if res.get("resolved") or per_arm >= budget or res.get("blocks_before") is None:
        return None
    conf = look_confidence(settings["confidence"], planned_looks(settings["min_blocks"], budget))
    reachable, hopeless, leaning_worse = {}, [], False
    for dim in DIMENSIONS:
        block = res.get(dim) or {}
        half, df = block.get("resolution"), block.get("df")
        if block.get("verdict") != "unknown" or half is None or not df:
            continue
        band = block.get("tolerance") or 0.0
        at_budget = half_at_budget(dim, half, df, df + 2 * (budget - per_arm), per_arm, budget, conf)
        if dim == "stalls":
            estimate = block.get("difference") or 0.0
            worse = estimate > band
            better = -estimate
        else:
            ratio = block.get("ratio") or 1.0
            estimate = ratio - 1.0 if dim == "throughput" else 1.0 - ratio  # > 0: a gain
            worse, better = estimate < -band, estimate
        # a dimension leaning the wrong way keeps the trial going only when the estimate and half
        # of its present half-width reach beyond the budget's half-width: a loss the budget could
        # show (as for gains below); a lean well inside the noise at the budget is no reason
        leaning_worse = leaning_worse or (worse and -better + half / 2.0 > at_budget)
        reachable[dim] = (at_budget, half, band, better)
        if at_budget >= band > 0:
            needed = int(math.ceil(per_arm * (half / band) ** 2))
            hopeless.append(
                "%s to %s (+-%s now, +-%s at %d blocks per arm; about %d blocks per arm would be needed)"
                % (
                    _DIM_WORDS[dim],
                    _span(dim, band),
                    _span(dim, half),
                    _span(dim, at_budget),
                    budget,
                    needed,
                )
            )
    if policy == "no_regression":
        if hopeless and not leaning_worse:
            return "cannot resolve " + "; ".join(hopeless)
        return None
    # a gain the interval now still allows (half of its half-width above the estimate) that the budget could show
    gains = [
        d
        for d, (at_budget, h, band, better) in reachable.items()
        if better + h / 2.0 >= band and at_budget < better + h / 2.0
    ]
    if reachable and not gains and not leaning_worse:
        return "no improvement of the %s asked for that the budget could show (%s)" % (
            _span("throughput", settings["min_gain"]),
            "; ".join(hopeless) or "no dimension leans to a gain",
        )
    return None


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

    ``set_layer(on)`` takes the layer off or puts it back through the settings engine;
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

    def __init__(self, workloads, set_layer, measure, policy, settings, clock, stop_early=True, worse_rule=None):
        if not workloads:
            raise ValueError("a trial needs at least one workload")
        self.stop_early = stop_early  # False: spend the budget although it cannot decide (benchmarks)
        self.worse_rule = worse_rule or WORSE_RULES[0]
        self.workloads = list(workloads)
        self.set_layer = set_layer
        self.measure = measure
        self.policy = policy
        self.s = settings
        self.clock = clock
        self.looks = planned_looks(settings["min_blocks"], settings["max_blocks"])
        self.data = None
        self.on = True

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
                    tail_quantile=self.s["tail_quantile"],
                    tail_tolerance=self.s["tail_tolerance"],
                    min_gain=self.s["min_gain"],
                    confidence=self.s["confidence"],
                    stall_factor=self.s["stall_factor"],
                    stall_tolerance=self.s["stall_tolerance"],
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
        futile = {}
        while result is None:
            for arm in self.ORDER:
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
            last = per_arm["on"] + 2 > self.s["max_blocks"] or elapsed + per_quad > self.s["max_seconds"]
            if per_arm["on"] < self.s["min_blocks"] and not last:
                continue
            for w in self.workloads:
                for arm in ("on", "off"):
                    vals = tps[w][arm]
                    given = vals and all(v is not None for v in vals)
                    data[w][arm]["throughput"] = list(vals) if given else None
            judged = self._judge(data, final=last)
            if self.stop_early and not (judged["resolved"] or last):
                # calibrate, then tune: a workload the budget cannot resolve stops taking blocks
                per = judged.get("workloads") or {self.workloads[0]: judged}
                for w in list(active):
                    why = futility(per.get(w) or {}, self.policy, self.s, per_arm["on"])
                    if why:
                        futile[w] = why
                        active.remove(w)
                if not active:
                    judged = self._judge(data, final=True)
                    last = True
            if judged["resolved"] or last:
                result = self._flaky(judged, fails, runs)
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
        self.data = data
        result["cost"] = block_cost(cost)
        share = result["cost"]["total"].get("measured_share")
        if share is not None:
            result["summary"] = "%s; steps were %d%% of the blocks' %.0f s" % (
                result["summary"],
                round(share * 100.0),
                result["cost"]["total"]["wall_s"],
            )
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


# ------------------------------------------------------------------ which workloads


MIN_GPUS = {"allreduce": 2}


def resolve_workloads(candidates, gpu_count, override=None):
    """The workloads that measure a layer on this host.

    ``candidates``: the layer's entry of ``stacktune_gate_workloads`` (workloads that can see
    the layer, in order). ``override``: ``stacktune_bench_workload`` when it is not ``auto``
    (the user's own ``command``, or one built-in workload for every layer). GPU workloads
    run where there are enough GPUs (all-reduce needs 2); the CPU ones only where none of the
    GPU ones can. An empty list means the layer is not measurable here.
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
    return [w for w in candidates if w in CPU_WORKLOADS]


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


def calibrate(workloads, measure, settings, blocks, clock):
    """Identical blocks per workload: the block-to-block noise per dimension and what the budget resolves.

    Blocks of the workloads are interleaved; each workload's blocks are split into two arms in
    the A B B A order the gate uses and judged as an A/A pair. Per dimension it returns the
    spread between blocks (standard deviation of the per-block statistic, as a percentage of
    its level, or in points for stalls), the interval the A/A pair gave, and the smallest
    change the gate can resolve at its budget (``max_blocks`` per arm, with the confidence of
    one of its planned looks).
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
    looks = planned_looks(settings["min_blocks"], settings["max_blocks"])
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
            tail_quantile=settings["tail_quantile"],
            tail_tolerance=settings["tail_tolerance"],
            min_gain=settings["min_gain"],
            confidence=settings["confidence"],
            stall_factor=settings["stall_factor"],
            stall_tolerance=settings["stall_tolerance"],
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
                df_budget = 2 * settings["max_blocks"] - (3 if block.get("drift_fitted", True) else 2)
                at_budget = half_at_budget(dim, half_now, df_now, df_budget, per_arm, settings["max_blocks"], conf)
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
        "table": calibration_table(out, settings),
        "confidence_per_look": sig(conf),
        "looks": looks,
        "budget": {k: settings[k] for k in ("min_blocks", "max_blocks", "max_seconds")},
    }


def calibration_table(workloads, settings):
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
                settings["min_blocks"],
                settings["max_blocks"],
                settings["max_seconds"],
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
