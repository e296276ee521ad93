# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The workload program's GPU workloads (PyTorch): GEMM, host-to-device copies, a DataLoader
into the GPU, all-reduce and a training step. Part of the assembled program (``base.py``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import socket
import sys
import tempfile
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.base import (
    GPU,
    Monitor,
    Workload,
    WorkloadError,
    ms_since,
    timed_loop,
)


IMAGE_MEAN = (0.485, 0.456, 0.406)


IMAGE_STD = (0.229, 0.224, 0.225)


# ---------------------------------------------------------------------------------------
# GPU workloads (PyTorch). Every one checks its result so a broken stack fails loudly.


def _torch(name, device):
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise WorkloadError(
            "workload %s needs PyTorch with CUDA in the interpreter %s (%s); set the python option "
            "to an interpreter that has it" % (name, sys.executable, exc)
        ) from None
    if not torch.cuda.is_available():
        raise WorkloadError(
            "workload %s needs a CUDA GPU, but torch %s (CUDA %s) in %s sees none"
            % (name, torch.__version__, torch.version.cuda, sys.executable)
        )
    count = torch.cuda.device_count()
    if device >= count:
        raise WorkloadError("GPU index %d does not exist: torch sees %d GPU(s)" % (device, count))
    torch.cuda.set_device(device)
    return torch, torch.device("cuda", device)


def _gpu_ref(torch, index):
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    return {"index": index, "uuid": str(uuid) if uuid is not None else None}


def _torch_info(torch, index):
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu_name": torch.cuda.get_device_name(index),
        "device": index,
    }


