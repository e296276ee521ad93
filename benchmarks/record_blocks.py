# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Record blocks of a built-in workload as a JSON fixture: the gate's real noise, replayed in tests.

A block is one process run of the workload program of ``stacktune.gpu.bench`` (the same
program, assembled from ``plugins/module_utils/workloads/`` and run the same way), so what the gate sees on a
host - start-up, clocks, allocator and NCCL set-up differing from run to run - is in the
recording. Arms are environments: ``--arm base`` (nothing added) and, for example,
``--arm 'nch4:NCCL_MAX_NCHANNELS=4'``. Blocks of the arms are interleaved round by round
(base, nch4, base, nch4, ... with the order reversed every other round), so drift of the
host falls on every arm alike. Needs only the Python standard library here; the workload
interpreter (``--python``) needs PyTorch with CUDA for the GPU workloads. With ``--runner``
the blocks are forked from the block runner, as the gate runs them (``stacktune_bench_runner``),
through the bench module's own code (``PYTHONPATH=collections``).

    python3 benchmarks/record_blocks.py --workload gemm --blocks 12 --out /tmp/gemm.json
    python3 benchmarks/record_blocks.py --workload allreduce --size 64 --blocks 8 \\
        --arm base --arm 'nch4:NCCL_MAX_NCHANNELS=4' --out /tmp/allreduce.json

A user's own program (``--workload command --command '<argv>'``) runs as the gate's
``command`` workload does, one process per block through the bench module
(``PYTHONPATH=collections``), its step lines read the same way:

    python3 benchmarks/record_blocks.py --workload command \\
        --command 'python3 tests/gpu/train_step_program.py --steps 140' --steps 120 --warmup 20 \\
        --arm base --arm 'nopin:PIN_MEMORY=0' --blocks 6 --out /tmp/user.json
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))

from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import BenchFailure  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.measure import measure  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.source import write_program  # noqa: E402

PROGRAM = write_program(tempfile.mkdtemp(prefix="stacktune-record-"))


def parse_arm(text):
    """``name`` or ``name:KEY=VALUE,KEY=VALUE`` -> (name, env dict)."""
    name, _sep, rest = text.partition(":")
    if not name or not name.replace("_", "").isalnum():
        raise argparse.ArgumentTypeError("arm name must be letters, digits and _: %r" % text)
    env = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise argparse.ArgumentTypeError("arm %s: %r is not KEY=VALUE" % (name, item))
        env[key] = value
    return name, env


def _throttles(conditions):
    seen = set()
    for entry in ((conditions or {}).get("during") or {}).values():
        seen.update(entry.get("throttle_reasons_seen") or [])
    seen.discard("gpu_idle")
    return sorted(seen)


def _bench_block(params, started, t0, info=None):
    """One block through the bench module's code (``measure``), as the recording keeps it."""
    try:
        res = measure(params)
    except BenchFailure as exc:
        raise SystemExit("block failed: %s" % exc.msg) from None
    details = res.get("details") or {}
    return {
        "started": round(started, 3),
        "wall_s": round(time.perf_counter() - t0, 3),
        "measure_s": details.get("measure_s"),
        "samples_ms": [float("%.5g" % s) for s in res["samples_ms"]],
        "work_per_step": (res.get("throughput") or {}).get("work_per_step"),
        "work_unit": (res.get("throughput") or {}).get("unit"),
        "throttle_reasons_seen": _throttles(res.get("conditions")),
        "info": details.get("info") if info is None else info(details),
    }


def run_runner_block(base, socket_path, cfg, extra_env):
    """One block forked from the block runner, through the bench module."""
    started, t0 = time.time(), time.perf_counter()
    params = dict(base, workload=cfg["workload"], size=cfg["size"], runner_socket=socket_path, env=extra_env)
    return _bench_block(params, started, t0)


def run_command_block(base, argv, extra_env):
    """One block of a user's program, as the gate's ``command`` workload runs it."""
    started, t0 = time.time(), time.perf_counter()
    params = dict(base, workload="command", command=argv, env=extra_env)
    return _bench_block(params, started, t0, info=lambda details: {"step_lines": details.get("step_lines")})


