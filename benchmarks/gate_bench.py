# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How often the stacktune gate gets it right, next to a median-only Mann-Whitney judge.

Every scenario is simulated ``--draws`` times; on each draw BOTH judges see the same
before/after samples:

* the stacktune gate (``plugins/module_utils/_gate.py``, policy ``improve``, defaults);
* a median-only judge as in Kayenta: two-sided Mann-Whitney U test, normal approximation
  with tie correction, alpha 0.05, "rollback" when after is significantly slower.

Scenarios (step times in ms, lognormal body, median 10 ms and sigma 0.2 unless stated):

1. identical distributions (false rollbacks), n = 500 and 2000 per arm, and identical
   heavy-tailed ones (0.5% of the steps stall at 5x the body time);
2. tail-only regression: the slowest 2% of steps are inflated by a ramp that is 1 at the
   98th percentile and 1.25 at the 99th (x1.475 at the 99.9th), so p50 stays put and p99
   rises 25%;
3. the field report: baseline p99 about 18 ms (median 12 ms); after the change the
   body is faster, throughput +8%, but 1.5% of the steps take about 203 ms;
4. a genuine uniform 10% speed-up (every step x 1/1.1), for context.

Rates carry a 95% Wilson interval. Run from the repository root:

    python3 benchmarks/gate_bench.py --draws 200 --seed 1
