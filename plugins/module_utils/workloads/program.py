# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Workload programs of ``stacktune.gpu.bench``.

This file is two things at once:

* a module_utils file, from which the bench module and its helpers import constants
  (workload names, default sizes, throttle-reason names), the condition monitor and
  ``run_process`` (how a workload process is started, timed out and cleaned up);
* a self-contained program. The bench module reads this file's source, writes it to a
  private temporary file and runs it as ``[python, file, json-args]`` under the
  interpreter named by its ``python`` option (for GPU workloads one with PyTorch). The
  program prints exactly one JSON document on its standard output: the per-step samples
  (warm-up already discarded), the amount of work per step and the conditions (clocks,
  temperatures, throttle reasons, load) read inside the measuring process.

It must therefore import nothing but the standard library at module level. PyTorch and
pynvml are imported inside the functions that need them, so the CPU workloads run on a
bare python3 with no third-party package at all.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import math
import mmap
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib

GPU_WORKLOADS = ("gemm", "h2d_pinned", "h2d_pageable", "dataloader", "allreduce", "train_step")
CPU_WORKLOADS = ("cpu_dataloader", "shm_pingpong", "mem_touch", "cpu_train_step")

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
}
# Measured steps per block when none are given. Longer blocks where ``_blocks.steps_for_noise``
# found that blocks recorded on H200 hosts (tests/unit/fixtures/blocks) hardly differ from each
# other, with the start-up a block cost there through the block runner: three times the
# start-up's worth of steps for GEMM and all-reduce. Where it asked for shorter blocks
# (DataLoader, copies, and the training step since the runner imports its optimiser's modules
# once) the default stays at 400: on the one-H200 host 80-step DataLoader blocks resolved less
# per second than 400-step ones. ``make calibrate`` prints the choice for a host's own noise.
DEFAULT_STEPS = {
    "gemm": 1800,
    "allreduce": 5000,
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
}

# NVML clock-event ("throttle") reason bits, as nvml.h defines them.
THROTTLE_REASON_BITS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)

MONITOR_INTERVAL_S = 0.1
IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)


class WorkloadError(Exception):
    """A workload cannot run here; the message says why in words a user can act on."""


def decode_throttle_reasons(mask):
    """Names of the NVML clock-event reason bits set in ``mask`` (unknown bits as hex)."""
    mask = int(mask)
    names = [name for bit, name in THROTTLE_REASON_BITS if mask & bit]
    known = 0
    for bit, _name in THROTTLE_REASON_BITS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append("unknown_0x%x" % bit)
            rest &= ~bit
        bit <<= 1
    return names


def parse_cpu_list(text):
    """Parse a CPU list such as ``0-7,16,18-19`` into a sorted list of CPU numbers."""
    cpus = set()
    text = str(text).strip()
    if not text:
        raise ValueError("empty CPU list")
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise ValueError("empty element in CPU list %r" % text)
        if "-" in part:
            lo, _sep, hi = part.partition("-")
            if not (lo.strip().isdigit() and hi.strip().isdigit()):
                raise ValueError("bad range %r in CPU list %r" % (part, text))
            lo, hi = int(lo), int(hi)
            if lo > hi:
                raise ValueError("range %r in CPU list %r runs backwards" % (part, text))
            cpus.update(range(lo, hi + 1))
        elif part.isdigit():
            cpus.add(int(part))
        else:
            raise ValueError("bad element %r in CPU list %r" % (part, text))
    return sorted(cpus)


# ---------------------------------------------------------------------------------------
# Conditions: host state and GPU state (NVML), read before, during and after a block.


def _read_first_line(path):
    try:
        with open(path) as handle:
            return handle.readline().strip()
    except (IOError, OSError):
        return None


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
    out["thp_enabled"] = _bracketed(_read_first_line("/sys/kernel/mm/transparent_hugepage/enabled"))
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


@contextlib.contextmanager
def private_program(source, prefix, name="program.py"):
    """A private folder (mode 0700) holding ``source`` as ``name`` (mode 0600).

    Yields ``(folder, path)``; the folder and everything the program left in it are
    removed afterwards. Every program stacktune runs on a host (workloads, acceptance,
    the NCCL transport check) runs from one of these, through :func:`run_process`.
    """
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        os.chmod(folder, 0o700)
        path = os.path.join(folder, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(source)
        yield folder, path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


PR_SET_PDEATHSIG = 1


def _libc_prctl():
    """libc's prctl, or None where there is none (resolved before any fork)."""
    try:
        import ctypes  # pylint: disable=import-outside-toplevel

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, ImportError):
        return None


