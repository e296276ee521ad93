# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The block-aware gate on block noise whose right answer is known (seeded draws), and its sequential trial."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import random

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.gate import calibration
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import registry as _workloads
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.blocks import arm_effect, judge_blocks
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import (
    BUDGET,
    DEFAULTS,
    GateSettingError,
    check_settings,
    planned_looks,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import SETTINGS as SETTINGS_TABLE
from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import t_ppf
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import (
    Trial,
    conditional_power,
    futility,
    resolve_workloads,
    unmeasurable_reason,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import judge

SETTINGS = check_settings({})


def block(rng, level, n=400, sigma=0.02):
    return [level * math.exp(rng.gauss(0.0, sigma)) for _unused in range(n)]


def blocks(seed, count, shift_sd=0.03, factor=1.0, drift=0.0, start=0):
    """Blocks whose level moves from block to block (the real noise shape), optional drift."""
    rng = random.Random(seed)
    return [block(rng, factor * math.exp(rng.gauss(0.0, shift_sd)) * (1.0 + drift * (start + i))) for i in range(count)]


class FakeHost:
    """A host whose blocks have a level shift each (sd ``shift_sd``), drift, and a layer effect."""

    def __init__(self, seed, effect=1.0, stall=0.0, shift_sd=0.03, drift=0.0):
        self.rng = random.Random(seed)
        self.on = True
        self.effect, self.stall, self.shift_sd, self.drift = effect, stall, shift_sd, drift
        self.t = 0
        self.toggles = []

    def set_layer(self, on):
        assert on != self.on, "the trial toggled to the state the layer already had"
        self.on = on
        self.toggles.append(on)

    def measure(self, _workload):
        self.t += 1
        level = math.exp(self.rng.gauss(0.0, self.shift_sd)) * (1.0 + self.drift * self.t)
        xs = block(self.rng, level * (self.effect if self.on else 1.0))
        if self.on and self.stall:
            top = sorted(xs)[int(0.99 * (len(xs) - 1))]
            for i in self.rng.sample(range(len(xs)), int(len(xs) * self.stall)):
                xs[i] = 3.0 * top
        return {"samples_ms": xs}


def run_trial(host, policy, settings=None, workloads=("w",), **options):
    clock = iter(range(10**6)).__next__
    return Trial(list(workloads), host.set_layer, host.measure, policy, settings or SETTINGS, clock, **options).run()


# ------------------------------------------------------------------------ statistics


@pytest.mark.parametrize("df,expected", [(1, 12.7062047), (3, 3.1824463), (5, 2.5705818), (30, 2.0422725)])
def test_t_quantiles_match_tables(df, expected):
    assert t_ppf(0.975, df) == pytest.approx(expected, rel=1e-6)
    assert t_ppf(0.025, df) == pytest.approx(-expected, rel=1e-6)


def test_arm_effect_fits_linear_drift_out():
    """A B B A blocks on a strong linear trend: the fitted effect is the true one, not the drift."""
    order = ["on", "off", "off", "on"] * 2
    ys = {"on": [], "off": []}
    at = {"on": [], "off": []}
    rng = random.Random(1)
    for t, arm in enumerate(order):
        ys[arm].append(0.05 * t + (0.10 if arm == "on" else 0.0) + rng.gauss(0, 0.002))
        at[arm].append(t)
    eff = arm_effect(ys["off"], ys["on"], at["off"], at["on"])
    assert eff["trend"] is True
    assert eff["lo"] < 0.10 < eff["hi"]
    assert eff["hi"] - eff["lo"] < 0.02
    plain = arm_effect(ys["off"], ys["on"])
    assert plain["hi"] - plain["lo"] > 5 * (eff["hi"] - eff["lo"])


def test_arm_effect_needs_two_blocks_per_arm():
    assert arm_effect([0.1], [0.2, 0.3]) is None


def test_block_noise_is_not_taken_for_an_effect():
    """Pooling steps calls a block-level A/A difference significant; the block gate does not."""
    before, after = blocks(3, 4), blocks(4, 4)
    pooled = judge([x for b in before for x in b], [x for b in after for x in b], policy="no_regression", final=True)
    by_block = judge(before, after, policy="no_regression", final=True)
    assert by_block["method"] == "blocks"
    assert by_block["verdicts"]["throughput"] != "worse"
    assert by_block["throughput"]["resolution"] > 0.02
    # the pooled CI is an order of magnitude narrower than the block-to-block noise
    pooled_width = pooled["throughput"]["ci"][1] - pooled["throughput"]["ci"][0]
    block_width = by_block["throughput"]["ratio_ci"][1] - by_block["throughput"]["ratio_ci"][0]
    assert block_width > 5 * pooled_width


def test_unknown_tail_does_not_blind_a_throughput_collapse():
    rng = random.Random(7)
    before = [block(rng, math.exp(rng.gauss(0, 0.02))) for _i in range(4)]
    after = []
    for _i in range(4):
        xs = block(rng, 5.0 * math.exp(rng.gauss(0, 0.02)))
        # wildly varying stalls make the tail unresolvable
        for j in rng.sample(range(400), rng.choice([0, 8])):
            xs[j] *= rng.choice([3.0, 30.0])
        after.append(xs)
    res = judge_blocks(before, after, policy="no_regression", final=True)
    assert res["decision"] == "rollback"
    assert res["verdicts"]["throughput"] == "worse"
    assert "throughput fell" in res["reason"]


def test_unknown_dimensions_name_what_they_could_have_seen():
    res = judge_blocks(blocks(11, 4, shift_sd=0.2), blocks(12, 4, shift_sd=0.2), policy="no_regression", final=True)
    assert res["decision"] == "keep"
    assert res["unresolved"]
    assert any("within block-to-block noise, ±" in u for u in res["unresolved"])
    assert "no regression shown" in res["reason"]


def test_stalls_are_judged_in_points():
    rng = random.Random(5)
    before = [block(rng, 1.0) for _i in range(4)]
    after = []
    for _i in range(4):
        xs = block(rng, 1.0)
        for j in rng.sample(range(400), 8):
            xs[j] = 4.0
        after.append(xs)
    res = judge_blocks(before, after, policy="no_regression", final=True)
    assert res["stalls"]["after"] == pytest.approx(0.02)
    assert res["stalls"]["verdict"] == "worse"
    assert res["verdicts"]["tail"] == "worse"
    assert res["decision"] == "rollback"
    assert res["p99"]["decides"] is False


def test_result_is_strict_json():
    res = judge_blocks(blocks(1, 4), blocks(2, 4), final=True)
    json.loads(json.dumps(res, allow_nan=False))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"before": [[1.0, 2.0]], "after": [1.0, 2.0]}, "both be blocks"),
        ({"before": [[1.0, -2.0]], "after": [[1.0]]}, r"before\[0\]\[1\] must be a positive"),
        ({"before": [[]], "after": [[1.0]]}, r"before\[0\] must be a non-empty list"),
        ({"before": {"blocks": [[1.0], [2.0]], "at": [1]}, "after": [[1.0]]}, "before.at must be a list"),
        ({"before": [[1.0]], "after": [[1.0]], "stall_factor": 0.5}, "stall_factor must be in"),
        ({"before": [[1.0]], "after": [[1.0]], "looks": 0}, "looks must be a positive integer"),
        ({"before": [[1.0]], "after": [[1.0]], "policy": "maybe"}, "policy must be one of"),
    ],
)
def test_bad_block_input_names_the_argument(kwargs, message):
    args = {"policy": "improve"}
    args.update(kwargs)
    before, after = args.pop("before"), args.pop("after")
    with pytest.raises(ValueError, match=message):
        judge(before, after, **args)


