# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A search of candidate values, end to end on this machine: the gate_layer action drives the
real bench module (a real block runner, a real program streaming its steps) and a host whose
setting is a file the running program re-reads every step (its value scales the step's sleep).
Only the settings engine is a stand-in (it writes that file: the candidate's value on
``present`` and ``switched``, the host's own value 1.0 on ``suspended``, ``restored`` and ``interrupted``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import sys
import tempfile
import textwrap
from types import SimpleNamespace

import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.stacktune.gpu.plugins.action.gate_layer import ActionModule
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import BenchFailure
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.measure import measure
from ansible_collections.stacktune.gpu.plugins.modules import bench
from ansible_collections.stacktune.gpu.plugins.plugin_utils._interrupt import read_records

PROGRAM = textwrap.dedent(
    """
    import sys, time, signal
    path = sys.argv[1]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        t0 = time.perf_counter()
        try:
            with open(path) as handle:
                slow = float(handle.read() or 1.0)
        except (OSError, ValueError):
            slow = 1.0
        time.sleep(0.004 * slow)
        print('{"step_ms": %.4f}' % ((time.perf_counter() - t0) * 1000.0), flush=True)
    """
)
ROW = {"id": "sysctl:vm.swappiness", "changed": True, "effect": "now", "seen_running": True, "settle_s": 0.0}


class WorkerExit(Exception):
    pass


class Host:
    def __init__(self, path, first, hook=None):
        self.path, self.calls, self.hook = path, [], hook
        self.journaled = first
        self.set(first)

    def set(self, value):
        with open(self.path, "w") as handle:
            handle.write("%s" % value)

    def value(self):
        with open(self.path) as handle:
            return float(handle.read())

    def execute(self, module_name, module_args, task_vars):
        name = module_name.rsplit(".", 1)[1]
        self.calls.append((name, dict(module_args)))
        if self.hook:
            self.hook(self)
        if name == "host_settings":
            state = module_args["state"]
            if state in ("present", "switched"):
                self.journaled = module_args["settings"][0]["value"]
                self.set(self.journaled)
            elif state == "reapplied":
                self.set(self.journaled)
            elif state in ("suspended", "restored", "interrupted"):
                self.set(1.0)
            return {"changed": True, "settings": []}
        if name == "run_lock":
            return {"changed": False}
        params = bench.default_params(**{k: v for k, v in module_args.items() if k in bench.ARGUMENT_SPEC})
        try:
            return measure(params)
        except BenchFailure as exc:
            return dict(exc.extra, failed=True, msg=exc.msg)


def action(args, host, monkeypatch, check_mode=False):
    act = ActionModule.__new__(ActionModule)
    act._task = SimpleNamespace(args=args)
    act._play_context = SimpleNamespace(check_mode=check_mode)
    act._execute_module = host.execute
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    return act


@pytest.fixture
def program(tmp_path):
    prog = tmp_path / "stream.py"
    prog.write_text(PROGRAM)
    return str(prog), str(tmp_path / "setting")


def args_for(prog, path, values, run_id=None):
    a = {
        "layer": "kernel",
        "policy": "improve",
        "workloads": ["train_step"],
        "workload": "command",
        "bench": {
            "command": ["unused"],
            "live_command": [sys.executable, prog, path],
            "runner": True,
            "live": True,
            "timeout": 60,
        },
        "gate": {},
        "budget": {"min_blocks": 4, "max_blocks": 8, "max_windows": 8, "window_s": 1, "max_seconds": 120},
        "changes": [ROW],
        "search": {
            "variable": "slow",
            "host_value": 1.0,
            "candidates": [{"value": v, "settings": [{"kind": "file", "value": v}]} for v in values],
            "budget": {"min_rounds": 2, "max_rounds": 3, "max_seconds": 60, "visit_windows": 1},
        },
    }
    if run_id:
        a["run_id"] = run_id
    return a


@pytest.mark.one_core
def test_the_faster_candidate_is_chosen_in_one_program_and_kept(program, monkeypatch):
    prog, path = program
    host = Host(path, 3.0)  # the layer's role put the first candidate in place
    res = action(args_for(prog, path, [3.0, 0.5, 1.0]), host, monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["method"] == "search" and gate["decision"] == "keep", gate["reason"]
    assert gate["search"]["chosen"] == 0.5 and host.value() == 0.5
    rows = {r["value"]: r for r in gate["search"]["rows"]}
    assert rows[3.0]["status"] == "dropped" and "throughput shown worse" in rows[3.0]["why"]
    assert rows[0.5]["status"] == "chosen" and rows[0.5]["energy"] == "not measured"
    lives = [a["live"] for name, a in host.calls if name == "bench" and a.get("live")]
    assert lives.count("started") == 1 and lives.count("stopped") == 1  # ONE program for the search
    states = [a["state"] for name, a in host.calls if name == "host_settings"]
    # every candidate is put in place by the engine's switch (journaled "candidate <v> in place")
    assert set(states[:-1]) <= {"suspended", "switched"} and states[-1] == "kept"
    switched = [a for name, a in host.calls if name == "host_settings" and a["state"] == "switched"]
    assert {a["decision"]["value"] for a in switched} == {3.0, 0.5}
    assert switched[-1]["decision"]["value"] == 0.5


@pytest.mark.one_core
def test_candidates_no_better_than_the_host_leave_the_host_value(program, monkeypatch):
    prog, path = program
    host = Host(path, 2.0)
    res = action(args_for(prog, path, [2.0, 4.0]), host, monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["decision"] == "rollback" and gate["search"]["chosen"] == 1.0, gate["reason"]
    assert host.value() == 1.0
    calls = [a for name, a in host.calls if name == "host_settings"]
    assert calls[-1]["state"] == "restored"
    # the first candidate on before the rollback: it is what the journal records as rejected,
    # the settings the layer applies when the same candidates are given again (not applied again)
    assert calls[-2]["state"] == "switched" and calls[-2]["decision"] == {"value": 2.0}


def test_check_mode_says_the_plan(program, monkeypatch):
    prog, path = program
    host = Host(path, 2.0)
    res = action(args_for(prog, path, [2.0, 0.5]), host, monkeypatch, check_mode=True).run(task_vars={})
    assert "search slow over 2.0, 0.5 against the host's own value (1.0)" in res["msg"]
    assert host.calls == []


def test_a_bad_candidate_list_is_refused_naming_the_key(program, monkeypatch):
    prog, path = program
    a = args_for(prog, path, [2.0])
    a["search"]["objective"] = "fastest"
    host = Host(path, 2.0)
    with pytest.raises(Exception, match="search.objective must be one of throughput, efficiency"):
        action(a, host, monkeypatch).run(task_vars={})
    assert host.calls == []


@pytest.mark.one_core
def test_an_interrupt_during_the_search_puts_the_host_back(program, monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None
    prog, path = program
    windows = []

    def hook(host):
        name, args = host.calls[-1]
        if name == "bench" and args.get("live") == "window":
            windows.append(1)
            if len(windows) == 3:
                os.kill(os.getpid(), signal.SIGINT)

    host = Host(path, 3.0, hook=hook)
    act = action(args_for(prog, path, [3.0, 0.5]), host, monkeypatch)  # no run_id: no lease to hold here

    def stop():
        raise WorkerExit()

    act._exit_worker = stop
    with pytest.raises(WorkerExit):
        act.run(task_vars={"inventory_hostname": "gpu-01"})
    tempfile.tempdir = None
    states = [a["state"] for name, a in host.calls if name in ("host_settings", "run_lock")]
    assert states[-2:] == ["interrupted", "unlocked"]
    assert host.value() == 1.0  # the host's own value, as before the layer
    assert read_records(os.getppid())["gpu-01"]["layer"] == "kernel"
