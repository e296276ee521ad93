# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's error rates and the blocks it spends, replaying recorded real blocks.

The blocks recorded on one and two H200 (tests/unit/fixtures/blocks) are drawn at random into
the gate's sequential trial (4 to ``--max-blocks`` blocks per arm), with a change laid on the
blocks measured with it: none (A/A), 15% slower, 5% slower, 15% faster, 1.5% of the steps
stalled at 3x the p99; and, for a recording with a second arm (a user's ResNet-18 training
program with pinned memory on and off, one H200), the real change between the arms, each arm's
blocks drawn from its own recording. Every draw is judged four ways on the same blocks, side by side:

* the gate as tune.yml runs it (stops early when the budget cannot decide);
* the gate made to spend its whole budget (what the early stop saves is the difference in
  blocks per arm, at what cost in decisions);
* the earlier rule ("worse" only when the whole interval is beyond the tolerance), whole budget;
* a median-only Mann-Whitney U test (alpha 0.05) on the whole budget's steps, pooled.

Per workload and case it prints how often each decided the case's way, against the target:

    python3 benchmarks/gate_replay.py [--draws 200] [--max-blocks 8] [--workloads gemm,dataloader]

With ``--live``, live trials instead (benchmarks/live_replay.py): windows of recorded streams of
one running program (the DataLoader-bound ResNet-18 user program streamed for 110 s on one H200,
and A/A windows of the built-in workloads), at ``--window-s`` and sized to the noise, and how
many minutes a 5% gain of the DataLoader-bound program needs (the ``small_changes`` preset):

    python3 benchmarks/gate_replay.py --live [--draws 200] [--window-s 3]
"""

import argparse
import json
import os
import random
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gate_bench  # noqa: E402  (the Mann-Whitney judge it compares with)

FIXTURES = os.path.join(REPO, "tests", "unit", "fixtures", "blocks")
WORKLOADS = ("gemm", "h2d_pinned", "allreduce", "dataloader", "train_step", "h2d_pageable")
# recorded on one H200 through the block runner, as the gate runs blocks: <file name> (steps)
ONE_H200 = (
    "h200x1_gemm_1800",
    "h200x1_h2d_pinned_400",
    "h200x1_dataloader_200",
    "h200x1_dataloader_400",
    "h200x1_train_step_400",
)
CASES = (
    ("A/A kept under improve", "improve", 1.0, 0.0, "keep", False),
    ("A/A rolled back under no_regression", "no_regression", 1.0, 0.0, "rollback", False),
    ("15% slower rolled back", "no_regression", 1.15, 0.0, "rollback", True),
    ("5% slower rolled back", "no_regression", 1.05, 0.0, "rollback", True),
    ("1.5% stalled rolled back", "no_regression", 1.0, 0.015, "rollback", True),
    ("15% faster kept", "improve", 0.85, 0.0, "keep", True),
)
# the targets for each case (decided so, share of draws)
TARGETS = {
    "A/A kept under improve": "<= 5%",
    "A/A rolled back under no_regression": "<= 5%",
    "15% slower rolled back": ">= 95%",
    "5% slower rolled back": "context",
    "1.5% stalled rolled back": ">= 95%",
    "15% faster kept": ">= 90%",
}


# Recordings with a real change as a second arm: (label, arm without, arm with, policy, the
# decision a user wants, target). The ResNet-18 program's pinned memory (PIN_MEMORY=0 turns it
# off) trades the mean against the tail: the project's founding case, on real blocks.
REAL_CHANGES = {
    "h200x1_user_resnet18": (
        (
            "real: pinned memory off (throughput -19%, median +60%, p99 -50%) rolled back",
            "base",
            "nopin",
            "no_regression",
            "rollback",
            ">= 95%",
        ),
        (
            "real: pinned memory on (throughput +19%, p99 x2) rolled back for its tail",
            "nopin",
            "base",
            "improve",
            "rollback",
            ">= 95%",
        ),
    ),
}
ONE_H200_USER = ("h200x1_user_resnet18",)


def blocks_of(workload, arm="base"):
    """An arm's blocks of a recording: a workload of two H200, or a file name (ONE_H200)."""
    name = workload if workload.startswith("h200x") else "h200x2_%s" % workload
    with open(os.path.join(FIXTURES, "%s.json" % name)) as handle:
        return [b["samples_ms"] for b in json.load(handle)["arms"][arm]["blocks"]]