# ------------------------------------------------------------------------ settings


@pytest.mark.parametrize(
    "settings,budget,workloads,message",
    [
        ({"tail_tolerance": 1.5}, {}, None, "stacktune_gate_tail_tolerance must be in"),
        ({"confidence": "high"}, {}, None, "stacktune_gate_confidence must be a number"),
        ({"bogus": 1}, {}, None, "stacktune_gate_bogus"),
        ({}, {"min_blocks": 1}, None, r"stacktune_gate_budget.min_blocks must be an integer in 2..50"),
        ({}, {"min_blocks": 6, "max_blocks": 4}, None, "max_blocks .4. must be at least"),
        ({}, {"blocks": 4}, None, "stacktune_gate_budget: unknown key"),
        ({}, {"max_seconds": True}, None, "stacktune_gate_budget.max_seconds"),
        ({}, {}, {"nccl": ["allreduc"]}, "stacktune_gate_workloads.nccl: unknown workload"),
        ({}, {}, {"nccl": "allreduce"}, "stacktune_gate_workloads.nccl must be a list"),
        # a key of the budget among the settings names the budget's variable, whatever its value
        ({"max_blocks": 1}, {}, None, r"give stacktune_gate_budget\.max_blocks$"),
        ({"max_blocks": 8}, None, None, r"give stacktune_gate_budget\.max_blocks$"),
        ({}, {"max_windows": 1}, None, r"stacktune_gate_budget\.max_windows must be an integer in 2\.\.1000"),
        ({}, [4], None, "stacktune_gate_budget must be a dict"),
    ],
)
def test_bad_settings_name_the_variable(settings, budget, workloads, message):
    with pytest.raises(GateSettingError, match=message):
        check_settings(settings, budget, workloads)