"""

from __future__ import annotations

import argparse
import hashlib
import math
import multiprocessing
import os
import random
import sys
import time
from statistics import NormalDist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "collections"))

from ansible_collections.stacktune.gpu.plugins.module_utils._gate import judge  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils._stats import quantile  # noqa: E402

_INV = NormalDist().inv_cdf
MEDIAN_MS = 10.0
SIGMA = 0.2


# ----------------------------------------------------------------- distributions


def lognormal(rng, n, median=MEDIAN_MS, sigma=SIGMA):
    return [median * rng.lognormvariate(0.0, sigma) for _unused in range(n)]


def tail_inflated(rng, n, median=MEDIAN_MS, sigma=SIGMA, start=0.98, at_p99=1.25):
    """Lognormal whose top (1 - start) is stretched: factor 1 at ``start``, ``at_p99`` at 0.99."""
    slope = (at_p99 - 1.0) / (0.99 - start)
    out = []
    for _unused in range(n):
        u = rng.random()
        while u <= 0.0:
            u = rng.random()
        x = median * math.exp(sigma * _INV(u))
        if u > start:
            x *= 1.0 + slope * (u - start)
        out.append(x)
    return out


FIELD_MEDIAN, FIELD_SIGMA = 12.0, math.log(18.0 / 12.0) / _INV(0.99)  # p99 = 18 ms
SPIKE_MS, SPIKE_SHARE, FIELD_GAIN = 203.0, 0.015, 1.08


def field_before(rng, n):
    return lognormal(rng, n, FIELD_MEDIAN, FIELD_SIGMA)


def field_after(rng, n):
    # Body scaled so that the mean step time (spikes included) is 1/1.08 of the baseline's.
    base_mean = FIELD_MEDIAN * math.exp(FIELD_SIGMA**2 / 2.0)
    body_mean = (base_mean / FIELD_GAIN - SPIKE_SHARE * SPIKE_MS) / (1.0 - SPIKE_SHARE)
    scale = body_mean / base_mean
    out = []
    for _unused in range(n):
        if rng.random() < SPIKE_SHARE:
            out.append(SPIKE_MS * rng.lognormvariate(0.0, 0.02))
        else:
            out.append(scale * FIELD_MEDIAN * rng.lognormvariate(0.0, FIELD_SIGMA))
    return out


def spiky(rng, n, share=0.005, factor=5.0):
    """Lognormal body plus rare stalls (``share`` of the steps take ``factor`` x as long)."""
    return [x * factor if rng.random() < share else x for x in lognormal(rng, n)]


SCENARIOS = {
    "identical": (lognormal, lognormal),
    "identical_spiky": (spiky, spiky),
    "tail_only": (lognormal, tail_inflated),
    "field_18_203": (field_before, field_after),
    "speedup_10": (lognormal, lambda r, n: lognormal(r, n, MEDIAN_MS / 1.1)),
}


# ------------------------------------------------------------ median-only judge


def mann_whitney_rollback(before, after, alpha=0.05):
    """Two-sided Mann-Whitney U (normal approximation, tie-corrected): after slower?"""
    n1, n2 = len(before), len(after)
    pooled = sorted([(v, 0) for v in before] + [(v, 1) for v in after])
    rank_sum_after = 0.0
    tie_term = 0.0
    i, n = 0, n1 + n2
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        avg_rank = (i + j) / 2.0 + 1.0
        t = j - i + 1
        if t > 1:
            tie_term += t**3 - t
        for k in range(i, j + 1):
            if pooled[k][1] == 1:
                rank_sum_after += avg_rank
        i = j + 1
    u_after = rank_sum_after - n2 * (n2 + 1) / 2.0
    mu = n1 * n2 / 2.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:
        return False
    z = (u_after - mu) / math.sqrt(var)
    p = 2.0 * (1.0 - NormalDist().cdf(abs(z)))
    return p < alpha and z > 0


# ------------------------------------------------------------------- simulation


def _draw_seed(seed, scenario, n, i):
    return int.from_bytes(hashlib.sha256(("%s|%s|%d|%d" % (seed, scenario, n, i)).encode()).digest()[:8], "big")


def one_draw(task):
    seed, scenario, n, i = task
    rng = random.Random(_draw_seed(seed, scenario, n, i))
    make_before, make_after = SCENARIOS[scenario]
    before, after = make_before(rng, n), make_after(rng, n)
    t0 = time.perf_counter()
    res = judge(before, after)
    elapsed = time.perf_counter() - t0
    sb, sa = sorted(before), sorted(after)
    return {
        "gate": res["decision"],
        "mw_rollback": mann_whitney_rollback(before, after),
        "p50_ratio": quantile(sa, 0.5) / quantile(sb, 0.5),
        "p99_ratio": quantile(sa, 0.99) / quantile(sb, 0.99),
        "tp_ratio": (sum(before) / n) / (sum(after) / n),
        "gate_s": elapsed,
    }


def wilson(k, n, z=1.959964):
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(k, n):
    lo, hi = wilson(k, n)
    return "%.1f%% [%.1f-%.1f]" % (100.0 * k / n, 100.0 * lo, 100.0 * hi)


ROWS = [
    ("identical", 500, "false rollbacks (identical distributions)", "rollback", "<= 2%"),
    ("identical", 2000, "false rollbacks (identical distributions)", "rollback", "<= 2%"),
    ("identical_spiky", 2000, "false rollbacks (identical, 0.5% stalls at 5x)", "rollback", "<= 2%"),
    ("tail_only", 500, "detects tail-only regression (p99 +25%, p50 same)", "rollback", "context"),
    ("tail_only", 2000, "detects tail-only regression (p99 +25%, p50 same)", "rollback", ">= 95%"),
    ("field_18_203", 500, "rolls back 18 -> 203 ms spikes (+8% throughput)", "rollback", "context"),
    ("field_18_203", 2000, "rolls back 18 -> 203 ms spikes (+8% throughput)", "rollback", "100%"),
    ("speedup_10", 500, "keeps a uniform 10% speed-up", "keep", "context"),
    ("speedup_10", 2000, "keeps a uniform 10% speed-up", "keep", "context"),
]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--draws", type=int, default=200, help="simulated before/after pairs per row (default 200)")
    parser.add_argument("--seed", type=int, default=1, help="base seed of the simulation (default 1)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: all cores)")
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error("--draws must be at least 1")

    started = time.perf_counter()
    tasks = [(args.seed, sc, n, i) for sc, n, _unused, _unused, _unused in ROWS for i in range(args.draws)]
    if args.jobs > 1:
        with multiprocessing.Pool(args.jobs) as pool:
            results = pool.map(one_draw, tasks, chunksize=8)
    else:
        results = [one_draw(t) for t in tasks]
    elapsed = time.perf_counter() - started

    by_row = {}
    for task, res in zip(tasks, results):
        by_row.setdefault((task[1], task[2]), []).append(res)

    print("Command: python3 %s" % " ".join([os.path.relpath(__file__)] + (argv if argv is not None else sys.argv[1:])))
    print("Draws per row: %d, seed %d, %d worker(s)" % (args.draws, args.seed, args.jobs))
    print()
    print(
        "| scenario | n per arm | what counts | target | stacktune gate | Mann-Whitney (median-only) "
        "| gate keep / rollback / inconclusive | realised p50 / p99 / throughput ratio (median of draws) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for sc, n, label, what, target in ROWS:
        rs = by_row[(sc, n)]
        d = len(rs)
        gate_hits = sum(1 for r in rs if r["gate"] == what)
        if what == "rollback":
            mw_hits = sum(1 for r in rs if r["mw_rollback"])
            mw_text = rate(mw_hits, d)
        else:
            mw_text = "n/a (never says keep)"
            mw_hits = None
        counts = "%d / %d / %d" % tuple(
            sum(1 for r in rs if r["gate"] == x) for x in ("keep", "rollback", "inconclusive")
        )

        def med(key, rs=rs):
            return quantile(sorted(r[key] for r in rs), 0.5)

        ratios = "x%.3f / x%.3f / x%.3f" % (med("p50_ratio"), med("p99_ratio"), med("tp_ratio"))
        print(
            "| %s | %d | %s: %s | %s | %s | %s | %s | %s |"
            % (sc, n, label, what, target, rate(gate_hits, d), mw_text, counts, ratios)
        )
    gate_times = sorted(r["gate_s"] for r in results)
    print()
    print(
        "Gate time per judge() call (%d resamples): median %.1f ms, max %.1f ms"
        % (2000, 1000 * quantile(gate_times, 0.5), 1000 * gate_times[-1])
    )
    print("Elapsed: %.1f s" % elapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
