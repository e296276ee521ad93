# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin ``stacktune.gpu.gate_layer``: measure one layer in balanced blocks and keep or restore it.

The loop is logic, so it lives in ``module_utils/gate/trial_loop.py`` (``TrialLoop``) and
``module_utils/gate/trial.py`` (``Trial``), not in YAML. This plugin turns the task into plain
values, runs the loop with callables that call the ``bench`` module for every block and the
``host_settings`` module for every toggle on the host, and handles a stop of the run (signals,
a lost lease). Documentation is in ``plugins/modules/gate_layer.py``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import JOURNAL_DIR
from ansible_collections.stacktune.gpu.plugins.module_utils.gate import trial_loop
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.calibration import calibrate
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.search import SearchBroken
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import WorkloadBroken
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial_loop import TrialError, TrialLoop
from ansible_collections.stacktune.gpu.plugins.plugin_utils._controller import command
from ansible_collections.stacktune.gpu.plugins.plugin_utils._interrupt import Guard, Interrupted, write_record

display = Display()
# what a put-back says when the run no longer holds the host (nothing touched)
LEFT_AS_IT_IS = "this run no longer holds the host, so the layer was left as it is"


class ModuleFailed(AnsibleActionFail, trial_loop.ModuleFailed):
    """A module the gate drives failed; ``module_result`` is its result."""

    def __init__(self, message, module_result):
        super().__init__(message)
        self.module_result = module_result


