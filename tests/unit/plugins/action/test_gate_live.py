# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's live trial, end to end on this machine: the gate_layer action drives the real
bench module (a real block runner, a real program streaming its steps) and a host whose
"layer" is a file that the running program re-reads every step, so a switch is seen by the
running process at once, as a sysctl or a GPU power limit is. Only the settings engine is a
stand-in here (it writes that file); the engine's own switching is tested in test_engine.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import random
import sys
import textwrap
from types import SimpleNamespace

import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.stacktune.gpu.plugins.action.gate_layer import ActionModule
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import check_settings
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import Trial, live_plan
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import BenchFailure
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.measure import measure
from ansible_collections.stacktune.gpu.plugins.modules import bench

# Each step sleeps 4 ms times the layer's factor, read from its file at every step, and prints
# that nominal time with a 1% spread of its own rather than the time the sleep took: the verdicts
# below are about what the trial does with the steps it is given (one process, windows, switches),
# and what a sleep measures on a loaded 2-core machine is that machine's noise (the identical
# layer's test failed once in a whole unit run here). The gate's noise handling on
# measured steps is tested on recorded GPU windows (tests/unit/fixtures) and in molecule's gate
# scenario.
PROGRAM = textwrap.dedent(
    """
    import os, random, sys, time, signal
    path = sys.argv[1]
    spread = random.Random(1)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        try:
            with open(path) as handle:
                slow = float(handle.read() or 1.0)
        except (OSError, ValueError):
            slow = 1.0
        time.sleep(0.004 * slow)
        print('{"step_ms": %.4f}' % (4.0 * slow * (1.0 + spread.gauss(0.0, 0.01))), flush=True)
    """
)

LIVE_ROW = {"id": "sysctl:vm.swappiness", "changed": True, "effect": "now", "seen_running": True, "settle_s": 0.0}


class Host:
    """bench runs for real; host_settings writes the layer's file (``slow`` while on)."""

    def __init__(self, path, slow):
        self.path, self.slow = path, slow
        self.calls = []
        self.set(True)

    def set(self, on):
        with open(self.path, "w") as handle:
            handle.write("%s" % (self.slow if on else 1.0))

    def execute(self, module_name, module_args, task_vars):
        name = module_name.rsplit(".", 1)[1]
        self.calls.append((name, dict(module_args)))
        if name == "host_settings":
            state = module_args["state"]
            if state in ("reapplied", "kept"):
                self.set(True)
            elif state in ("suspended", "restored", "interrupted"):
                self.set(False)
            return {"changed": True, "settings": []}
        if name == "run_lock":
            return {"changed": False}
        params = bench.default_params(**{k: v for k, v in module_args.items() if k in bench.ARGUMENT_SPEC})
        try:
            return measure(params)
        except BenchFailure as exc:
            return dict(exc.extra, failed=True, msg=exc.msg)


def action(args, host, monkeypatch):
    act = ActionModule.__new__(ActionModule)
    act._task = SimpleNamespace(args=args)
    act._play_context = SimpleNamespace(check_mode=False)
    act._execute_module = host.execute
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    return act


@pytest.fixture
def program(tmp_path):
    prog = tmp_path / "stream.py"
    prog.write_text(PROGRAM)
    return str(prog), str(tmp_path / "layer")


def args_for(prog, layer_file, policy="no_regression"):
    return {
        "layer": "kernel",
        "policy": policy,
        "workloads": ["train_step"],
        "workload": "command",
        "bench": {
            "command": ["unused-in-a-live-trial"],
            "live_command": [sys.executable, prog, layer_file],
            "runner": True,
            "live": True,
            "timeout": 60,
        },
        "gate": {},
        "budget": {"min_blocks": 4, "max_blocks": 8, "max_windows": 8, "window_s": 1, "max_seconds": 120},
        "changes": [LIVE_ROW],
        # no run_id: the runner would end at once, as no run holds this machine's lease
    }