def die_with_parent(prctl=None, parent=None):
    """Have the kernel SIGKILL this process when the process that started it dies (Linux).

    Every program stacktune starts (through :func:`run_process`) and every worker process a
    workload starts calls it first, so a killed bench module or workload leaves no process
    behind. ``parent``: the pid the caller expects as parent; if it is already gone, exit.
    """
    prctl = prctl or _libc_prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def run_process(argv, env, timeout, cpus=None, cwd=None, tick=None, tick_every=30.0):
    """Run argv (no shell) in its own session; return (rc, stdout, stderr, timed_out).

    On timeout the whole process group (the workload and every worker it started) is
    killed. With ``cpus``, the calling thread's CPU affinity is set for the duration of
    the fork (the child inherits it) and restored afterwards. The child dies with its
    parent (``die_with_parent``). ``tick()`` is called every ``tick_every`` seconds while
    the program runs; when it raises, the process group is killed and the exception
    propagates. Start failures raise OSError.
    """
    saved = None
    prctl = _libc_prctl()
    parent = os.getpid()
    try:
        if cpus:
            saved = os.sched_getaffinity(0)
            os.sched_setaffinity(0, cpus)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
            preexec_fn=lambda: die_with_parent(prctl, parent),  # noqa: PLW1509 - no lock is taken in it
        )
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)
    timed_out = False
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            out, err = proc.communicate(timeout=max(0.0, min(left, tick_every) if tick else left))
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() < deadline and tick is not None:
                try:
                    tick()
                    continue
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate()
                    raise
            timed_out = True
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            break
    return proc.returncode, _decode(out), _decode(err), timed_out


