# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's one-block case: keep, roll back or measure again from one run per side.

``judge`` is the entry point of the ``perf_gate`` filter. Given blocks (lists of lists of
step ms, one per process run) it hands them to ``blocks.judge_blocks``, the gate tune.yml
runs. Given one flat list of steps per side, there is one block each: what varies from one
process run to the next cannot be seen, so this module judges what one block can support -
the steps' throughput, median and tail (with a ladder of higher quantiles) and the share of
stalled steps (Fisher's exact test) - and every reason says that between-run noise is
unknown and how to give blocks.

Stdlib only, so the same code decides on the controller (filter ``perf_gate``) and on a
host. Three dimensions are judged separately, each as a ratio after/before with a
confidence interval (CI), never on point estimates alone:

* throughput: ratio after/before of items/s (or of 1000 / mean step ms). CI by the delta
  method on the log of the mean step time (normal approximation, exact enough from a few
  hundred steps per side); an explicit throughput figure takes the relative uncertainty
  of the mean step time measured alongside it.
* median (p50) step time, and
* the tail: ``tail_quantile`` (p99 by default) and every higher quantile of the ladder
  q, 1-(1-q)/2, 1-(1-q)/4, ... (and p99.9) that has at least 10 samples above it on both
  sides. Spikes that hit 1.5% of the steps move p99.5 far more surely than p99, so the
  ladder gives the tail test its power without a looser tolerance.

Quantiles are type 7 (see ``common/stats.py``). Each side's quantile gets a distribution-free CI
from order statistics (binomial ranks); the ratio after/before gets a percentile
bootstrap CI over both samples. The bootstrap draws the resampled order statistics
directly (the k-th smallest of n uniforms is Beta(k, n - k + 1)), which is the exact
bootstrap distribution of the type-7 quantile without building any resample, so 2000
resamples cost milliseconds. The random stream is seeded from the data when no seed is
given: the same samples always give the same answer (check mode and reruns agree).

Verdicts per dimension, for a ratio r with CI [lo, hi] and tolerance band b (``min_gain``
for throughput and p50, ``tail_tolerance`` for the tail; step-time ratios, lower is
better):

* ``worse``: the whole CI lies beyond the tolerance (lo > 1 + b; throughput hi < 1 - b);
* ``better``: the CI excludes no change (hi < 1; throughput lo > 1) and the point estimate
  is at least the band (r <= 1 - b; throughput r >= 1 + b);
* ``same``: neither, and the CI shows it is clearly not worse (hi <= 1 + b; throughput
  lo >= 1 - b);
* ``unknown``: anything else (the CI straddles the tolerance).

A tail verdict of ``worse`` at any ladder quantile rolls the change back, whatever
throughput did.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import math
import numbers
import random
import struct
from statistics import NormalDist

from ansible_collections.stacktune.gpu.plugins.module_utils.gate import blocks as _blocks
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import gate_settings
from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import mean, quantile, stdev
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.verdicts import (
    POLICIES,
    latency_verdict,
    ms,
    quantile_label,
    sig,
    throughput_verdict,
)

DEFAULT_RESAMPLES = 2000
# A ladder quantile above tail_quantile decides only with at least this many samples above it.
LADDER_MIN_ABOVE = 10
P999 = 0.999


# --------------------------------------------------------------------------- helpers


def _ci(pair, digits=6):
    return None if pair is None else [sig(pair[0], digits), sig(pair[1], digits)]


def _samples(value, name):
    """Normalise one side to (sorted samples, explicit throughput or None)."""
    throughput = None
    if isinstance(value, dict) or (hasattr(value, "keys") and hasattr(value, "get")):
        if "samples_ms" not in value:
            raise ValueError("%s must be a list of step times in ms or a dict with 'samples_ms'" % name)
        throughput = value.get("throughput")
        samples = value.get("samples_ms")
        if throughput is not None:
            if (
                isinstance(throughput, bool)
                or not isinstance(throughput, numbers.Real)
                or not math.isfinite(throughput)
                or throughput <= 0
            ):
                raise ValueError("%s.throughput must be a positive number, got %r" % (name, throughput))
            throughput = float(throughput)
        label = "%s.samples_ms" % name
    else:
        samples = value
        label = name
    if isinstance(samples, (str, bytes)) or not isinstance(samples, (list, tuple)):
        raise ValueError("%s must be a list of step times in ms, got %s" % (label, type(samples).__name__))
    if not samples:
        raise ValueError("%s is empty: no step times to judge" % label)
    out = []
    for i, raw in enumerate(samples):
        if isinstance(raw, bool) or not isinstance(raw, numbers.Real):
            raise ValueError("%s[%d] is not a number: %r" % (label, i, raw))
        v = float(raw)
        if math.isnan(v):
            raise ValueError("%s[%d] is NaN" % (label, i))
        if math.isinf(v):
            raise ValueError("%s[%d] is infinite" % (label, i))
        if v < 0:
            raise ValueError("%s[%d] is negative (%r ms): step times must be positive" % (label, i, v))
        if v == 0:
            raise ValueError("%s[%d] is 0 ms: step times must be positive" % (label, i))
        out.append(v)
    out.sort()
    return out, throughput


def _seed_from(before, after, params):
    h = hashlib.sha256()
    h.update(struct.pack("<%dd" % len(before), *before))
    h.update(b"|")
    h.update(struct.pack("<%dd" % len(after), *after))
    h.update(repr(params).encode("ascii"))
    return int.from_bytes(h.digest()[:8], "big")


# ------------------------------------------------------------- order statistics / CIs


def _binom_cdf_window(n, p, lo_j, hi_j):
    """P(B <= j) for j in [lo_j, hi_j], B ~ Binomial(n, p); mass below the window is ~0."""
    # Start far enough below the mean that the omitted mass is negligible.
    sd = math.sqrt(n * p * (1.0 - p))
    start = max(0, min(lo_j, int(n * p - 12.0 * sd - 2)))
    logp, log1p = math.log(p), math.log1p(-p)
    lgn = math.lgamma(n + 1)
    cdf = {}
    acc = 0.0
    for j in range(start, hi_j + 1):
        acc += math.exp(lgn - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * logp + (n - j) * log1p)
        if j >= lo_j:
            cdf[j] = min(acc, 1.0)
    return cdf


def needed_samples(q, confidence=0.95):
    """Fewest samples per side for which the order-statistic CI of the q-quantile exists.

    Both ends must exist: q**n <= alpha/2 (an observation above the quantile with enough
    probability) and (1 - q)**n <= alpha/2. For p99 at 95%: 368; p99.9: 3688; p50: 6.
    """
    half_alpha = (1.0 - confidence) / 2.0
    n = 1
    for p in (q, 1.0 - q):
        k = int(math.ceil(math.log(half_alpha) / math.log(p)))
        while k > 1 and p ** (k - 1) <= half_alpha:
            k -= 1
        while p**k > half_alpha:
            k += 1
        n = max(n, k)
    return n


def order_stat_ci(sorted_values, q, confidence=0.95):
    """Distribution-free CI of the q-quantile: (X_(l), X_(u)) with binomial ranks.

    P(X_(l) <= x_q <= X_(u)) >= confidence, equal tails. None when n is too small.
    """
    n = len(sorted_values)
    if n < needed_samples(q, confidence):
        return None
    half_alpha = (1.0 - confidence) / 2.0
    sd = math.sqrt(n * q * (1.0 - q))
    lo_j = max(0, int(n * q - 8.0 * sd - 2))
    hi_j = min(n - 1, int(n * q + 8.0 * sd + 2))
    cdf = _binom_cdf_window(n, q, lo_j, hi_j)
    lower = None  # largest j with P(B <= j) <= alpha/2  -> l = j + 1 (1-based)
    upper = None  # smallest j with P(B <= j) >= 1 - alpha/2 -> u = j + 1
    for j in range(lo_j, hi_j + 1):
        c = cdf[j]
        if c <= half_alpha:
            lower = j
        if upper is None and c >= 1.0 - half_alpha:
            upper = j
    l_idx = 0 if lower is None else lower  # 0-based index of X_(l), l = lower + 1
    u_idx = n - 1 if upper is None else upper  # 0-based index of X_(u), u = upper + 1
    return sorted_values[l_idx], sorted_values[u_idx]


def _boot_quantile(rng, xs, q, resamples):
    """Bootstrap distribution of the type-7 quantile of ``xs`` (sorted), drawn exactly.

    The k-th smallest resampled index is floor(n * U_(k)) with U_(k) ~ Beta(k, n-k+1); the
    next one follows from U_(k+1) = U_(k) + (1 - U_(k)) * Beta(1, n-k).
    """
    n = len(xs)
    if n == 1:
        return [xs[0]] * resamples
    h = (n - 1) * q
    lo = int(math.floor(h))
    frac = h - lo
    k = lo + 1  # 1-based rank of the lower order statistic
    need_next = frac > 0.0 and k < n
    inv = 1.0 / (n - k) if need_next else 0.0
    beta, rand, last = rng.betavariate, rng.random, n - 1
    out = []
    append = out.append
    for _unused in range(resamples):
        u = beta(k, n - k + 1)
        i1 = int(u * n)
        v = xs[i1 if i1 < last else last]
        if need_next:
            u2 = u + (1.0 - u) * (1.0 - rand() ** inv)
            i2 = int(u2 * n)
            v2 = xs[i2 if i2 < last else last]
            v += frac * (v2 - v)
        append(v)
    return out


def _tail_count(n, q):
    """How many of n samples lie above the q-quantile: floor(n * (1 - q)), at least 1."""
    return max(1, int(math.floor(n * (1.0 - q) + 1e-9)))


def tail_mean(sorted_values, q):
    """Mean of the slowest floor(n * (1 - q)) samples (expected shortfall beyond q)."""
    m = _tail_count(len(sorted_values), q)
    return math.fsum(sorted_values[-m:]) / m


def _boot_tail_mean(rng, xs, q, resamples):
    """Bootstrap distribution of :func:`tail_mean`, drawn exactly from the top order statistics.

    The largest of n uniforms is V**(1/n); given it is u, the next is u * V**(1/(n-1)), and so on.
    """
    n = len(xs)
    m = _tail_count(n, q)
    exps = [1.0 / (n - j) for j in range(m)]
    rand, last = rng.random, n - 1
    out = []
    append = out.append
    for _unused in range(resamples):
        u = 1.0
        total = 0.0
        for e in exps:
            u *= rand() ** e
            i = int(u * n)
            total += xs[i if i < last else last]
        append(total / m)
    return out


def _percentile_ci(values, confidence):
    s = sorted(values)
    a = (1.0 - confidence) / 2.0
    return quantile(s, a), quantile(s, 1.0 - a)


def _ratio(a, b):
    if b > 0:
        return a / b
    return 1.0 if a == 0 else float("inf")


# ---------------------------------------------------------------- verdict rules


def _quantile_block(rng, before, after, q, confidence, resamples, band):
    b_q, a_q = quantile(before, q), quantile(after, q)
    boot_b = _boot_quantile(rng, before, q, resamples)
    boot_a = _boot_quantile(rng, after, q, resamples)
    ratios = [_ratio(x, y) for x, y in zip(boot_a, boot_b)]
    ratio_ci = _percentile_ci(ratios, confidence)
    ratio = _ratio(a_q, b_q)
    before_ci, after_ci = order_stat_ci(before, q, confidence), order_stat_ci(after, q, confidence)
    verdict = latency_verdict(ratio, ratio_ci, band)
    if (
        verdict in ("better", "same")
        and before_ci is not None
        and after_ci is not None
        and after_ci[1] > (1.0 + band) * before_ci[1]
    ):
        # The bootstrap cannot see past the few slowest steps; the distribution-free bound
        # can: a handful of huge stalls leaves "not worse" unproven.
        verdict = "unknown"
    return {
        "quantile": q,
        "label": quantile_label(q),
        "before": b_q,
        "after": a_q,
        "before_ci": before_ci,
        "after_ci": after_ci,
        "ratio": ratio,
        "ratio_ci": ratio_ci,
        "verdict": verdict,
        "tolerance": band,
    }


def _tail_mean_block(rng, before, after, q, confidence, resamples, band):
    b_m, a_m = tail_mean(before, q), tail_mean(after, q)
    boot_b = _boot_tail_mean(rng, before, q, resamples)
    boot_a = _boot_tail_mean(rng, after, q, resamples)
    ratio_ci = _percentile_ci([_ratio(x, y) for x, y in zip(boot_a, boot_b)], confidence)
    ratio = _ratio(a_m, b_m)
    return {
        "quantile": q,
        "label": "mean above %s" % quantile_label(q),
        "statistic": "tail_mean",
        "before": b_m,
        "after": a_m,
        "before_ci": None,
        "after_ci": None,
        "ratio": ratio,
        "ratio_ci": ratio_ci,
        "verdict": latency_verdict(ratio, ratio_ci, band),
        "tolerance": band,
    }


def _round_block(block):
    if block is None:
        return None
    out = dict(block)
    for key in ("before", "after", "ratio"):
        out[key] = sig(out[key])
    for key in ("before_ci", "after_ci", "ratio_ci"):
        out[key] = _ci(out[key])
    out["tolerance"] = sig(out["tolerance"])
    if "ladder" in out:
        out["ladder"] = [_round_block(b) for b in out["ladder"]]
    return out


def _throughput_block(before, after, tp_b, tp_a, confidence, band):
    m_b, m_a = mean(before), mean(after)
    if tp_b is None or tp_a is None:
        tp_b, tp_a = 1000.0 / m_b, 1000.0 / m_a
        source = "1000/mean_ms"
    else:
        source = "given"
    ratio = tp_a / tp_b
    # Delta method: Var(log mean) ~= s^2 / (n * mean^2); the two sides are independent.
    var = 0.0
    for xs, m in ((before, m_b), (after, m_a)):
        if len(xs) > 1:
            var += (stdev(xs) / m) ** 2 / len(xs)
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    half = z * math.sqrt(var)
    ci = (ratio * math.exp(-half), ratio * math.exp(half))
    return {
        "before": tp_b,
        "after": tp_a,
        "ratio": ratio,
        "ci": ci,
        "verdict": throughput_verdict(ratio, ci, band),
        "tolerance": band,
        "source": source,
        "method": "delta method on log(mean step time)",
        "mean_ms_before": m_b,
        "mean_ms_after": m_a,
    }


# ---------------------------------------------------------------- reason sentences


def _pct(r):
    return "%+.1f%%" % ((r - 1.0) * 100.0)


def _xci(ci, confidence):
    return "%g%% CI x%.3g-x%.3g" % (confidence * 100, ci[0], ci[1])


def _pctci(ci, confidence):
    return "%g%% CI %s to %s" % (confidence * 100, _pct(ci[0]), _pct(ci[1]))


def _tp_phrase(tp, confidence):
    r = tp["ratio"]
    word = "rose" if r >= 1 else "fell"
    return "throughput %s %.1f%% (%s)" % (word, abs(r - 1.0) * 100.0, _pctci(tp["ci"], confidence))


def _lat_phrase(block, confidence):
    return "%s %s -> %s ms (x%.3g, %s)" % (
        block["label"],
        ms(block["before"]),
        ms(block["after"]),
        block["ratio"],
        _xci(block["ratio_ci"], confidence),
    )


def _summary(tp, p50, tail, confidence):
    parts = [_tp_phrase(tp, confidence), _lat_phrase(p50, confidence)]
    if tail is not None:
        parts.append(_lat_phrase(tail, confidence))
    return "; ".join(parts)


# ------------------------------------------------------------------------ public API


def judge(before, after, policy="improve", final=False, seed=None, resamples=DEFAULT_RESAMPLES, looks=1, **settings):
    """Decide ``keep``, ``rollback`` or ``inconclusive`` for one before/after pair.

    ``before``/``after``: a flat list of per-step times in ms, or a dict
    ``{"samples_ms": [...], "throughput": items_per_s}``, judged step by step as below; or
    blocks (one per process run): a list of lists of step ms, or a dict ``{"blocks": [...],
    "throughput": [per block], "at": [positions]}``, judged over blocks by
    ``blocks.judge_blocks`` (``looks`` applies there only). ``settings``: the gate's settings
    by name (``gate.settings.SETTINGS``), the defaults for those not given. See docs/gate.md
    for the rules. Raises ValueError naming the offending argument.
    """

    if _blocks.is_blocks(before) or _blocks.is_blocks(after):
        if not (_blocks.is_blocks(before) and _blocks.is_blocks(after)):
            raise ValueError("before and after must both be blocks (lists of lists of step ms) or both flat lists")
        return _blocks.judge_blocks(before, after, policy=policy, final=final, looks=looks, **settings)
    if policy not in POLICIES:
        raise ValueError("policy must be one of %s, got %r" % (", ".join(POLICIES), policy))
    s = gate_settings(settings, "judge")
    q, tol, gain, confidence = s["tail_quantile"], s["tail_tolerance"], s["min_gain"], s["confidence"]
    factor, stall_tol = s["stall_factor"], s["stall_tolerance"]
    if not isinstance(final, bool):
        raise ValueError("final must be a boolean, got %r" % (final,))
    if isinstance(resamples, bool) or not isinstance(resamples, int) or not 100 <= resamples <= 1000000:
        raise ValueError("resamples must be an integer between 100 and 1000000, got %r" % (resamples,))
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError("seed must be an integer or None, got %r" % (seed,))
    xb, tp_b = _samples(before, "before")
    xa, tp_a = _samples(after, "after")

    eff_tol, eff_gain, eff_p50 = tol, gain, gain

    n_b, n_a = len(xb), len(xa)
    n_min = min(n_b, n_a)
    if seed is None:
        seed = _seed_from(xb, xa, (q, confidence, resamples))
    rng = random.Random(seed)

    result = {
        "decision": "inconclusive",
        "reason": "",
        "policy": policy,
        "final": final,
        "n_before": n_b,
        "n_after": n_a,
        "confidence": confidence,
        "resamples": resamples,
        "tolerances": {"tail": sig(eff_tol), "min_gain": sig(eff_gain), "p50": sig(eff_p50)},
        "throughput": None,
        "p50": None,
        "tail": None,
        "p999": None,
        "needed_samples": None,
        "verdicts": {"throughput": "unknown", "p50": "unknown", "tail": "unknown"},
        "method": "steps",
        "between_run_noise": "unknown",
    }
    result["stalls"] = stall_test(xb, xa, factor, stall_tol, confidence)
    result["verdicts"]["stalls"] = result["stalls"]["verdict"]

    need_tail = needed_samples(q, confidence)
    need_p50 = needed_samples(0.5, confidence)
    if n_min < need_p50:
        result["needed_samples"] = need_tail
        return _finish(
            result, None, "%s needs at least %d samples per side, got %d" % (quantile_label(q), need_tail, n_min)
        )

    tp = _throughput_block(xb, xa, tp_b, tp_a, confidence, eff_gain)
    p50 = _quantile_block(rng, xb, xa, 0.5, confidence, resamples, eff_p50)
    result["throughput"] = {
        "before": sig(tp["before"]),
        "after": sig(tp["after"]),
        "ratio": sig(tp["ratio"]),
        "ci": _ci(tp["ci"]),
        "verdict": tp["verdict"],
        "tolerance": sig(tp["tolerance"]),
        "source": tp["source"],
        "method": tp["method"],
        "mean_ms_before": sig(tp["mean_ms_before"]),
        "mean_ms_after": sig(tp["mean_ms_after"]),
    }
    result["p50"] = _round_block(p50)
    result["verdicts"]["throughput"] = tp["verdict"]
    result["verdicts"]["p50"] = p50["verdict"]

    if n_min < need_tail:
        result["needed_samples"] = need_tail
        why = "%s needs at least %d samples per side, got %d" % (quantile_label(q), need_tail, n_min)
        return _finish(result, None, why, tp=tp, p50=p50)

    tail = _quantile_block(rng, xb, xa, q, confidence, resamples, eff_tol)
    ladder = [tail]
    extra = []
    step = 1.0 - q
    while True:
        step /= 2.0
        qi = 1.0 - step
        if n_min * step < LADDER_MIN_ABOVE - 1e-9 or qi >= 1.0:
            break
        extra.append(qi)
    if q < P999 and n_min * (1.0 - P999) >= LADDER_MIN_ABOVE - 1e-9 and all(abs(x - P999) > 1e-12 for x in extra):
        extra.append(P999)
    p999 = dict(tail, decides=True) if abs(q - P999) < 1e-12 else None
    if n_min * (1.0 - q) >= LADDER_MIN_ABOVE - 1e-9:
        ladder.append(_tail_mean_block(rng, xb, xa, q, confidence, resamples, eff_tol))
    for qi in sorted(extra):
        block = _quantile_block(rng, xb, xa, qi, confidence, resamples, eff_tol)
        ladder.append(block)
        if abs(qi - P999) < 1e-12:
            p999 = dict(block, decides=True)
    if p999 is None and n_min >= needed_samples(P999, confidence):
        p999 = _quantile_block(rng, xb, xa, P999, confidence, resamples, eff_tol)
        p999["decides"] = False
    tail = dict(tail)
    tail["ladder"] = [{k: v for k, v in b.items() if k != "ladder"} for b in ladder[1:]]
    worst = None
    for block in ladder:
        if block["verdict"] == "worse" and (worst is None or block["ratio_ci"][0] > worst["ratio_ci"][0]):
            worst = block
    tail_verdict = "worse" if worst is not None else tail["verdict"]
    tail["verdict"] = tail_verdict
    result["tail"] = _round_block(tail)
    result["p999"] = _round_block(p999)
    result["verdicts"]["tail"] = tail_verdict
    return _finish(result, worst, None, tp=tp, p50=p50, tail=tail)


ONE_BLOCK = (
    "judged as one block per side: the noise between process runs is unknown here, so a shift of "
    "the whole run cannot be told from it; give blocks (a list of lists of step ms, one per run) to "
    "judge over runs"
)


def _hypergeom_upper(k, draws, successes, population):
    """P(X >= k) for X ~ Hypergeometric(population, successes, draws): Fisher's exact test, one-sided."""

    def log_choose(n, r):
        return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)

    low, high = max(k, draws - (population - successes), 0), min(draws, successes)
    if low > high:
        return 0.0
    denominator = log_choose(population, draws)
    return min(
        1.0,
        sum(
            math.exp(log_choose(successes, i) + log_choose(population - successes, draws - i) - denominator)
            for i in range(low, high + 1)
        ),
    )


