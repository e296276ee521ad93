# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a block's start-up goes in a child forked from a warm parent, per parent preload.

GPU host probe (needs PyTorch with CUDA): the parent imports torch (variant A) or torch and
the modules of ``workloads/host/registry.py RUNNER_PRELOAD`` (variant B), then forks three children per
workload, as the block runner does; each child runs one block of the real workload program
and prints the seconds to a ready CUDA context, of set-up (model, optimiser, buffers), of the
first step, of the rest of the warm-up and of the measured steps.

    PYTHONPATH=collections python3 tests/gpu/probe_startup.py A train_step
    PYTHONPATH=collections python3 tests/gpu/probe_startup.py B train_step,dataloader
"""

import json
import os
import sys
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import gpu as W_gpu
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import program as W_program
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import registry as W_registry

STEPS = {"train_step": 300, "gemm": 400, "dataloader": 80, "h2d_pinned": 100}
PHASES = (
    ("start", "cuda_ready"),
    ("cuda_ready", "loop_start"),
    ("loop_start", "first_step"),
    ("first_step", "warm_done"),
    ("warm_done", "steps_done"),
)
NAMES = ("to cuda ready", "setup", "first step", "warmup rest", "steps")


def instrument(torch, marks):
    orig_torch, orig_loop = W_gpu._torch, W_gpu.timed_loop

    def timed_torch(name, dev):
        got = orig_torch(name, dev)
        torch.cuda.synchronize()
        marks["cuda_ready"] = time.perf_counter()
        return got

    def timed_loop(step, steps, warmup, monitor):
        marks["loop_start"] = time.perf_counter()
        step()
        marks["first_step"] = time.perf_counter()
        for _warm in range(warmup - 1):
            step()
        marks["warm_done"] = time.perf_counter()
        got = orig_loop(step, steps, 0, monitor)
        marks["steps_done"] = time.perf_counter()
        return got

    W_gpu._torch, W_gpu.timed_loop = timed_torch, timed_loop


def child(workload, marks, fd):
    marks["start"] = time.perf_counter()
    size = 4096 if workload == "gemm" else W_registry.DEFAULT_SIZE[workload]
    res = W_program.run(
        {"workload": workload, "device": 0, "size": size, "steps": STEPS.get(workload, 200), "warmup": 20}
    )
    samples = sorted(res["samples_ms"])
    os.write(fd, json.dumps({"marks": marks, "p50": samples[len(samples) // 2]}).encode())
    os._exit(0)


def main(variant, workloads):
    t0 = time.perf_counter()
    import torch  # noqa: PLC0415 - the probe measures this import

    took = {"torch": time.perf_counter() - t0}
    if variant == "B":
        for module in W_program.runner_preload(workloads)[1:]:
            t1 = time.perf_counter()
            __import__(module)
            took[module] = time.perf_counter() - t1
    assert not torch.cuda.is_initialized()
    print("variant %s: parent imports %s" % (variant, ", ".join("%s %.2f s" % kv for kv in took.items())))
    marks = {}
    instrument(torch, marks)
    for workload in workloads:
        for i in range(3):
            read_fd, write_fd = os.pipe()
            t_fork = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                child(workload, marks, write_fd)
            os.close(write_fd)
            data = b""
            while True:
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    break
                data += chunk
            os.waitpid(pid, 0)
            got = json.loads(data or b"{}")
            m = got.get("marks", {})
            parts = " | ".join(
                "%s %.2f" % (name, m[b] - m[a]) if a in m and b in m else "%s -" % name
                for name, (a, b) in zip(NAMES, PHASES)
            )
            print(
                "%s %s #%d wall %.2f | %s | p50 %s ms"
                % (variant, workload, i, time.perf_counter() - t_fork, parts, got.get("p50")),
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(","))
