# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Raw snapshots of a running program and its host, as read: the diagnosis's only input.

A snapshot is ``{"t", "cost_s", "host": {name: /proc text or None}, "tree": {pid: {"stat",
"status"}}, "gpus": [NVML readings]}`` (``gpus`` only where NVML answers), and in the first
snapshot of a profile ``uses`` (what the program uses that a layer read at its start sets). The figures are
derived from consecutive snapshots in ``profile.py``, so snapshots recorded on another host
(benchmarks/gpu_timeline.py records them with :func:`take`) replay through the same arithmetic.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import os
import time

HOST_FILES = {
    "stat": "/proc/stat",
    "loadavg": "/proc/loadavg",
    "vmstat": "/proc/vmstat",
    "diskstats": "/proc/diskstats",
    "net_dev": "/proc/net/dev",
    "pressure_cpu": "/proc/pressure/cpu",
    "pressure_io": "/proc/pressure/io",
    "pressure_memory": "/proc/pressure/memory",
}


def read(path):
    """A file's text, or None where it cannot be read."""
    try:
        with open(path) as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def tree_of(root, proc="/proc"):
    """``{pid: {"stat", "status"}}`` of ``root`` and every descendant, as read from ``proc``."""
    parents = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return {}
    for name in names:
        if not name.isdigit():
            continue
        text = read(os.path.join(proc, name, "stat"))
        if not text or ")" not in text:
            continue
        rest = text[text.rfind(")") + 2 :].split()
        if len(rest) < 2:
            continue
        parents[int(name)] = (int(rest[1]), text)
    children = {}
    for pid, (ppid, _text) in parents.items():
        children.setdefault(ppid, []).append(pid)
    keep, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in keep or pid not in parents:
            continue
        keep[pid] = {"stat": parents[pid][1], "status": read(os.path.join(proc, str(pid), "status"))}
        frontier.extend(children.get(pid, []))
    return {str(pid): doc for pid, doc in keep.items()}


def host_meta(sys_root="/sys"):
    """``ncpu``, ``clk_tck`` and the NUMA nodes' cpulists (``{node: cpulist}``) of this host."""
    nodes = {}
    base = os.path.join(sys_root, "devices/system/node")
    if os.path.isdir(base):
        for name in sorted(os.listdir(base)):
            if name.startswith("node") and name[4:].isdigit():
                text = read(os.path.join(base, name, "cpulist"))
                if text and text.strip():
                    nodes[name[4:]] = text.strip()
    return {"ncpu": os.cpu_count() or 1, "clk_tck": os.sysconf("SC_CLK_TCK"), "nodes": nodes}


class Nvml:
    """Per-GPU readings from NVML (``pynvml``, the nvidia-ml-py package). ``Nvml.open()``
    returns None, with the reason in ``Nvml.why_not``, where NVML cannot be used."""

    why_not = None

    def __init__(self, pynvml):
        self.n = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    @classmethod
    def open(cls):
        try:
            import pynvml  # pylint: disable=import-outside-toplevel
        except ImportError as exc:
            cls.why_not = "pynvml is not installed (%s)" % exc
            return None
        try:
            return cls(pynvml)
        except Exception as exc:  # noqa: BLE001 - NVMLError and its library errors: no GPUs to read
            cls.why_not = "NVML: %s" % exc
            return None

    def close(self):
        with contextlib.suppress(Exception):  # nothing to give back
            self.n.nvmlShutdown()

    def _try(self, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - one reading missing is recorded, not fatal
            return {"nvml_error": str(exc)}

    def compute_pids(self):
        """``{gpu index: [pids of the processes computing on it]}``; a GPU NVML cannot list is left out."""
        n, out = self.n, {}
        listing = getattr(n, "nvmlDeviceGetComputeRunningProcesses", None)
        if listing is None:
            return None
        for i, h in enumerate(self.handles):
            try:
                out[str(i)] = sorted({int(p.pid) for p in listing(h)})
            except Exception:  # noqa: BLE001 - one GPU not listed is left out, not fatal
                continue
        return out

    def sample(self):
        n, out = self.n, []
        event_reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        for i, h in enumerate(self.handles):
            util = self._try(n.nvmlDeviceGetUtilizationRates, h)
            mem = self._try(n.nvmlDeviceGetMemoryInfo, h)
            out.append(
                {
                    "index": i,
                    "util_gpu": getattr(util, "gpu", None),
                    "util_mem": getattr(util, "memory", None),
                    "power_mw": self._try(n.nvmlDeviceGetPowerUsage, h),
                    "power_limit_mw": self._try(n.nvmlDeviceGetEnforcedPowerLimit, h),
                    "sm_clock_mhz": self._try(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
                    "mem_clock_mhz": self._try(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
                    "sm_clock_max_mhz": self._try(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM),
                    "clock_event_reasons": self._try(event_reasons, h) if event_reasons else None,
                    "pcie_tx_kbs": self._try(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_TX_BYTES),
                    "pcie_rx_kbs": self._try(n.nvmlDeviceGetPcieThroughput, h, n.NVML_PCIE_UTIL_RX_BYTES),
                    "mem_used_b": getattr(mem, "used", None),
                    "mem_total_b": getattr(mem, "total", None),
                    "temp_c": self._try(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
                    "energy_mj": self._try(n.nvmlDeviceGetTotalEnergyConsumption, h),
                }
            )
        return out


# What a program uses that a layer read at its start sets: the libraries looked for in each
# process's memory map, and the variables of its environment that say how many ranks a job has.
LIBRARIES = {"nccl": "libnccl"}
RANK_VARIABLES = ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def _maps_libraries(text):
    found = set()
    for line in (text or "").splitlines():
        path = line.rsplit(" ", 1)[-1]
        for name, stem in LIBRARIES.items():
            if stem in path.rsplit("/", 1)[-1]:
                found.add(name)
    return sorted(found)


def _rank_env(pid, proc):
    try:
        with open(os.path.join(proc, str(pid), "environ"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        key, _sep, value = item.partition(b"=")
        name = key.decode("ascii", "replace")
        if name in RANK_VARIABLES:
            out[name] = value.decode("ascii", "replace")[:16]
    return out


def uses_of(tree, nvml=None, proc="/proc"):
    """What the processes of ``tree`` (tree_of's dict) use: ``{"libraries": {pid: [names of
    LIBRARIES mapped]}, "env": {pid: {rank variable: value}}, "gpu_pids": {gpu index: [pids]}
    or None without NVML}``. Only those names and values are kept of a process's map and
    environment."""
    libraries, env = {}, {}
    for pid in tree:
        libraries[pid] = _maps_libraries(read(os.path.join(proc, pid, "maps")))
        found = _rank_env(pid, proc)
        if found:
            env[pid] = found
    return {"libraries": libraries, "env": env, "gpu_pids": nvml.compute_pids() if nvml is not None else None}


def take(root, t, nvml=None, clock=time.monotonic, proc="/proc", deep=False):
    """One raw snapshot of the host, the process tree under ``root`` and the GPUs, stamped
    ``t`` (seconds on the caller's clock); ``cost_s`` is what reading it took. ``deep`` adds
    what the program uses (:func:`uses_of`), read once per profile."""
    start = clock()
    doc = {"t": round(t, 4), "host": {k: read(p.replace("/proc", proc, 1)) for k, p in HOST_FILES.items()}}
    doc["tree"] = tree_of(root, proc)
    if nvml is not None:
        doc["gpus"] = nvml.sample()
    if deep:
        doc["uses"] = uses_of(doc["tree"], nvml, proc)
    doc["cost_s"] = round(clock() - start, 5)
    return doc