def stall_test(before, after, factor, tolerance, confidence):
    """Stalled steps (slower than ``factor`` x the median step before) in one flat list against
    the other: Fisher's exact test on the counts. Worse when more steps stall after, at
    ``confidence``, by at least ``tolerance`` (a share of the steps)."""
    threshold = factor * quantile(sorted(before), 0.5)
    kb = sum(1 for x in before if x > threshold)
    ka = sum(1 for x in after if x > threshold)
    nb, na = len(before), len(after)
    p_worse = _hypergeom_upper(ka, na, ka + kb, na + nb)
    difference = ka / float(na) - kb / float(nb)
    if difference >= tolerance and p_worse < 1.0 - confidence:
        verdict = "worse"
    elif difference <= 0.0 or difference < tolerance and p_worse >= 0.5:
        verdict = "same"
    else:
        verdict = "unknown"
    return {
        "label": "steps beyond %gx the median" % factor,
        "threshold_ms": sig(threshold),
        "count_before": kb,
        "count_after": ka,
        "before": sig(kb / float(nb)),
        "after": sig(ka / float(na)),
        "difference": sig(difference),
        "p_value": sig(p_worse, 3),
        "tolerance": tolerance,
        "verdict": verdict,
    }


def _finish(result, worst_tail, short_reason, tp=None, p50=None, tail=None):
    result = _decide_flat(result, worst_tail, short_reason, tp, p50, tail)
    result["reason"] = "%s [%s]" % (result["reason"], ONE_BLOCK)
    return result


