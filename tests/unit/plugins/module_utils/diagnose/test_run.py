# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Running a program for a diagnosis, on real processes of this host: the step lines, the
snapshots, and bad programs (one that prints nothing, exits at once, stops in its warm-up,
prints a broken step time) refused with a message naming the variable; the program and its
workers are ended in every case, also one that ignores SIGTERM."""

from __future__ import absolute_import, division, print_function

import os
import sys
import time

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose import run
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import HostLocked
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.registry import LIVE_WORKLOADS

NAMES = {
    "command": "stacktune_bench_live_command",
    "seconds": "stacktune_diagnose_seconds",
    "warmup_s": "stacktune_diagnose_warmup",
    "first_step_timeout": "stacktune_diagnose_timeout",
    "workload": "stacktune_diagnose_workload",
}


def program(tmp_path, body):
    path = tmp_path / "prog.py"
    path.write_text("import json, os, signal, sys, time\n" + body)
    return [sys.executable, str(path)]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as handle:
        return handle.read().split(") ")[1][0] != "Z"


STEPS = "while True:\n    time.sleep(0.02)\n    print(json.dumps({'step_ms': 20.0}), flush=True)\n"


def test_a_program_recorded_then_ended(tmp_path):
    got = run.record(program(tmp_path, STEPS), seconds=1.0, warmup_s=0.2, first_step_timeout=20, sample_hz=5)
    assert len(got["samples"]) >= 5
    assert all(len(s["tree"]) == 1 for s in got["samples"])
    assert len(got["steps"]) > 20 and got["steps"][0][1] == 20.0
    pid = int(next(iter(got["samples"][0]["tree"])))
    assert not alive(pid)


def test_settled_needs_two_full_spans_whose_medians_agree():
    steady = [[i * 0.05, 20.0 + (i % 3) * 0.1] for i in range(1, 41)]  # 2 s of 20 ms steps
    assert run.settled(steady, 2.0)
    # too few steps in a span (a program of 500 ms steps): never settled early
    slow = [[i * 0.5, 500.0] for i in range(1, 5)]
    assert not run.settled(slow, 2.0)
    # still speeding up (a cache filling, a loader's first epoch): 20% apart
    ramp = [[i * 0.05, 30.0 if i <= 20 else 24.0] for i in range(1, 41)]
    assert not run.settled(ramp, 2.0)
    # the last span within 3% of the one before
    near = [[i * 0.05, 20.0 if i <= 20 else 20.5] for i in range(1, 41)]
    assert run.settled(near, 2.0)


def test_the_warm_up_ends_once_the_steps_settle_and_not_before_two_spans(tmp_path):
    got = run.record(program(tmp_path, STEPS), seconds=0.6, warmup_s=10.0, first_step_timeout=20, sample_hz=5)
    assert got["settled"] is True
    assert 2 * run.SETTLE_SPAN_S <= got["warmup_s"] < 5.0


def test_a_program_that_keeps_changing_gets_its_whole_warm_up(tmp_path):
    # each step takes 5% longer than the one before: two spans never hold the same steps, so
    # their medians never agree within 3%, however a busy machine shifts when each step is read
    # (a step time that grew per second of the program's clock settled on a loaded 2-core CI run:
    # steps read late in bursts put one second's steps in both spans)
    body = (
        "ms = 10.0\n"
        "while True:\n"
        "    time.sleep(ms / 1000.0)\n"
        "    print(json.dumps({'step_ms': ms}), flush=True)\n"
        "    ms *= 1.05\n"
    )
    got = run.record(program(tmp_path, body), seconds=0.6, warmup_s=3.0, first_step_timeout=20, sample_hz=5)
    assert got["settled"] is False
    assert got["warmup_s"] >= 3.0


def test_a_tune_lease_is_renewed_while_the_program_runs_and_its_loss_ends_the_diagnosis(tmp_path):
    # a tune diagnoses under its lease: the tick (lease_ticker) runs about once a second
    ticks = []
    got = run.record(
        program(tmp_path, STEPS),
        seconds=1.2,
        warmup_s=0.5,
        first_step_timeout=20,
        sample_hz=5,
        tick=lambda: ticks.append(1),
    )
    assert 2 <= len(ticks) <= 4 and got["samples"]

    # the run no longer holds the host (stopped, taken over): the diagnosis ends, the program too
    def lost():
        raise HostLocked("run r1 no longer holds the host")

    started = time.monotonic()
    with pytest.raises(HostLocked):
        run.record(program(tmp_path, STEPS), seconds=30, warmup_s=0, first_step_timeout=20, sample_hz=5, tick=lost)
    assert time.monotonic() - started < 10


def test_the_process_group_is_killed_even_when_it_ignores_sigterm(tmp_path):
    body = (
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = os.fork()\n"
        "if child == 0:\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    time.sleep(600)\n    os._exit(0)\n"
        + STEPS
    )
    old = run.GRACE_S
    run.GRACE_S = 0.5
    try:
        got = run.record(program(tmp_path, body), seconds=0.6, warmup_s=0, first_step_timeout=20, sample_hz=5)
    finally:
        run.GRACE_S = old
    pids = {int(p) for s in got["samples"] for p in s["tree"]}
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


@pytest.mark.parametrize(
    "body, words",
    [
        (
            "time.sleep(60)\n",
            "stacktune_bench_live_command: the program printed no step line in 1 s (stacktune_diagnose_timeout)",
        ),
        (
            "print('starting', flush=True)\nsys.exit(3)\n",
            "stacktune_bench_live_command: the program ended (exit code 3) before its first step line",
        ),
        (
            "print(5.0, flush=True)\nsys.exit(0)\n",
            "the program ended (exit code 0) during its warm-up (stacktune_diagnose_warmup 1.0 s",
        ),
        (
            "print(5.0, flush=True)\ntime.sleep(60)\n",
            "printed 0 step line(s) in the 1.0 s of the profile (stacktune_diagnose_seconds)",
        ),
        ("print(json.dumps({'step_ms': -1}), flush=True)\ntime.sleep(60)\n", "a step line that is not a step time"),
    ],
)
def test_bad_programs_are_refused_naming_the_variable(tmp_path, body, words):
    argv = program(tmp_path, body)
    with pytest.raises(run.DiagnoseError) as err:
        run.record(argv, seconds=1.0, warmup_s=1.0, first_step_timeout=1, sample_hz=5, names=NAMES)
    assert words in str(err.value)


def test_a_program_that_cannot_start(tmp_path):
    with pytest.raises(run.DiagnoseError, match="stacktune_bench_live_command: cannot start /nonexistent/prog"):
        run.record(["/nonexistent/prog"], 1.0, 0, 1, names=NAMES)


@pytest.mark.parametrize(
    "args, words",
    [
        ({"command": ["a"], "workload": "gemm"}, "give one program, not both"),
        ({"command": [], "workload": None}, "name the program to diagnose"),
        ({"command": ["a", ""], "workload": None}, "stacktune_bench_live_command must be a list of non-empty strings"),
        (
            {"command": None, "workload": "allreduce"},
            "stacktune_diagnose_workload: 'allreduce' is not a built-in workload that runs live",
        ),
        (
            {"command": ["a"], "workload": None, "seconds": 1.0},
            "stacktune_diagnose_seconds must be a number from 2.0 to 300.0, got 1.0",
        ),
        ({"command": ["a"], "workload": None, "first_step_timeout": 0}, "stacktune_diagnose_timeout must be a number"),
    ],
)
def test_options_are_checked_naming_the_variable(args, words):
    with pytest.raises(run.DiagnoseError) as err:
        run.check_options(
            args["command"],
            args["workload"],
            LIVE_WORKLOADS,
            NAMES,
            **{k: v for k, v in args.items() if k not in ("command", "workload")},
        )
    assert words in str(err.value)


def test_diagnose_a_spinning_main_process(tmp_path):
    """The module's whole path on a program that spins one CPU in its main process. On a host
    whose CPUs are all taken by other work the process is still runnable all the time."""
    body = (
        "while True:\n    t = time.perf_counter()\n    x = sum(range(200000))\n"
        "    print((time.perf_counter() - t) * 1000.0, flush=True)\n"
    )
    d = run.diagnose(
        command=program(tmp_path, body), seconds=3.0, warmup_s=0.5, first_step_timeout=30, sample_hz=4, use_nvml=False
    )
    assert d["verdict"] == "cpu_main", d["line"]
    assert d["program"]["command"][0] == sys.executable
    assert d["profile"]["program"]["processes"] == 1
    assert d["line"].startswith("diagnosis: CPU-bound in its main process (step p50 ")


@pytest.mark.alone
def test_diagnose_a_builtin_workload():
    """The module's whole path on the built-in DataLoader workload: its loader workers keep the
    main process waiting. That holds where the workers can have the CPUs; beside other work that
    fills a 2-core machine the diagnosis rightly says "unclear" (host CPU busy 99.6%), so make
    test runs it alone."""
    d = run.diagnose(
        workload="cpu_dataloader",
        python=sys.executable,
        seconds=3.0,
        warmup_s=0.5,
        first_step_timeout=60,
        sample_hz=4,
        use_nvml=False,
    )
    assert d["program"]["workload"] == "cpu_dataloader"
    assert d["profile"]["program"]["processes"] >= 2
    assert d["profile"]["steps"]["count"] > 5
    assert d["verdict"] == "input_loader", d["line"]
