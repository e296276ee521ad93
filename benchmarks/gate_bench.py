# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How often the stacktune gate gets it right, next to a median-only Mann-Whitney judge.

Every scenario is simulated ``--draws`` times; on each draw BOTH judges see the same
before/after samples:

* the stacktune gate (``plugins/module_utils/gate/steps.py``, policy ``improve``, defaults);
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

Block noise (second table). Real hosts are measured one process run (a block, here 400
steps) at a time, and blocks differ from each other far more than steps inside a block do.
Each draw simulates such a host. Every block has a level (10 ms x a lognormal shift with
sd 2%) and steps around it (lognormal, sigma 0.02); each noise shape adds one feature:

* ``level_shift``: nothing more (the shift between blocks alone);
* ``drift``: warm-up drift, the level rises or falls (sign drawn per host) linearly by
  0.5% of the level per block over the run;
* ``stall_rates``: every block has its own stall share, uniform in 0-1% of its steps, at 3x
  the block's median;
* ``bimodal``: 20% of the blocks run at 1.5x the level (as real DataLoader blocks do).

Cases, on the blocks measured with the change (the "after" arm) only: A/A (no effect),
15% slower (every step x1.15), 1.5% of the steps stalled at 3x the block's p99, 15% faster
(x0.85). The policy is ``improve`` for the false keeps (A/A) and for the faster case,
``no_regression`` for the false rollbacks (A/A), the slower and the stall cases. Three
judges decide on each draw:

(a) the step-level gate as the old flow used it: ``judge(pooled_before, pooled_after,
    policy, final=True)`` on the steps of the first 4 blocks per arm, pooled;
(b) the block gate: ``trial.Trial`` drives the simulated host itself (its balanced
    sequential schedule on, off, off, on, ... with the default budget of 4 to 8 blocks per
    arm and its looks) and decides with ``judge_blocks``;
(c) the Mann-Whitney judge above on the same pooled steps as (a); under ``improve`` it
    "keeps" when after is significantly faster (two-sided, alpha 0.05).

All three see the SAME blocks: one host per draw (one seed) is measured by the trial, and
(a) and (c) pool the first 4 blocks per arm of that trial, which the trial always measures
(in the order B A A B B A A B, B being the change). The trial may go on to draw more blocks
from the same host, up to its budget of 8 per arm; (a) and (c) never see those. The table
shows how many blocks (b) used, and how often its decision was resolved rather than the
default its policy takes when the budget is spent. Each block-noise draw runs a whole trial
and a step-level judge over 3200 steps, so these rows take half as many draws as
``--draws`` unless ``--block-draws`` says otherwise; ``--only iid|blocks`` prints one table.

Rates carry a 95% Wilson interval. Run from the repository root (about 3 minutes on 2 cores):

    python3 benchmarks/gate_bench.py --draws 200 --seed 1
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import math
import multiprocessing
import os
import random
import sys
import time
from statistics import NormalDist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "collections"))

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import check_settings  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import Trial  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import judge  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import quantile  # noqa: E402

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
    z, p = mann_whitney(before, after)
    return p < alpha and z > 0


def mann_whitney_keep(before, after, alpha=0.05):
    """The same test read for a keep: after significantly faster."""
    z, p = mann_whitney(before, after)
    return p < alpha and z < 0


def mann_whitney(before, after):
    """Two-sided Mann-Whitney U, normal approximation with tie correction: (z of after, p)."""
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
        return 0.0, 1.0
    z = (u_after - mu) / math.sqrt(var)
    p = 2.0 * (1.0 - NormalDist().cdf(abs(z)))
    return z, p


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


# ------------------------------------------------------------------- block noise

BLOCK_STEPS = 400
BLOCK_LEVEL_MS = 10.0
STEP_SIGMA = 0.02  # steps around their block's level
SHIFT_SD = 0.02  # block level, lognormal
DRIFT_PER_BLOCK = 0.005
STALL_SHARE_MAX, STALL_NOISE_FACTOR = 0.01, 3.0
BIMODAL_SHARE, BIMODAL_FACTOR = 0.2, 1.5
FIRST_BLOCKS = 4  # per arm, what the old step-level flow measured
BLOCK_SETTINGS = check_settings({})

NOISE_SHAPES = {
    "level_shift": "level shift per block (sd 2%), steps sigma 0.02",
    "drift": "+ drift of 0.5% of the level per block",
    "stall_rates": "+ 0-1% of each block's steps stalled at 3x its median",
    "bimodal": "+ 20% of the blocks at 1.5x the level",
}

