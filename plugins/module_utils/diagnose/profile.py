# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The profile of a running program, derived from consecutive raw snapshots (``snapshot.py``).

Counters (/proc/stat, vmstat, diskstats, net/dev, each process's stat, NVML's energy) are
turned into rates between the first and the last snapshot; levels (NVML utilisation, power,
clocks, the run queue, pressure) are averaged over the snapshots. Nothing here reads the host:
a recording from another host gives the same figures as the host itself would.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import mean, quantile
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import CLOCKS_EVENT_REASONS
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.cpulist import parse_cpulist

# A process using at least this many cores (of one) over the profile is saturated: a
# single-threaded Python worker cannot go faster by itself. So is one found runnable (state R)
# in at least RUNNABLE_PCT of the snapshots: it wants a whole core, and where it gets less,
# the host's CPUs are taken by others (it is starved). A process under IDLE_CORES did no work.
SATURATED_CORES = 0.85
RUNNABLE_PCT = 80
IDLE_CORES = 0.05
SECTOR = 512
MB = 1e6


def _num(value):
    """A reading as a float, None for a missing or failed one (``{"nvml_error": ...}``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _r(value, digits=2):
    return None if value is None else round(value, digits)


def _avg(values):
    values = [v for v in values if v is not None]
    return mean(values) if values else None


# ------------------------------------------------------------------ host /proc text


def parse_stat(text):
    """/proc/stat: ``{"cpus": {cpu: (busy, iowait, total) jiffies}, "all": (...), "ctxt",
    "procs_running", "procs_blocked"}``."""
    out = {"cpus": {}, "all": None, "ctxt": None, "procs_running": None, "procs_blocked": None}
    for line in (text or "").splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0].startswith("cpu"):
            v = [int(x) for x in parts[1:9]] + [0] * (8 - len(parts[1:9]))
            user, nice, system, idle, iowait, irq, softirq, steal = v
            total = sum(v)
            row = (total - idle - iowait, iowait, total)
            if parts[0] == "cpu":
                out["all"] = row
            else:
                out["cpus"][int(parts[0][3:])] = row
        elif parts[0] in ("ctxt", "procs_running", "procs_blocked") and len(parts) > 1:
            out[parts[0]] = int(parts[1])
    return out


def parse_keyvalue(text):
    """/proc/vmstat style ``name value`` lines."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _whole_disk(name):
    if name.startswith(("loop", "ram", "zram", "sr", "fd", "dm-", "md")):
        return False
    if name.startswith("nvme"):
        return "p" not in name.split("n", 2)[-1]
    if name.startswith("mmcblk"):
        return "p" not in name[6:]
    return not name[-1].isdigit()


