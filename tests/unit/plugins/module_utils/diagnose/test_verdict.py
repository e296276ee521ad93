# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verdict rules on profiles written out by hand: each rule at and around its threshold,
the order the rules are tried in, and "unclear" where the numbers do not decide. The recorded
programs are in test_recorded.py."""

from __future__ import absolute_import, division, print_function

import copy

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose import advice, verdict
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.metrics import DIAGNOSIS_VERDICTS


def proc(role, cores, runnable=0, pid=1, disk_wait=0):
    return {
        "pid": pid,
        "comm": "python3",
        "role": role,
        "cores": cores,
        "runnable_pct": runnable,
        "disk_wait_pct": disk_wait,
        "saturated": cores >= 0.85 or runnable >= 80,
        "starved": runnable >= 80 and cores < 0.85,
        "threads": 1,
        "rss_mb": 10,
    }


def base(gpu_util=None, main=0.3, workers=(), **over):
    rows = [proc("main", main, 100 if main >= 0.85 else 10)] + [
        proc("worker", c, 100 if c >= 0.85 else 10, pid=2 + i) for i, c in enumerate(workers)
    ]
    p = {
        "samples": 30,
        "ncpu": 16,
        "cpu": {"busy_pct": 20.0, "iowait_pct": 0.0, "run_queue": 3},
        "memory": {"major_faults_per_s": 0.0, "swap_in_per_s": 0.0, "swap_out_per_s": 0.0},
        "disk": {"read_mbs": 1.0, "write_mbs": 0.0, "busiest": "sda", "busiest_util_pct": 1.0},
        "pressure": {"cpu_some_pct": 0.0, "io_some_pct": 0.0, "memory_some_pct": 0.0},
        "program": {
            "processes": len(rows),
            "cores": sum(r["cores"] for r in rows),
            "main": rows[0],
            "list": rows,
            "starved": 0,
        },
        "gpus": [],
        "steps": {"count": 500, "p50_ms": 10.0, "p99_ms": 12.0},
    }
    if gpu_util is not None:
        p["gpus"] = [
            {
                "index": 0,
                "util_gpu_pct": gpu_util,
                "util_gpu_min_pct": gpu_util,
                "power_w": 400.0,
                "power_limit_w": 700.0,
                "power_of_limit_pct": 57.1,
                "sm_clock_mhz": 1980,
                "sm_clock_max_mhz": 1980,
                "sm_clock_of_max_pct": 100.0,
                "clock_events_pct": {},
                "temp_c": 60,
                "temp_max_c": 61,
            }
        ]
    for path, value in over.items():
        head, _sep, key = path.partition("__")
        if key:
            p[head][key] = value
        else:
            p[head] = value
    return p


def test_the_verdict_lists_agree_with_the_metrics():
    assert verdict.VERDICTS == DIAGNOSIS_VERDICTS
    assert [r[0] for r in verdict.RULES] == list(verdict.VERDICTS)
    assert set(verdict.TITLES) == set(verdict.VERDICTS) == set(advice.MOVES)


def test_gpu_power_cap_by_events_or_by_power():
    p = base(gpu_util=90)
    p["gpus"][0]["clock_events_pct"] = {"sw_power_cap": 30}
    assert verdict.decide(p)["verdict"] == "gpu_power_cap"
    p["gpus"][0]["clock_events_pct"] = {"sw_power_cap": 29}
    assert verdict.decide(p)["verdict"] == "gpu_compute"
    p["gpus"][0]["power_of_limit_pct"] = 95.0
    got = verdict.decide(p)
    assert got["verdict"] == "gpu_power_cap" and "power 400 of 700 W (95%)" in got["evidence"]


def test_gpu_clocks_held_down_by_temperature_or_clock():
    p = base(gpu_util=75)
    p["gpus"][0]["clock_events_pct"] = {"hw_thermal_slowdown": 40}
    assert verdict.decide(p)["verdict"] == "gpu_clocks_thermal"
    p["gpus"][0]["clock_events_pct"] = {}
    p["gpus"][0]["sm_clock_of_max_pct"] = 89.9
    assert verdict.decide(p)["verdict"] == "gpu_clocks_thermal"
    p["gpus"][0]["sm_clock_of_max_pct"] = 90.0
    assert verdict.decide(p)["verdict"] == "gpu_compute"


def test_a_busy_gpu_wins_over_host_figures():
    """At 70% GPU utilisation the GPU bounds the step even with saturated workers."""
    p = base(gpu_util=70, workers=(1.0, 1.0))
    assert verdict.decide(p)["verdict"] == "gpu_compute"
    p = base(gpu_util=69.9, workers=(1.0, 1.0))
    assert verdict.decide(p)["verdict"] == "input_loader"


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"memory__major_faults_per_s": 200.0}, "host_memory"),
        ({"memory__swap_out_per_s": 100.0}, "host_memory"),
        ({"pressure__memory_some_pct": 10.0}, "host_memory"),
        ({"memory__major_faults_per_s": 199.0}, "unclear"),
        ({"cpu__iowait_pct": 10.0}, "input_storage"),
        ({"pressure__io_some_pct": 20.0}, "input_storage"),
        ({"cpu__iowait_pct": 9.9}, "unclear"),
    ],
)
def test_host_memory_and_storage_thresholds(over, expected):
    got = verdict.decide(base(gpu_util=30, **over))
    assert got["verdict"] == expected, got


def test_the_hosts_io_waits_are_not_laid_on_a_program_that_runs_all_the_time():
    # seen in CI: a program spinning its main process, the host's IO pressure 20.5% from another
    # job's writes; the program never in disk sleep
    got = verdict.decide(base(main=1.0, pressure__io_some_pct=20.5))
    assert got["verdict"] == "cpu_main", got
    assert any(
        "the host waited on storage (iowait 0%, IO pressure 20.5%), but not the program" in c for c in got["caveats"]
    )
    # its own processes in disk sleep: storage whatever else runs
    p = base(main=1.0, pressure__io_some_pct=20.5)
    p["program"]["list"][0]["disk_wait_pct"] = 30
    assert verdict.decide(p)["verdict"] == "input_storage"


def test_storage_from_disk_sleep():
    p = base(gpu_util=20)
    p["program"]["list"][0]["disk_wait_pct"] = 30
    assert verdict.decide(p)["verdict"] == "input_storage"


def test_loader_and_main_process():
    # half of the working workers saturated is enough; a worker doing nothing is not counted
    assert verdict.decide(base(workers=(1.0, 0.2)))["verdict"] == "input_loader"
    assert verdict.decide(base(workers=(1.0, 0.2, 0.2)))["verdict"] == "unclear"
    assert verdict.decide(base(workers=(1.0, 0.0, 0.01)))["verdict"] == "input_loader"
    # no GPU: saturated workers and a saturated main process do not say which one bounds
    assert verdict.decide(base(main=1.0, workers=(1.0, 1.0)))["verdict"] == "unclear"
    # with an idle GPU, saturated workers do
    assert verdict.decide(base(gpu_util=30, main=1.0, workers=(1.0, 1.0)))["verdict"] == "input_loader"
    got = verdict.decide(base(main=1.0))
    assert got["verdict"] == "cpu_main"
    assert got["evidence"][1].startswith("main python3 (pid 1): 1 core, runnable")


def test_unclear_when_too_short_or_nothing_decides():
    p = base(main=1.0)
    p["samples"] = 3
    got = verdict.decide(p)
    assert got["verdict"] == "unclear" and "too few to judge" in got["evidence"][0]
    p = base(main=1.0, steps={"count": 4})
    assert verdict.decide(p)["verdict"] == "unclear"
    got = verdict.decide(base(gpu_util=60))
    assert got["verdict"] == "unclear"
    assert got["evidence"][0] == "GPU 0 utilisation 60% (< 70%, min 60%)"


def test_communication_is_named_as_a_candidate_never_decided():
    p = base(gpu_util=40)
    p["gpus"].append(dict(p["gpus"][0], index=1))
    got = verdict.decide(p)
    assert got["verdict"] == "unclear"
    assert any("communication between them is a candidate" in e for e in got["evidence"])
    moves = advice.what_moves("unclear", p)
    assert "nccl" in moves["can"] and moves["cannot"] == {}


def test_contention_is_a_caveat_not_a_verdict():
    p = base(main=0.4)
    p["program"]["main"] = p["program"]["list"][0] = proc("main", 0.4, runnable=100)
    p["program"]["starved"] = 1
    p["cpu"]["busy_pct"] = 99.0
    got = verdict.decide(p)
    assert got["verdict"] == "cpu_main"
    assert "the host's CPUs are all busy" in got["caveats"][0]
    assert "takes cores from the program" in " ".join(advice.what_moves("cpu_main", p)["outside"])


def test_thresholds_can_be_given():
    p = base(gpu_util=60)
    assert verdict.decide(p, {"gpu_busy_pct": 50.0})["verdict"] == "gpu_compute"


def test_advice_outside_the_stack_uses_the_numbers():
    p = base(gpu_util=30, workers=(1.0, 1.0, 1.0, 1.0))
    p["cpu"]["busy_pct"] = 31.25
    out = advice.what_moves("input_loader", p)["outside"]
    assert out[0] == (
        "the 4 loader workers use 4.0 of 16 cores (the program 4.3), 11.0 cores idle: more workers would help; "
        "so would cheaper decoding"
    )
    full = copy.deepcopy(p)
    full["cpu"]["busy_pct"] = 97.0
    assert "the host has no idle core" in advice.what_moves("input_loader", full)["outside"][0]


def test_skip_layers_only_what_the_verdict_says_cannot():
    d = {"verdict": "gpu_power_cap", "title": "t"}
    assert sorted(advice.skip_layers(d, ["cpu", "gpu_settings", "nccl", "kernel"])) == ["cpu", "kernel"]
    assert advice.skip_layers({"verdict": "unclear"}, ["cpu", "gpu_settings"]) == {}
    assert advice.skip_layers({}, ["cpu"]) == {}