# case -> (step factor with the change, share of its steps stalled at 3x the block's p99)
BLOCK_CASES = {
    "aa": (1.0, 0.0),
    "slower_15": (1.15, 0.0),
    "stall_1.5": (1.0, 0.015),
    "faster_15": (0.85, 0.0),
}

# (case, policy, what counts, target rate, at least?)
BLOCK_ROWS = [
    ("aa", "improve", "false keep (A/A)", "keep", 0.05, False),
    ("aa", "no_regression", "false rollback (A/A)", "rollback", 0.05, False),
    ("slower_15", "no_regression", "rolls back 15% slower", "rollback", 0.95, True),
    ("stall_1.5", "no_regression", "rolls back 1.5% stalls at 3x p99", "rollback", 0.90, True),
    ("faster_15", "improve", "keeps 15% faster", "keep", 0.90, True),
]


class BlockHost:
    """A simulated host measured one block (one process run) at a time.

    ``set_layer(on)`` and ``measure(workload)`` are what ``trial.Trial`` calls; the layer
    is on when the trial starts. The noise comes from one stream seeded per draw, the change's
    stalls from a second one, so the blocks' noise does not depend on which arm they fall in.
    """

    def __init__(self, seed, shape, effect=1.0, stall=0.0):
        if shape not in NOISE_SHAPES:
            raise ValueError("unknown noise shape %r" % (shape,))
        self.rng = random.Random(seed)
        self.stall_rng = random.Random(seed ^ 0x5A5A5A5A)
        self.shape, self.effect, self.stall = shape, effect, stall
        self.direction = 1.0 if self.rng.random() < 0.5 else -1.0
        self.on = True
        self.t = 0

    def set_layer(self, on):
        self.on = on

    def measure(self, _workload):
        rng, gauss = self.rng, self.rng.gauss
        level = BLOCK_LEVEL_MS * math.exp(gauss(0.0, SHIFT_SD))
        if self.shape == "drift":
            level *= 1.0 + self.direction * DRIFT_PER_BLOCK * self.t
        elif self.shape == "bimodal" and rng.random() < BIMODAL_SHARE:
            level *= BIMODAL_FACTOR
        self.t += 1
        xs = [level * math.exp(gauss(0.0, STEP_SIGMA)) for _unused in range(BLOCK_STEPS)]
        if self.shape == "stall_rates":
            share = rng.uniform(0.0, STALL_SHARE_MAX)
            for i in rng.sample(range(BLOCK_STEPS), int(round(share * BLOCK_STEPS))):
                xs[i] = STALL_NOISE_FACTOR * level * math.exp(gauss(0.0, STEP_SIGMA))
        if self.on:
            if self.effect != 1.0:
                xs = [x * self.effect for x in xs]
            if self.stall:
                top = sorted(xs)[int(0.99 * (BLOCK_STEPS - 1))]
                for i in self.stall_rng.sample(range(BLOCK_STEPS), int(round(self.stall * BLOCK_STEPS))):
                    xs[i] = 3.0 * top
        return {"samples_ms": xs}


