# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The workload program's own first part: workload names, defaults, the conditions monitor.

The workload program of ``stacktune.gpu.bench`` is one self-contained file on the host,
assembled from parts (``workloads/source.py``, ``PARTS``): the process helpers
(``common/hostproc.py``), the hardware constants, this file, the GPU workloads (``gpu.py``),
the CPU workloads (``cpu.py``), the file workload (``files.py``), the live session
(``live.py``) and the entry point with the block runner (``program.py``). The bench
module writes it to a private temporary file and runs it as ``[python, file, json-args]``
under the interpreter named by its ``python`` option (for GPU workloads one with PyTorch).
The program prints exactly one JSON document on its standard output: the per-step samples
(warm-up already discarded), the amount of work per step and the conditions (clocks,
temperatures, throttle reasons, load) read inside the measuring process.

Every part therefore imports nothing but the standard library at module level, and other
parts only in its one collection import block (which the assembly leaves out: the names are
defined above it in the assembled file). PyTorch and pynvml are imported inside the
functions that need them, so the CPU workloads run on a bare python3 with no third-party
package at all. The bench module and its helpers import the names and defaults here too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import os
import threading
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import read_first_line
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import CLOCKS_EVENT_REASONS


GPU_WORKLOADS = ("gemm", "h2d_pinned", "h2d_pageable", "dataloader", "allreduce", "train_step")


CPU_WORKLOADS = ("cpu_dataloader", "shm_pingpong", "mem_touch", "cpu_train_step", "file_dataloader")


# Workloads that read and write files in the data directory (the bench module's data_dir): without
# one they cannot run.
DATA_DIR_WORKLOADS = ("file_dataloader",)


# Default of the `size` option per workload, and what the number means.
DEFAULT_SIZE = {
    "gemm": 8192,
    "h2d_pinned": 256,
    "h2d_pageable": 256,
    "dataloader": 64,
    "allreduce": 256,
    "train_step": 32,
    "cpu_dataloader": 64,
    "shm_pingpong": 64,
    "mem_touch": 32,
    "cpu_train_step": 16,
    "file_dataloader": 32,
}


# Measured steps per block when none are given, from ``calibration.steps_for_noise`` on blocks
# recorded through the block runner (tests/unit/fixtures/blocks). Longer blocks where blocks
# hardly differ from each other: three times the start-up's worth of steps for GEMM and
# all-reduce. Shorter ones where blocks differ more than their steps do: on the one-H200 host
# DataLoader blocks of 200 and 400 steps resolved the throughput equally per second of wall
# time (block-to-block spread 4.6% and 3.6%), so 200 buys twice the blocks (and looks) for the
# gate's minimum; the training step likewise (spread 4.6% at 400 steps). Not shorter than that:
# 80-step DataLoader blocks resolved much less per second there, the workers' bursts spanning
# more than the batches the rule looks at. ``make calibrate`` prints the choice for a host.
DEFAULT_STEPS = {
    "gemm": 1800,
    "allreduce": 5000,
    "dataloader": 200,
    "train_step": 200,
}


DEFAULT_STEPS_OTHER = 400


SIZE_MEANING = {
    "gemm": "matrix dimension N (bf16 NxN @ NxN)",
    "h2d_pinned": "MiB copied per step",
    "h2d_pageable": "MiB copied per step",
    "dataloader": "batch size (3x224x224 images)",
    "allreduce": "MiB of float32 reduced per step",
    "train_step": "batch size (sequences of 256 tokens)",
    "cpu_dataloader": "batch size (3x64x64 images)",
    "shm_pingpong": "message bytes",
    "mem_touch": "MiB mapped and touched per step",
    "cpu_train_step": "batch size (samples)",
    "file_dataloader": "batch size (files of 64-256 KiB)",
}


MONITOR_INTERVAL_S = 0.1


class WorkloadError(Exception):
    """A workload cannot run here; the message says why in words a user can act on."""


def decode_throttle_reasons(mask):
    """Names of the NVML clock-event reason bits set in ``mask`` (unknown bits as hex)."""
    mask = int(mask)
    names = [name for bit, name in CLOCKS_EVENT_REASONS if mask & bit]
    known = 0
    for bit, _name in CLOCKS_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append("unknown_0x%x" % bit)
            rest &= ~bit
        bit <<= 1
    return names


# ---------------------------------------------------------------------------------------
# Conditions: host state and GPU state (NVML), read before, during and after a block.


def _bracketed(text):
    """The selected value of a sysfs choice file such as ``always [madvise] never``."""
    if not text or "[" not in text:
        return text
    return text.split("[", 1)[1].split("]", 1)[0]