def test_settings_fill_defaults_and_accept_template_strings():
    gate = check_settings({"tail_tolerance": "0.1"}, {"max_blocks": "12"})
    assert gate.settings["tail_tolerance"] == 0.1
    assert gate.budget["max_blocks"] == 12
    assert gate.budget["min_blocks"] == 4
    # the settings and the budget stay apart: each holds its own table's keys, no more
    assert set(gate.settings) == set(SETTINGS_TABLE) and set(gate.budget) == set(BUDGET)
    assert check_settings({}) == (DEFAULTS, {k: row.default for k, row in BUDGET.items()})
    assert planned_looks(4, 8) == 3
    assert planned_looks(4, 4) == 1


def test_workloads_resolve_per_host():
    table = ["train_step", "dataloader", "cpu_dataloader", "shm_pingpong"]
    assert resolve_workloads(table, 1) == ["train_step", "dataloader"]
    assert resolve_workloads(table, 0) == ["cpu_dataloader", "shm_pingpong"]
    assert resolve_workloads(["allreduce"], 1) == []
    assert resolve_workloads(["h2d_pinned", "allreduce"], 2) == ["h2d_pinned", "allreduce"]
    assert resolve_workloads(["gemm"], 0) == []
    assert resolve_workloads([], 8, override="command") == ["command"]
    assert resolve_workloads(["gemm"], 1, override="auto") == ["gemm"]


def test_the_file_workload_runs_only_with_a_data_dir_and_on_any_host():
    assert resolve_workloads(["file_dataloader"], 8) == []
    assert resolve_workloads(["file_dataloader"], 0) == []
    assert resolve_workloads(["file_dataloader"], 8, data_dir="/data/x") == ["file_dataloader"]
    assert resolve_workloads(["file_dataloader"], 0, data_dir="/data/x") == ["file_dataloader"]
    assert resolve_workloads(["cpu_dataloader", "file_dataloader"], 0) == ["cpu_dataloader"]
    why = unmeasurable_reason(["file_dataloader"])
    assert why.startswith("none of the workloads that can see this layer (file_dataloader) runs here; ")
    assert "stacktune_bench_data_dir, which is not set" in why
    assert unmeasurable_reason(["allreduce"], "/data/x") == (
        "none of the workloads that can see this layer (allreduce) runs here"
    )
    assert unmeasurable_reason([]) == "none of the workloads that can see this layer (none declared) runs here"


# ------------------------------------------------------------------------ the trial


