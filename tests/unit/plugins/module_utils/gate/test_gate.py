# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate on distributions whose right answer is known (seeded draws, no mocks)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import random
from statistics import NormalDist

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.gate import steps as _gate
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import judge, needed_samples, order_stat_ci
from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import quantile

INV = NormalDist().inv_cdf


def lognormal(seed, n, median=10.0, sigma=0.2):
    rng = random.Random(seed)
    return [median * rng.lognormvariate(0.0, sigma) for _unused in range(n)]


def tail_inflated(seed, n, median=10.0, sigma=0.2):
    """Top 2% stretched: x1 at the 98th percentile, x1.25 at the 99th; the median is untouched."""
    rng = random.Random(seed)
    out = []
    for _unused in range(n):
        u = min(max(rng.random(), 1e-12), 1 - 1e-12)
        x = median * math.exp(sigma * INV(u))
        if u > 0.98:
            x *= 1.0 + 25.0 * (u - 0.98)
        out.append(x)
    return out


def field_case(seed, n):
    """Baseline p99 ~18 ms; after: body faster, +8% throughput, 1.5% of steps at ~203 ms."""
    rng = random.Random(seed)
    sigma = math.log(18.0 / 12.0) / INV(0.99)
    before = [12.0 * rng.lognormvariate(0.0, sigma) for _unused in range(n)]
    base_mean = 12.0 * math.exp(sigma**2 / 2)
    scale = ((base_mean / 1.08 - 0.015 * 203.0) / 0.985) / base_mean
    after = [
        203.0 * rng.lognormvariate(0.0, 0.02) if rng.random() < 0.015 else scale * 12.0 * rng.lognormvariate(0.0, sigma)
        for _unused in range(n)
    ]
    return before, after


# ------------------------------------------------------------------ known answers


@pytest.mark.parametrize("n", [500, 2000])
def test_identical_lognormals_are_not_rolled_back(n):
    decisions = [judge(lognormal(2 * i, n), lognormal(2 * i + 1, n))["decision"] for i in range(12)]
    assert "rollback" not in decisions


def test_tail_only_regression_is_rolled_back():
    before, after = lognormal(11, 2000), tail_inflated(12, 2000)
    res = judge(before, after)
    assert res["decision"] == "rollback"
    assert res["verdicts"]["tail"] == "worse"
    # The median did not move: a median-only judge has nothing to see.
    assert res["verdicts"]["p50"] in ("same", "unknown")
    assert 0.97 < res["p50"]["ratio"] < 1.03
    assert res["reason"].startswith("rollback: ")
    assert "beyond the 5% tolerance" in res["reason"]


def test_field_report_spikes_are_rolled_back_despite_throughput_gain():
    before, after = field_case(3, 2000)
    res = judge(before, after)
    assert res["decision"] == "rollback"
    # Throughput rose (the spikes make its CI wide), yet the tail decides.
    assert res["verdicts"]["throughput"] != "worse"
    assert res["throughput"]["ratio"] > 1.0
    assert res["tail"]["before"] < 20.0
    assert res["tail"]["after"] > 190.0
    assert res["tail"]["ratio_ci"][0] > 5.0
    assert "although throughput rose" in res["reason"]
    assert "p99 rose" in res["reason"]


def test_clear_speed_up_is_kept_under_improve():
    before = lognormal(21, 2000)
    after = [x / 1.2 for x in lognormal(22, 2000)]
    res = judge(before, after, policy="improve")
    assert res["decision"] == "keep"
    assert res["verdicts"] == {"throughput": "better", "p50": "better", "tail": "better", "stalls": "same"}
    assert res["throughput"]["ci"][0] > 1.1


def test_noise_level_change_under_no_regression_is_kept_when_final():
    before = lognormal(31, 600)
    after = [x * 1.01 for x in lognormal(32, 600)]
    interim = judge(before, after, policy="no_regression")
    assert interim["decision"] in ("keep", "inconclusive")
    res = judge(before, after, policy="no_regression", final=True)
    assert res["decision"] == "keep"
    assert res["final"] is True


def test_inconclusive_under_improve_becomes_rollback_when_final():
    before, after = lognormal(41, 800), lognormal(42, 800)
    res = judge(before, after, policy="improve")
    assert res["decision"] == "inconclusive"
    assert res["decision"] == "inconclusive" and not res["final"]
    final = judge(before, after, policy="improve", final=True)
    assert final["decision"] == "rollback"
    assert "no significant improvement" in final["reason"]
    assert final["decision"] != "inconclusive"