def start_detached(argv, cwd, log_path):
    """Start a program that outlives its caller (the block runner): its own session, no
    standard input, its output to ``log_path``. Returns the Popen object."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )


def _decode(data):
    return (data or b"").decode("utf-8", "replace")


def timed_loop(step, steps, warmup, monitor):
    """Run ``warmup`` unmeasured steps, then ``steps`` measured ones; ``step`` returns ms."""
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


def _ms_since(t0):
    return (time.perf_counter() - t0) * 1000.0


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
        return _ms_since(t0)

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
        return _ms_since(t0)

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
    losses = []

    def body():
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())

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


# ---------------------------------------------------------------------------------------
# CPU workloads (standard library only).

CPU_IMAGE_SIDE = 64
CPU_IMAGE_BYTES = 3 * CPU_IMAGE_SIDE * CPU_IMAGE_SIDE
CPU_IMAGE_POOL = 16
BATCH_HEADER = struct.Struct("<QI")  # batch sequence number, CRC-32 of the payload
HEADER_BYTES = 16
# Lookup table standing in for per-pixel normalisation (contrast stretch around 128).
NORMALISE_LUT = bytes(min(255, max(0, int((v - 120) * 1.25 + 128))) for v in range(256))


def _mp_context():
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


def wl_cpu_dataloader(p):
    import queue  # pylint: disable=import-outside-toplevel
    from multiprocessing import shared_memory  # pylint: disable=import-outside-toplevel

    ctx = _mp_context()
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
            while True:
                try:
                    seq, slot = ready_q.get(timeout=5)
                    break
                except queue.Empty:
                    dead = [proc.exitcode for proc in procs if proc.exitcode not in (None, 0)]
                    if dead:
                        raise WorkloadError("cpu_dataloader worker died with exit code %s" % dead[0]) from None
            buf = blocks[slot].buf
            got_seq, crc = BATCH_HEADER.unpack_from(buf, 0)
            payload = buf[HEADER_BYTES : HEADER_BYTES + payload_len]
            ok = zlib.crc32(payload) == crc and got_seq == seq  # the per-batch reduction
            payload.release()
            del buf
            free_q.put(slot)
            elapsed = _ms_since(t0)
            if not ok or seq in seen:
                raise WorkloadError("batch %d arrived corrupted through shared memory" % seq)
            seen.add(seq)
            return elapsed

        monitor = Monitor()
        samples = timed_loop(step, p["steps"], p["warmup"], monitor)
        for proc in procs:
            proc.join(timeout=10)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
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

    ctx = _mp_context()
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
            elapsed = _ms_since(t0)
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
        return _ms_since(t0)

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
        return _ms_since(t0)

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


WORKLOAD_FUNCS = {
    "gemm": wl_gemm,
    "h2d_pinned": wl_h2d_pinned,
    "h2d_pageable": wl_h2d_pageable,
    "dataloader": wl_dataloader,
    "allreduce": wl_allreduce,
    "train_step": wl_train_step,
    "cpu_dataloader": wl_cpu_dataloader,
    "shm_pingpong": wl_shm_pingpong,
    "mem_touch": wl_mem_touch,
    "cpu_train_step": wl_cpu_train_step,
}


def resolve_auto():
    """``gemm`` when this interpreter has a CUDA-enabled torch that sees a GPU, else ``cpu_dataloader``."""
    try:
        import torch  # pylint: disable=import-outside-toplevel

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return "gemm"
    except Exception:  # noqa: BLE001 - a broken torch install means no GPU workload
        pass
    return "cpu_dataloader"


def run(cfg):
    """Run one block as described by ``cfg`` and return the result document."""
    name = cfg["workload"]
    if name == "auto":
        name = resolve_auto()
    if name not in WORKLOAD_FUNCS:
        raise WorkloadError("unknown workload %r" % name)
    cpus = cfg.get("cpus")
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except (AttributeError, OSError, ValueError) as exc:
            raise WorkloadError("cannot pin the workload to CPUs %s: %s" % (cpus, exc)) from None
    params = {
        "steps": int(cfg["steps"]) if cfg.get("steps") is not None else DEFAULT_STEPS.get(name, DEFAULT_STEPS_OTHER),
        "warmup": int(cfg["warmup"]),
        "size": int(cfg["size"]) if cfg.get("size") is not None else DEFAULT_SIZE[name],
        "workers": int(cfg.get("workers", 4)),
        "device": int(cfg.get("device", 0)),
    }
    t0 = time.perf_counter()
    out = WORKLOAD_FUNCS[name](params)
    out["measure_s"] = round(time.perf_counter() - t0, 3)
    out["workload"] = name
    out["size"] = params["size"]
    out["size_meaning"] = SIZE_MEANING[name]
    out["warmup"] = params["warmup"]
    out["python"] = sys.executable
    out["python_version"] = "%d.%d.%d" % sys.version_info[:3]
    try:
        out["cpus"] = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        out["cpus"] = None
    return out


# ---------------------------------------------------------------------------------------
# The block runner: a warm parent that forks one fresh process per block.
#
# Started once per layer measurement (bench ``runner_state=started``), it imports what the
# workloads import (torch, without initialising CUDA) and then waits on a private unix socket.
# Each block it is asked for runs in a child forked for it: a process of its own (its own
# session, CUDA context, NCCL initialisation, its own reading of /etc/nccl.conf, limits and
# /dev/shm), so a block stays the unit of noise; only the interpreter's start and the imports
# are paid once. It ends when asked, when it is idle for ``idle_s``, when its folder is
# removed, or as soon as its run no longer holds the host's lease.


def _lease_holder(lock_path):
    try:
        with open(lock_path) as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    holder = data.get("holder") if isinstance(data, dict) and "holder" in data else data
    if not isinstance(holder, dict) or float(holder.get("expires_ts", 0)) <= time.time():
        return None
    return holder.get("run_id")


def _run_child(request, folder, number, listener, conn):
    """In the forked child: one block, its result document to a file, then exit."""
    listener.close()
    conn.close()
    os.setsid()
    die_with_parent()
    os.environ.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
    out = os.open(os.path.join(folder, "out-%d" % number), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(os.path.join(folder, "err-%d" % number), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    code = 1
    try:
        code = main(["runner", json.dumps(request["args"])])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve_one(listener, conn, folder, number):
    """Read one request, fork its block, wait for it (or for a kill), answer with its files."""
    conn.settimeout(30)
    raw = b""
    while not raw.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            return False
        raw += chunk
    request = json.loads(raw.decode("utf-8"))
    if request.get("stop"):
        conn.sendall(b'{"stopped": true}\n')
        return True
    pid = os.fork()
    if pid == 0:
        _run_child(request, folder, number, listener, conn)
    conn.setblocking(False)
    rc = None
    while rc is None:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
            break
        try:
            said = conn.recv(64)
        except (BlockingIOError, InterruptedError):
            said = None
        except OSError:
            said = b""
        if said is not None:  # "kill" or the client gone (timeout, lost lease, killed module)
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            rc = -signal.SIGKILL
            break
        time.sleep(0.05)
    conn.setblocking(True)
    answer = {"rc": rc, "out": os.path.join(folder, "out-%d" % number), "err": os.path.join(folder, "err-%d" % number)}
    with contextlib.suppress(OSError):
        conn.sendall((json.dumps(answer) + "\n").encode("utf-8"))
    return False


# What the block runner imports before it forks, per workload: torch for every GPU workload,
# and what a workload's own set-up would otherwise import anew in every block. On the one-H200
# host a train_step block spent 6.9-7.4 s building its model and optimiser when the parent had
# imported torch only (the optimiser's first use imports torch._dynamo), 0.53-0.58 s when the
# parent had imported these too (docs/benchmarks.md). None of them initialises CUDA.
RUNNER_PRELOAD = {
    "train_step": ("torch._dynamo", "torch.optim"),
    "dataloader": ("torch.utils.data",),
    "allreduce": ("torch.distributed",),
}


def runner_preload(workloads):
    """The modules a runner for ``workloads`` imports, in order (none for CPU workloads only)."""
    names = [w for w in workloads if w in GPU_WORKLOADS or w == "auto"]
    if not names:
        return []
    modules = ["torch"]
    for name in names:
        modules.extend(m for m in RUNNER_PRELOAD.get(name, ()) if m not in modules)
    return modules


def _preload(modules, folder):
    """Import ``modules`` and write what each took to ``ready.json`` in ``folder``."""
    imports = []
    for module in modules:
        t0 = time.perf_counter()
        error = None
        try:
            __import__(module)
        except Exception as exc:  # noqa: BLE001 - a block that needs it reports the error itself
            error = "%s: %s" % (type(exc).__name__, exc)
        imports.append({"module": module, "seconds": round(time.perf_counter() - t0, 3), "error": error})
    with open(os.path.join(folder, "ready.json"), "w") as handle:
        json.dump({"imports": imports}, handle)
    return imports


def serve(cfg):
    """The block runner's loop (see above). ``cfg``: socket, run_id, lock_path, idle_s, preload."""
    folder = os.path.dirname(cfg["socket"])
    _preload(cfg.get("preload") or (), folder)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(cfg["socket"] + ".tmp")
    os.chmod(cfg["socket"] + ".tmp", 0o600)
    listener.listen(4)
    os.rename(cfg["socket"] + ".tmp", cfg["socket"])  # there only once it answers
    listener.settimeout(1.0)
    last, number = time.time(), 0
    try:
        while True:
            if cfg.get("run_id") and _lease_holder(cfg["lock_path"]) != cfg["run_id"]:
                return 0
            if time.time() - last > float(cfg.get("idle_s", 900)) or not os.path.exists(cfg["socket"]):
                return 0
            try:
                conn, _addr = listener.accept()
            except socket.timeout:
                continue
            number += 1
            with conn:
                if _serve_one(listener, conn, folder, number):
                    return 0
            last = time.time()
    finally:
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


def main(argv):
    # Keep stdout for the one result document: anything a library prints goes to stderr.
    result_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    code = 0
    try:
        if len(argv) != 2:
            raise WorkloadError("usage: %s '<json arguments>'" % argv[0])
        cfg = json.loads(argv[1])
        if "serve" in cfg:
            return serve(cfg["serve"])
        result = run(cfg)
    except WorkloadError as exc:
        result, code = {"error": str(exc)}, 2
    except Exception as exc:  # noqa: BLE001 - reported as data, the module turns it into fail_json
        result = {"error": "%s: %s" % (type(exc).__name__, exc), "traceback": traceback.format_exc()}
        code = 1
    result_stream.write(json.dumps(result))
    result_stream.write("\n")
    result_stream.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