@pytest.mark.one_core
def test_a_slower_layer_is_seen_in_one_running_process_and_put_back(program, monkeypatch):
    prog, layer_file = program
    host = Host(layer_file, slow=1.5)
    res = action(args_for(prog, layer_file), host, monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["decision"] == "rollback", gate["reason"]
    assert gate["method"] == "live" and gate["live"]["used"] is True
    assert gate["verdicts"]["throughput"] == "worse"
    # one program for the whole trial: started once, windows, stopped once
    lives = [a["live"] for name, a in host.calls if name == "bench" and a.get("live")]
    assert lives[0] == "started" and lives[-1] == "stopped"
    assert lives.count("started") == 1 and lives.count("stopped") == 1
    assert lives.count("window") == gate["blocks"]["with"] + gate["blocks"]["without"]
    # switched through the engine, and put back to its snapshot with the decision
    states = [a["state"] for name, a in host.calls if name == "host_settings"]
    assert set(states[:-1]) <= {"suspended", "reapplied"} and states[-1] == "restored"
    with open(layer_file) as handle:
        assert float(handle.read()) == 1.0
    # the windows were measured, not the start-up: most of the trial's time is steps
    assert gate["live"]["measured_share"] > 0.5
    assert len(res["samples"]["with"]) > 50 and len(res["samples"]["without"]) > 50


@pytest.mark.one_core
def test_an_identical_layer_is_kept_within_the_windows_budget(program, monkeypatch):
    prog, layer_file = program
    host = Host(layer_file, slow=1.0)
    res = action(args_for(prog, layer_file), host, monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["decision"] == "keep", gate["reason"]
    assert gate["method"] == "live"
    assert gate["blocks"]["with"] <= 8 and gate["blocks"]["without"] <= 8
    states = [a["state"] for name, a in host.calls if name == "host_settings"]
    assert states[-1] == "kept"
    with open(layer_file) as handle:  # kept: the layer is on at the end, whatever arm came last
        assert float(handle.read()) == 1.0


def test_a_layer_a_running_process_cannot_see_is_measured_in_blocks(program, monkeypatch):
    prog, layer_file = program
    a = args_for(prog, layer_file)
    a["changes"] = [dict(LIVE_ROW, id="file:/etc/nccl.conf", seen_running=False)]
    a["bench"]["command"] = [sys.executable, "-c", "print('{\"step_ms\": 1.0}\\n' * 30)"]
    host = Host(layer_file, slow=1.0)
    res = action(a, host, monkeypatch).run(task_vars={})
    assert res["gate"]["live"] == {
        "used": False,
        "why": "a running process does not see file:/etc/nccl.conf; every block starts a process of its own",
    }
    assert not [1 for name, args in host.calls if name == "bench" and args.get("live")]


NO_LIVE_COMMAND = "the user's program runs per block (stacktune_bench_live_command is not set)"
NOTHING_NOW = "no change of the layer says whether a running process sees it"


@pytest.mark.parametrize(
    "changes, workloads, bench_opts, expected",
    [
        ([LIVE_ROW], ["train_step", "dataloader"], {}, (True, 0.0)),
        ([dict(LIVE_ROW, settle_s=1.0), dict(LIVE_ROW, id="b", settle_s=0.2)], ["gemm"], {}, (True, 1.0)),
        ([LIVE_ROW], ["allreduce"], {}, (False, "workload allreduce cannot run for a whole trial")),
        ([LIVE_ROW], ["command"], {}, (False, NO_LIVE_COMMAND)),
        ([LIVE_ROW], ["gemm"], {"runner": False}, (False, "the block runner is off")),
        ([LIVE_ROW], ["gemm"], {"live": False}, (False, "live trials are off (stacktune_gate_live)")),
        ([dict(LIVE_ROW, effect="next_boot")], ["gemm"], {}, (False, NOTHING_NOW)),
    ],
)
def test_which_layers_a_live_trial_measures(changes, workloads, bench_opts, expected):
    assert live_plan(changes, workloads, bench_opts, wanted=bench_opts.get("live", True)) == expected


def test_live_quads_are_balanced_in_a_random_order():
    arms = []

    def measure(_w):
        arms.append(state["on"])
        return {"samples_ms": [10.0] * 20, "throughput": None}

    state = {"on": True}

    def set_layer(on):
        state["on"] = on

    gate = check_settings({}, {"min_blocks": 8, "max_blocks": 8, "max_seconds": 100})
    Trial(["w"], set_layer, measure, "no_regression", gate, lambda: 0.0, rng=random.Random(7)).run()
    quads = [tuple(arms[i : i + 4]) for i in range(0, len(arms), 4)]
    assert len(quads) == 4
    assert set(quads) == {(True, False, False, True), (False, True, True, False)}
    assert arms.count(True) == arms.count(False)


@pytest.mark.one_core
def test_the_runner_is_gone_after_the_trial(program, monkeypatch):
    prog, layer_file = program
    host = Host(layer_file, slow=1.0)
    act = action(args_for(prog, layer_file), host, monkeypatch)
    act.run(task_vars={})
    started = [a for name, a in host.calls if name == "bench" and a.get("runner_state") == "started"]
    assert started
    stopped = [a for name, a in host.calls if name == "bench" and a.get("runner_state") == "stopped"]
    assert stopped and not os.path.exists(stopped[-1]["runner_socket"])


CRASHING = textwrap.dedent(
    """
    import os, sys, time
    path = sys.argv[1]
    since = None  # when the layer's file began to say crash (it fails 0.6 s later)
    for step in range(10**9):
        if os.path.exists(path) and open(path).read().strip() == "crash":
            since = time.monotonic() if since is None else since
            if time.monotonic() - since > 0.6:
                sys.exit("RuntimeError: unable to allocate shared memory(shm)")
        else:
            since = None
        time.sleep(0.004)
        print('{"step_ms": 4.0}', flush=True)
    """
)


class CrashHost(Host):
    def set(self, on):
        with open(self.path, "w") as handle:
            handle.write("crash" if on else "fine")


@pytest.mark.one_core
def test_a_layer_that_makes_the_running_program_fail_is_rolled_back_with_that_cause(tmp_path, monkeypatch):
    prog = tmp_path / "crash.py"
    prog.write_text(CRASHING)
    layer_file = str(tmp_path / "layer")
    host = CrashHost(layer_file, slow=1.0)
    res = action(args_for(str(prog), layer_file), host, monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["decision"] == "rollback" and gate["cause"] == "workload_fails", gate
    assert "unable to allocate shared memory" in gate["reason"]
    # the program was started again, without the layer, for the window that showed it runs
    lives = [a["live"] for name, a in host.calls if name == "bench" and a.get("live")]
    assert lives.count("started") == 2
    with open(layer_file) as handle:
        assert handle.read() == "fine"


class FakeLiveHost:
    """Answers the live requests with made-up windows: ``slow[workload]`` while the layer is on."""

    def __init__(self, slow):
        self.slow, self.on, self.calls = slow, True, []
        self.rng = random.Random(5)

    def execute(self, module_name, module_args, task_vars):
        name = module_name.rsplit(".", 1)[1]
        self.calls.append((name, dict(module_args)))
        if name == "host_settings":
            self.on = module_args["state"] in ("reapplied", "kept")
            return {"changed": True, "settings": []}
        if module_args.get("runner_state"):
            return {"runner_socket": "/run/stacktune-runner-x/runner.sock", "runner_start_s": 0.1}
        live = module_args.get("live")
        if live == "started":
            return {"live": "started", "live_start_s": 0.1}
        if live == "stopped":
            return {"live": "stopped", "ended": {"rc": 0, "steps": 1000}}
        factor = self.slow.get(module_args["workload"], 1.0) if self.on else 1.0
        steps = [10.0 * factor * (1.0 + self.rng.gauss(0, 0.002)) for _i in range(100)]
        return {"live": "window", "window": {"samples_ms": steps, "dropped": 2}}


def fake_live_args(layer, policy, workloads, row=None):
    """gate_layer's arguments for a live trial on FakeLiveHost (1-second windows); ``row`` is
    the layer's one change (LIVE_ROW when not given)."""
    return {
        "layer": layer,
        "policy": policy,
        "workloads": workloads,
        "gpu_count": 1,
        "bench": {"live": True},
        "gate": {},
        "budget": {"min_blocks": 4, "max_windows": 8, "window_s": 1},
        "changes": [row or LIVE_ROW],
    }


def test_a_workload_that_shows_the_layer_worse_ends_the_live_trial(monkeypatch):
    host = FakeLiveHost({"gemm": 1.3})
    power = dict(LIVE_ROW, id="nvml:gpu0:power_limit_w")
    args = fake_live_args("gpu_settings", "improve", ["gemm", "train_step"], power)
    res = action(args, host, monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["decision"] == "rollback" and gate["verdicts"]["throughput"] == "worse"
    assert gate["workloads_measured"] == ["gemm"]
    started = [a["workload"] for name, a in host.calls if name == "bench" and a.get("live") == "started"]
    assert started == ["gemm"]  # train_step was never started: gemm had shown the layer worse
    assert set(res["samples_by_workload"]) == {"gemm"}


def test_a_harmless_layer_is_judged_on_every_workload(monkeypatch):
    host = FakeLiveHost({})
    res = action(fake_live_args("kernel", "no_regression", ["train_step", "dataloader"]), host, monkeypatch).run(
        task_vars={}
    )
    gate = res["gate"]
    assert gate["decision"] == "keep" and gate["workloads_measured"] == ["train_step", "dataloader"]
    assert sorted(gate["workloads"]) == ["dataloader", "train_step"]
    assert gate["method"] == "live" and gate["final"] is True


def test_under_improve_a_second_workload_is_measured_only_when_the_first_cannot_decide(monkeypatch):
    # the layer makes the training step 20% faster: shown on train_step, dataloader never started
    host = FakeLiveHost({"train_step": 0.8})
    res = action(fake_live_args("kernel", "improve", ["train_step", "dataloader"]), host, monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["decision"] == "keep" and gate["workloads_measured"] == ["train_step"]
    started = [a["workload"] for name, a in host.calls if name == "bench" and a.get("live") == "started"]
    assert started == ["train_step"]
    assert "not measured on dataloader: train_step decided" in gate["reason"]
    # a layer the first workload cannot see (no change on it): the second one is measured
    flat = FakeLiveHost({"dataloader": 0.8})
    res = action(fake_live_args("kernel", "improve", ["train_step", "dataloader"]), flat, monkeypatch).run(task_vars={})
    assert res["gate"]["workloads_measured"] == ["train_step", "dataloader"]