def test_throughput_regression_is_rolled_back_under_both_policies():
    before = lognormal(51, 1000)
    after = [x * 1.15 for x in lognormal(52, 1000)]
    for policy in ("improve", "no_regression"):
        res = judge(before, after, policy=policy)
        assert res["decision"] == "rollback"
        assert res["verdicts"]["throughput"] == "worse"


def test_too_few_samples_is_inconclusive_with_needed_samples():
    res = judge(lognormal(61, 100), lognormal(62, 120))
    assert res["decision"] == "inconclusive"
    assert res["needed_samples"] == 368
    assert "p99 needs at least 368 samples per side, got 100" in res["reason"]
    assert res["tail"] is None
    assert res["p50"] is not None
    assert res["decision"] == "inconclusive" and not res["final"]
    assert judge(lognormal(61, 100), lognormal(62, 120), final=True)["decision"] == "rollback"
    assert judge(lognormal(61, 100), lognormal(62, 120), policy="no_regression", final=True)["decision"] == "keep"


def test_tiny_samples_still_answer():
    res = judge([10.0, 11.0], [12.0])
    assert res["decision"] == "inconclusive"
    assert res["needed_samples"] == 368
    assert res["throughput"] is None


def test_p999_reported_only_when_enough_samples():
    assert judge(lognormal(71, 2000), lognormal(72, 2000))["p999"] is None
    res = judge(lognormal(73, 3700), lognormal(74, 3700))
    assert res["p999"]["quantile"] == 0.999
    assert res["p999"]["decides"] is False
    assert res["p999"]["before_ci"][0] <= res["p999"]["before"] <= res["p999"]["before_ci"][1]


def test_given_throughput_is_used():
    before = {"samples_ms": lognormal(81, 500), "throughput": 1000.0}
    after = {"samples_ms": lognormal(82, 500), "throughput": 1100.0}
    res = judge(before, after)
    assert res["throughput"]["source"] == "given"
    assert res["throughput"]["ratio"] == pytest.approx(1.1)
    assert res["throughput"]["ci"][0] < 1.1 < res["throughput"]["ci"][1]


def test_same_input_gives_identical_result():
    before, after = field_case(7, 1000)
    assert judge(before, after) == judge(list(before), list(after))


def test_result_depends_on_values_not_their_order():
    before, after = lognormal(111, 800), lognormal(112, 800)
    shuffled = list(after)
    random.Random(0).shuffle(shuffled)
    assert judge(before, after) == judge(before, shuffled)


def test_explicit_seed_is_honoured():
    """One seed gives one bootstrap; another seed draws other resamples (the seed is not ignored)."""
    before, after = lognormal(121, 500), lognormal(122, 500)
    five, six = judge(before, after, seed=5), judge(before, after, seed=6)
    assert judge(before, after, seed=5) == five
    assert five["p50"]["ratio_ci"] != six["p50"]["ratio_ci"]
    assert five["tail"]["ratio_ci"] != six["tail"]["ratio_ci"]


def test_result_is_strict_json():
    res = judge(*field_case(9, 4000))
    text = json.dumps(res, allow_nan=False, sort_keys=True)
    assert json.loads(text) == res
    assert set(res) >= {
        "decision",
        "reason",
        "policy",
        "final",
        "n_before",
        "n_after",
        "throughput",
        "p50",
        "tail",
        "p999",
        "needed_samples",
        "verdicts",
    }
    assert set(res["tail"]) >= {"quantile", "before", "after", "before_ci", "after_ci", "ratio", "ratio_ci"}


def test_speed_n2000_1000_resamples():
    import time

    before, after = lognormal(131, 2000), lognormal(132, 2000)
    t0 = time.perf_counter()
    judge(before, after, resamples=1000)
    assert time.perf_counter() - t0 < 1.0


