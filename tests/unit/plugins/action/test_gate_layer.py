# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate_layer action's glue: which modules it calls, in which order, with which arguments.

The host is a fake that answers the two modules the action drives (host_settings and bench);
the statistics behind the decision are tested in test_blocks.py and on recorded real blocks.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import os
import random
import signal
import tempfile
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.stacktune.gpu.plugins.action.gate_layer import ActionModule
from ansible_collections.stacktune.gpu.plugins.plugin_utils._interrupt import read_records


class FakeHost:
    """Answers host_settings, run_lock and bench; the layer slows the workload by ``effect`` while it is on.

    ``fail``: how the workload fails, a function of (block number, layer on) returning a bench
    failure result or None; ``hook``: called before each block (block number) to inject a signal.
    """

    def __init__(self, effect=1.0, fail=None, hook=None):
        self.on = True
        self.effect = effect
        self.calls = []
        self.rng = random.Random(3)
        self.fail = fail
        self.hook = hook

    def states(self):
        return [a["state"] for name, a in self.calls if name == "host_settings"]

    def execute(self, module_name, module_args, task_vars):
        if module_args.get("runner_state"):  # the warm parent of the blocks: started, then stopped
            self.runner_calls = getattr(self, "runner_calls", []) + [module_args["runner_state"]]
            self.runner_args = getattr(self, "runner_args", []) + [dict(module_args)]
            if module_args.get("runner_socket") and module_args["runner_socket"] == getattr(self, "live_runner", None):
                return {"runner_socket": module_args["runner_socket"], "runner_reused": True}
            return {"runner_socket": "/run/stacktune-runner-x/runner.sock", "runner_start_s": 0.1}
        self.calls.append((module_name.rsplit(".", 1)[1], dict(module_args)))
        if module_name.endswith("host_settings"):
            state = module_args["state"]
            if state == "reapplied":
                self.on = True
            elif state in ("restored", "suspended", "interrupted"):
                self.on = False
            return {"changed": True}
        if module_name.endswith("run_lock"):
            return {"changed": False}
        benches = sum(1 for name, _args in self.calls if name == "bench")
        if self.hook:
            self.hook(benches)
        failed = self.fail(benches, self.on) if self.fail else None
        if failed:
            return dict(failed, failed=True)
        level = math.exp(self.rng.gauss(0, 0.01)) * (self.effect if self.on else 1.0)
        return {
            "samples_ms": [level * math.exp(self.rng.gauss(0, 0.01)) for _i in range(200)],
            "void": False,
            "throughput": {"value": 1.0, "unit": "items/s"},
            "workload": module_args["workload"],
        }


def action(args, host, check_mode=False, monkeypatch=None):
    act = ActionModule.__new__(ActionModule)
    act._task = SimpleNamespace(args=args)
    act._play_context = SimpleNamespace(check_mode=check_mode)
    act._execute_module = host.execute
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    return act


BASE = {
    "layer": "nccl",
    "policy": "no_regression",
    "workloads": ["allreduce"],
    "gpu_count": 2,
    "bench": {"python": "/opt/torch/.venv/bin/python3", "steps": 200, "command": ["ignored"]},
    "gate": {},
    "budget": {"min_blocks": 4, "max_blocks": 4},
    "run_id": "r1",
    "journal_dir": "/var/lib/stacktune",
}


def test_a_harmful_layer_is_measured_in_abba_order_and_restored(monkeypatch):
    host = FakeHost(effect=1.5)
    res = action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    assert res["gate"]["decision"] == "rollback"
    states = [a["state"] for name, a in host.calls if name == "host_settings"]
    # on (applied by the role), off, [off], on, [on], off, [off], on; then restore with the decision
    assert states == ["suspended", "reapplied", "suspended", "reapplied", "restored"]
    last = host.calls[-1][1]
    assert last["restore_to"] == "snapshot"
    assert last["decision"]["decision"] == "rollback"
    assert "workloads" not in last["decision"]
    benches = [a for name, a in host.calls if name == "bench"]
    assert len(benches) == 8
    assert all(b["workload"] == "allreduce" and "command" not in b for b in benches)
    assert len(res["samples"]["with"]) == len(res["samples"]["without"]) == 800