def _event_step(torch, body):
    """Return a step function timing ``body`` on the current stream with CUDA events."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    def step():
        start.record()
        body()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    return step


def wl_gemm(p):
    torch, dev = _torch("gemm", p["device"])
    n = p["size"]
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=gen)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    torch.cuda.synchronize(dev)
    monitor = Monitor([_gpu_ref(torch, p["device"])])
    samples = timed_loop(_event_step(torch, lambda: torch.mm(a, b, out=c)), p["steps"], p["warmup"], monitor)
    if not bool(torch.isfinite(c).all()):
        raise WorkloadError("GEMM produced non-finite values on GPU %d" % p["device"])
    info = _torch_info(torch, p["device"])
    info["dtype"] = "bfloat16"
    return {
        "samples_ms": samples,
        "work_per_step": 2.0 * n**3,
        "work_unit": "FLOP",
        "info": info,
        "conditions": monitor.result(),
    }


def _wl_h2d(p, pinned):
    name = "h2d_pinned" if pinned else "h2d_pageable"
    torch, dev = _torch(name, p["device"])
    nbytes = p["size"] * 1024 * 1024
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    host.fill_(7)
    dst = torch.zeros(nbytes, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize(dev)

    def step():
        # Host wall clock around copy + synchronize: a pageable copy is staged through a
        # driver buffer by the CPU, so only the host clock sees all of it; the pinned copy
        # is timed the same way so the two are comparable.
        t0 = time.perf_counter()
        dst.copy_(host, non_blocking=pinned)
        torch.cuda.synchronize(dev)
        return ms_since(t0)

    monitor = Monitor([_gpu_ref(torch, p["device"])])
    samples = timed_loop(step, p["steps"], p["warmup"], monitor)
    if not bool((dst == 7).all()):
        raise WorkloadError("host-to-device copy delivered wrong bytes on GPU %d" % p["device"])
    info = _torch_info(torch, p["device"])
    info["pinned"] = pinned
    info["bytes_per_step"] = nbytes
    return {
        "samples_ms": samples,
        "work_per_step": float(nbytes),
        "work_unit": "B",
        "info": info,
        "conditions": monitor.result(),
    }


def wl_h2d_pinned(p):
    return _wl_h2d(p, True)


def wl_h2d_pageable(p):
    return _wl_h2d(p, False)


class SyntheticImages:
    """Map-style dataset doing per-sample work like an image pipeline.

    Each item is a 224x224 RGB "encoded" byte image made from a seeded generator, decoded
    (8x8 blocks reordered into raster order, HWC to CHW) and normalised to float32, as
    torchvision's ToTensor + Normalize would. Plain class (no torch base class at import
    time) so it pickles under any multiprocessing start method.
    """

    def __init__(self, length, seed=0):
        self.length = length
        self.seed = seed

    def __len__(self):
        return self.length

    def __getitem__(self, idx):
        import torch  # pylint: disable=import-outside-toplevel

        gen = torch.Generator().manual_seed(self.seed + idx)
        encoded = torch.randint(0, 256, (28 * 28 * 8 * 8 * 3,), dtype=torch.uint8, generator=gen)
        hwc = encoded.view(28, 28, 8, 8, 3).permute(0, 2, 1, 3, 4).reshape(224, 224, 3)
        chw = hwc.permute(2, 0, 1).contiguous()
        mean = torch.tensor(IMAGE_MEAN).view(3, 1, 1)
        std = torch.tensor(IMAGE_STD).view(3, 1, 1)
        image = (chw.float().div_(255.0) - mean) / std
        return image, idx % 1000


def wl_dataloader(p):
    torch, dev = _torch("dataloader", p["device"])
    from torch.utils.data import DataLoader  # pylint: disable=import-outside-toplevel

    batch = p["size"]
    workers = p["workers"]
    total = p["warmup"] + p["steps"]
    kwargs = {}
    if workers > 0:
        import multiprocessing  # pylint: disable=import-outside-toplevel

        kwargs["prefetch_factor"] = 2
        if "fork" in multiprocessing.get_all_start_methods():
            kwargs["multiprocessing_context"] = "fork"
    loader = DataLoader(
        SyntheticImages(total * batch),
        batch_size=batch,
        shuffle=False,
        drop_last=True,
        num_workers=workers,
        pin_memory=True,
        **kwargs,
    )
    state = {"batches": iter(loader)}
    last = {}

    def step():
        t0 = time.perf_counter()
        images, labels = next(state["batches"])
        last["images"] = images.to(dev, non_blocking=True)
        last["labels"] = labels.to(dev, non_blocking=True)
        torch.cuda.synchronize(dev)
        return ms_since(t0)

    monitor = Monitor([_gpu_ref(torch, p["device"])])
    try:
        samples = timed_loop(step, p["steps"], p["warmup"], monitor)
    finally:
        state.clear()  # dropping the iterator shuts the worker processes down
    images = last["images"]
    if tuple(images.shape) != (batch, 3, 224, 224) or images.dtype != torch.float32 or not images.is_cuda:
        raise WorkloadError(
            "DataLoader delivered %s %s, expected (%d, 3, 224, 224) float32 on the GPU"
            % (tuple(images.shape), images.dtype, batch)
        )
    info = _torch_info(torch, p["device"])
    info.update({"workers": workers, "pin_memory": True, "image": "3x224x224 float32"})
    return {
        "samples_ms": samples,
        "work_per_step": float(batch),
        "work_unit": "samples",
        "info": info,
        "conditions": monitor.result(),
    }


def _free_port():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
    finally:
        sock.close()


def _allreduce_rank(rank, world, cfg, port, result_path):
    """One rank of the all-reduce block (runs in its own process, one per GPU)."""
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    try:
        numel = cfg["size"] * 1024 * 1024 // 4
        data = torch.empty(numel, dtype=torch.float32, device=dev)
        align = torch.zeros(1, dtype=torch.float32, device=dev)
        expected = float(world * (world + 1) // 2)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        times = []
        for i in range(cfg["warmup"] + cfg["steps"]):
            data.fill_(float(rank + 1))
            dist.all_reduce(align)  # line the ranks up so each times the collective only
            torch.cuda.synchronize(dev)
            start.record()
            dist.all_reduce(data)
            end.record()
            end.synchronize()
            wrong = int((data != expected).sum().item())
            if wrong:
                got = float(data[(data != expected).nonzero()[0]].item())
                raise RuntimeError(
                    "all_reduce step %d on rank %d returned %d wrong element(s): expected %s, got e.g. %s"
                    % (i, rank, wrong, expected, got)
                )
            if i >= cfg["warmup"]:
                times.append(start.elapsed_time(end))
        # A step lasts as long as its slowest rank.
        slowest = torch.tensor(times, dtype=torch.float64, device=dev)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        if rank == 0:
            version = torch.cuda.nccl.version()
            version = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
            with open(result_path, "w") as handle:
                json.dump({"samples_ms": slowest.tolist(), "nccl": version}, handle)
    finally:
        dist.destroy_process_group()


def wl_allreduce(p):
    torch, _dev = _torch("allreduce", 0)
    world = torch.cuda.device_count()
    if world < 2:
        raise WorkloadError(
            "allreduce needs 2 or more GPUs (one process per GPU over NCCL); this host shows torch %d GPU" % world
        )
    import torch.multiprocessing as tmp  # pylint: disable=import-outside-toplevel

    cfg = {"size": p["size"], "steps": p["steps"], "warmup": p["warmup"]}
    fd, result_path = tempfile.mkstemp(prefix="stacktune-allreduce-", suffix=".json")
    os.close(fd)
    monitor = Monitor([_gpu_ref(torch, i) for i in range(world)])
    try:
        monitor.begin()
        try:
            tmp.spawn(_allreduce_rank, args=(world, cfg, _free_port(), result_path), nprocs=world, join=True)
        finally:
            monitor.end()
        with open(result_path) as handle:
            ranks = json.load(handle)
    finally:
        os.unlink(result_path)
    nbytes = cfg["size"] * 1024 * 1024 // 4 * 4
    factor = 2.0 * (world - 1) / world
    info = _torch_info(torch, 0)
    info.update(
        {
            "world_size": world,
            "bytes": nbytes,
            "nccl": ranks.get("nccl"),
            "busbw_factor": factor,
            "note": "throughput is bus bandwidth: algbw * 2(n-1)/n",
        }
    )
    return {
        "samples_ms": ranks["samples_ms"],
        "work_per_step": nbytes * factor,
        "work_unit": "B",
        "info": info,
        "conditions": monitor.result(),
    }


def wl_train_step(p):
    torch, dev = _torch("train_step", p["device"])
    batch, seq, width, layers = p["size"], 256, 1024, 4
    torch.manual_seed(0)
    blocks = [
        torch.nn.TransformerEncoderLayer(
            d_model=width, nhead=16, dim_feedforward=4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        for _layer in range(layers)
    ]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(width, width)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, seq, width, device=dev)
    target = torch.randn(batch, seq, width, device=dev)
    # the first and the last loss only: a detached loss kept per step held 32 MiB of GPU memory
    # each (measured on one H200: 48 GiB after 1500 steps, out of memory in a live trial)
    losses = [None, None]

    def body():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if losses[0] is None:
            losses[0] = loss.detach()
        losses[1] = loss.detach()

    monitor = Monitor([_gpu_ref(torch, p["device"])])
    samples = timed_loop(_event_step(torch, body), p["steps"], p["warmup"], monitor)
    first, last = float(losses[0].item()), float(losses[-1].item())
    if not (math.isfinite(first) and math.isfinite(last)):
        raise WorkloadError("training step produced a non-finite loss (first %s, last %s)" % (first, last))
    info = _torch_info(torch, p["device"])
    info.update(
        {
            "model": "%d pre-norm transformer layers, width %d, seq %d" % (layers, width, seq),
            "params": sum(t.numel() for t in model.parameters()),
            "loss_first": first,
            "loss_last": last,
            "autocast": "bfloat16",
        }
    )
    return {
        "samples_ms": samples,
        "work_per_step": float(batch),
        "work_unit": "samples",
        "info": info,
        "conditions": monitor.result(),
    }


# The GPU workloads, one row each (``base.Workload`` says what the fields are; registry.py
# gathers the tables). A new GPU workload: its ``wl_<name>`` function above and its row here.
#
# steps: from ``calibration.steps_for_noise`` on blocks recorded through the block runner
# (tests/unit/fixtures/blocks). Longer blocks where blocks hardly differ from each other: three
# times the start-up's worth of steps for GEMM and all-reduce. Shorter ones where blocks differ
# more than their steps do: on the one-H200 host DataLoader blocks of 200 and 400 steps resolved
# the throughput equally per second of wall time (block-to-block spread 4.6% and 3.6%), so 200
# buys twice the blocks (and looks) for the gate's minimum; the training step likewise (spread
# 4.6% at 400 steps). Not shorter than that: 80-step DataLoader blocks resolved much less per
# second there, the workers' bursts spanning more than the batches the rule looks at. ``make
# calibrate`` prints the choice for a host.
#
# live_size of train_step: on one H200 the train_step of batch 32 (12 ms steps) varied by 4.6%
# between windows of 250 steps inside one process, at batch 128 (33 ms, GPU-bound) by 0.11%
# between windows of 60 steps (tests/gpu/probe_live_memory.py, docs/benchmarks.md): a live
# trial resolves the second. allreduce does not run live: it starts its ranks per block.
#
# preload: what a workload's own set-up would otherwise import anew in every block. On the
# one-H200 host a train_step block spent 6.9-7.4 s building its model and optimiser when the
# parent had imported torch only (the optimiser's first use imports torch._dynamo), 0.53-0.58 s
# when the parent had imported these too (docs/benchmarks.md). None of them initialises CUDA.
GPU_TABLE = (
    Workload("gemm", wl_gemm, GPU, 8192, "matrix dimension N (bf16 NxN @ NxN)", steps=1800, live=True),
    Workload("h2d_pinned", wl_h2d_pinned, GPU, 256, "MiB copied per step", live=True),
    Workload("h2d_pageable", wl_h2d_pageable, GPU, 256, "MiB copied per step", live=True),
    Workload(
        "dataloader",
        wl_dataloader,
        GPU,
        64,
        "batch size (3x224x224 images)",
        steps=200,
        live=True,
        preload=("torch.utils.data",),
    ),
    Workload(
        "allreduce",
        wl_allreduce,
        GPU,
        256,
        "MiB of float32 reduced per step",
        steps=5000,
        min_gpus=2,
        preload=("torch.distributed",),
    ),
    Workload(
        "train_step",
        wl_train_step,
        GPU,
        32,
        "batch size (sequences of 256 tokens)",
        steps=200,
        live=True,
        live_size=128,
        preload=("torch._dynamo", "torch.optim"),
    ),
)
