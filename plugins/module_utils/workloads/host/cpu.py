# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The workload program's CPU workloads: a DataLoader through /dev/shm workers, a shared-memory
ping-pong, memory touching and a small training step on the CPU. Part of the assembled
program (``base.py``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import mmap
import random
import struct
import time
import zlib

from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import die_with_parent
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.base import (
    CPU,
    Monitor,
    Workload,
    WorkloadError,
    ms_since,
    timed_loop,
)


# ---------------------------------------------------------------------------------------
# CPU workloads (standard library only).

CPU_IMAGE_SIDE = 64


CPU_IMAGE_BYTES = 3 * CPU_IMAGE_SIDE * CPU_IMAGE_SIDE


CPU_IMAGE_POOL = 16


BATCH_HEADER = struct.Struct("<QI")  # batch sequence number, CRC-32 of the payload


HEADER_BYTES = 16


# Lookup table standing in for per-pixel normalisation (contrast stretch around 128).
NORMALISE_LUT = bytes(min(255, max(0, int((v - 120) * 1.25 + 128))) for v in range(256))


def mp_context():
    """The fork start method where there is one (worker processes inherit open files), else the default."""
    import multiprocessing  # pylint: disable=import-outside-toplevel

    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _encoded_images(seed):
    """A small pool of zlib-compressed RGB images (smooth gradients plus noise, HWC)."""
    rng = random.Random(seed)
    side = CPU_IMAGE_SIDE
    pool = []
    for _image in range(CPU_IMAGE_POOL):
        noise = rng.getrandbits(8 * CPU_IMAGE_BYTES).to_bytes(CPU_IMAGE_BYTES, "little")
        dx, dy = rng.randint(1, 4), rng.randint(1, 4)
        pixels = bytearray(CPU_IMAGE_BYTES)
        for y in range(side):
            row = y * side * 3
            for x in range(side):
                for c in range(3):
                    k = row + x * 3 + c
                    pixels[k] = (x * dx + y * dy + 40 * c + (noise[k] & 0x0F)) & 0xFF
        pool.append(zlib.compress(bytes(pixels), 6))
    return pool


def _cpu_loader_worker(worker, workers, total, batch, names, free_q, ready_q):
    die_with_parent()
    from multiprocessing import shared_memory  # pylint: disable=import-outside-toplevel

    blocks = [shared_memory.SharedMemory(name=name) for name in names]
    try:
        encoded = _encoded_images(worker)
        plane = CPU_IMAGE_BYTES // 3
        payload_len = batch * CPU_IMAGE_BYTES
        for seq in range(worker, total, workers):
            slot = free_q.get()
            buf = blocks[slot].buf
            for i in range(batch):
                # decode, normalise, interleaved HWC -> planar CHW straight into shared memory
                raw = zlib.decompress(encoded[(seq * batch + i) % CPU_IMAGE_POOL]).translate(NORMALISE_LUT)
                base = HEADER_BYTES + i * CPU_IMAGE_BYTES
                for c in range(3):
                    buf[base + c * plane : base + (c + 1) * plane] = raw[c::3]
            payload = buf[HEADER_BYTES : HEADER_BYTES + payload_len]
            crc = zlib.crc32(payload)
            payload.release()
            BATCH_HEADER.pack_into(buf, 0, seq, crc)
            del buf
            ready_q.put((seq, slot))
    finally:
        for block in blocks:
            block.close()


def wait_ready(ready_q, procs, what):
    """The next item a worker put on ``ready_q``; a worker that died fails the workload."""
    import queue  # pylint: disable=import-outside-toplevel

    while True:
        try:
            return ready_q.get(timeout=5)
        except queue.Empty:
            dead = [proc.exitcode for proc in procs if proc.exitcode not in (None, 0)]
            if dead:
                raise WorkloadError("%s worker died with exit code %s" % (what, dead[0])) from None


def stop_workers(procs):
    """Terminate the worker processes still running and wait for them."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)


def wl_cpu_dataloader(p):
    from multiprocessing import shared_memory  # pylint: disable=import-outside-toplevel

    ctx = mp_context()
    batch, workers = p["size"], p["workers"]
    if workers < 1:
        raise WorkloadError("cpu_dataloader needs at least 1 worker process")
    total = p["warmup"] + p["steps"]
    payload_len = batch * CPU_IMAGE_BYTES
    slots = 2 * workers  # prefetch factor 2, as torch's DataLoader
    blocks, procs = [], []
    try:
        for _slot in range(slots):
            blocks.append(shared_memory.SharedMemory(create=True, size=HEADER_BYTES + payload_len))
        free_q, ready_q = ctx.Queue(), ctx.Queue()
        for slot in range(slots):
            free_q.put(slot)
        names = [block.name for block in blocks]
        for w in range(workers):
            proc = ctx.Process(target=_cpu_loader_worker, args=(w, workers, total, batch, names, free_q, ready_q))
            proc.daemon = True
            proc.start()
            procs.append(proc)
        seen = set()

        def step():
            t0 = time.perf_counter()
            seq, slot = wait_ready(ready_q, procs, "cpu_dataloader")
            buf = blocks[slot].buf
            got_seq, crc = BATCH_HEADER.unpack_from(buf, 0)
            payload = buf[HEADER_BYTES : HEADER_BYTES + payload_len]
            ok = zlib.crc32(payload) == crc and got_seq == seq  # the per-batch reduction
            payload.release()
            del buf
            free_q.put(slot)
            elapsed = ms_since(t0)
            if not ok or seq in seen:
                raise WorkloadError("batch %d arrived corrupted through shared memory" % seq)
            seen.add(seq)
            return elapsed

        monitor = Monitor()
        samples = timed_loop(step, p["steps"], p["warmup"], monitor)
        for proc in procs:
            proc.join(timeout=10)
    finally:
        stop_workers(procs)
        for block in blocks:
            block.close()
            block.unlink()
    return {
        "samples_ms": samples,
        "work_per_step": float(batch),
        "work_unit": "samples",
        "info": {
            "workers": workers,
            "image": "3x64x64 uint8 (zlib-decoded)",
            "shared_memory_slots": slots,
            "batch_bytes": payload_len,
            "start_method": ctx.get_start_method(),
        },
        "conditions": monitor.result(),
    }


def _pong(name, size, total, ping, pong):
    die_with_parent()
    from multiprocessing import shared_memory  # pylint: disable=import-outside-toplevel

    block = shared_memory.SharedMemory(name=name)
    buf = block.buf
    try:
        for _trip in range(total):
            if not ping.acquire(timeout=30):
                return
            seq = struct.unpack_from("<Q", buf, 0)[0]
            buf[8 + size : 8 + 2 * size] = buf[8 : 8 + size]  # echo the message back
            struct.pack_into("<Q", buf, 0, seq + 1)
            pong.release()
    finally:
        del buf
        block.close()


def wl_shm_pingpong(p):
    from multiprocessing import shared_memory  # pylint: disable=import-outside-toplevel

    ctx = mp_context()
    size = p["size"]
    total = p["warmup"] + p["steps"]
    block = shared_memory.SharedMemory(create=True, size=8 + 2 * size)
    proc = None
    try:
        buf = block.buf
        ping, pong = ctx.Semaphore(0), ctx.Semaphore(0)
        proc = ctx.Process(target=_pong, args=(block.name, size, total, ping, pong))
        proc.daemon = True
        proc.start()
        counter = [0]

        def step():
            i = counter[0]
            counter[0] += 1
            message = bytes(((i + k) & 0xFF) for k in range(8)) * (size // 8 + 1)
            message = message[:size]
            t0 = time.perf_counter()
            struct.pack_into("<Q", buf, 0, 2 * i)
            buf[8 : 8 + size] = message
            ping.release()
            if not pong.acquire(timeout=30):
                raise WorkloadError("shm_pingpong peer did not answer within 30 s")
            elapsed = ms_since(t0)
            if struct.unpack_from("<Q", buf, 0)[0] != 2 * i + 1 or bytes(buf[8 + size : 8 + 2 * size]) != message:
                raise WorkloadError("shm_pingpong round trip %d returned a wrong message" % i)
            return elapsed

        monitor = Monitor()
        samples = timed_loop(step, p["steps"], p["warmup"], monitor)
        proc.join(timeout=10)
    finally:
        if proc is not None and proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)
        block.close()
        block.unlink()
    return {
        "samples_ms": samples,
        "work_per_step": 1.0,
        "work_unit": "steps",
        "info": {
            "message_bytes": size,
            "handshake": "semaphores (futex wake-ups)",
            "start_method": ctx.get_start_method(),
        },
        "conditions": monitor.result(),
    }


def wl_mem_touch(p):
    nbytes = p["size"] * 1024 * 1024
    page = 4096
    ones = b"\x01" * (nbytes // page)
    checked = []

    def step():
        t0 = time.perf_counter()
        area = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)  # anonymous, private: THP-eligible
        area[::page] = ones  # one write per 4 KiB page faults every page in
        if not checked:
            checked.append(area[::page] == ones)
        area.close()
        return ms_since(t0)

    monitor = Monitor()
    samples = timed_loop(step, p["steps"], p["warmup"], monitor)
    if checked != [True]:
        raise WorkloadError("mem_touch read back different bytes than it wrote")
    return {
        "samples_ms": samples,
        "work_per_step": float(nbytes),
        "work_unit": "B",
        "info": {"bytes_per_step": nbytes, "touch_stride": page},
        "conditions": monitor.result(),
    }


def _matmul(a, b_t):
    """a (n x k) times b where b_t is b transposed (m x k): n x m, lists of lists."""
    return [[sum(x * y for x, y in zip(row, col)) for col in b_t] for row in a]


def _transpose(m):
    return [list(col) for col in zip(*m)]


def wl_cpu_train_step(p):
    batch, width, lr = p["size"], 32, 0.5
    rng = random.Random(1234)
    teacher = [[rng.gauss(0.0, 1.0 / width**0.5) for _col in range(width)] for _row in range(width)]
    teacher_t = _transpose(teacher)
    pool = []
    for _batch in range(8):
        x = [[rng.gauss(0.0, 1.0) for _col in range(width)] for _row in range(batch)]
        pool.append((x, _transpose(x), _matmul(x, teacher_t)))
    weights = [[0.0] * width for _row in range(width)]  # width_in x width_out
    losses = []
    counter = [0]

    def step():
        x, x_t, target = pool[counter[0] % len(pool)]
        counter[0] += 1
        t0 = time.perf_counter()
        out = _matmul(x, _transpose(weights))  # forward: batch x width_out
        err = [[o - t for o, t in zip(orow, trow)] for orow, trow in zip(out, target)]
        scale = 2.0 / (batch * width)
        grad = _matmul(x_t, _transpose(err))  # backward: x^T err, width_in x width_out
        for wrow, grow in zip(weights, grad):
            for j, g in enumerate(grow):
                wrow[j] -= lr * scale * g
        losses.append(sum(e * e for row in err for e in row) / (batch * width))
        return ms_since(t0)

    monitor = Monitor()
    samples = timed_loop(step, p["steps"], p["warmup"], monitor)
    return {
        "samples_ms": samples,
        "work_per_step": float(batch),
        "work_unit": "samples",
        "info": {
            "model": "linear %dx%d, MSE, SGD lr %s" % (width, width, lr),
            "loss_first": losses[0],
            "loss_last": losses[-1],
        },
        "conditions": monitor.result(),
    }


# The CPU workloads, one row each (``base.Workload`` says what the fields are; registry.py
# gathers the tables). A new CPU workload: its ``wl_<name>`` function above and its row here.
# shm_pingpong does not run live: its steps of 6-12 us are shorter than printing a step line,
# which would then be what a window measures (180,000 lines a second, seen on this project's
# CI machine).
CPU_TABLE = (
    Workload("cpu_dataloader", wl_cpu_dataloader, CPU, 64, "batch size (3x64x64 images)", live=True, min_workers=1),
    Workload("shm_pingpong", wl_shm_pingpong, CPU, 64, "message bytes"),
    Workload("mem_touch", wl_mem_touch, CPU, 32, "MiB mapped and touched per step", live=True),
    Workload("cpu_train_step", wl_cpu_train_step, CPU, 16, "batch size (samples)", live=True),
)