def test_a_harmless_layer_is_kept_with_its_decision_journaled(monkeypatch):
    host = FakeHost(effect=1.0)
    res = action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    assert res["gate"]["decision"] == "keep"
    assert host.calls[-1][1]["state"] == "kept"
    assert host.on is True


def test_a_layer_no_workload_can_see_is_not_measured(monkeypatch):
    host = FakeHost()
    res = action(dict(BASE, gpu_count=1), host, monkeypatch=monkeypatch).run(task_vars={})
    assert res["gate"]["measurable"] is False
    assert "not measurable on this host" in res["gate"]["reason"]
    assert [name for name, _a in host.calls] == ["host_settings"]
    assert host.calls[0][1]["state"] == "kept"


def test_the_io_layer_without_a_data_dir_is_not_measurable_and_says_what_to_set(monkeypatch):
    host = FakeHost()
    args = dict(BASE, layer="io", workloads=["file_dataloader"], gpu_count=8)
    res = action(args, host, monkeypatch=monkeypatch).run(task_vars={})
    assert res["gate"]["measurable"] is False
    assert res["gate"]["reason"] == (
        "keep: not measurable on this host: none of the workloads that can see this layer (file_dataloader) runs "
        "here; file_dataloader reads files from stacktune_bench_data_dir, which is not set: set it to a directory "
        "on the disk that holds the training data"
    )
    assert [name for name, _a in host.calls] == ["host_settings"]


def test_the_io_layer_with_a_data_dir_is_measured_on_the_file_workload(monkeypatch):
    host = FakeHost()
    bench = dict(BASE["bench"], data_dir="/data/stacktune")
    args = dict(BASE, layer="io", workloads=["file_dataloader"], gpu_count=8, bench=bench)
    res = action(args, host, monkeypatch=monkeypatch).run(task_vars={})
    assert res["gate"]["measurable"] is True and res["gate"]["workloads_measured"] == ["file_dataloader"]
    benches = [a for name, a in host.calls if name == "bench"]
    assert benches and all(b["workload"] == "file_dataloader" and b["data_dir"] == "/data/stacktune" for b in benches)


def test_check_mode_measures_nothing(monkeypatch):
    host = FakeHost()
    res = action(dict(BASE), host, check_mode=True, monkeypatch=monkeypatch).run(task_vars={})
    assert res["skipped"] is True
    assert host.calls == []


def test_an_error_of_the_run_puts_the_layer_back_unjudged(monkeypatch):
    """A bench error that is no measurement (bad options, no interpreter): back to the snapshot, then fail."""
    start = {"msg": "Failed to start workload: no such file", "failure": "start"}
    host = FakeHost(fail=lambda n, on: start if n == 2 else None)
    with pytest.raises(AnsibleActionFail, match="Failed to measure layer nccl: bench failed: Failed to start") as exc:
        action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    assert "put back to its snapshot" in str(exc.value)
    assert host.states() == ["suspended", "interrupted"]
    assert host.calls[-1][1]["decision"]["reason"].startswith("not judged: ")
    assert host.on is False


SHM = "RuntimeError: unable to allocate shared memory(shm) for file </torch_85_1>"


def crash_with_layer(n, on):
    return {"msg": "Failed to run command python3: exit status 1", "failure": "exit", "error_line": SHM} if on else None


def test_a_layer_that_makes_the_workload_crash_is_rolled_back_with_that_cause(monkeypatch):
    host = FakeHost(fail=crash_with_layer)
    res = action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["decision"] == "rollback" and gate["cause"] == "workload_fails"
    assert gate["summary"] == "rollback: the workload fails with this layer: %s on allreduce" % SHM
    assert "block 1 with the layer failed, block 2 without it ran" in gate["reason"]
    # one block with (failed), one without (ran) - no more time spent; then the rollback is journaled
    assert [name for name, _a in host.calls] == ["bench", "host_settings", "bench", "host_settings"]
    assert host.states() == ["suspended", "restored"]
    assert host.calls[-1][1]["decision"]["decision"] == "rollback"
    assert host.on is False


