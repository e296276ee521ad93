# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's error rates and the blocks it spends, replaying recorded real blocks.

The blocks recorded on two H200 (tests/unit/fixtures/blocks) are drawn at random into the
gate's sequential trial (4 to ``--max-blocks`` blocks per arm), with a change laid on the
blocks measured with it: none (A/A), 15% slower, 15% faster, 1.5% of the steps stalled at 3x
the p99. Per workload it prints how often the gate decided right and how many blocks per arm
it took, and how often it stopped early because the budget could not resolve more. Run it at
two commits to compare two versions of the gate on the same blocks:

    python3 benchmarks/gate_replay.py [--draws 200] [--max-blocks 8]
"""

import argparse
import json
import os
import random
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))
FIXTURES = os.path.join(REPO, "tests", "unit", "fixtures", "blocks")
WORKLOADS = ("gemm", "h2d_pinned", "allreduce", "dataloader", "train_step", "h2d_pageable")
CASES = (
    ("A/A kept under improve", "improve", 1.0, 0.0, "keep", False),
    ("A/A rolled back under no_regression", "no_regression", 1.0, 0.0, "rollback", False),
    ("15% slower rolled back", "no_regression", 1.15, 0.0, "rollback", True),
    ("1.5% stalled rolled back", "no_regression", 1.0, 0.015, "rollback", True),
    ("15% faster kept", "improve", 0.85, 0.0, "keep", True),
)


def blocks_of(workload):
    with open(os.path.join(FIXTURES, "h200x2_%s.json" % workload)) as handle:
        return [b["samples_ms"] for b in json.load(handle)["arms"]["base"]["blocks"]]


def trial(blocks, policy, effect, stall, seed, max_blocks):
    from ansible_collections.stacktune.gpu.plugins.module_utils._blocks import Trial, check_settings

    rng = random.Random(seed)
    feed = iter([blocks[rng.randrange(len(blocks))] for _i in range(4 * max_blocks + 8)])
    state = {"on": True}

    def measure(_w):
        xs = list(next(feed))
        if state["on"]:
            xs = [x * effect for x in xs]
            if stall:
                top = sorted(xs)[int(0.99 * (len(xs) - 1))]
                for i in rng.sample(range(len(xs)), int(round(len(xs) * stall))):
                    xs[i] = 3.0 * top
        return {"samples_ms": xs}

    settings = check_settings({}, {"min_blocks": 4, "max_blocks": max_blocks, "max_seconds": 86400})
    clock = iter(range(10**9)).__next__
    return Trial(["w"], lambda on: state.update(on=on), measure, policy, settings, clock).run()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--max-blocks", type=int, default=8)
    args = parser.parse_args(argv)
    print("| workload | case | decided so | blocks per arm | stopped early |")
    print("|---|---|---|---|---|")
    for workload in WORKLOADS:
        blocks = blocks_of(workload)
        for label, policy, effect, stall, wanted, _should in CASES:
            results = [trial(blocks, policy, effect, stall, seed, args.max_blocks) for seed in range(args.draws)]
            share = sum(r["decision"] == wanted for r in results) / float(args.draws)
            spent = sum(r["blocks"]["with"] for r in results) / float(args.draws)
            early = sum(bool(r.get("futility")) for r in results) / float(args.draws)
            print("| %s | %s | %.1f%% | %.1f | %.0f%% |" % (workload, label, 100 * share, spent, 100 * early))
    return 0


if __name__ == "__main__":
    sys.exit(main())