def one_block_draw(task):
    seed, shape, case, policy, i = task
    # Keyed on shape and case, not policy: both A/A rows see the same hosts.
    host = BlockHost(_draw_seed(seed, "blocks|%s|%s" % (shape, case), BLOCK_STEPS, i), shape, *BLOCK_CASES[case])
    trial = Trial(["w"], host.set_layer, host.measure, policy, BLOCK_SETTINGS, itertools.count().__next__)
    res = trial.run()
    arms = trial.data["w"]
    before = [x for block in arms["off"]["blocks"][:FIRST_BLOCKS] for x in block]
    after = [x for block in arms["on"]["blocks"][:FIRST_BLOCKS] for x in block]
    old = judge(before, after, policy=policy, final=True)
    mw = mann_whitney_keep(before, after) if policy == "improve" else mann_whitney_rollback(before, after)
    return {
        "step_gate": old["decision"],
        "block_gate": res["decision"],
        "block_resolved": res["resolved"],
        "blocks_per_arm": (res["blocks"]["with"] + res["blocks"]["without"]) / 2.0,
        "mw": "keep" if mw and policy == "improve" else "rollback" if mw else "none",
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


def _map(pool, func, tasks):
    if pool is None:
        return [func(t) for t in tasks]
    return pool.map(func, tasks, chunksize=8)


def iid_table(pool, args):
    started = time.perf_counter()
    tasks = [(args.seed, sc, n, i) for sc, n, _unused, _unused, _unused in ROWS for i in range(args.draws)]
    results = _map(pool, one_draw, tasks)
    elapsed = time.perf_counter() - started

    by_row = {}
    for task, res in zip(tasks, results):
        by_row.setdefault((task[1], task[2]), []).append(res)

    print("I.i.d. steps. Draws per row: %d, seed %d, %d worker(s)" % (args.draws, args.seed, args.jobs))
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
    print("Elapsed (i.i.d. table): %.1f s" % elapsed)


def block_table(pool, args):
    started = time.perf_counter()
    tasks = [
        (args.seed, shape, case, policy, i)
        for shape in NOISE_SHAPES
        for case, policy, _unused, _unused, _unused, _unused in BLOCK_ROWS
        for i in range(args.block_draws)
    ]
    results = _map(pool, one_block_draw, tasks)
    elapsed = time.perf_counter() - started

    by_row = {}
    for task, res in zip(tasks, results):
        by_row.setdefault(task[1:4], []).append(res)

    print(
        "Block noise, %d steps per block. Draws per row: %d, seed %d, %d worker(s); (b) budget %d-%d blocks per arm"
        % (
            BLOCK_STEPS,
            args.block_draws,
            args.seed,
            args.jobs,
            BLOCK_SETTINGS.budget["min_blocks"],
            BLOCK_SETTINGS.budget["max_blocks"],
        )
    )
    print()
    print(
        "| noise | case | policy | what counts | target | (a) step gate, 4+4 blocks pooled "
        "| (b) block gate, Trial | (c) Mann-Whitney, 4+4 blocks pooled | (b) blocks per arm, mean (min-max) "
        "| (b) resolved, not the budget's default |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    misses = []
    for shape in NOISE_SHAPES:
        for case, policy, label, what, target, at_least in BLOCK_ROWS:
            rs = by_row[(shape, case, policy)]
            d = len(rs)
            hits = {key: sum(1 for r in rs if r[key] == what) for key in ("step_gate", "block_gate", "mw")}
            used = [r["blocks_per_arm"] for r in rs]
            resolved = sum(1 for r in rs if r["block_resolved"])
            target_text = "%s %g%%" % (">=" if at_least else "<=", 100.0 * target)
            share = hits["block_gate"] / float(d)
            if (share < target) if at_least else (share > target):
                misses.append(
                    "%s / %s (%s): block gate %s, target %s"
                    % (shape, case, policy, rate(hits["block_gate"], d), target_text)
                )
            print(
                "| %s | %s | %s | %s: %s | %s | %s | %s | %s | %.2f (%g-%g) | %s |"
                % (
                    shape,
                    case,
                    policy,
                    label,
                    what,
                    target_text,
                    rate(hits["step_gate"], d),
                    rate(hits["block_gate"], d),
                    rate(hits["mw"], d),
                    sum(used) / d,
                    min(used),
                    max(used),
                    rate(resolved, d),
                )
            )
    print()
    for shape, text in NOISE_SHAPES.items():
        print("- %s: %s" % (shape, text))
    print()
    if misses:
        print("Block gate (b) off its target (point estimate):")
        for line in misses:
            print("- " + line)
    else:
        print("Block gate (b) meets every target (point estimate).")
    print()
    print("Elapsed (block table): %.1f s" % elapsed)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--draws", type=int, default=200, help="simulated before/after pairs per row (default 200)")
    parser.add_argument(
        "--block-draws",
        type=int,
        default=None,
        help="simulated hosts per block-noise row (default: half of --draws, as each costs a whole trial "
        "and a step-level judge)",
    )
    parser.add_argument("--seed", type=int, default=1, help="base seed of the simulation (default 1)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: all cores)")
    parser.add_argument("--only", choices=("iid", "blocks"), default=None, help="print one of the two tables only")
    args = parser.parse_args(argv)
    if args.block_draws is None:
        args.block_draws = max(1, args.draws // 2)
    if args.draws < 1 or args.block_draws < 1:
        parser.error("--draws and --block-draws must be at least 1")

    started = time.perf_counter()
    print("Command: python3 %s" % " ".join([os.path.relpath(__file__)] + (argv if argv is not None else sys.argv[1:])))
    pool = multiprocessing.Pool(args.jobs) if args.jobs > 1 else None
    try:
        if args.only != "blocks":
            print()
            iid_table(pool, args)
        if args.only != "iid":
            print()
            block_table(pool, args)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    print()
    print("Elapsed: %.1f s" % (time.perf_counter() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