def test_a_hang_with_the_layer_is_a_rollback(monkeypatch):
    host = FakeHost(
        fail=lambda n, on: (
            {"msg": "still running", "failure": "hang", "error_line": "still running after 60 s"} if on else None
        )
    )
    res = action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    assert res["gate"]["summary"].startswith("rollback: the workload hangs with this layer: still running after 60 s")


def test_a_workload_broken_either_way_stops_with_the_layer_put_back(monkeypatch):
    host = FakeHost(fail=lambda n, on: {"msg": "x", "failure": "exit", "error_line": "ImportError: no torch"})
    with pytest.raises(AnsibleActionFail) as exc:
        action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    message = str(exc.value)
    assert "the workload allreduce fails with and without the layer: ImportError: no torch" in message
    assert "ImportError: no torch" in message and "put back to its snapshot" in message
    assert host.states() == ["suspended", "interrupted"]
    assert "not judged" in host.calls[-1][1]["decision"]["reason"]


def test_a_flaky_workload_is_judged_on_the_blocks_that_ran_and_said_to_be_flaky(monkeypatch):
    # block 2 (without the layer) and block 5 (with it) fail; everything else runs
    bus = {"msg": "x", "failure": "exit", "error_line": "Bus error"}
    host = FakeHost(fail=lambda n, on: bus if n in (2, 5) else None)
    res = action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["decision"] == "keep" and gate["flaky"] is True
    assert "the workload is flaky: allreduce failed in 1 of" in gate["summary"]
    assert "and 1 of" in gate["summary"] and "(last: Bus error)" in gate["summary"]
    assert len(gate["failures"]["allreduce"]["on"]) == 1 and len(gate["failures"]["allreduce"]["off"]) == 1


def test_a_lost_lease_stops_without_touching_the_host(monkeypatch):
    lost = {"msg": "run r1 no longer holds the host", "lease_lost": True}
    host = FakeHost(fail=lambda n, on: lost if n == 3 else None)
    with pytest.raises(AnsibleActionFail, match="Stopped measuring layer nccl: bench failed: run r1 no longer holds"):
        action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    assert host.calls[-1][0] == "bench"  # nothing after the refusal


class WorkerExit(Exception):
    pass


@pytest.mark.parametrize(
    "signum,at,during",
    [
        (signal.SIGINT, 1, "a block with the layer"),
        (signal.SIGTERM, 2, "a block without the layer"),
        (signal.SIGHUP, 3, "a block without the layer"),
    ],
)
def test_a_signal_during_a_block_puts_the_layer_back_and_frees_the_host(monkeypatch, tmp_path, signum, at, during):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None
    host = FakeHost(hook=lambda n: os.kill(os.getpid(), signum) if n == at else None)
    act = action(dict(BASE), host, monkeypatch=monkeypatch)

    def stop():
        raise WorkerExit()

    act._exit_worker = stop
    kept = [{"layer": "memory", "decision": "keep", "changed": True}]
    with pytest.raises(WorkerExit):
        act.run(task_vars={"inventory_hostname": "gpu-01", "stacktune_results": kept})
    tempfile.tempdir = None
    # the layer back to its snapshot with the interruption, never a verdict; then the lock released
    assert [name for name, _a in host.calls][-2:] == ["host_settings", "run_lock"]
    reason = host.calls[-2][1]["decision"]["reason"]
    assert host.calls[-2][1]["state"] == "interrupted" and "decision" not in host.calls[-2][1]["decision"]
    assert reason == "interrupted: %s during %s" % (signal.Signals(signum).name, during)
    assert host.calls[-1][1]["state"] == "unlocked" and host.calls[-1][1]["run_id"] == "r1"
    records = read_records(os.getppid())
    assert records["gpu-01"]["layer"] == "nccl" and records["gpu-01"]["lock"] == "released"
    assert records["gpu-01"]["kept"] == ["memory"] and "rollback" in records["gpu-01"]["undo"]
    # the worker's own handlers are back once the gate is done
    assert signal.getsignal(signal.SIGINT) is not None