def parse_diskstats(text):
    """/proc/diskstats: ``{disk: (sectors read, sectors written, ms busy)}`` of whole disks."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) >= 13 and _whole_disk(parts[2]):
            out[parts[2]] = (int(parts[5]), int(parts[9]), int(parts[12]))
    return out


def parse_net_dev(text):
    """/proc/net/dev: ``{interface: (rx bytes, tx bytes)}``, loopback left out."""
    out = {}
    for line in (text or "").splitlines():
        if ":" not in line:
            continue
        name, rest = line.split(":", 1)
        parts = rest.split()
        name = name.strip()
        if name != "lo" and len(parts) >= 9:
            out[name] = (int(parts[0]), int(parts[8]))
    return out


def parse_pressure(text):
    """/proc/pressure/*: ``{"some": avg10, "full": avg10}`` (percent of time stalled)."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if parts and parts[0] in ("some", "full"):
            for field in parts[1:]:
                if field.startswith("avg10="):
                    out[parts[0]] = float(field[6:])
    return out


def parse_loadavg(text):
    """/proc/loadavg: the runnable entities now (the 4th field's first number)."""
    parts = (text or "").split()
    if len(parts) >= 4 and "/" in parts[3]:
        return int(parts[3].split("/")[0])
    return None


def parse_pid_stat(text):
    """/proc/<pid>/stat: comm, state, ppid, majflt, utime+stime (ticks), threads, starttime."""
    comm = text[text.find("(") + 1 : text.rfind(")")]
    rest = text[text.rfind(")") + 2 :].split()
    # rest[0] is field 3 (state): field n is rest[n - 3]
    return {
        "comm": comm,
        "state": rest[0],
        "ppid": int(rest[1]),
        "majflt": int(rest[9]),
        "ticks": int(rest[11]) + int(rest[12]),
        "threads": int(rest[17]),
        "start": int(rest[19]),
    }


def parse_pid_status(text):
    """/proc/<pid>/status: RSS (kB) and context switches."""
    out = {}
    for line in (text or "").splitlines():
        name, _sep, value = line.partition(":")
        if name in ("VmRSS", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            out[name] = int(value.split()[0])
    return out


# ------------------------------------------------------------------ derivations


def _span(samples, key):
    """The first and the last snapshot whose ``host[key]`` was read."""
    have = [s for s in samples if (s.get("host") or {}).get(key)]
    return (have[0], have[-1]) if len(have) >= 2 else (None, None)


def cpu_figures(samples, nodes):
    """Host CPU busy and iowait (percent of all CPUs) overall and per NUMA node; context
    switches per second; the run queue and blocked processes (mean over the snapshots)."""
    first, last = _span(samples, "stat")
    if first is None:
        return {}
    a, b = parse_stat(first["host"]["stat"]), parse_stat(last["host"]["stat"])
    dt = last["t"] - first["t"]

    def pct(rows_a, rows_b):
        busy = sum(rb[0] - ra[0] for ra, rb in zip(rows_a, rows_b))
        wait = sum(rb[1] - ra[1] for ra, rb in zip(rows_a, rows_b))
        total = sum(rb[2] - ra[2] for ra, rb in zip(rows_a, rows_b))
        return (100.0 * busy / total, 100.0 * wait / total) if total > 0 else (None, None)

    busy, wait = pct([a["all"]], [b["all"]]) if a["all"] and b["all"] else (None, None)
    out = {"busy_pct": _r(busy, 1), "iowait_pct": _r(wait, 1), "nodes": {}}
    for node, cpulist in sorted((nodes or {}).items()):
        cpus = [c for c in parse_cpulist(cpulist) if c in a["cpus"] and c in b["cpus"]]
        if cpus:
            nb, nw = pct([a["cpus"][c] for c in cpus], [b["cpus"][c] for c in cpus])
            out["nodes"][str(node)] = {"cpus": len(cpus), "busy_pct": _r(nb, 1), "iowait_pct": _r(nw, 1)}
    if a["ctxt"] is not None and b["ctxt"] is not None and dt > 0:
        out["ctxt_per_s"] = _r((b["ctxt"] - a["ctxt"]) / dt, 0)
    stats = [parse_stat(s["host"]["stat"]) for s in samples if (s.get("host") or {}).get("stat")]
    out["procs_running"] = _r(_avg([s["procs_running"] for s in stats]), 1)
    out["procs_blocked"] = _r(_avg([s["procs_blocked"] for s in stats]), 2)
    out["run_queue"] = _r(_avg([parse_loadavg((s.get("host") or {}).get("loadavg")) for s in samples]), 1)
    return out


def memory_figures(samples):
    """Major faults and swap pages per second (vmstat) and memory pressure."""
    first, last = _span(samples, "vmstat")
    out = {}
    if first is not None and last["t"] > first["t"]:
        a, b = parse_keyvalue(first["host"]["vmstat"]), parse_keyvalue(last["host"]["vmstat"])
        dt = last["t"] - first["t"]
        for name, key in (
            ("major_faults_per_s", "pgmajfault"),
            ("swap_in_per_s", "pswpin"),
            ("swap_out_per_s", "pswpout"),
        ):
            if key in a and key in b:
                out[name] = _r((b[key] - a[key]) / dt, 1)
    return out


def _rates(samples, key, parse):
    first, last = _span(samples, key)
    if first is None or last["t"] <= first["t"]:
        return None, None
    return parse(first["host"][key]), parse(last["host"][key]), last["t"] - first["t"]


def disk_figures(samples):
    """Read and write MB/s over all whole disks, and the busiest disk's busy percent."""
    got = _rates(samples, "diskstats", parse_diskstats)
    if got[0] is None:
        return {}
    a, b, dt = got
    read = write = 0.0
    busiest, busy = None, 0.0
    for name, (r1, w1, ms1) in b.items():
        if name not in a:
            continue
        r0, w0, ms0 = a[name]
        read += (r1 - r0) * SECTOR / MB / dt
        write += (w1 - w0) * SECTOR / MB / dt
        util = 100.0 * (ms1 - ms0) / 1000.0 / dt
        if busiest is None or util > busy:
            busiest, busy = name, util
    return {
        "read_mbs": _r(read),
        "write_mbs": _r(write),
        "busiest": busiest,
        "busiest_util_pct": _r(min(busy, 100.0), 1),
    }


def net_figures(samples):
    """Receive and send MB/s over every interface but loopback."""
    got = _rates(samples, "net_dev", parse_net_dev)
    if got[0] is None:
        return {}
    a, b, dt = got
    rx = sum(b[n][0] - a[n][0] for n in b if n in a) / MB / dt
    tx = sum(b[n][1] - a[n][1] for n in b if n in a) / MB / dt
    return {"rx_mbs": _r(rx), "tx_mbs": _r(tx)}


def pressure_figures(samples):
    """Mean of each pressure file's ``some`` avg10 (percent) over the snapshots."""
    out = {}
    for what in ("cpu", "io", "memory"):
        values = [parse_pressure((s.get("host") or {}).get("pressure_" + what)).get("some") for s in samples]
        value = _avg(values)
        if value is not None:
            out[what + "_some_pct"] = _r(value, 1)
    return out


def process_figures(samples, clk_tck, root=None):
    """The program's process tree: per process its CPU in cores (from its ticks between the
    first and the last snapshot it was seen in), threads, RSS, faults, context switches; the
    root process is ``main``, every descendant a worker. A process is identified by pid and
    start time, so a reused pid is another process."""
    seen = {}
    for s in samples:
        for pid, doc in (s.get("tree") or {}).items():
            try:
                st = parse_pid_stat(doc["stat"])
            except (KeyError, IndexError, ValueError, TypeError):
                continue
            key = (pid, st["start"])
            row = seen.setdefault(key, {"pid": int(pid), "first": None, "last": None, "threads": [], "states": []})
            status = parse_pid_status(doc.get("status"))
            point = (s["t"], st, status)
            row["first"] = row["first"] or point
            row["last"] = point
            row["threads"].append(st["threads"])
            row["states"].append(st["state"])
    if not seen:
        return {"processes": 0, "list": []}
    if root is None:
        root = min(seen, key=lambda k: (seen[k]["first"][1]["start"], k[0]))[0]
    rows = []
    for (pid, _start), row in seen.items():
        (t0, s0, st0), (t1, s1, st1) = row["first"], row["last"]
        dt = t1 - t0
        cores = (s1["ticks"] - s0["ticks"]) / float(clk_tck) / dt if dt > 0 else None
        states = row["states"]
        item = {
            "pid": row["pid"],
            "comm": s1["comm"],
            "role": "main" if str(pid) == str(root) else "worker",
            "seconds_seen": _r(dt, 1),
            "cores": _r(cores),
            # share of snapshots it was running or runnable (R) and in uninterruptible sleep (D)
            "runnable_pct": _r(100.0 * states.count("R") / len(states), 0),
            "disk_wait_pct": _r(100.0 * states.count("D") / len(states), 0),
            "threads": max(row["threads"]),
            "rss_mb": _r(st1.get("VmRSS", 0) / 1024.0, 0),
            "major_faults_per_s": _r((s1["majflt"] - s0["majflt"]) / dt, 1) if dt > 0 else None,
        }
        if dt > 0 and "voluntary_ctxt_switches" in st0 and "voluntary_ctxt_switches" in st1:
            item["voluntary_switches_per_s"] = _r(
                (st1["voluntary_ctxt_switches"] - st0["voluntary_ctxt_switches"]) / dt, 0
            )
            item["involuntary_switches_per_s"] = _r(
                (st1["nonvoluntary_ctxt_switches"] - st0["nonvoluntary_ctxt_switches"]) / dt, 0
            )
        wants = item["runnable_pct"] >= RUNNABLE_PCT
        item["saturated"] = cores is not None and (cores >= SATURATED_CORES or wants)
        item["starved"] = cores is not None and wants and cores < SATURATED_CORES
        rows.append(item)
    measured = [r for r in rows if r["cores"] is not None]
    # short-lived helpers (seen in one snapshot only) are listed, not counted as workers
    rows.sort(key=lambda r: (r["role"] != "main", -(r["cores"] or 0), r["pid"]))
    main = next((r for r in rows if r["role"] == "main"), None)
    workers = [r for r in measured if r["role"] == "worker" and (r["cores"] >= IDLE_CORES or r["saturated"])]
    return {
        "processes": len(rows),
        "threads": sum(r["threads"] for r in rows),
        "cores": _r(sum(r["cores"] for r in measured)),
        "main": main,
        "workers": len(workers),
        "worker_cores": _r(sum(r["cores"] for r in workers)),
        "workers_saturated": sum(1 for r in workers if r["saturated"]),
        "starved": sum(1 for r in measured if r["starved"]),
        "list": rows,
    }


REASON_NAMES = dict(CLOCKS_EVENT_REASONS)


def gpu_figures(samples):
    """Per GPU: means of the NVML levels, the share of snapshots each clock-event reason was
    set in, and the mean power from the total-energy counter."""
    per = {}
    for s in samples:
        for g in s.get("gpus") or []:
            per.setdefault(g.get("index"), []).append((s["t"], g))
    out = []
    for index in sorted(per, key=lambda i: (i is None, i)):
        rows = per[index]
        g = [r for _t, r in rows]

        def level(key, rows=g):
            return _avg([_num(r.get(key)) for r in rows])

        reasons, counted = {}, 0
        for r in g:
            mask = _num(r.get("clock_event_reasons"))
            if mask is None:
                continue
            counted += 1
            for bit, name in CLOCKS_EVENT_REASONS:
                if int(mask) & bit:
                    reasons[name] = reasons.get(name, 0) + 1
        power, limit = level("power_mw"), level("power_limit_mw")
        energy = [(t, _num(r.get("energy_mj"))) for t, r in rows if _num(r.get("energy_mj")) is not None]
        energy_w = None
        if len(energy) >= 2 and energy[-1][0] > energy[0][0]:
            energy_w = (energy[-1][1] - energy[0][1]) / 1000.0 / (energy[-1][0] - energy[0][0])
        sm, sm_max = level("sm_clock_mhz"), level("sm_clock_max_mhz")
        utils = [_num(r.get("util_gpu")) for r in g if _num(r.get("util_gpu")) is not None]
        out.append(
            {
                "index": index,
                "samples": len(g),
                "util_gpu_pct": _r(_avg(utils), 1),
                "util_gpu_min_pct": _r(min(utils), 1) if utils else None,
                "util_mem_pct": _r(level("util_mem"), 1),
                "power_w": _r(power / 1000.0 if power is not None else None, 1),
                "power_limit_w": _r(limit / 1000.0 if limit is not None else None, 1),
                "power_of_limit_pct": _r(100.0 * power / limit, 1) if power is not None and limit else None,
                "energy_w": _r(energy_w, 1),
                "sm_clock_mhz": _r(sm, 0),
                "sm_clock_max_mhz": _r(sm_max, 0),
                "sm_clock_of_max_pct": _r(100.0 * sm / sm_max, 1) if sm is not None and sm_max else None,
                "mem_clock_mhz": _r(level("mem_clock_mhz"), 0),
                "clock_events_pct": {n: _r(100.0 * c / counted, 0) for n, c in sorted(reasons.items())}
                if counted
                else {},
                "pcie_rx_gbs": _r(level("pcie_rx_kbs") / 1e6 if level("pcie_rx_kbs") is not None else None, 3),
                "pcie_tx_gbs": _r(level("pcie_tx_kbs") / 1e6 if level("pcie_tx_kbs") is not None else None, 3),
                "mem_used_gib": _r(level("mem_used_b") / 2**30 if level("mem_used_b") is not None else None, 1),
                "mem_total_gib": _r(level("mem_total_b") / 2**30 if level("mem_total_b") is not None else None, 1),
                "temp_c": _r(level("temp_c"), 0),
                "temp_max_c": _r(
                    max([_num(r.get("temp_c")) for r in g if _num(r.get("temp_c")) is not None] or [0]), 0
                ),
            }
        )
    return out


def step_figures(steps, t0=None, t1=None):
    """Steps that arrived in ``[t0, t1]`` (``steps``: [[arrival s, step ms], ...]): count, rate
    (steps per second of arrivals), mean, p50, p90, p99, max and the coefficient of variation."""
    chosen = [ms for t, ms in steps if (t0 is None or t >= t0) and (t1 is None or t <= t1)]
    arrivals = [t for t, _ms in steps if (t0 is None or t >= t0) and (t1 is None or t <= t1)]
    if not chosen:
        return {"count": 0}
    ordered = sorted(chosen)
    m = mean(chosen)
    sd = (sum((x - m) ** 2 for x in chosen) / (len(chosen) - 1)) ** 0.5 if len(chosen) > 1 else 0.0
    span = (arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0
    return {
        "count": len(chosen),
        "per_s": _r((len(arrivals) - 1) / span, 2) if span > 0 else None,
        "mean_ms": _r(m, 3),
        "p50_ms": _r(quantile(ordered, 0.5), 3),
        "p90_ms": _r(quantile(ordered, 0.9), 3),
        "p99_ms": _r(quantile(ordered, 0.99), 3),
        "max_ms": _r(ordered[-1], 3),
        "cv_pct": _r(100.0 * sd / m, 1) if m else None,
    }


def uses_figures(samples):
    """What the program uses that a layer read at its start sets: ``{"nccl": {"used": True,
    False or None (cannot tell), "why", "gpus", "ranks"}}``, from the first snapshot that read it.

    NCCL's collectives: a program uses them when its environment says the job has more than one
    rank, or its processes map libnccl and hold more than one GPU. One that maps no libnccl, or
    holds one GPU with no ranks in its environment, does not (PyTorch maps libnccl in every CUDA
    program: loaded is not used). Without NVML a program that maps libnccl and names no ranks
    cannot be told."""
    doc = next((s["uses"] for s in samples if isinstance(s.get("uses"), dict)), None)
    if doc is None:
        return {}
    tree = {str(p) for p in (doc.get("libraries") or {})}
    mapped = sorted(p for p, names in (doc.get("libraries") or {}).items() if "nccl" in (names or []))
    ranks = []
    for values in (doc.get("env") or {}).values():
        for value in (values or {}).values():
            try:
                ranks.append(int(value))
            except (TypeError, ValueError):
                continue
    rank = max(ranks) if ranks else None
    gpu_pids = doc.get("gpu_pids")
    gpus = None
    if isinstance(gpu_pids, dict):
        gpus = sorted(int(i) for i, pids in gpu_pids.items() if tree & {str(p) for p in pids or []})
    row = {"ranks": rank, "gpus": gpus, "mapped_by": len(mapped)}
    if rank is not None and rank > 1:
        row.update(used=True, why="%s ranks in its environment" % rank)
    elif not mapped:
        row.update(used=False, why="none of its %d processes loads libnccl" % len(tree))
    elif gpus is not None and len(gpus) > 1:
        row.update(used=True, why="libnccl loaded, %d GPUs held" % len(gpus))
    elif gpus is not None:
        held = "one GPU (%d)" % gpus[0] if gpus else "no GPU"
        row.update(used=False, why="it holds %s and names no ranks in its environment" % held)
    else:
        row.update(used=None, why="libnccl loaded; without NVML the GPUs it holds cannot be read")
    return {"nccl": row}


def derive(samples, ncpu, clk_tck, nodes=None, steps=None, root=None):
    """The profile of the program from its snapshots (oldest first) and its step lines."""
    samples = sorted((s for s in samples or [] if isinstance(s, dict) and "t" in s), key=lambda s: s["t"])
    costs = [s.get("cost_s") for s in samples if isinstance(s.get("cost_s"), (int, float))]
    t0 = samples[0]["t"] if samples else None
    t1 = samples[-1]["t"] if samples else None
    seconds = (t1 - t0) if samples else 0.0
    return {
        "seconds": _r(seconds, 1),
        "samples": len(samples),
        "ncpu": ncpu,
        "cpu": cpu_figures(samples, nodes),
        "memory": memory_figures(samples),
        "disk": disk_figures(samples),
        "net": net_figures(samples),
        "pressure": pressure_figures(samples),
        "program": process_figures(samples, clk_tck, root),
        "gpus": gpu_figures(samples),
        "steps": step_figures(steps or [], t0, t1),
        "uses": uses_figures(samples),
        "sampler": {
            "cost_ms_mean": _r(1000.0 * mean(costs), 2) if costs else None,
            "cost_ms_max": _r(1000.0 * max(costs), 2) if costs else None,
            # share of the profile's wall time the sampler spent reading (one thread)
            "duty_pct": _r(100.0 * sum(costs) / seconds, 2) if costs and seconds > 0 else None,
        },
    }
