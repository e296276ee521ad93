# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What can move a program, per verdict: which layers of this collection can, which cannot,
and advice outside the stack, with the profile's numbers. Advice only: nothing here changes
anything.

``MOVES`` is the one table (docs/diagnose.md prints it). A layer listed under ``cannot`` for
the verdict is one the tune may leave unmeasured on the diagnosed program
(``skip_layers``); a layer not listed either way (bios, driver, nccl) is measured as usual.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.verdict import contention

_CPU_SIDE = {
    "memory": "THP, /dev/shm and memlock: the host side of a step the GPU bounds",
    "kernel": "sysctls: the host side of a step the GPU bounds",
    "cpu": "governor and C-states: the host waits on the GPU",
    "io": "read-ahead and the IO scheduler: nothing waits on the disks",
    "numa_irq": "IRQ and NUMA placement: the host side of a step the GPU bounds",
}
_GPU_SIDE = {"gpu_settings": "power limit and clocks: the GPU waits for the host, so a faster GPU changes nothing"}

MOVES = {
    "gpu_power_cap": {
        "can": {"gpu_settings": "the power limit (gpu_settings_power_limit_watts): the GPU runs at its cap"},
        "cannot": _CPU_SIDE,
    },
    "gpu_clocks_thermal": {
        "can": {
            "gpu_settings": "application clocks and the power limit (gpu_settings_app_clocks): the clocks are held down"
        },
        "cannot": _CPU_SIDE,
    },
    "gpu_compute": {
        "can": {"gpu_settings": "locked clocks and the power limit, by little: the GPU is neither capped nor slowed"},
        "cannot": _CPU_SIDE,
    },
    "host_memory": {
        "can": {
            "memory": "THP and huge pages (memory_thp_enabled, memory_hugepages)",
            "numa_irq": "NUMA placement: memory near the CPUs that touch it",
            "kernel": "vm sysctls (kernel_sysctl), by amounts only a measurement shows",
        },
        "cannot": {"gpu_settings": _GPU_SIDE["gpu_settings"]},
    },
    "input_storage": {
        "can": {
            "io": "read-ahead and the IO scheduler (io_read_ahead_kb, io_scheduler)",
            "memory": "page cache room (THP off for file-backed reads), by amounts only a measurement shows",
            "kernel": "dirty-page and vm sysctls, by amounts only a measurement shows",
        },
        "cannot": {"gpu_settings": _GPU_SIDE["gpu_settings"]},
    },
    "input_loader": {
        "can": {
            "cpu": "governor and C-states: the workers' speed per core",
            "numa_irq": "placement of the workers and the GPU's IRQs",
            "memory": "THP and /dev/shm, which the workers' batches pass through",
            "kernel": "scheduler sysctls",
        },
        "cannot": {"gpu_settings": _GPU_SIDE["gpu_settings"]},
    },
    "cpu_main": {
        "can": {
            "cpu": "governor and C-states: the main thread's speed",
            "kernel": "scheduler sysctls, by amounts only a measurement shows",
            "numa_irq": "placement of the main process",
            "memory": "THP, by amounts only a measurement shows",
        },
        "cannot": {"gpu_settings": _GPU_SIDE["gpu_settings"]},
    },
    "communication": {"can": {"nccl": "NCCL's transport and buffers", "numa_irq": "NIC IRQ placement"}, "cannot": {}},
    "unclear": {"can": {}, "cannot": {}},
}


def _n(value, digits=1):
    return "n/a" if value is None else ("%.*f" % (digits, value))


