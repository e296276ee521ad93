# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The block gate replaying real noise: blocks recorded on H200 hosts (no GPU is needed here).

The fixtures under tests/unit/fixtures/blocks/ were recorded on the ``nvidia-h200-x2`` host
with ``tests/gpu/record-noise.sh`` (benchmarks/record_blocks.py): identical blocks of every
built-in GPU workload, each block one process run, and all-reduce blocks with two real NCCL
changes interleaved with the unchanged ones (README-recording.txt, SUMMARY.md). Here the
gate's sequential trial draws those real blocks in shuffled order, with the effect of a
change laid on the blocks measured with it, and the error rates are counted. The h200x1_*
fixtures were recorded on the one-H200 host through the block runner, as the gate runs blocks
(``bash tests/gpu/gpu-host-run.sh record1``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import random

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import check_settings
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import Trial

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "blocks")
DRAWS = 200
# workloads some layer is measured on (roles/stacktune/defaults: stacktune_gate_workloads)
GATED = ("gemm", "h2d_pinned", "allreduce", "dataloader", "train_step")
# recorded on one H200 through the block runner, as the gate runs blocks (8 blocks each)
ONE_H200 = ("h200x1_dataloader_200", "h200x1_h2d_pinned_400", "h200x1_train_step_400")


def recorded(workload, arm="base"):
    name = workload if workload.startswith("h200x") else "h200x2_%s" % workload
    with open(os.path.join(FIXTURES, "%s.json" % name)) as handle:
        doc = json.load(handle)
    return doc, [b["samples_ms"] for b in doc["arms"][arm]["blocks"]]