def test_trial_order_is_balanced_and_ends_with_the_layer_on():
    host = FakeHost(1, effect=1.0)
    res = run_trial(host, "no_regression")
    assert res["order"][:8] == ["on", "off", "off", "on", "on", "off", "off", "on"]
    assert res["blocks"]["with"] == res["blocks"]["without"] >= 4
    assert host.on is True
    assert res["toggles"] == len(host.toggles)


def test_trial_stops_early_when_resolved_and_spends_the_budget_otherwise():
    fast = run_trial(FakeHost(2, effect=0.5), "improve")
    assert fast["decision"] == "keep" and fast["resolved"]
    assert fast["blocks"]["with"] == 4
    noisy = run_trial(FakeHost(3, effect=1.0, shift_sd=0.3), "no_regression", stop_early=False)
    assert noisy["blocks"]["with"] == 8
    assert noisy["decision"] == "keep"
    assert noisy["looks"] == 3


def test_trial_that_cannot_resolve_stops_at_the_first_look_and_says_why():
    """30% between blocks: 8 per arm cannot resolve 2%; a lean the budget could not show is no reason to go on."""
    noisy = run_trial(FakeHost(4, effect=1.0, shift_sd=0.3), "no_regression")
    assert noisy["blocks"]["with"] == 4
    assert noisy["decision"] == "keep"
    assert "cannot resolve the throughput to 2.0%" in noisy["futility"]["w"]
    assert "stopped early after 4+4 blocks" in noisy["reason"]


def test_trial_respects_the_seconds_budget():
    """10 s per block, 100 s allowed: the trial stops before a quad would overrun."""
    settings = check_settings({}, {"max_seconds": 100})
    host = FakeHost(4, shift_sd=0.3)
    now = {"t": 0.0}

    def measure(w):
        now["t"] += 10.0
        return host.measure(w)

    res = Trial(["w"], host.set_layer, measure, "no_regression", settings, lambda: now["t"]).run()
    assert res["seconds"] <= 100
    assert res["blocks"]["with"] == 4
    assert res["final"] is True


def test_void_blocks_are_left_out_and_reported():
    host = FakeHost(5)
    calls = {"n": 0}

    def measure(w):
        calls["n"] += 1
        out = host.measure(w)
        if calls["n"] == 2:
            out = dict(out, void=True, reason="clocks were held down")
        return out

    res = Trial(["w"], host.set_layer, measure, "no_regression", SETTINGS, iter(range(10**6)).__next__).run()
    assert res["void_blocks"] == [{"workload": "w", "arm": "off", "position": 2, "reason": "clocks were held down"}]
    assert res["blocks_before"] == res["blocks"]["without"] - 1


def test_any_workload_worse_rolls_the_layer_back():
    host = FakeHost(6)

    def measure(w):
        out = host.measure(w)
        if w == "b" and host.on:
            out = {"samples_ms": [x * 1.3 for x in out["samples_ms"]]}
        return out

    res = Trial(["a", "b"], host.set_layer, measure, "improve", SETTINGS, iter(range(10**6)).__next__).run()
    assert res["decision"] == "rollback"
    assert res["workload"] == "b"
    assert set(res["workloads"]) == {"a", "b"}
    assert res["reason"].startswith("rollback, judged on a and b. b: rollback:")


@pytest.mark.parametrize(
    "case,policy,effect,stall,want,at_least",
    [
        ("A/A kept under improve", "improve", 1.0, 0.0, "keep", None),
        ("A/A rolled back under no_regression", "no_regression", 1.0, 0.0, "rollback", None),
        ("15% slower rolled back", "no_regression", 1.15, 0.0, "rollback", 0.95),
        ("1.5% stalls rolled back", "no_regression", 1.0, 0.015, "rollback", 0.90),
        ("15% faster kept", "improve", 0.85, 0.0, "keep", 0.90),
    ],
)
def test_error_rates_on_block_noise(case, policy, effect, stall, want, at_least):
    """Synthetic block noise (3% level shift per block, drift): the rates the gate promises."""
    runs = 60
    hits = sum(
        run_trial(FakeHost(1000 + i, effect=effect, stall=stall, drift=0.002), policy)["decision"] == want
        for i in range(runs)
    )
    if at_least is None:
        assert hits / runs <= 0.05, case
    else:
        assert hits / runs >= at_least, case