# ------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"before": []}, "before is empty"),
        ({"after": []}, "after is empty"),
        ({"before": [1.0, "x"]}, r"before\[1\] is not a number"),
        ({"after": [1.0, -2.0]}, r"after\[1\] is negative"),
        ({"before": [1.0, float("nan")]}, r"before\[1\] is NaN"),
        ({"after": [1.0, float("inf")]}, r"after\[1\] is infinite"),
        ({"before": [True, 1.0]}, r"before\[0\] is not a number"),
        ({"before": "10,11"}, "before must be a list"),
        ({"before": {"throughput": 5}}, "before must be a list"),
        ({"after": {"samples_ms": [1.0], "throughput": -1}}, "after.throughput must be a positive number"),
        ({"after": {"samples_ms": []}}, "after.samples_ms is empty"),
        ({"policy": "fast"}, "policy must be one of improve, no_regression"),
        ({"tail_tolerance": 1.5}, "tail_tolerance must be in"),
        ({"tail_tolerance": -0.1}, "tail_tolerance must be in"),
        ({"tail_quantile": 0.3}, "tail_quantile must be in"),
        ({"tail_quantile": 1.0}, "tail_quantile must be in"),
        ({"min_gain": "2%"}, "min_gain must be a number"),
        ({"confidence": 1.0}, "confidence must be in"),
        ({"final": "yes"}, "final must be a boolean"),
        ({"resamples": 10}, "resamples must be an integer"),
    ],
)
def test_bad_input_names_the_argument(kwargs, message):
    args = {"before": [10.0, 11.0, 12.0], "after": [10.0, 11.0, 12.0]}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        judge(**args)


# ---------------------------------------------------------------- statistics


def test_needed_samples():
    assert needed_samples(0.99) == 368
    assert needed_samples(0.999) == 3688
    assert needed_samples(0.5) == 6
    assert needed_samples(0.99, 0.99) == 528
    # The definition: q**n <= alpha/2 at the answer, not one sample earlier.
    assert 0.99**368 <= 0.025 < 0.99**367


def test_order_stat_ci_covers_the_true_quantile():
    hits = 0
    for i in range(200):
        rng = random.Random(1000 + i)
        xs = sorted(rng.random() for _unused in range(400))
        lo, hi = order_stat_ci(xs, 0.9)
        hits += lo <= 0.9 <= hi
    assert 0.92 * 200 <= hits <= 200
    assert order_stat_ci(sorted(range(1, 100)), 0.99) is None


def test_bootstrap_quantile_matches_brute_force_resampling():
    rng = random.Random(5)
    xs = sorted(rng.lognormvariate(0, 0.3) for _unused in range(200))
    exact = sorted(_gate._boot_quantile(random.Random(6), xs, 0.95, 6000))
    brute = sorted(quantile(sorted(rng.choices(xs, k=200)), 0.95) for _unused in range(6000))
    for p in (0.05, 0.5, 0.95):
        assert quantile(exact, p) == pytest.approx(quantile(brute, p), rel=0.02)


def test_bootstrap_tail_mean_matches_brute_force_resampling():
    rng = random.Random(7)
    xs = sorted(rng.lognormvariate(0, 0.3) for _unused in range(300))
    exact = sorted(_gate._boot_tail_mean(random.Random(8), xs, 0.97, 6000))
    brute = sorted(_gate.tail_mean(sorted(rng.choices(xs, k=300)), 0.97) for _unused in range(6000))
    for p in (0.05, 0.5, 0.95):
        assert quantile(exact, p) == pytest.approx(quantile(brute, p), rel=0.02)


# ------------------------------------------------------------ measuring helpers


def test_the_seed_case_in_flat_form_is_a_rollback_on_its_stalls():
    """Two flat lists of 500 steps, 8 stalls of 200+ ms after the change (p99 about x11): the
    stall-rate test catches what one block per side supports, and the reason says that the
    noise between runs is unknown and how to give blocks."""
    before, after = field_case(7, 500)
    rng = random.Random(9)
    after = [x for x in after if x < 100.0][:492] + [203.0 + rng.random() for _unused in range(8)]
    rng.shuffle(after)
    res = judge(before, after, policy="no_regression")
    assert res["decision"] == "rollback"
    assert res["stalls"]["count_before"] == 0 and res["stalls"]["count_after"] == 8
    assert res["stalls"]["p_value"] < 0.01 and res["verdicts"]["stalls"] == "worse"
    assert res["reason"].startswith("rollback: more steps stalled: 0 of 500 -> 8 of 500 steps slower than")
    assert res["tail"]["ratio"] > 10.0  # the p99 the field report saw, which one block alone cannot pin down
    assert res["reason"].endswith("give blocks (a list of lists of step ms, one per run) to judge over runs]")
    assert res["between_run_noise"] == "unknown" and res["method"] == "steps"


def test_a_few_more_stalls_within_the_noise_are_no_verdict():
    before = lognormal(31, 500)
    after = lognormal(32, 500)
    res = judge(before, after, policy="no_regression", final=True)
    assert res["verdicts"]["stalls"] in ("same", "unknown") and res["decision"] == "keep"
