# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One block of every GPU workload of ``stacktune.gpu.bench``, as a Markdown table.

Runs each workload through the module's own code path (``measure``: the same
program file, interpreter hand-over, parsing, throughput and void decision as a task)
and prints workload, steps, p50, p99, throughput and whether the block was void.
Needs ansible-core importable by this interpreter and PyTorch with CUDA in --python.
Run from the repository root:

    python3 benchmarks/gpu_workloads.py --python /opt/torch/.venv/bin/python3
"""

import argparse
import json
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))

WORKLOADS = ("gemm", "h2d_pinned", "h2d_pageable", "dataloader", "train_step", "allreduce")


def fmt(value, digits=3):
    return "-" if value is None else ("%.*f" % (digits, value))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="/opt/torch/.venv/bin/python3", help="interpreter with PyTorch")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset")
    parser.add_argument("--json", help="also write every raw result to this file")
    args = parser.parse_args(argv)

    try:
        from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import BenchFailure
        from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.measure import measure
        from ansible_collections.stacktune.gpu.plugins.modules import bench
    except ImportError as exc:
        sys.stderr.write("ansible-core is needed to load the bench module: %s\n" % exc)
        return 2

    rows, raw = [], {}
    for workload in args.workloads.split(","):
        params = bench.default_params(
            workload=workload, python=args.python, steps=args.steps, warmup=args.warmup, device=args.device
        )
        try:
            res = measure(params)
        except BenchFailure as exc:
            rows.append("| %s | - | - | - | %s | - |" % (workload, exc.msg.replace("|", "/")))
            raw[workload] = {"failed": True, "msg": exc.msg}
            continue
        raw[workload] = res
        summary, tp = res["summary"], res["throughput"]
        size = res["details"].get("size")
        rows.append(
            "| %s (size %s) | %d | %s | %s | %s %s | %s |"
            % (
                workload,
                size,
                summary["count"],
                fmt(summary["p50_ms"]),
                fmt(summary["p99_ms"]),
                fmt(tp["value"], 1),
                tp["unit"],
                "void: %s" % res["void_reason"] if res["void"] else "no",
            )
        )
        sys.stderr.write("%s done in %.1f s\n" % (workload, res["elapsed_s"]))

    gpu = next((r["details"]["info"].get("gpu_name") for r in raw.values() if not r.get("failed")), "unknown GPU")
    print("GPU workloads on %s (steps %d, warm-up %d)\n" % (gpu, args.steps, args.warmup))
    print("| workload | steps | p50 ms | p99 ms | throughput | void |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(raw, handle, indent=1)
    return 0 if all(not r.get("failed") or w == "allreduce" for w, r in raw.items()) else 1


if __name__ == "__main__":
    sys.exit(main())