def test_calibrate_reports_noise_per_dimension():
    host = FakeHost(9, shift_sd=0.05)
    now = [0.0]

    def measure(w):  # a block costs its steps and 0.05 s of start-up on the clock calibrate reads
        out = host.measure(w)
        now[0] += 0.05 + sum(out["samples_ms"]) / 1000.0
        return out

    out = calibration.calibrate(["w"], measure, SETTINGS, 12, lambda: now[0])
    entry = out["workloads"]["w"]
    assert entry["blocks"] == 12
    tp = entry["dimensions"]["throughput"]
    assert 0.02 < tp["spread_between_blocks"] < 0.09
    assert tp["resolvable_at_budget"] < tp["resolvable_now"] * 1.01
    assert out["table"][0].split()[:3] == ["workload", "dimension", "level"]
    # 5% between blocks against steps of about 2% each: shorter blocks, and the line to use them
    steps = entry["steps"]
    assert steps["steps"] < steps["measured_with"] and "shorter blocks" in steps["why"]
    assert any(line.strip().startswith("steps per block: %d " % steps["steps"]) for line in out["table"])
    assert out["table"][-1] == (
        'to measure with these steps: -e \'{"stacktune_bench_steps_by_workload": {"w": %d}}\'' % steps["steps"]
    )


# ------------------------------------------------------------------------ steps per block


def _blocks_with(rng, n, steps, between_sd, inside_sd, level=10.0):
    out = []
    for _b in range(n):
        block_level = level * math.exp(rng.gauss(0.0, between_sd))
        out.append([block_level * math.exp(rng.gauss(0.0, inside_sd)) for _s in range(steps)])
    return out


def test_steps_for_noise_shortens_blocks_that_differ_more_than_their_steps():
    rng = random.Random(5)
    blocks = _blocks_with(rng, 10, 400, between_sd=0.08, inside_sd=0.02)
    got = calibration.steps_for_noise(blocks, startup_s=0.5, steps=400)
    # floor: half the steps measured (a shorter block is a prediction, checked by calibrating again)
    assert got["steps"] == 200
    assert got["unbounded"] < got["steps"]
    again = calibration.steps_for_noise([b[:200] for b in blocks], startup_s=0.5, steps=200)
    assert again["steps"] == 100  # half again (the start-up's worth, about 50 steps, is further down)
    assert "shorter blocks" in got["why"]
    assert got["between_sd"] == pytest.approx(0.08, rel=0.5)


def test_steps_for_noise_lengthens_blocks_that_hardly_differ():
    rng = random.Random(6)
    blocks = _blocks_with(rng, 10, 400, between_sd=0.0, inside_sd=0.05)
    got = calibration.steps_for_noise(blocks, startup_s=2.0, steps=400)
    assert got["steps"] == pytest.approx(6.0 / (got["step_ms"] / 1000.0), abs=1)  # ceiling: 3x the start-up
    assert "longer blocks" in got["why"]


def test_steps_for_noise_balances_the_two_noises_between_its_bounds():
    rng = random.Random(7)
    blocks = _blocks_with(rng, 12, 400, between_sd=0.004, inside_sd=0.05)
    got = calibration.steps_for_noise(blocks, startup_s=1.0, steps=400)
    # between half the steps measured (200) and three times the start-up's worth (about 300)
    assert got["steps"] == max(200, min(300, got["unbounded"]))


def test_steps_for_noise_needs_four_blocks():
    assert calibration.steps_for_noise([[1.0] * 100] * 3, 1.0, 100) is None


