# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What one measured block costs: a fresh interpreter per block against the block runner.

For each workload, blocks alternate between the two ways (fresh, runner, runner, fresh ...)
through the bench module's own code path (``measure``), and the table gives per way the
wall seconds of a block, the seconds of its measured steps, their share, and the block's
median step (which must not depend on the way it was started). Run from the repository root:

    python3 benchmarks/block_cost.py --python /opt/torch/.venv/bin/python3 [--blocks 4]
"""

import argparse
import json
import os
import statistics
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))

WORKLOADS = ("gemm", "h2d_pinned", "train_step", "dataloader")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter of the workloads (with PyTorch for GPU ones)"
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per way and workload")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="WORKLOAD=N",
        help="size of one workload (repeatable; the others take their defaults, as in a gate over several)",
    )
    parser.add_argument("--json", help="also write every block's numbers to this file")
    args = parser.parse_args(argv)
    from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import BenchFailure
    from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.measure import measure
    from ansible_collections.stacktune.gpu.plugins.modules import bench

    sizes = {}
    for item in args.size:
        name, sep, value = item.partition("=")
        if not sep or not value.isdigit():
            parser.error("--size takes WORKLOAD=N, got %r" % item)
        sizes[name] = int(value)
    base = bench.default_params(python=args.python, steps=args.steps, warmup=args.warmup)
    started = time.time()
    runner = measure(dict(base, runner_state="started", runner_workloads=args.workloads.split(",")))
    print(
        "block runner ready in %.2f s (interpreter start and imports, paid once per layer)" % runner["runner_start_s"]
    )
    rows, raw = [], {}
    head = (
        "| workload | way | blocks | wall s per block (median) | in the workload s | measured s | measured share "
        "| p50 ms (min-max) |"
    )
    try:
        for workload in args.workloads.split(","):
            ways = {"fresh": [], "runner": []}
            try:
                for i in range(2 * args.blocks):
                    way = ("fresh", "runner", "runner", "fresh")[i % 4]
                    params = dict(base, workload=workload, size=sizes.get(workload))
                    if way == "runner":
                        params["runner_socket"] = runner["runner_socket"]
                    t0 = time.time()
                    res = measure(params)
                    ways[way].append(
                        {
                            "wall_s": time.time() - t0,
                            "workload_s": res["details"].get("measure_s"),
                            "measured_s": sum(res["samples_ms"]) / 1000.0,
                            "p50_ms": res["summary"]["p50_ms"],
                            "throughput": res["throughput"]["value"],
                        }
                    )
            except BenchFailure as exc:
                print("%s: %s" % (workload, str(exc)[:300]))
                continue
            raw[workload] = ways
            for way, blocks in ways.items():
                wall = statistics.median(b["wall_s"] for b in blocks)
                measured = statistics.median(b["measured_s"] for b in blocks)
                inside = statistics.median(b["workload_s"] or 0.0 for b in blocks)
                rows.append(
                    "| %s | %s | %d | %.2f | %.2f | %.2f | %d%% | %.4g (%.4g-%.4g) |"
                    % (
                        workload,
                        way,
                        len(blocks),
                        wall,
                        inside,
                        measured,
                        round(100 * measured / wall),
                        statistics.median(b["p50_ms"] for b in blocks),
                        min(b["p50_ms"] for b in blocks),
                        max(b["p50_ms"] for b in blocks),
                    )
                )
                print(rows[-1], flush=True)
            if args.json:
                with open(args.json, "w") as handle:
                    json.dump(raw, handle, indent=1)
    finally:
        measure(dict(base, runner_state="stopped", runner_socket=runner["runner_socket"]))
    print(head)
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    print("total %.0f s" % (time.time() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())
