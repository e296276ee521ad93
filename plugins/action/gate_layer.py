# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin ``stacktune.gpu.gate_layer``: measure one layer in balanced blocks and keep or restore it.

The loop is logic, so it lives here and in ``module_utils/_blocks.py`` (``Trial``), not in
YAML: it drives the ``bench`` module for every block and the ``host_settings`` module for
every toggle on the host, and the gate decides from the blocks. Documentation is in
``plugins/modules/gate_layer.py``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.six import string_types
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.stacktune.gpu.plugins.module_utils._blocks import (
    GateSettingError,
    Trial,
    calibrate,
    check_settings,
    resolve_workloads,
)
from ansible_collections.stacktune.gpu.plugins.module_utils._gate import POLICIES

display = Display()

BENCH_KEYS = ("command", "python", "size", "steps", "warmup", "timeout", "device", "workers", "env")


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
            "unmeasurable",
            "run_id",
            "journal_dir",
            "blocks",
        )
    )

    def _module(self, name, args, task_vars):
        res = self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        if res.get("failed"):
            raise AnsibleActionFail("%s failed: %s" % (name.rsplit(".", 1)[-1], res.get("msg", "unknown error")))
        return res

    def _engine(self, state, task_vars, **extra):
        args = {
            "layer": self._task.args["layer"],
            "state": state,
            "run_id": self._task.args.get("run_id") or "manual",
            "journal_dir": self._task.args.get("journal_dir") or "/var/lib/stacktune",
        }
        args.update(extra)
        return self._module("stacktune.gpu.host_settings", args, task_vars)

    def _bench(self, workload, bench, task_vars):
        args = {"workload": workload}
        for key in BENCH_KEYS:
            if bench.get(key) is not None and not (key == "command" and workload != "command"):
                args[key] = bench[key]
        res = self._module("stacktune.gpu.bench", args, task_vars)
        tp = res.get("throughput") or {}
        return {
            "samples_ms": res["samples_ms"],
            "void": bool(res.get("void")),
            "reason": res.get("void_reason"),
            "throughput": tp.get("value") if isinstance(tp, dict) else None,
            "workload": res.get("workload", workload),
        }

    def _args(self):
        a = self._task.args
        mode = a.get("mode", "gate")
        if mode not in ("gate", "calibrate"):
            raise AnsibleActionFail("mode must be gate or calibrate, got %r" % (mode,))
        try:
            settings = check_settings(a.get("gate") or {})
        except GateSettingError as exc:
            raise AnsibleActionFail(str(exc)) from None
        bench = a.get("bench") or {}
        if not isinstance(bench, dict):
            raise AnsibleActionFail("bench must be a dict of bench module options")
        unknown = sorted(set(bench) - set(BENCH_KEYS))
        if unknown:
            raise AnsibleActionFail("bench: unknown option(s) %s" % ", ".join(unknown))
        candidates = a.get("workloads") or []
        if isinstance(candidates, string_types) or not isinstance(candidates, list):
            raise AnsibleActionFail("workloads must be a list of workload names")
        try:
            gpu_count = int(a.get("gpu_count") or 0)
        except (TypeError, ValueError):
            raise AnsibleActionFail("gpu_count must be an integer, got %r" % (a.get("gpu_count"),)) from None
        workloads = resolve_workloads(candidates, gpu_count, a.get("workload"))
        return mode, settings, bench, workloads

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        mode, settings, bench, workloads = self._args()
        if mode == "calibrate":
            return self._calibrate(result, settings, bench, workloads, task_vars)
        a = self._task.args
        if not a.get("layer"):
            raise AnsibleActionFail("layer is required with mode=gate")
        policy = a.get("policy", "improve")
        if policy not in POLICIES:
            raise AnsibleActionFail("policy must be one of %s, got %r" % (", ".join(POLICIES), policy))
        if self._play_context.check_mode:
            result.update(changed=False, skipped=True, msg="check mode: nothing is measured")
            return result
        if not workloads:
            keep = a.get("unmeasurable", "keep") == "keep"
            decision = {
                "decision": "keep" if keep else "rollback",
                "policy": policy,
                "measurable": False,
                "reason": "%s: not measurable on this host: none of the workloads that can see this layer (%s) "
                "runs here" % ("keep" if keep else "rollback", ", ".join(a.get("workloads") or []) or "none declared"),
            }
            decision["summary"] = decision["reason"]
            self._finish(decision, task_vars)
            result.update(changed=True, gate=decision, samples={"without": [], "with": []})
            return result

        state = {"on": True}

        def set_layer(on):
            if on:
                self._engine("reapplied", task_vars)
            else:
                self._engine("restored", task_vars, restore_to="snapshot")
            state["on"] = on

        progress = {"n": 0, "most": 2 * int(settings.get("max_blocks") or 0) * len(workloads)}

        def measure(workload):
            # one line per block as it runs, so a run of many minutes can be followed
            progress["n"] += 1
            started = time.monotonic()
            out = self._bench(workload, bench, task_vars)
            display.display(
                "    %s: block %d of at most %d, %s the layer, %s: %.1f s%s"
                % (
                    a["layer"],
                    progress["n"],
                    progress["most"],
                    "with" if state["on"] else "without",
                    workload,
                    time.monotonic() - started,
                    " (void: %s)" % out["reason"] if out.get("void") else "",
                )
            )
            return out

        trial = Trial(
            workloads,
            set_layer,
            measure,
            policy,
            settings,
            time.monotonic,
        )
        try:
            decision = trial.run()
        except AnsibleActionFail as exc:
            # Leave the layer applied and unjudged, as a killed run would: the next run's
            # recovery puts it back to its snapshot without marking its settings rejected.
            note = "the layer is left applied and unjudged; the next tune.yml run puts it back to its snapshot first"
            if not state["on"]:
                try:
                    set_layer(True)
                except AnsibleActionFail as again:
                    note = "putting the layer back on failed too (%s); run playbooks/rollback.yml" % again
            raise AnsibleActionFail("Failed to measure layer %s: %s; %s" % (a["layer"], exc, note)) from None
        decision["measurable"] = True
        decision["workloads_measured"] = workloads
        self._finish(decision, task_vars)
        result.update(changed=True, gate=decision, samples=trial.samples(decision.get("workload", workloads[0])))
        return result

    def _finish(self, decision, task_vars):
        """Keep the layer or put it back to its snapshot, with the decision in the journal."""
        summary = {k: v for k, v in decision.items() if k not in ("workloads", "order")}
        if decision["decision"] == "keep":
            self._engine("kept", task_vars, decision=summary)
        else:
            self._engine("restored", task_vars, restore_to="snapshot", decision=summary)

    def _calibrate(self, result, settings, bench, workloads, task_vars):
        if not workloads:
            raise AnsibleActionFail(
                "no workload to calibrate: none of %s runs here" % (self._task.args.get("workloads"),)
            )
        blocks = self._task.args.get("blocks") or 2 * settings["max_blocks"]
        try:
            blocks = int(blocks)
        except (TypeError, ValueError):
            blocks = 0
        if blocks < 4:
            raise AnsibleActionFail(
                "blocks must be an integer of at least 4, got %r" % (self._task.args.get("blocks"),)
            )
        out = calibrate(workloads, lambda w: self._bench(w, bench, task_vars), settings, blocks, time.monotonic)
        result.update(changed=False, calibration=out)
        return result