@pytest.mark.parametrize(
    "workload,shorter", [("dataloader", True), ("h2d_pageable", True), ("train_step", True), ("gemm", False)]
)
def test_steps_for_noise_on_recorded_h200_blocks(workload, shorter):
    """Real blocks (tests/unit/fixtures/blocks, recorded on two H200): DataLoader, pageable
    copies and training steps differ block to block more than step to step; GEMM blocks
    hardly differ."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "blocks", "h200x2_%s.json" % workload)
    with open(path) as handle:
        rec = json.load(handle)
    blocks = [b["samples_ms"] for b in rec["arms"]["base"]["blocks"]]
    got = calibration.steps_for_noise(blocks, startup_s=1.0, steps=len(blocks[0]))
    assert (got["steps"] < len(blocks[0])) is shorter, got
    # the defaults follow where it points (never below 200: 80-step DataLoader blocks resolved
    # less per second on the one-H200 host)
    default = _workloads.DEFAULT_STEPS[workload]
    assert (200 <= default <= 400) if shorter else default > 400


# ------------------------------------------------------------------ conditional power


@pytest.mark.parametrize(
    "lean, at_budget, band, want",
    [
        (0.05, 0.05, 0.02, 0.5),  # the final estimate sits on the line half the time
        (0.20, 0.05, 0.02, 1.0),
        (0.0, 0.05, 0.02, 0.0),
        (-0.03, 0.05, 0.02, 0.0),
        (0.05, 0.02, 0.05, 0.5),  # the tolerance is the line when it is wider
    ],
)
def test_conditional_power(lean, at_budget, band, want):
    assert conditional_power(lean, at_budget, band, 2.5, 4, 8) == pytest.approx(want, abs=1e-3)


def test_conditional_power_at_the_last_look_is_what_the_estimate_shows():
    assert conditional_power(0.06, 0.05, 0.02, 2.5, 8, 8) == 1.0
    assert conditional_power(0.04, 0.05, 0.02, 2.5, 8, 8) == 0.0


def dim(ratio, half, df=5, tolerance=0.02):
    return {"verdict": "unknown", "ratio": ratio, "resolution": half, "df": df, "tolerance": tolerance}


def look(**dims):
    res = {"resolved": False, "blocks_before": 4}
    res.update(dims)
    return res


def test_a_bimodal_median_leaning_the_wrong_way_keeps_no_trial_going():
    """The memory layer on one H200 (docs/benchmarks.md): its DataLoader's median step is 0.9 ms
    or 40-200 ms, so the median leans +62% with +-261% of noise; throughput leans -2%. Neither
    is a regression the rest of the budget could show: the trial stops at its first look."""
    res = look(
        throughput=dim(0.98, 0.12),
        p50=dim(1.625, 2.61, tolerance=0.02),
        tail=dim(1.045, 0.30, tolerance=0.05),
        stalls={"verdict": "unknown", "difference": 0.049, "resolution": 0.30, "df": 5, "tolerance": 0.005},
    )
    why = futility(res, "no_regression", check_settings({}, {}), 4)
    assert why is not None and why.startswith("cannot resolve the throughput to 2.0%")
    # what the median would need is beyond any budget, and said so without a seven-digit count
    assert "the median step to 2.0% (±261.0% now" in why and "over 10000 blocks per arm would be needed" in why


def test_a_lean_the_budget_would_show_keeps_the_trial_going():
    # throughput 8% down with +-6% now: 8 blocks per arm would likely show it
    res = look(throughput=dim(0.92, 0.06), p50=dim(1.0, 0.01), tail=dim(1.0, 0.01, tolerance=0.05))
    assert futility(res, "no_regression", check_settings({}, {}), 4) is None
    # under improve a gain like that keeps it going too; no lean either way stops it
    gain = look(throughput=dim(1.08, 0.06), p50=dim(1.0, 0.06), tail=dim(1.0, 0.2, tolerance=0.05))
    assert futility(gain, "improve", check_settings({}, {}), 4) is None
    flat = look(throughput=dim(1.0, 0.06), p50=dim(1.0, 0.06), tail=dim(1.0, 0.2, tolerance=0.05))
    assert futility(flat, "improve", check_settings({}, {}), 4).startswith("no improvement of the 2.0%")
