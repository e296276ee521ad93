# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a program is bound, decided from its profile (``profile.derive``) by a few rules.

The rules are tried in the order of ``RULES``; the first whose condition holds gives the
verdict, with the figures that decided it as evidence (each with its threshold). Where no rule
holds, or the profile is too short to judge, the verdict is ``unclear`` and says what was
seen. docs/diagnose.md has the table; the thresholds are ``THRESHOLDS``, in one place.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.metrics import DIAGNOSIS_VERDICTS

THRESHOLDS = {
    "min_samples": 4,  # snapshots: fewer cannot give a rate
    "min_steps": 5,  # step lines in the profile
    "gpu_busy_pct": 70.0,  # mean NVML GPU utilisation of the busiest GPU: the GPU is the bound
    "gpu_idle_pct": 50.0,  # under this the GPU waits for the host (input-side rules may decide)
    "power_events_pct": 30.0,  # snapshots with the SW power cap or power brake set
    "power_of_limit_pct": 95.0,  # power drawn of the enforced limit
    "thermal_events_pct": 30.0,  # snapshots with a thermal or HW slowdown reason set
    "sm_clock_of_max_pct": 90.0,  # SM clock of its maximum, under this: clocks are held down
    "major_faults_per_s": 200.0,  # host major faults per second
    "swap_pages_per_s": 100.0,  # swap-in plus swap-out pages per second
    "memory_pressure_pct": 10.0,  # /proc/pressure/memory some avg10
    "iowait_pct": 10.0,  # host CPU time in iowait
    "io_pressure_pct": 20.0,  # /proc/pressure/io some avg10
    "disk_wait_pct": 30.0,  # snapshots the program's processes were in disk sleep (D)
    "workers_saturated_share": 0.5,  # share of the working loader processes that are saturated
    "host_busy_pct": 90.0,  # host CPU busy: every core taken
    "cpu_pressure_pct": 50.0,  # /proc/pressure/cpu some avg10: runnable tasks wait for a CPU
}

# the verdicts, in the order the rules are tried: one list with the metrics series that carries them
VERDICTS = DIAGNOSIS_VERDICTS

TITLES = {
    "gpu_power_cap": "GPU-bound at its power cap",
    "gpu_clocks_thermal": "GPU-bound with its clocks held down (temperature or slowdown)",
    "gpu_compute": "GPU compute-bound",
    "host_memory": "bound by host memory (page faults or swap)",
    "input_storage": "input-bound, waiting on storage",
    "input_loader": "input-bound, its loader workers saturated",
    "cpu_main": "CPU-bound in its main process",
    "communication": "bound by communication between GPUs",
    "unclear": "unclear: the evidence does not decide",
}

# The rules as a reader follows them (docs/diagnose.md prints this table): verdict, condition.
RULES = (
    (
        "gpu_power_cap",
        "busiest GPU utilisation >= gpu_busy_pct and (SW power cap or power brake in >= "
        "power_events_pct of snapshots, or power >= power_of_limit_pct of the enforced limit)",
    ),
    (
        "gpu_clocks_thermal",
        "busiest GPU utilisation >= gpu_busy_pct and (a thermal or HW slowdown reason in >= "
        "thermal_events_pct of snapshots, or SM clock < sm_clock_of_max_pct of its maximum)",
    ),
    ("gpu_compute", "busiest GPU utilisation >= gpu_busy_pct, neither of the above"),
    (
        "host_memory",
        "major faults >= major_faults_per_s, or swap >= swap_pages_per_s, or memory pressure >= memory_pressure_pct",
    ),
    (
        "input_storage",
        "GPU (if any) utilisation < gpu_busy_pct and (a process of the program in disk sleep in >= "
        "disk_wait_pct of snapshots, or iowait >= iowait_pct or IO pressure >= io_pressure_pct while no "
        "process of the program is saturated: the host's waits may be other work's)",
    ),
    (
        "input_loader",
        "GPU (if any) utilisation < gpu_busy_pct, loader workers, >= workers_saturated_share of the "
        "working ones saturated, and (a GPU below gpu_idle_pct, or the main process not saturated)",
    ),
    ("cpu_main", "GPU (if any) utilisation < gpu_busy_pct, the main process saturated, loader workers (if any) not"),
    (
        "communication",
        "never decided here: it needs several GPUs and the collective's counters; with several GPUs "
        "and none of the above, the verdict is unclear and names it as a candidate",
    ),
    ("unclear", "none of the above, or fewer than min_samples snapshots or min_steps steps"),
)


def _f(value, unit="", digits=1):
    if value is None:
        return "n/a"
    return ("%.*f" % (digits, value)).rstrip("0").rstrip(".") + unit if digits else "%d%s" % (round(value), unit)


def _busiest_gpu(profile):
    gpus = [g for g in profile.get("gpus") or [] if g.get("util_gpu_pct") is not None]
    return max(gpus, key=lambda g: g["util_gpu_pct"]) if gpus else None


