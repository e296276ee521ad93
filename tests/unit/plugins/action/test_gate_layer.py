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
import random
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.stacktune.gpu.plugins.action.gate_layer import ActionModule


class FakeHost:
    """Answers host_settings and bench; the layer slows the workload by ``effect`` while it is on."""

    def __init__(self, effect=1.0, fail_bench_at=None):
        self.on = True
        self.effect = effect
        self.calls = []
        self.rng = random.Random(3)
        self.fail_bench_at = fail_bench_at

    def execute(self, module_name, module_args, task_vars):
        self.calls.append((module_name.rsplit(".", 1)[1], dict(module_args)))
        if module_name.endswith("host_settings"):
            state = module_args["state"]
            if state == "reapplied":
                self.on = True
            elif state == "restored":
                self.on = False
            return {"changed": True}
        benches = sum(1 for name, _args in self.calls if name == "bench")
        if self.fail_bench_at == benches:
            return {"failed": True, "msg": "workload gemm needs a CUDA GPU"}
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
    "gate": {"min_blocks": 4, "max_blocks": 4},
    "run_id": "r1",
    "journal_dir": "/var/lib/stacktune",
}


def test_a_harmful_layer_is_measured_in_abba_order_and_restored(monkeypatch):
    host = FakeHost(effect=1.5)
    res = action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    assert res["gate"]["decision"] == "rollback"
    states = [a["state"] for name, a in host.calls if name == "host_settings"]
    # on (applied by the role), off, [off], on, [on], off, [off], on; then restore with the decision
    assert states == ["restored", "reapplied", "restored", "reapplied", "restored"]
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


def test_check_mode_measures_nothing(monkeypatch):
    host = FakeHost()
    res = action(dict(BASE), host, check_mode=True, monkeypatch=monkeypatch).run(task_vars={})
    assert res["skipped"] is True
    assert host.calls == []


def test_a_failed_block_leaves_the_layer_applied_for_the_next_run(monkeypatch):
    host = FakeHost(fail_bench_at=2)  # the second block is the first one with the layer off
    with pytest.raises(AnsibleActionFail, match="Failed to measure layer nccl: bench failed: workload gemm needs"):
        action(dict(BASE), host, monkeypatch=monkeypatch).run(task_vars={})
    assert host.on is True
    assert [a["state"] for name, a in host.calls if name == "host_settings"] == ["restored", "reapplied"]


@pytest.mark.parametrize(
    "args,message",
    [
        ({"gate": {"max_blocks": 0}}, "max_blocks must be an integer"),
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