def outside(verdict, profile):
    """Advice outside the stack, in words with the profile's numbers (advice, never a change)."""
    prog = profile.get("program") or {}
    ncpu = profile.get("ncpu") or 0
    busy = contention(profile)
    gpus = profile.get("gpus") or []
    gpu = max(gpus, key=lambda g: g.get("util_gpu_pct") or 0) if gpus else {}
    out = []
    if verdict == "input_loader":
        rows = [
            r
            for r in prog.get("list") or []
            if r["role"] == "worker" and ((r.get("cores") or 0) >= 0.05 or r.get("saturated"))
        ]
        used = prog.get("cores") or 0
        idle = ncpu - ncpu * ((profile.get("cpu") or {}).get("busy_pct") or 0) / 100.0
        words = "the %d loader workers use %s of %d cores (the program %s)" % (
            len(rows),
            _n(sum(r["cores"] for r in rows)),
            ncpu,
            _n(used),
        )
        if busy or idle < 1:
            out.append(
                words + ": the host has no idle core, so more workers cannot help; cheaper decoding or "
                "augmentation (or a faster decoder) would, and so would less other work on the host"
            )
        else:
            out.append(words + ", %s cores idle: more workers would help; so would cheaper decoding" % _n(idle))
        out.append("the stack can move this little: CPU-side layers by amounts only a measurement shows")
    elif verdict == "cpu_main":
        main = prog.get("main") or {}
        out.append(
            "the main process uses %s cores: move work off it (DataLoader workers, prefetching, pinned "
            "memory and non_blocking copies) or make it cheaper" % _n(main.get("cores"), 2)
        )
        if busy:
            out.append("the host's CPUs are all busy: other work on the host takes cores from the program")
        out.append("the stack can move this little: the CPU layer by amounts only a measurement shows")
    elif verdict == "input_storage":
        disk = profile.get("disk") or {}
        out.append(
            "the program waits on its disks (%s MB/s read, busiest %s at %s%%): cache the data set in memory "
            "or on a faster disk, or read it in larger files"
            % (_n(disk.get("read_mbs")), disk.get("busiest"), _n(disk.get("busiest_util_pct")))
        )
    elif verdict == "host_memory":
        mem = profile.get("memory") or {}
        out.append(
            "%s major faults/s: keep the working set in memory (more RAM, a smaller data cache, no swap)"
            % _n(mem.get("major_faults_per_s"), 0)
        )
    elif verdict == "gpu_power_cap":
        out.append(
            "the GPU draws %s of its %s W limit: only more power (a higher limit where the board allows) or "
            "less work per step (lower precision, fused kernels) moves it"
            % (_n(gpu.get("power_w")), _n(gpu.get("power_limit_w")))
        )
    elif verdict == "gpu_clocks_thermal":
        out.append(
            "the SM clock runs at %s%% of its maximum (%s C): check cooling and airflow; the stack sets clocks, "
            "not temperatures" % (_n(gpu.get("sm_clock_of_max_pct")), _n(gpu.get("temp_max_c"), 0))
        )
    elif verdict == "gpu_compute":
        out.append(
            "the GPU is busy %s%% of the time and neither capped nor slowed: a larger batch, lower precision or "
            "fused kernels move it; the stack can move this little" % _n(gpu.get("util_gpu_pct"))
        )
    else:
        out.append(
            "no rule decided: every layer is measured as usual; a longer profile "
            "(stacktune_diagnose_seconds) or the program under its real load may decide"
        )
    return out


def what_moves(verdict, profile):
    """``{"can": {layer: why}, "cannot": {layer: why}, "outside": [words]}`` for a verdict."""
    row = MOVES.get(verdict, MOVES["unclear"])
    out = {"can": dict(row["can"]), "cannot": dict(row["cannot"]), "outside": outside(verdict, profile)}
    if len(profile.get("gpus") or []) >= 2:
        out["can"].setdefault(
            "nccl", "NCCL's settings: with several GPUs communication may bound a step (not judged here)"
        )
    return out


def skip_layers(diagnosis, layers):
    """``{layer: reason}`` for the ``layers`` the diagnosis says cannot move its program."""
    if not isinstance(diagnosis, dict) or not diagnosis.get("verdict"):
        return {}
    cannot = (diagnosis.get("moves") or {}).get("cannot")
    if cannot is None:
        cannot = MOVES.get(diagnosis["verdict"], MOVES["unclear"])["cannot"]
    return {
        name: "the diagnosis (%s) says this layer cannot move the program: %s"
        % (diagnosis.get("title") or diagnosis["verdict"], cannot[name])
        for name in layers
        if name in cannot
    }