def _events(gpu, names):
    return max([gpu.get("clock_events_pct", {}).get(n) or 0 for n in names] or [0])


def _gpu_rules(gpu, t):
    """The GPU-bound verdicts, or None when the busiest GPU is not busy enough."""
    util = gpu["util_gpu_pct"]
    if util < t["gpu_busy_pct"]:
        return None
    base = "GPU %s utilisation %s%% (>= %s%%)" % (gpu["index"], _f(util), _f(t["gpu_busy_pct"]))
    power_events = _events(gpu, ("sw_power_cap", "hw_power_brake_slowdown"))
    of_limit = gpu.get("power_of_limit_pct")
    power = "power %s of %s W (%s%%)" % (_f(gpu.get("power_w")), _f(gpu.get("power_limit_w")), _f(of_limit))
    clocks = "SM clock %s of %s MHz" % (
        _f(gpu.get("sm_clock_mhz"), digits=0),
        _f(gpu.get("sm_clock_max_mhz"), digits=0),
    )
    if power_events >= t["power_events_pct"] or (of_limit or 0) >= t["power_of_limit_pct"]:
        return "gpu_power_cap", [
            base,
            "power cap or brake in %s%% of snapshots (>= %s%%)"
            % (_f(power_events, digits=0), _f(t["power_events_pct"])),
            power,
            clocks,
        ]
    thermal = _events(gpu, ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"))
    clock_pct = gpu.get("sm_clock_of_max_pct")
    if thermal >= t["thermal_events_pct"] or (clock_pct is not None and clock_pct < t["sm_clock_of_max_pct"]):
        return "gpu_clocks_thermal", [
            base,
            "thermal/HW slowdown in %s%% of snapshots (>= %s%%)" % (_f(thermal, digits=0), _f(t["thermal_events_pct"])),
            "%s (%s%%; below %s%% counts)" % (clocks, _f(clock_pct), _f(t["sm_clock_of_max_pct"])),
            "temperature %s C (max %s C)" % (_f(gpu.get("temp_c"), digits=0), _f(gpu.get("temp_max_c"), digits=0)),
        ]
    return "gpu_compute", [base, power, "%s: no power or thermal limit set" % clocks]


def _cpu_words(profile):
    cpu = profile.get("cpu") or {}
    words = "host CPU busy %s%% of %s CPUs, iowait %s%%" % (
        _f(cpu.get("busy_pct")),
        profile.get("ncpu"),
        _f(cpu.get("iowait_pct")),
    )
    if cpu.get("run_queue") is not None:
        words += ", run queue %s" % _f(cpu["run_queue"])
    return words


def _proc_words(row):
    cores = _f(row["cores"], digits=2)
    return "%s %s (pid %s): %s %s, runnable in %s%% of snapshots" % (
        row["role"],
        row["comm"],
        row["pid"],
        cores,
        "core" if cores == "1" else "cores",
        _f(row.get("runnable_pct"), digits=0),
    )


def contention(profile, t=None):
    """Words saying that the host's CPUs are all taken (others compete with the program), or None."""
    t = t or THRESHOLDS
    cpu = profile.get("cpu") or {}
    pressure = (profile.get("pressure") or {}).get("cpu_some_pct")
    starved = (profile.get("program") or {}).get("starved") or 0
    if (cpu.get("busy_pct") or 0) >= t["host_busy_pct"] and (starved or (pressure or 0) >= t["cpu_pressure_pct"]):
        prog = (profile.get("program") or {}).get("cores") or 0
        return (
            "the host's CPUs are all busy (%s%%, CPU pressure %s%%); the program gets %s of %s cores and %d of its "
            "processes wait for a CPU: other work competes with it"
            % (_f(cpu.get("busy_pct")), _f(pressure), _f(prog, digits=2), profile.get("ncpu"), starved)
        )
    return None


def decide(profile, thresholds=None):
    """``{"verdict", "title", "evidence": [words], "caveats": [words]}`` for a profile."""
    t = dict(THRESHOLDS, **(thresholds or {}))
    caveats = []
    steps = profile.get("steps") or {}
    if profile.get("samples", 0) < t["min_samples"] or steps.get("count", 0) < t["min_steps"]:
        return _out(
            "unclear",
            [
                "%s snapshots and %s steps: too few to judge (need %d and %d)"
                % (profile.get("samples", 0), steps.get("count", 0), t["min_samples"], t["min_steps"])
            ],
            caveats,
        )
    busy = contention(profile, t)
    if busy:
        caveats.append(busy)
    gpu = _busiest_gpu(profile)
    gpus = profile.get("gpus") or []
    if gpu is not None:
        got = _gpu_rules(gpu, t)
        if got:
            return _out(got[0], got[1], caveats)
    gpu_words = (
        [
            "GPU %s utilisation %s%% (< %s%%, min %s%%)"
            % (gpu["index"], _f(gpu["util_gpu_pct"]), _f(t["gpu_busy_pct"]), _f(gpu.get("util_gpu_min_pct")))
        ]
        if gpu is not None
        else ["no GPU readings (NVML)"]
    )
    mem = profile.get("memory") or {}
    faults = mem.get("major_faults_per_s") or 0
    swap = (mem.get("swap_in_per_s") or 0) + (mem.get("swap_out_per_s") or 0)
    mem_pressure = (profile.get("pressure") or {}).get("memory_some_pct") or 0
    if faults >= t["major_faults_per_s"] or swap >= t["swap_pages_per_s"] or mem_pressure >= t["memory_pressure_pct"]:
        return _out(
            "host_memory",
            gpu_words
            + [
                "major faults %s/s (>= %s)" % (_f(faults, digits=0), _f(t["major_faults_per_s"], digits=0)),
                "swap %s pages/s (>= %s)" % (_f(swap, digits=0), _f(t["swap_pages_per_s"], digits=0)),
                "memory pressure %s%% (>= %s%%)" % (_f(mem_pressure), _f(t["memory_pressure_pct"])),
            ],
            caveats,
        )
    cpu = profile.get("cpu") or {}
    io_pressure = (profile.get("pressure") or {}).get("io_some_pct") or 0
    prog = profile.get("program") or {}
    rows = prog.get("list") or []
    disk_wait = max([r.get("disk_wait_pct") or 0 for r in rows] or [0])
    host_io = (cpu.get("iowait_pct") or 0) >= t["iowait_pct"] or io_pressure >= t["io_pressure_pct"]
    # iowait and IO pressure are the host's: other work's writes raise them too. A program one of
    # whose processes runs all the time (saturated) is not the one waiting on them.
    running = any(r.get("saturated") for r in rows)
    if host_io and running and disk_wait < t["disk_wait_pct"]:
        caveats = list(caveats) + [
            "the host waited on storage (iowait %s%%, IO pressure %s%%), but not the program: a process of it "
            "ran all the time, and none was in disk sleep in %s%% or more of snapshots"
            % (_f(cpu.get("iowait_pct")), _f(io_pressure), _f(t["disk_wait_pct"], digits=0))
        ]
    if (host_io and not running) or disk_wait >= t["disk_wait_pct"]:
        disk = profile.get("disk") or {}
        return _out(
            "input_storage",
            gpu_words
            + [
                "iowait %s%% (>= %s%%), IO pressure %s%% (>= %s%%)"
                % (_f(cpu.get("iowait_pct")), _f(t["iowait_pct"]), _f(io_pressure), _f(t["io_pressure_pct"])),
                "a process of the program in disk sleep in %s%% of snapshots (>= %s%%)"
                % (_f(disk_wait, digits=0), _f(t["disk_wait_pct"])),
                "disks read %s MB/s, write %s MB/s; busiest %s at %s%%"
                % (
                    _f(disk.get("read_mbs")),
                    _f(disk.get("write_mbs")),
                    disk.get("busiest"),
                    _f(disk.get("busiest_util_pct")),
                ),
            ],
            caveats,
        )
    main = prog.get("main") or {}
    workers = [r for r in rows if r["role"] == "worker" and ((r.get("cores") or 0) >= 0.05 or r.get("saturated"))]
    saturated = [r for r in workers if r.get("saturated")]
    gpu_idle = gpu is not None and gpu["util_gpu_pct"] < t["gpu_idle_pct"]
    if (
        workers
        and len(saturated) >= t["workers_saturated_share"] * len(workers)
        and (gpu_idle or not main.get("saturated"))
    ):
        return _out(
            "input_loader",
            gpu_words
            + [
                "%d of %d loader workers saturated, together %s cores of %s"
                % (len(saturated), len(workers), _f(sum(r["cores"] for r in workers), digits=2), profile.get("ncpu")),
                _proc_words(main) if main else "main process not seen",
                _cpu_words(profile),
            ]
            + [_proc_words(r) for r in saturated[:4]],
            caveats,
        )
    if main.get("saturated") and not saturated:
        return _out(
            "cpu_main",
            gpu_words
            + [
                _proc_words(main) + " (saturated: >= 0.85 cores or runnable in >= 80%)",
                "%d loader workers, none saturated" % len(workers),
                _cpu_words(profile),
            ],
            caveats,
        )
    seen = gpu_words + [_cpu_words(profile)]
    if main:
        seen.append(_proc_words(main))
    if workers:
        seen.append("%d of %d loader workers saturated" % (len(saturated), len(workers)))
    if len(gpus) >= 2:
        seen.append("with %d GPUs, communication between them is a candidate this diagnosis cannot measure" % len(gpus))
    return _out("unclear", seen, caveats)


def _out(verdict, evidence, caveats):
    return {"verdict": verdict, "title": TITLES[verdict], "evidence": [e for e in evidence if e], "caveats": caveats}
