# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Descriptive statistics over per-step samples, stdlib only.

Shared by the benchmark module (which summarises what it measured) and the gate
(which compares two runs). Quantiles use linear interpolation between order statistics
(Hyndman & Fan type 7, the default of numpy and R) so figures match what users compute
themselves from the raw samples.
"""

from __future__ import annotations

import math


# Smallest sample count for which a quantile q is reported at all: the q-quantile needs at
# least one observation above it, i.e. n >= 1 / (1 - q).
def min_samples_for_quantile(q):
    """Return the fewest samples for which the q-quantile has a sample above it."""
    if not 0.0 < q < 1.0:
        raise ValueError("quantile must be in (0, 1), got %r" % (q,))
    return int(math.ceil(1.0 / (1.0 - q) - 1e-9))


def quantile(sorted_values, q):
    """Type-7 quantile of an already sorted, non-empty sequence."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("quantile of an empty sample")
    if n == 1:
        return float(sorted_values[0])
    h = (n - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, n - 1)
    return float(sorted_values[lo]) + (h - lo) * (float(sorted_values[hi]) - float(sorted_values[lo]))


def median(values):
    """Median of any sequence of numbers (the mean of the middle two for an even count); None when empty."""
    values = sorted(values)
    n = len(values)
    if not n:
        return None
    mid = n // 2
    return float(values[mid]) if n % 2 else (values[mid - 1] + values[mid]) / 2.0


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    if not values:
        raise ValueError("mean of an empty sample")
    return math.fsum(values) / len(values)


def stdev(values):
    """Sample standard deviation (n - 1); 0.0 for fewer than two values."""
    n = len(values)
    if n < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))


def summarize(samples_ms):
    """Summary of per-step times in milliseconds.

    Returns count, mean, stdev, min, max, p50, p90, p99 and p99.9; a quantile is None
    when there are too few samples for it to be more than the maximum.
    """
    values = sorted(float(v) for v in samples_ms)
    if not values:
        raise ValueError("no samples to summarise")
    out = {
        "count": len(values),
        "mean_ms": mean(values),
        "stdev_ms": stdev(values),
        "min_ms": values[0],
        "max_ms": values[-1],
    }
    for name, q in (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99), ("p999_ms", 0.999)):
        out[name] = quantile(values, q) if len(values) >= min_samples_for_quantile(q) else None
    return out


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