def host_conditions():
    """Load, CPU count, affinity, /dev/shm size, THP mode and available memory."""
    out = {"cpu_count": os.cpu_count()}
    try:
        out["affinity_cpus"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        out["affinity_cpus"] = None
    try:
        load = os.getloadavg()
        out["loadavg_1m"], out["loadavg_5m"], out["loadavg_15m"] = (round(v, 2) for v in load)
    except (AttributeError, OSError):
        out["loadavg_1m"] = out["loadavg_5m"] = out["loadavg_15m"] = None
    try:
        st = os.statvfs("/dev/shm")
        out["shm_size_bytes"] = st.f_blocks * st.f_frsize
        out["shm_free_bytes"] = st.f_bavail * st.f_frsize
    except (AttributeError, OSError):
        out["shm_size_bytes"] = out["shm_free_bytes"] = None
    out["thp_enabled"] = _bracketed(read_first_line("/sys/kernel/mm/transparent_hugepage/enabled"))
    out["mem_available_bytes"] = None
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    out["mem_available_bytes"] = int(line.split()[1]) * 1024
                    break
    except (IOError, OSError, ValueError):
        pass
    return out


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _strip_uuid(value):
    value = _text(value).strip().lower()
    for prefix in ("gpu-", "mig-"):
        if value.startswith(prefix):
            return value[len(prefix) :]
    return value


class Monitor:
    """Reads host and GPU conditions before and after a block, and polls GPUs during it.

    ``gpus`` is a list of ``{"index": n, "uuid": "..."|None}``: the GPU is found in NVML
    by UUID when one is given (robust against CUDA_VISIBLE_DEVICES reordering), else by
    index. Without pynvml, or when NVML cannot start, GPU state is left out and
    ``nvml`` says why; the host part is always there.
    """

    def __init__(self, gpus=(), interval=MONITOR_INTERVAL_S):
        self.interval = interval
        self.nvml = None
        self.handles = []
        self.nvml_status = "not used"
        self.before = None
        self.after = None
        self.during = {}
        self._stop = threading.Event()
        self._thread = None
        gpus = list(gpus)
        if gpus:
            self._open_nvml(gpus)

    def _open_nvml(self, gpus):
        try:
            import pynvml  # pylint: disable=import-outside-toplevel

            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - any NVML failure only removes GPU data
            self.nvml_status = "unavailable: %s" % (exc,)
            return
        self.nvml = pynvml
        try:
            by_uuid = {}
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                with contextlib.suppress(pynvml.NVMLError):
                    by_uuid[_strip_uuid(pynvml.nvmlDeviceGetUUID(handle))] = (i, handle)
            for gpu in gpus:
                uuid = _strip_uuid(gpu["uuid"]) if gpu.get("uuid") else None
                if uuid and uuid in by_uuid:
                    index, handle = by_uuid[uuid]
                else:
                    index = int(gpu["index"])
                    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                self.handles.append((index, handle))
            self.nvml_status = "ok"
        except Exception as exc:  # noqa: BLE001
            self.handles = []
            self.nvml_status = "unavailable: %s" % (exc,)

    def _call(self, name, *args):
        func = getattr(self.nvml, name, None)
        if func is None:
            return None
        try:
            return func(*args)
        except Exception:  # noqa: BLE001 - a field the GPU does not support stays None
            return None

    def _reasons(self, handle):
        mask = self._call("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if mask is None:
            mask = self._call("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return None if mask is None else decode_throttle_reasons(mask)

    def gpu_state(self, index, handle):
        nv = self.nvml
        power_mw = self._call("nvmlDeviceGetPowerUsage", handle)
        return {
            "index": index,
            "name": _text(self._call("nvmlDeviceGetName", handle) or ""),
            "sm_clock_mhz": self._call("nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": self._call("nvmlDeviceGetClockInfo", handle, nv.NVML_CLOCK_MEM),
            "temperature_c": self._call("nvmlDeviceGetTemperature", handle, nv.NVML_TEMPERATURE_GPU),
            "power_w": None if power_mw is None else round(power_mw / 1000.0, 1),
            "throttle_reasons": self._reasons(handle),
        }

    def snapshot(self):
        return {
            "host": host_conditions(),
            "gpus": [self.gpu_state(index, handle) for index, handle in self.handles],
        }

    def _poll(self):
        while not self._stop.is_set():
            for index, handle in self.handles:
                self._record(index, handle)
            self._stop.wait(self.interval)

    def _record(self, index, handle):
        entry = self.during.setdefault(
            str(index),
            {
                "polls": 0,
                "throttle_reasons_seen": [],
                "sm_clock_min_mhz": None,
                "sm_clock_max_mhz": None,
                "temperature_max_c": None,
                "power_max_w": None,
            },
        )
        entry["polls"] += 1
        for name in self._reasons(handle) or ():
            if name not in entry["throttle_reasons_seen"]:
                entry["throttle_reasons_seen"].append(name)
        sm = self._call("nvmlDeviceGetClockInfo", handle, self.nvml.NVML_CLOCK_SM)
        if sm is not None:
            lo, hi = entry["sm_clock_min_mhz"], entry["sm_clock_max_mhz"]
            entry["sm_clock_min_mhz"] = sm if lo is None else min(lo, sm)
            entry["sm_clock_max_mhz"] = sm if hi is None else max(hi, sm)
        temp = self._call("nvmlDeviceGetTemperature", handle, self.nvml.NVML_TEMPERATURE_GPU)
        if temp is not None and (entry["temperature_max_c"] is None or temp > entry["temperature_max_c"]):
            entry["temperature_max_c"] = temp
        power_mw = self._call("nvmlDeviceGetPowerUsage", handle)
        if power_mw is not None:
            watts = round(power_mw / 1000.0, 1)
            if entry["power_max_w"] is None or watts > entry["power_max_w"]:
                entry["power_max_w"] = watts

    def begin(self):
        self.before = self.snapshot()
        if self.handles:
            self._thread = threading.Thread(target=self._poll, name="stacktune-nvml-poll")
            self._thread.daemon = True
            self._thread.start()

    def end(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.before is not None and self.after is None:
            self.after = self.snapshot()

    def result(self):
        if self.nvml is not None:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
            self.nvml = None
        return {"before": self.before, "after": self.after, "during": self.during, "nvml": self.nvml_status}


# Live mode (the gate's live trial): one process runs a workload until it is ended, printing
# each step's time as it is measured, one JSON line ``{"step_ms": 12.5}`` per step, flushed, the
# way a user's own program streams (docs/bench.md "A program for live trials"). ``run`` in
# program.py sets ``out`` (the result stream), ``stop`` (set by SIGTERM) and ``max_s``.
LIVE = {"out": None, "stop": None, "max_s": None}
# Steps a workload sizes itself for in live mode (its data set, its batches): it is ended long
# before, by the trial.
LIVE_STEPS = 10**6
# Workloads that can run for a whole live trial (the others size files or ranks per block;
# shm_pingpong's steps of 6-12 us are shorter than printing a step line, which would then be
# what a window measures: 180,000 lines a second, seen on this project's CI machine).
LIVE_WORKLOADS = (
    "gemm",
    "h2d_pinned",
    "h2d_pageable",
    "dataloader",
    "train_step",
    "cpu_dataloader",
    "mem_touch",
    "cpu_train_step",
)
# Sizes a workload takes in live mode where they differ from DEFAULT_SIZE. On one H200 the
# train_step of batch 32 (12 ms steps) varied by 4.6% between windows of 250 steps inside one
# process, at batch 128 (33 ms, GPU-bound) by 0.11% between windows of 60 steps
# (tests/gpu/probe_live_memory.py, docs/benchmarks.md): a live trial resolves the second.
LIVE_SIZE = {"train_step": 128}
# Steps kept for the result document a live run prints when it is ended.
LIVE_KEEP = 2000


def live_loop(step, warmup, monitor):
    """Live mode's loop: ``warmup`` unmeasured steps, then one line per step until stopped."""
    for _warm in range(warmup):
        step()
    out, stop = LIVE["out"], LIVE["stop"]
    deadline = time.monotonic() + float(LIVE["max_s"] or 3600.0)
    monitor.begin()
    samples = []
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            ms = float(step())
            samples.append(ms)
            if len(samples) > 2 * LIVE_KEEP:
                del samples[:-LIVE_KEEP]
            try:
                out.write('{"step_ms": %.6f}\n' % ms)
                out.flush()
            except (BrokenPipeError, OSError):
                break  # nobody reads any more: the runner is gone
    finally:
        monitor.end()
    return samples[-LIVE_KEEP:]


def timed_loop(step, steps, warmup, monitor):
    """Run ``warmup`` unmeasured steps, then ``steps`` measured ones; ``step`` returns ms.
    In live mode (``LIVE``), steps until the process is told to stop instead."""
    if LIVE["out"] is not None:
        return live_loop(step, warmup, monitor)
    for _warm in range(warmup):
        step()
    monitor.begin()
    samples = []
    try:
        for _step in range(steps):
            samples.append(float(step()))
    finally:
        monitor.end()
    return samples


def ms_since(t0):
    return (time.perf_counter() - t0) * 1000.0