def replay(blocks, policy, effect=1.0, stall=0.0, seed=0):
    """One trial over the recorded blocks in a shuffled order; the change acts on the 'with' arm."""
    rng = random.Random(seed)
    seq = list(blocks)
    rng.shuffle(seq)
    settings = check_settings({}, {"min_blocks": 4, "max_blocks": max(4, len(seq) // 2)})
    feed = iter(seq)
    state = {"on": True}

    def set_layer(on):
        state["on"] = on

    def measure(_workload):
        xs = list(next(feed))
        if state["on"]:
            xs = [x * effect for x in xs]
            if stall:
                top = sorted(xs)[int(0.99 * (len(xs) - 1))]
                for i in rng.sample(range(len(xs)), int(round(len(xs) * stall))):
                    xs[i] = 3.0 * top
        return {"samples_ms": xs}

    return Trial(["w"], set_layer, measure, policy, settings, iter(range(10**6)).__next__).run()


def replay_drawn(blocks, policy, effect=1.0, seed=0, max_blocks=8):
    """As replay, with blocks drawn with replacement so the gate can spend its whole budget
    (the one-H200 recordings hold 8 blocks: without replacement 4+4 would be all)."""
    rng = random.Random(seed)
    return replay([blocks[rng.randrange(len(blocks))] for _i in range(2 * max_blocks)], policy, effect, 0.0, seed)


def rate(blocks, policy, want, **kwargs):
    return sum(replay(blocks, policy, seed=i, **kwargs)["decision"] == want for i in range(DRAWS)) / float(DRAWS)


@pytest.mark.parametrize("workload", GATED + ONE_H200)
def test_identical_real_blocks_are_rarely_kept_or_rolled_back(workload):
    _doc, blocks = recorded(workload)
    assert len(blocks) >= 8
    assert rate(blocks, "improve", "keep") <= 0.05
    assert rate(blocks, "no_regression", "rollback") <= 0.05


@pytest.mark.parametrize("workload", GATED)
def test_real_blocks_15_percent_slower_are_rolled_back(workload):
    _doc, blocks = recorded(workload)
    assert rate(blocks, "no_regression", "rollback", effect=1.15) >= 0.95


@pytest.mark.parametrize("workload", GATED)
def test_real_blocks_with_stalls_are_rolled_back(workload):
    """1.5% of the steps stalled at 3x the block's p99: the mean barely moves, the tail does."""
    _doc, blocks = recorded(workload)
    assert rate(blocks, "no_regression", "rollback", stall=0.015) >= 0.90


@pytest.mark.parametrize("workload", GATED)
def test_real_blocks_15_percent_faster_are_kept(workload):
    _doc, blocks = recorded(workload)
    assert rate(blocks, "improve", "keep", effect=0.85) >= 0.90


def test_pageable_copies_are_too_noisy_for_15_percent_and_say_so():
    """Pageable host copies varied 19.7-26 ms (p50) between blocks: 5 blocks per arm cannot
    resolve 15%, and the gate says what it could have seen instead of guessing."""
    _doc, blocks = recorded("h2d_pageable")
    res = replay(blocks, "no_regression", effect=1.0, seed=1)
    assert res["decision"] == "keep"
    assert not res["resolved"]
    assert res["throughput"]["resolution"] > 0.10
    assert any(u.startswith("throughput: within block-to-block noise, ±") for u in res["unresolved"])


@pytest.mark.parametrize("arm,collapse", [("nch4", 0.40), ("p2poff", 0.15)])
def test_real_nccl_changes_are_rolled_back_for_what_they_do(arm, collapse):
    """NCCL_MAX_NCHANNELS=4 and NCCL_P2P_DISABLE=1, recorded interleaved with unchanged blocks."""
    doc, base = recorded("allreduce")
    _doc, changed = recorded("allreduce", arm)
    feeds = {True: iter(changed), False: iter(base)}
    state = {"on": True}

    def set_layer(on):
        state["on"] = on

    settings = check_settings({}, {"min_blocks": 4, "max_blocks": 4})
    res = Trial(
        ["allreduce"],
        set_layer,
        lambda _w: {"samples_ms": next(feeds[state["on"]])},
        "no_regression",
        settings,
        iter(range(10**6)).__next__,
    ).run()
    assert doc["arms"][arm]["env"]
    assert res["decision"] == "rollback"
    assert res["resolved"]
    assert res["verdicts"]["throughput"] == "worse"
    assert res["throughput"]["ratio"] < collapse
    assert "throughput fell" in res["reason"]
    assert res["blocks"] == {"with": 4, "without": 4}


@pytest.mark.parametrize(
    "effect,decision,cause",
    [
        (0.90, "keep", "keep: significant improvement in "),
        (1.12, "rollback", "rollback: "),
        (1.0, "rollback", "rollback: "),
    ],
)
def test_the_one_line_summary_names_the_decision_the_changes_and_the_blocks(effect, decision, cause):
    # On real GEMM blocks: what a run prints is one short line; the report keeps the intervals.
    _doc, blocks = recorded("gemm")
    result = replay(blocks, "improve", effect=effect, seed=3)
    assert result["decision"] == decision, result["reason"]
    summary = result["summary"]
    assert summary.startswith(cause), summary
    assert "CI" not in summary and len(summary) < 200, summary
    assert "throughput " in summary and "median step " in summary and "tail " in summary, summary
    assert "[%d+%d blocks]" % (result["blocks_before"], result["blocks_after"]) in summary, summary
    assert summary.endswith(" on w"), summary  # the replay names its workload w
    assert len(result["reason"]) > len(summary)


def test_a_change_within_the_noise_carries_its_noise_band_in_the_summary():
    # Real DataLoader blocks are too noisy to resolve a 1% change in 4+4 blocks: the point
    # estimates are printed with the band they sit in, so "keep" next to them does not read
    # as a measured effect.
    _doc, blocks = recorded("dataloader")
    result = replay(blocks[:8], "no_regression", effect=1.01, seed=5)
    unknown = [d for d in ("throughput", "p50", "tail") if result["verdicts"][d] == "unknown"]
    assert unknown, result["reason"]
    assert "(noise ±" in result["summary"], result["summary"]


# ---------------------------------------------------------------- a workload that fails
# Recorded on one H200 (tests/gpu/gpu-host-run.sh failures, docs/gpu-host.md): the user's own
# ResNet-18 training program with a 4-worker DataLoader, gated with 2+2 blocks of 70 steps.
# With the memory layer (/dev/shm shrunk to 128M) its first block failed with PyTorch's shm
# error; the block without the layer ran. The kernel and nccl layers were measured on it.
TRAIN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "h200-train-step-blocks.json")


def train_blocks():
    with open(TRAIN) as handle:
        return json.load(handle)["layers"]


def replay_in_order(layer, fail=None):
    """The trial over one layer's recorded blocks in the order they ran; ``fail(n, on)`` turns
    block n into the recorded failure of the memory layer."""
    rec = train_blocks()
    error = rec["memory"]["failures"]["command"]["on"][0]["error"]
    arms = {"on": iter(rec[layer]["with"]), "off": iter(rec[layer]["without"])}
    settings = check_settings({}, {"min_blocks": 2, "max_blocks": 2, "max_seconds": 400})
    state = {"on": True, "n": 0}

    def set_layer(on):
        state["on"] = on

    def measure(_workload):
        state["n"] += 1
        arm = "on" if state["on"] else "off"
        if fail and fail(state["n"], state["on"]):
            next(arms[arm], None)
            return {"failed": True, "failure": "exit", "error": error}
        return {"samples_ms": next(arms[arm])}

    return Trial(["command"], set_layer, measure, "no_regression", settings, iter(range(10**6)).__next__), rec


def test_the_recorded_shm_failure_is_a_rollback_with_its_cause():
    rec = train_blocks()["memory"]
    error = rec["failures"]["command"]["on"][0]["error"]
    feed = iter([{"failed": True, "failure": "exit", "error": error}, {"samples_ms": rec["without"][0]}])
    state = {"on": True}
    trial = Trial(
        ["command"],
        lambda on: state.update(on=on),
        lambda _w: next(feed),
        "no_regression",
        check_settings({}, {"min_blocks": 2, "max_blocks": 2, "max_seconds": 400}),
        iter(range(10**6)).__next__,
    )
    res = trial.run()
    assert res["decision"] == "rollback" and res["cause"] == "workload_fails"
    assert res["summary"] == "rollback: the workload fails with this layer: %s on command" % error
    assert res["order"] == rec["order"] == ["on", "off"]
    assert res["blocks"] == {"with": 1, "without": 1} and state["on"] is False


@pytest.mark.parametrize("layer", ["kernel", "nccl"])
def test_the_recorded_training_blocks_give_the_recorded_decisions(layer):
    trial, rec = replay_in_order(layer)
    res = trial.run()
    assert res["decision"] == rec[layer]["decision"] == "keep"
    assert res["summary"].split(" on command")[0] == rec[layer]["summary"].split(" on command")[0]


def test_a_flaky_run_of_the_recorded_training_is_said_to_be_flaky():
    # the third block (without the layer) fails: the workload fails without the layer too,
    # so a later failure with it is no verdict; the blocks that ran decide
    trial, _rec = replay_in_order("kernel", fail=lambda n, on: n == 3)
    res = trial.run()
    assert res["flaky"] is True and "the workload is flaky: command failed in 0 of 2" in res["summary"]
    assert "and 1 of 2 without (last: RuntimeError: unable to allocate shared memory(shm)" in res["summary"]


# ---------------------------------------------------------------- stop when it cannot decide


def dataloader_trial(seed, effect=1.0):
    """One trial of the DataLoader on its recorded blocks, drawn at random; the layer slows it by ``effect``."""
    _doc, blocks = recorded("dataloader")
    rng = random.Random(seed)
    feed = iter([blocks[rng.randrange(len(blocks))] for _i in range(40)])
    state = {"on": True}

    def measure(_w):
        xs = next(feed)
        return {"samples_ms": [x * effect for x in xs] if state["on"] else xs}

    settings = check_settings({}, {"min_blocks": 4, "max_blocks": 8})
    return Trial(
        ["dataloader"], lambda on: state.update(on=on), measure, "no_regression", settings, iter(range(10**6)).__next__
    ).run()


def test_a_budget_that_cannot_resolve_the_noisy_dataloader_stops_early_and_says_so():
    """A/A on the recorded DataLoader blocks (its throughput spreads about 10% between blocks):
    at the first looks the remaining budget is often shown unable to resolve 2%, and the trial
    stops with the policy's default for what it cannot resolve, naming what it would need."""
    stopped, spent, decisions = 0, [], []
    for seed in range(60):
        res = dataloader_trial(seed)
        decisions.append(res["decision"])
        spent.append(res["blocks"]["with"])
        if res.get("futility"):
            stopped += 1
            assert "stopped early after" in res["reason"] and "cannot resolve the " in res["summary"]
            assert "blocks per arm would be needed" in res["futility"]["dataloader"]
    assert stopped >= 10
    assert sum(spent) / len(spent) < 7.5  # fewer blocks than the 8 per arm without the stop
    assert decisions.count("rollback") <= 3  # and as few wrong rollbacks as before


def test_a_clear_regression_is_never_stopped_early():
    for seed in range(40):
        res = dataloader_trial(seed, effect=1.15)
        assert res["decision"] == "rollback" and not res.get("futility")


@pytest.mark.parametrize("workload", ONE_H200)
def test_one_h200_blocks_15_percent_slower_are_rolled_back_within_the_budget(workload):
    """At 4+4 blocks a 15% slowdown on train_step or DataLoader blocks of the one-H200 host
    (which differ by about 4.6% block to block) is shown in about 90% of draws; the gate goes
    on to at most 8 per arm and then shows it at least 95% of the time."""
    _doc, blocks = recorded(workload)
    got = [replay_drawn(blocks, "no_regression", effect=1.15, seed=i) for i in range(DRAWS)]
    assert sum(r["decision"] == "rollback" for r in got) / float(DRAWS) >= 0.95


def test_the_memory_layers_dataloader_a_a_stops_at_its_first_look_most_of_the_time():
    """The memory layer's workload on one H200 (DataLoader, 200 steps a block, blocks 4.6% apart):
    8 blocks per arm can never resolve 2%, so an A/A trial stops at its first look unless a lean
    the rest of the budget would show at least one time in five keeps it going. Measured
    before the conditional-power rule (estimate plus half the present half-width): 6.2 blocks
    per arm over 200 draws (docs/benchmarks.md)."""
    _doc, blocks = recorded("h200x1_dataloader_200")
    runs = [replay_drawn(blocks, "no_regression", seed=seed) for seed in range(60)]
    spent = [r["blocks"]["with"] for r in runs]
    assert sum(spent) / float(len(spent)) < 5.2
    assert sum(1 for r in runs if r.get("futility")) >= 45
    assert sum(1 for r in runs if r["decision"] == "rollback") <= 3
    for r in runs:
        if r.get("futility"):
            assert r["futility"]["w"].startswith("cannot resolve the ")


def real_change(off, on, policy, seed, max_blocks=8):
    """A trial whose arms are drawn (with replacement) from two recorded arms of one program."""
    _doc, before = recorded("h200x1_user_resnet18", off)
    _doc, after = recorded("h200x1_user_resnet18", on)
    rng = random.Random(seed)
    feed = {False: iter([before[rng.randrange(len(before))] for _i in range(40)])}
    feed[True] = iter([after[rng.randrange(len(after))] for _i in range(40)])
    state = {"on": True}
    settings = check_settings({}, {"min_blocks": 4, "max_blocks": max_blocks})
    return Trial(
        ["command"],
        lambda on_: state.update(on=on_),
        lambda _w: {"samples_ms": list(next(feed[state["on"]]))},
        policy,
        settings,
        iter(range(10**6)).__next__,
    ).run()


def test_a_user_program_whose_change_helps_the_mean_and_doubles_the_tail_is_rolled_back():
    """The founding case on real blocks: a user's ResNet-18 training program on one H200
    (tests/gpu/train_step_program.py, recorded as the gate's command workload runs it, 6 blocks
    of 120 steps per arm). Turning pinned memory on raises its throughput about 19% and halves
    its median step, and doubles its p99 (32-44 ms -> 64-82 ms): under ``improve`` the gate
    rolls it back for the tail; turning it off (throughput -19%) is rolled back under
    ``no_regression`` (its median step is shown worse at once)."""
    for seed in range(20):
        on = real_change("nopin", "base", "improve", seed)
        assert on["decision"] == "rollback", on["reason"]
        assert on["verdicts"]["tail"] == "worse" and on["throughput"]["ratio"] > 1.1
        off = real_change("base", "nopin", "no_regression", seed)
        assert off["decision"] == "rollback" and "worse" in off["verdicts"].values()