def trial(blocks, policy, effect, stall, seed, max_blocks, blocks_on=None, **options):
    """One sequential trial on blocks drawn (by ``seed``) from the recording; with the blocks it saw.
    ``blocks_on``: the blocks the layer's arm is drawn from (a recorded real change), else
    ``blocks`` with ``effect`` and ``stall`` laid on them."""
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import check_settings
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import Trial

    rng = random.Random(seed)
    feed = iter([blocks[rng.randrange(len(blocks))] for _i in range(4 * max_blocks + 8)])
    on = blocks_on or blocks
    feed_on = iter([on[rng.randrange(len(on))] for _i in range(4 * max_blocks + 8)])
    state = {"on": True}
    seen = {True: [], False: []}

    def measure(_w):
        xs = list(next(feed_on if state["on"] and blocks_on else feed))
        if state["on"] and not blocks_on:
            xs = [x * effect for x in xs]
            if stall:
                top = sorted(xs)[int(0.99 * (len(xs) - 1))]
                for i in rng.sample(range(len(xs)), int(round(len(xs) * stall))):
                    xs[i] = 3.0 * top
        seen[state["on"]].append(xs)
        return {"samples_ms": xs}

    settings = check_settings({}, {"min_blocks": 4, "max_blocks": max_blocks, "max_seconds": 86400})
    clock = iter(range(10**9)).__next__
    result = Trial(["w"], lambda on: state.update(on=on), measure, policy, settings, clock, **options).run()
    return result, seen


def mann_whitney_decision(seen, policy):
    """A median-only judge on the same blocks' steps, pooled: Mann-Whitney U, alpha 0.05."""
    before = [v for b in seen[False] for v in b]
    after = [v for b in seen[True] for v in b]
    if policy == "no_regression":
        return "rollback" if gate_bench.mann_whitney_rollback(before, after) else "keep"
    return "keep" if gate_bench.mann_whitney_keep(before, after) else "rollback"


# the judges, each as (label, trial options): the same seed gives every judge the same blocks
JUDGES = (
    ("gate", {}),
    ("gate, whole budget", {"stop_early": False}),
    ("earlier rule", {"stop_early": False, "worse_rule": "whole_interval"}),
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--max-blocks", type=int, default=8)
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS + ONE_H200 + ONE_H200_USER),
        help="comma-separated: workloads recorded on two H200, or recordings of one (h200x1_...)",
    )
    parser.add_argument("--live", action="store_true", help="live trials on recorded streams")
    parser.add_argument("--window-s", type=float, default=3.0, help="with --live: the first windows' seconds")
    args = parser.parse_args(argv)
    if args.live:
        import live_replay

        live_replay.table(live_replay.STREAMS, args.draws, window_s=args.window_s)
        print()
        print("| recording | change | max_windows | kept | minutes of windows (median) | most |")
        print("|---|---|---|---|---|---|")
        found = live_replay.minutes_for(live_replay.STREAMS[0], 1.0 / 1.05, args.draws, window_s=args.window_s)
        if found:
            print()
            print("a 5%% gain kept in >= 90%% of draws from max_windows %d: at most %.1f minutes" % found)
        return 0
    print(
        "| workload | case | target | gate: decided so | blocks per arm | stopped early "
        "| gate, whole budget: decided so | blocks per arm | earlier rule: decided so "
        "| Mann-Whitney on the whole budget's steps: decided so |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for workload in args.workloads.split(","):
        blocks = blocks_of(workload)
        cases = [
            (label, policy, effect, stall, wanted, TARGETS[label], None)
            for label, policy, effect, stall, wanted, _s in CASES
        ]
        for label, arm_off, arm_on, policy, wanted, target in REAL_CHANGES.get(workload, ()):
            cases.append(
                (label, policy, 1.0, 0.0, wanted, target, (blocks_of(workload, arm_off), blocks_of(workload, arm_on)))
            )
        for label, policy, effect, stall, wanted, target, real in cases:
            right, spent, early = {}, {}, 0
            mw_right = 0
            for seed in range(args.draws):
                for judge, options in JUDGES:
                    base, on = real or (blocks, None)
                    res, seen = trial(base, policy, effect, stall, seed, args.max_blocks, blocks_on=on, **options)
                    right[judge] = right.get(judge, 0) + (res["decision"] == wanted)
                    spent[judge] = spent.get(judge, 0) + res["blocks"]["with"]
                    if judge == "gate":
                        early += bool(res.get("futility"))
                    if judge == "gate, whole budget":
                        mw_right += mann_whitney_decision(seen, policy) == wanted
            n = float(args.draws)
            print(
                "| %s | %s | %s | %.1f%% | %.1f | %.0f%% | %.1f%% | %.1f | %.1f%% | %.1f%% |"
                % (
                    workload,
                    label,
                    target,
                    100 * right["gate"] / n,
                    spent["gate"] / n,
                    100 * early / n,
                    100 * right["gate, whole budget"] / n,
                    spent["gate, whole budget"] / n,
                    100 * right["earlier rule"] / n,
                    100 * mw_right / n,
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
