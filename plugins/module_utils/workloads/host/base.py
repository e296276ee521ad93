# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The workload program's own first part: the row a workload is declared in, the conditions monitor.

The workload program of ``stacktune.gpu.bench`` is one self-contained file on the host,
assembled from parts (``workloads/source.py``, ``PARTS``): the process helpers
(``common/hostproc.py``), the hardware constants, this file, the GPU workloads (``gpu.py``),
the CPU workloads (``cpu.py``), the file workload (``files.py``), the registry of them all
(``registry.py``), the live session
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
package at all. Each workload is one :class:`Workload` row in the part that defines its
function; the names and defaults the collection uses are derived from them in ``registry.py``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import os
import threading
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import read_first_line
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import CLOCKS_EVENT_REASONS


# Measured steps per block of a workload whose row gives none (and the most step lines kept of
# a command's).
DEFAULT_STEPS_OTHER = 400


GPU = "gpu"


CPU = "cpu"


class Workload:
    """One built-in workload: its row in the table at the bottom of the part that defines its
    function (``GPU_TABLE`` in gpu.py, ``CPU_TABLE`` in cpu.py, ``FILE_TABLE`` in files.py).
    ``registry.py`` gathers the tables into ``WORKLOADS`` and derives every other name from it
    (``GPU_WORKLOADS``, ``DEFAULT_SIZE``, ``WORKLOAD_FUNCS`` ...).

    ``name``: the bench module's ``workload`` value. ``func``: ``wl_<name>(params)``, returns
    the result document. ``device``: :data:`GPU` (PyTorch and a GPU) or :data:`CPU` (the
    standard library only). ``size`` and ``meaning``: the default of the ``size`` option and
    what the number counts. ``steps``: measured steps per block when none are given. ``live``:
    whether it can run for a whole live trial (one process, stepping until ended; see
    ``live_loop``), with the size ``live_size`` there (None: ``size``). ``data_dir``: it reads
    and writes files in the bench module's ``data_dir`` and cannot run without one.
    ``min_gpus``, ``min_workers``: the GPUs (None: 1 for a GPU workload, else 0) and worker
    processes it needs. ``preload``: what
    the block runner imports for it before it forks, after torch for a GPU workload.
    """

    __slots__ = (
        "name",
        "func",
        "device",
        "size",
        "meaning",
        "steps",
        "live",
        "live_size",
        "data_dir",
        "min_gpus",
        "min_workers",
        "preload",
    )

    def __init__(
        self,
        name,
        func,
        device,
        size,
        meaning,
        *,
        steps=DEFAULT_STEPS_OTHER,
        live=False,
        live_size=None,
        data_dir=False,
        min_gpus=None,
        min_workers=0,
        preload=(),
    ):
        if device not in (GPU, CPU):
            raise ValueError("workload %s: device must be %r or %r, got %r" % (name, GPU, CPU, device))
        if live_size is not None and not live:
            raise ValueError("workload %s: a live_size without live" % name)
        self.name = name
        self.func = func
        self.device = device
        self.size = int(size)
        self.meaning = meaning
        self.steps = int(steps)
        self.live = bool(live)
        self.live_size = None if live_size is None else int(live_size)
        self.data_dir = bool(data_dir)
        self.min_gpus = (1 if device == GPU else 0) if min_gpus is None else int(min_gpus)
        self.min_workers = int(min_workers)
        self.preload = tuple(preload)

    def __repr__(self):
        return "Workload(%r, %s)" % (self.name, self.device)


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