class LeaseLost(ModuleFailed, trial_loop.LeaseLost):
    """This run no longer holds the host: stop at once, touching nothing."""


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        (
            "mode",
            "layer",
            "policy",
            "workloads",
            "workload",
            "gpu_count",
            "bench",
            "gate",
            "budget",
            "unmeasurable",
            "run_id",
            "journal_dir",
            "blocks",
            "changes",
            "runner_socket",
            "runner_for",
            "keep_runner",
            "search",
            "size",
            "not_used",
        )
    )

    def _module(self, name, args, task_vars):
        res = self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        if res.get("failed"):
            message = "%s failed: %s" % (name.rsplit(".", 1)[-1], res.get("msg", "unknown error"))
            raise (LeaseLost if res.get("lease_lost") else ModuleFailed)(message, res)
        return res

    def _run_args(self):
        """The run and the journal this task acts for, as every module it calls takes them."""
        return {
            "run_id": self._task.args.get("run_id") or "manual",
            "journal_dir": self._task.args.get("journal_dir") or JOURNAL_DIR,
        }

    def _engine(self, state, task_vars, **extra):
        args = dict(self._run_args(), layer=self._task.args["layer"], state=state)
        args.update(extra)
        return self._module("stacktune.gpu.host_settings", args, task_vars)

    def _loop(self, task_vars, guard=None):
        """The gate's loop for this task, its engine and bench calls run on the host."""

        def bench(args, check=True):
            if check:
                return self._module("stacktune.gpu.bench", args, task_vars)
            return self._execute_module(module_name="stacktune.gpu.bench", module_args=args, task_vars=task_vars)

        return TrialLoop(
            self._task.args,
            lambda state, **extra: self._engine(state, task_vars, **extra),
            bench,
            say=display.display,
            warn=display.warning,
            guard=guard,
            clock=time.monotonic,
        )

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        a = self._task.args
        loop = self._loop(task_vars, Guard())
        try:
            mode, gate, bench, workloads = trial_loop.check_args(a)
            loop.wanted = loop.runner_workloads(workloads, int(a.get("gpu_count") or 0), bench)
        except TrialError as exc:
            raise AnsibleActionFail(str(exc)) from None
        if mode == "calibrate":
            return self._calibrate(result, loop, gate, bench, workloads)
        try:
            policy, search = trial_loop.check_gate_args(a, gate)
            if not search:
                gate = trial_loop.sized(gate, a.get("size", "full"))
            if self._play_context.check_mode:
                plan = "; %s" % search["plan"] if search else ""
                result.update(changed=False, skipped=True, msg="check mode: nothing is measured%s" % plan)
                return result
            decision = trial_loop.not_measured(a, workloads, bench, policy)
        except TrialError as exc:
            raise AnsibleActionFail(str(exc)) from None
        if decision is not None:
            loop.finish(decision)
            result.update(changed=True, gate=decision, samples={"without": [], "with": []})
            return result
        guard = loop.guard
        with guard:
            try:
                decision, samples, kept = loop.measure(workloads, bench, gate, policy, search)
                if kept:
                    result["runner_socket"] = kept
                with guard.critical():
                    loop.finish(decision)
            except LeaseLost as exc:
                # another run holds the host now (or the lock was released by hand): touch nothing
                raise AnsibleActionFail("Stopped measuring layer %s: %s" % (a["layer"], exc)) from None
            except Interrupted as exc:
                self._interrupted(exc, loop.state, task_vars, guard.parent)
            except (WorkloadBroken, SearchBroken) as exc:
                loop.stop_runner_quietly()
                note = self._put_back(task_vars, "not judged: %s" % exc)
                raise AnsibleActionFail(
                    "Stopped on layer %s: %s. %s. Fix the workload (stacktune_bench_workload and its settings) "
                    "and run again" % (a["layer"], exc, note)
                ) from None
            except (AnsibleActionFail, TrialError) as exc:
                loop.stop_runner_quietly()
                note = self._put_back(task_vars, "not judged: %s" % exc)
                if note.startswith(LEFT_AS_IT_IS):
                    # the run lost the host meanwhile (a frozen controller resumed): that is the one line
                    raise AnsibleActionFail("Stopped measuring layer %s: %s" % (a["layer"], note)) from None
                raise AnsibleActionFail("Failed to measure layer %s: %s; %s" % (a["layer"], exc, note)) from None
        result.update(
            changed=True,
            gate=decision,
            samples=samples.get(decision.get("workload"), samples[workloads[0]]),
            samples_by_workload=samples,
        )
        return result

    def _put_back(self, task_vars, reason):
        """Put the layer back to its snapshot, unjudged; say what was done."""
        try:
            res = self._engine("interrupted", task_vars, decision={"reason": reason})
        except LeaseLost as exc:
            return "%s: %s" % (LEFT_AS_IT_IS, exc)
        except AnsibleActionFail as exc:
            return "Putting the layer back failed too (%s); run %s" % (exc, command("rollback", task_vars))
        said = "The layer was put back to its snapshot: the host is as it was before this layer"
        return "%s (%s)" % (said, res["lease_trouble"]) if res.get("lease_trouble") else said

    def _interrupted(self, exc, state, task_vars, controller_pid):
        """The run was stopped while this layer was measured: put it back, free the host, say so."""
        layer = self._task.args["layer"]
        if exc.held or state["switching"]:
            during = "a switch of the layer"
        else:
            during = "a %s %s the layer" % (state.get("unit", "block"), "with" if state["on"] else "without")
        why = "%s during %s" % (exc.why, during)
        record = {"layer": layer, "why": why, "run_id": self._task.args.get("run_id")}
        record["layer_outcome"] = self._put_back(task_vars, "interrupted: %s" % why)
        try:
            self._module("stacktune.gpu.run_lock", dict(self._run_args(), state="unlocked"), task_vars)
            record["lock"] = "released"
        except AnsibleActionFail as again:
            record["lock"] = "not released (%s)" % again
        kept = [
            r.get("layer")
            for r in task_vars.get("stacktune_results") or []
            if isinstance(r, dict) and r.get("decision") == "keep" and r.get("changed")
        ]
        record["kept"] = kept
        record["undo"] = command("rollback", task_vars)
        host = task_vars.get("inventory_hostname", "?")
        write_record(controller_pid, host, record)
        self._exit_worker()

    @staticmethod
    def _exit_worker():
        """The controller is stopping (or gone): this worker's result has nobody to go to."""
        os._exit(1)

    def _calibrate(self, result, loop, gate, bench, workloads):
        if not workloads:
            raise AnsibleActionFail(
                "no workload to calibrate: none of %s runs here" % (self._task.args.get("workloads"),)
            )
        blocks = self._task.args.get("blocks") or 2 * gate.budget["max_blocks"]
        try:
            blocks = int(blocks)
        except (TypeError, ValueError):
            blocks = 0
        if blocks < 4:
            raise AnsibleActionFail(
                "blocks must be an integer of at least 4, got %r" % (self._task.args.get("blocks"),)
            )
        loop.runner = loop.start_runner(workloads, bench)
        try:
            out = calibrate(workloads, lambda w: loop.block(w, bench), gate, blocks, time.monotonic)
        finally:
            loop.stop_runner()
        result.update(changed=False, calibration=out)
        return result