def test_a_signal_during_a_switch_lets_the_switch_finish_first(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None
    host = FakeHost()
    real = host.execute

    def execute(module_name, module_args, task_vars):
        if module_args.get("state") == "suspended":
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the engine switches the layer off
        return real(module_name, module_args, task_vars)

    host.execute = execute
    act = action(dict(BASE), host, monkeypatch=monkeypatch)

    def stop():
        raise WorkerExit()

    act._exit_worker = stop
    with pytest.raises(WorkerExit):
        act.run(task_vars={"inventory_hostname": "gpu-01"})
    tempfile.tempdir = None
    assert host.states() == ["suspended", "interrupted"]
    assert host.calls[-2][1]["decision"]["reason"] == "interrupted: SIGTERM during a switch of the layer"


@pytest.mark.parametrize(
    "args,message",
    [
        ({"budget": {"max_blocks": 0}}, r"stacktune_gate_budget\.max_blocks must be an integer"),
        # a budget key among the settings is refused, naming where it goes (never merged)
        ({"gate": {"max_blocks": 4}}, r"max_blocks: part of the budget.*give stacktune_gate_budget\.max_blocks"),
        ({"gate": {"tail_tolrance": 0.1}}, r"unknown gate setting\(s\): stacktune_gate_tail_tolrance"),
        ({"gate": {"tail_tolerance": 2}}, "tail_tolerance must be in"),
        ({"policy": "sometimes"}, "policy must be one of"),
        ({"bench": {"colour": "red"}}, "bench: unknown option"),
        ({"workloads": "allreduce"}, "workloads must be a list"),
        ({"layer": None}, "layer is required"),
    ],
)
def test_bad_arguments_are_refused_before_the_host_is_touched(monkeypatch, args, message):
    host = FakeHost()
    with pytest.raises(AnsibleActionFail, match=message):
        action(dict(BASE, **args), host, monkeypatch=monkeypatch).run(task_vars={})
    assert host.calls == []


def test_the_decision_says_where_the_blocks_time_went(monkeypatch):
    host = FakeHost(effect=1.0)
    res = action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    # the blocks ran in one warm parent, started before the first and stopped after the last
    assert host.runner_calls == ["started", "stopped"]
    assert all(a["runner_socket"] == "/run/stacktune-runner-x/runner.sock" for n, a in host.calls if n == "bench")
    cost = res["gate"]["cost"]
    assert cost["total"]["blocks"] == 8 == cost["allreduce"]["blocks"]
    # 200 steps of about 1 ms per block were measured; the block's wall time is the controller's
    assert 1.5 < cost["total"]["measured_s"] < 1.7
    assert cost["total"]["wall_s"] >= 0 and "measured_share" in cost["total"]


MEMLOCK_ROW = {
    "id": "file:/etc/security/limits.d/60-stacktune-memlock.conf",
    "changed": True,
    "status": "changed",
    "effect": "next_login",
}


@pytest.mark.parametrize(
    "unmeasurable, decision, state", [("keep", "keep", "kept"), ("rollback", "rollback", "restored")]
)
def test_a_layer_whose_changes_no_block_can_see_is_not_measured(monkeypatch, unmeasurable, decision, state):
    # the memory layer on the one-H200 host: /dev/shm was large enough, only memlock was written
    host = FakeHost()
    args = dict(BASE, layer="memory", workloads=["dataloader"], gpu_count=1, changes=[MEMLOCK_ROW])
    args["unmeasurable"] = unmeasurable
    res = action(args, host, monkeypatch=monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["decision"] == decision and gate["measurable"] is False
    assert gate["seen_later"] == [{"id": MEMLOCK_ROW["id"], "effect": "next_login"}]
    assert gate["reason"] == (
        "%s: not measured: nothing a block started now can see changed "
        "(file:/etc/security/limits.d/60-stacktune-memlock.conf at the next login); "
        "the gate measures a layer only while its change is live" % decision
    )
    assert [name for name, _a in host.calls] == ["host_settings"]
    assert host.calls[0][1]["state"] == state
    assert getattr(host, "runner_calls", []) == []


def test_a_layer_with_one_change_seen_now_is_measured(monkeypatch):
    host = FakeHost()
    now = dict(MEMLOCK_ROW, id="mount:/dev/shm:size", effect="now")
    args = dict(BASE, layer="memory", workloads=["dataloader"], gpu_count=1, changes=[MEMLOCK_ROW, now])
    res = action(args, host, monkeypatch=monkeypatch).run(task_vars={})
    assert res["gate"]["measurable"] is True
    assert sum(1 for name, _a in host.calls if name == "bench") == 8


def test_one_block_runner_serves_every_layer_of_the_run(monkeypatch):
    runner_for = {
        "memory": ["dataloader", "cpu_dataloader"],
        "kernel": ["train_step", "dataloader"],
        "nccl": ["allreduce"],
    }
    first = FakeHost()
    args = dict(BASE, layer="memory", workloads=["dataloader"], gpu_count=1, runner_for=runner_for, keep_runner=True)
    res = action(args, first, monkeypatch=monkeypatch).run(task_vars={})
    # started once, for what every layer measures on this one-GPU host (all-reduce needs two), and left running
    assert first.runner_calls == ["started"]
    assert first.runner_args[0]["runner_workloads"] == ["dataloader", "train_step"]
    assert res["runner_socket"] == "/run/stacktune-runner-x/runner.sock"
    # the next layer finds it answering and uses it: nothing started, nothing stopped
    second = FakeHost()
    second.live_runner = res["runner_socket"]
    args = dict(args, layer="kernel", workloads=["train_step", "dataloader"], runner_socket=res["runner_socket"])
    again = action(args, second, monkeypatch=monkeypatch).run(task_vars={})
    assert second.runner_calls == ["started"]
    assert second.runner_args[0]["runner_socket"] == res["runner_socket"]
    assert again["runner_socket"] == res["runner_socket"]
    assert all(a["runner_socket"] == res["runner_socket"] for n, a in second.calls if n == "bench")


def test_runner_for_must_name_lists(monkeypatch):
    host = FakeHost()
    with pytest.raises(AnsibleActionFail, match="runner_for.kernel must be a list"):
        action(dict(BASE, runner_for={"kernel": "train_step"}), host, monkeypatch=monkeypatch).run(task_vars={})
    assert host.calls == []


def test_the_budget_is_an_option_of_its_own_and_its_errors_name_the_variable(monkeypatch):
    args = dict(BASE, gate={}, budget={"min_blocks": 4, "max_blocks": 1})
    with pytest.raises(AnsibleActionFail, match=r"stacktune_gate_budget\.max_blocks must be an integer in 2\.\.200"):
        action(args, FakeHost(), monkeypatch=monkeypatch).run(task_vars={})
    args = dict(BASE, gate={}, budget={"max_block": 4})
    with pytest.raises(AnsibleActionFail, match=r"stacktune_gate_budget: unknown key\(s\) max_block"):
        action(args, FakeHost(), monkeypatch=monkeypatch).run(task_vars={})
    host = FakeHost(effect=1.5)
    res = action(dict(BASE, gate={}, budget={"min_blocks": 4, "max_blocks": 4}), host, monkeypatch=monkeypatch).run(
        task_vars={}
    )
    assert res["gate"]["decision"] == "rollback" and res["gate"]["blocks"] == {"with": 4, "without": 4}


def test_under_improve_the_second_workload_is_measured_only_when_the_first_cannot_decide(monkeypatch):
    # the layer makes every workload 10% faster: train_step shows it, dataloader is never run
    host = FakeHost(effect=0.9)
    args = dict(BASE, layer="kernel", policy="improve", workloads=["train_step", "dataloader"], gpu_count=1)
    res = action(args, host, monkeypatch=monkeypatch).run(task_vars={})
    gate = res["gate"]
    assert gate["decision"] == "keep" and gate["workloads_measured"] == ["train_step"]
    assert {a["workload"] for name, a in host.calls if name == "bench"} == {"train_step"}
    assert "not measured on dataloader: train_step decided" in gate["reason"]
    assert res["samples_by_workload"]["dataloader"] == {"without": [], "with": []}
    assert host.calls[-1][1]["state"] == "kept"
