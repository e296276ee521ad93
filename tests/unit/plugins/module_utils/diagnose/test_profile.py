# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The derivations from consecutive raw snapshots, on /proc text written out by hand so that
every figure can be checked by arithmetic."""

from __future__ import absolute_import, division, print_function

from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose import profile, snapshot


def stat(cpus, ctxt, running=2, blocked=0):
    """/proc/stat text; ``cpus``: per CPU (user, idle, iowait) jiffies."""
    total = [sum(c[i] for c in cpus) for i in range(3)]
    lines = ["cpu  %d 0 0 %d %d 0 0 0 0 0" % tuple(total)]
    lines += ["cpu%d %d 0 0 %d %d 0 0 0 0 0" % ((i,) + tuple(c)) for i, c in enumerate(cpus)]
    lines += ["ctxt %d" % ctxt, "procs_running %d" % running, "procs_blocked %d" % blocked]
    return "\n".join(lines) + "\n"


def pid_stat(pid, comm, state, ppid, ticks, majflt=0, threads=1, start=100):
    fields = [state, ppid, 1, 1, 0, -1, 0, 0, 0, majflt, 0, ticks, 0, 0, 0, 20, 0, threads, 0, start]
    return "%d (%s) %s\n" % (pid, comm, " ".join(str(f) for f in fields))


def snap(t, cpus, ctxt, tree, vmstat="pgmajfault 0\n", disk=(0, 0, 0), net=(0, 0), gpus=None, cost=0.01):
    doc = {
        "t": t,
        "cost_s": cost,
        "host": {
            "stat": stat(cpus, ctxt),
            "loadavg": "1.0 1.0 1.0 3/200 999\n",
            "vmstat": vmstat,
            "diskstats": "   8   0 sda 10 0 %d 0 5 0 %d 0 0 %d 0\n   8   1 sda1 1 0 999999 0 0 0 0 0 0 0 0\n" % disk,
            "net_dev": "Inter-|\n face |\n    lo: 999999 0 0 0 0 0 0 0 999999 0\n  eth0: %d 0 0 0 0 0 0 0 %d 0\n" % net,
            "pressure_cpu": "some avg10=4.00 avg60=1.00 avg300=0.00 total=1\n",
            "pressure_io": None,
            "pressure_memory": "some avg10=0.00 avg60=0 avg300=0 total=0\nfull avg10=0.00 avg60=0 avg300=0 total=0\n",
        },
        "tree": tree,
    }
    if gpus is not None:
        doc["gpus"] = gpus
    return doc


def test_parsers_read_proc_text():
    s = profile.parse_stat(stat([(10, 80, 10), (50, 50, 0)], 1000, 3, 1))
    assert s["all"] == (60, 10, 200) and s["cpus"][1] == (50, 0, 100)
    assert (s["ctxt"], s["procs_running"], s["procs_blocked"]) == (1000, 3, 1)
    assert profile.parse_pressure("some avg10=1.50 avg60=0 avg300=0 total=9\nfull avg10=0.25 avg60=0\n") == {
        "some": 1.5,
        "full": 0.25,
    }
    assert profile.parse_loadavg("0.5 0.4 0.3 7/512 100") == 7
    assert profile.parse_net_dev("  lo: 5 0 0 0 0 0 0 0 5 0\neth0: 100 0 0 0 0 0 0 0 200 0\n") == {"eth0": (100, 200)}
    row = profile.parse_pid_stat(pid_stat(42, "my prog (x)", "R", 1, 250, majflt=3, threads=4, start=77))
    assert row == {"comm": "my prog (x)", "state": "R", "ppid": 1, "majflt": 3, "ticks": 250, "threads": 4, "start": 77}
    assert profile.parse_diskstats("8 0 sda 1 0 20 0 1 0 40 0 0 300 0\n8 1 sda1 1 0 20 0 1 0 40 0 0 300 0\n") == {
        "sda": (20, 40, 300)
    }


def test_cpu_per_node_faults_disk_net_from_two_snapshots():
    tree0 = {"10": {"stat": pid_stat(10, "main", "S", 1, 0), "status": "VmRSS:\t2048 kB\n"}}
    tree1 = {"10": {"stat": pid_stat(10, "main", "S", 1, 50), "status": "VmRSS:\t2048 kB\n"}}
    a = snap(0.0, [(0, 0, 0), (0, 0, 0)], 0, tree0, "pgmajfault 0\npswpin 0\npswpout 0\n", (0, 0, 0), (0, 0))
    # two seconds later: cpu0 busy 100 of 200 jiffies with 50 iowait, cpu1 idle; 2000 switches
    b = snap(
        2.0,
        [(100, 50, 50), (0, 200, 0)],
        2000,
        tree1,
        "pgmajfault 600\npswpin 10\npswpout 30\n",
        (4000, 2000, 1000),
        (4_000_000, 2_000_000),
    )
    p = profile.derive([b, a], ncpu=2, clk_tck=100, nodes={"0": "0", "1": "1"})
    assert p["seconds"] == 2.0 and p["samples"] == 2
    assert p["cpu"]["busy_pct"] == 25.0 and p["cpu"]["iowait_pct"] == 12.5
    assert p["cpu"]["nodes"] == {
        "0": {"cpus": 1, "busy_pct": 50.0, "iowait_pct": 25.0},
        "1": {"cpus": 1, "busy_pct": 0.0, "iowait_pct": 0.0},
    }
    assert p["cpu"]["ctxt_per_s"] == 1000 and p["cpu"]["run_queue"] == 3
    assert p["memory"] == {"major_faults_per_s": 300.0, "swap_in_per_s": 5.0, "swap_out_per_s": 15.0}
    # sectors of 512 bytes; the partition is not counted again
    assert p["disk"] == {"read_mbs": 1.02, "write_mbs": 0.51, "busiest": "sda", "busiest_util_pct": 50.0}
    assert p["net"] == {"rx_mbs": 2.0, "tx_mbs": 1.0}
    assert p["pressure"] == {"cpu_some_pct": 4.0, "memory_some_pct": 0.0}
    main = p["program"]["main"]
    assert main["cores"] == 0.25 and main["rss_mb"] == 2.0 and not main["saturated"]
    assert p["sampler"] == {"cost_ms_mean": 10.0, "cost_ms_max": 10.0, "duty_pct": 1.0}


def test_processes_saturated_starved_and_reused_pids():
    def tree(t):
        return {
            "10": {"stat": pid_stat(10, "main", "S", 1, 5 * t), "status": None},
            # a worker at one full core
            "11": {"stat": pid_stat(11, "worker", "R", 10, 100 * t, start=200), "status": None},
            # a worker always runnable but given a third of a core: starved
            "12": {"stat": pid_stat(12, "worker", "R", 10, 33 * t, start=200), "status": None},
        }

    samples = [snap(float(t), [(0, 0, 0)], 0, tree(t)) for t in range(5)]
    # pid 12 is reused by another process (another start time) in the last snapshot
    samples[-1]["tree"]["12"]["stat"] = pid_stat(12, "other", "S", 10, 0, start=999)
    prog = profile.derive(samples, ncpu=1, clk_tck=100)["program"]
    rows = {(r["pid"], r["comm"]): r for r in prog["list"]}
    assert rows[(10, "main")]["role"] == "main" and rows[(10, "main")]["cores"] == 0.05
    assert rows[(11, "worker")]["cores"] == 1.0 and rows[(11, "worker")]["saturated"]
    assert not rows[(11, "worker")]["starved"]
    assert rows[(12, "worker")]["cores"] == 0.33 and rows[(12, "worker")]["starved"]
    assert rows[(12, "other")]["cores"] is None  # seen once: no rate
    assert prog["workers"] == 2 and prog["workers_saturated"] == 2 and prog["starved"] == 1


def test_gpu_levels_events_and_energy():
    def gpu(util, mw, events, energy):
        return [
            {
                "index": 0,
                "util_gpu": util,
                "util_mem": 10,
                "power_mw": mw,
                "power_limit_mw": 700000,
                "sm_clock_mhz": 1500,
                "mem_clock_mhz": 2619,
                "sm_clock_max_mhz": 1980,
                "clock_event_reasons": events,
                "pcie_tx_kbs": 1000,
                "pcie_rx_kbs": {"nvml_error": "Not Supported"},
                "mem_used_b": 2**30,
                "mem_total_b": 2**31,
                "temp_c": 60,
                "energy_mj": energy,
            }
        ]

    samples = [
        snap(0.0, [(0, 0, 0)], 0, {}, gpus=gpu(90, 690000, 0x4, 0)),
        snap(1.0, [(0, 0, 0)], 0, {}, gpus=gpu(100, 700000, 0x4 | 0x20, 600000)),
        snap(2.0, [(0, 0, 0)], 0, {}, gpus=gpu(80, 680000, 0, 1200000)),
    ]
    g = profile.derive(samples, ncpu=1, clk_tck=100)["gpus"][0]
    assert g["util_gpu_pct"] == 90.0 and g["util_gpu_min_pct"] == 80.0
    assert g["power_w"] == 690.0 and g["power_limit_w"] == 700.0 and g["power_of_limit_pct"] == 98.6
    assert g["energy_w"] == 600.0
    assert g["clock_events_pct"] == {"sw_power_cap": 67, "sw_thermal_slowdown": 33}
    assert g["sm_clock_of_max_pct"] == 75.8
    # a reading NVML refused is left out, not counted as zero
    assert g["pcie_rx_gbs"] is None and g["pcie_tx_gbs"] == 0.001


def test_steps_in_the_profile_window():
    steps = [[0.5, 100.0]] + [[1.0 + i * 0.01, 10.0 + (i % 10)] for i in range(101)] + [[9.0, 500.0]]
    got = profile.step_figures(steps, 1.0, 2.0)
    assert got["count"] == 101 and got["per_s"] == 100.0
    assert got["p50_ms"] == 14.0 and got["max_ms"] == 19.0
    assert profile.step_figures([], 0, 1) == {"count": 0}


def test_snapshot_of_this_process_tree(tmp_path):
    """The live reader on this host: the test's own process, its /proc text as read."""
    import os

    doc = snapshot.take(os.getpid(), 1.5)
    assert doc["t"] == 1.5 and doc["cost_s"] >= 0
    assert str(os.getpid()) in doc["tree"]
    assert doc["host"]["stat"].startswith("cpu ")
    assert "gpus" not in doc
    meta = snapshot.host_meta()
    assert meta["ncpu"] >= 1 and meta["clk_tck"] > 0
    # a /proc without the process gives an empty tree
    assert snapshot.tree_of(os.getpid(), str(tmp_path)) == {}