def run_block(python, cfg, env, timeout):
    started = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [python, PROGRAM, json.dumps(cfg)],
        env=env,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - t0
    try:
        doc = json.loads(proc.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        doc = {"error": "no result document (rc %d): %s" % (proc.returncode, proc.stderr.decode()[-2000:])}
    if "error" in doc:
        raise SystemExit("block failed: %s" % doc["error"])
    samples = doc["samples_ms"]
    conditions = doc.get("conditions") or {}
    return {
        "started": round(started, 3),
        "wall_s": round(wall, 3),
        "measure_s": doc.get("measure_s"),
        "samples_ms": [float("%.5g" % s) for s in samples],
        "work_per_step": doc.get("work_per_step"),
        "work_unit": doc.get("work_unit"),
        "throttle_reasons_seen": _throttles(conditions),
        "info": doc.get("info"),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True)
    parser.add_argument("--python", default="/opt/torch/.venv/bin/python3")
    parser.add_argument("--blocks", type=int, default=10, help="blocks per arm")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--size", type=int)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument("--arm", action="append", type=parse_arm, help="name[:KEY=VALUE,...]; default one arm 'base'")
    parser.add_argument("--runner", action="store_true", help="fork the blocks from the block runner, as the gate does")
    parser.add_argument(
        "--command", help="with --workload command: the program and its arguments (split as a shell would)"
    )
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    arms = args.arm or [("base", {})]
    cfg = {
        "workload": args.workload,
        "steps": args.steps,
        "warmup": args.warmup,
        "size": args.size,
        "device": args.device,
        "workers": args.workers,
    }
    doc = {
        "workload": args.workload,
        "cfg": cfg,
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "host": {"node": platform.node(), "kernel": platform.release()},
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "order": [],
        "arms": {name: {"env": env, "blocks": []} for name, env in arms},
    }
    if (args.workload == "command") != bool(args.command):
        parser.error("--command goes with --workload command, and only with it")
    if args.command:
        cfg["command"] = shlex.split(args.command)
    runner = base = None
    if args.runner or args.command:
        from ansible_collections.stacktune.gpu.plugins.modules import bench  # pylint: disable=import-outside-toplevel

        base = bench.default_params(
            python=args.python,
            steps=args.steps,
            warmup=args.warmup,
            device=args.device,
            workers=args.workers,
            timeout=args.timeout,
        )
    if args.runner and not args.command:
        runner = measure(dict(base, runner_state="started", runner_workloads=[args.workload]))
        doc["runner"] = {"start_s": runner["runner_start_s"], "imports": runner.get("runner_imports")}
        print("block runner ready in %.2f s" % runner["runner_start_s"], flush=True)
    try:
        record_rounds(args, arms, cfg, doc, base, runner)
    finally:
        if runner:
            measure(dict(base, runner_state="stopped", runner_socket=runner["runner_socket"]))
    return 0


def record_rounds(args, arms, cfg, doc, base, runner):
    for rnd in range(args.blocks):
        order = arms if rnd % 2 == 0 else list(reversed(arms))
        for name, extra in order:
            if args.command:
                block = run_command_block(base, cfg["command"], extra)
            elif runner:
                block = run_runner_block(base, runner["runner_socket"], cfg, extra)
            else:
                env = dict(os.environ)
                env.update(extra)
                block = run_block(args.python, cfg, env, args.timeout)
            block["round"] = rnd
            doc["arms"][name]["blocks"].append(block)
            doc["order"].append(name)
            s = sorted(block["samples_ms"])
            print(
                "%s round %d %s: p50 %.4g ms p99 %.4g ms wall %.1f s%s"
                % (
                    args.workload,
                    rnd,
                    name,
                    s[len(s) // 2],
                    s[int(0.99 * (len(s) - 1))],
                    block["wall_s"],
                    " throttle %s" % block["throttle_reasons_seen"] if block["throttle_reasons_seen"] else "",
                ),
                flush=True,
            )
            with open(args.out, "w") as handle:
                json.dump(doc, handle, separators=(",", ":"))


if __name__ == "__main__":
    sys.exit(main())