def _decide_flat(result, worst_tail, short_reason, tp=None, p50=None, tail=None):
    policy, final, conf = result["policy"], result["final"], result["confidence"]
    v = result["verdicts"]
    tol_pct = "%g%%" % (result["tolerances"]["tail"] * 100.0)
    if worst_tail is not None:
        if tp["ratio"] >= 1.0:
            tail_note = "although throughput rose %.1f%%" % ((tp["ratio"] - 1.0) * 100.0)
        else:
            tail_note = "and throughput fell %.1f%%" % ((1.0 - tp["ratio"]) * 100.0)
        where = ""
        if worst_tail["label"] != tail["label"]:
            where = " for the tail from %s up (%s %s -> %s ms)" % (
                tail["label"],
                tail["label"],
                ms(tail["before"]),
                ms(tail["after"]),
            )
        result["decision"] = "rollback"
        result["reason"] = "rollback: %s rose %s -> %s ms (x%.3g, %s) beyond the %s tolerance%s, %s" % (
            worst_tail["label"],
            ms(worst_tail["before"]),
            ms(worst_tail["after"]),
            worst_tail["ratio"],
            _xci(worst_tail["ratio_ci"], conf),
            tol_pct,
            where,
            tail_note,
        )
        return result

    stalls = result.get("stalls") or {}
    if stalls.get("verdict") == "worse":
        result["decision"] = "rollback"
        result["reason"] = (
            "rollback: more steps stalled: %d of %d -> %d of %d steps slower than %s ms (%s), one-sided "
            "p = %.2g beyond the %g-point tolerance"
            % (
                stalls["count_before"],
                result["n_before"],
                stalls["count_after"],
                result["n_after"],
                ms(stalls["threshold_ms"]),
                stalls["label"],
                stalls["p_value"],
                stalls["tolerance"] * 100.0,
            )
        )
        return result

    if short_reason is not None:
        # Not enough samples for the tail: no decision on the tail is possible.
        detail = short_reason
        if tp is not None:
            detail += " (%s)" % _summary(tp, p50, None, conf)
        if not final:
            result["decision"] = "inconclusive"
            result["reason"] = "inconclusive: %s; collect more steps" % detail
        elif policy == "improve":
            result["decision"] = "rollback"
            result["reason"] = "rollback: no significant improvement shown: %s" % detail
        else:
            result["decision"] = "keep"
            result["reason"] = (
                "keep: no significant regression shown (final decision with too few samples): %s" % detail
            )
        return result

    summary = _summary(tp, p50, tail, conf)
    if v["throughput"] == "worse":
        result["decision"] = "rollback"
        result["reason"] = "rollback: throughput fell beyond the %g%% tolerance: %s" % (
            tp["tolerance"] * 100.0,
            summary,
        )
        return result
    if v["p50"] == "worse":
        result["decision"] = "rollback"
        result["reason"] = "rollback: median step time rose beyond the %g%% tolerance: %s" % (
            p50["tolerance"] * 100.0,
            summary,
        )
        return result

    tail_ok = v["tail"] in ("better", "same")
    if policy == "improve":
        improved = [name for name in ("throughput", "p50", "tail") if v[name] == "better"]
        others_ok = all(v[name] != "unknown" for name in ("throughput", "p50"))
        if improved and tail_ok and (others_ok or v["throughput"] == "better"):
            result["decision"] = "keep"
            result["reason"] = "keep: significant improvement in %s and the tail is within the %s tolerance: %s" % (
                ", ".join(improved),
                tol_pct,
                summary,
            )
        elif final:
            result["decision"] = "rollback"
            result["reason"] = "rollback: no significant improvement: %s" % summary
        else:
            result["decision"] = "inconclusive"
            result["reason"] = "inconclusive: no significant improvement yet: %s; collect more rounds" % summary
        return result

    # no_regression
    if tail_ok and v["throughput"] in ("better", "same") and v["p50"] in ("better", "same"):
        result["decision"] = "keep"
        result["reason"] = "keep: nothing significantly worse (tail tolerance %s): %s" % (tol_pct, summary)
    elif final:
        result["decision"] = "keep"
        result["reason"] = "keep: no significant regression found (final, noise-level differences): %s" % summary
    else:
        result["decision"] = "inconclusive"
        result["reason"] = "inconclusive: a regression within the noise cannot be ruled out yet: %s" % summary
    return result
