# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The block gate replaying real noise: blocks recorded on two H200 (no GPU is needed here).

The fixtures under tests/unit/fixtures/blocks/ were recorded on the ``nvidia-h200-x2`` host
with ``tests/gpu/record-noise.sh`` (benchmarks/record_blocks.py): identical blocks of every
built-in GPU workload, each block one process run, and all-reduce blocks with two real NCCL
changes interleaved with the unchanged ones (README-recording.txt, SUMMARY.md). Here the
gate's sequential trial draws those real blocks in shuffled order, with the effect of a
change laid on the blocks measured with it, and the error rates are counted.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import random

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils._blocks import Trial, check_settings

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "blocks")
DRAWS = 200
# workloads some layer is measured on (roles/stacktune/defaults: stacktune_gate_workloads)
GATED = ("gemm", "h2d_pinned", "allreduce", "dataloader", "train_step")


def recorded(workload, arm="base"):
    with open(os.path.join(FIXTURES, "h200x2_%s.json" % workload)) as handle:
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


def rate(blocks, policy, want, **kwargs):
    return sum(replay(blocks, policy, seed=i, **kwargs)["decision"] == want for i in range(DRAWS)) / float(DRAWS)


@pytest.mark.parametrize("workload", GATED)
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
    assert any(u.startswith("throughput: within block-to-block noise, +-") for u in res["unresolved"])


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
    assert "(noise +-" in result["summary"], result["summary"]
