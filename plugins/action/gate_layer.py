# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin ``stacktune.gpu.gate_layer``: measure one layer in balanced blocks and keep or restore it.

The loop is logic, so it lives here and in ``module_utils/gate/trial.py`` (``Trial``), not in
YAML: it drives the ``bench`` module for every block and the ``host_settings`` module for
every toggle on the host, and the gate decides from the blocks. Documentation is in
``plugins/modules/gate_layer.py``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import random
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.six import string_types
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import JOURNAL_DIR
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.calibration import (
    calibrate,
    window_bounds,
    window_plan,
    window_words,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import (
    Gate,
    GateSettingError,
    check_settings,
    live_gate,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import (
    LIVE_DROP_STEPS,
    Trial,
    WorkloadBroken,
    block_cost,
    changes_seen_later,
    combine,
    decided_on,
    live_plan,
    run_staged,
    resolve_workloads,
    unmeasurable_reason,
    unseen_reason,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import POLICIES
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.search import SearchBroken, check_search, search_live
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.decision import budget_words
from ansible_collections.stacktune.gpu.plugins.plugin_utils._controller import command
from ansible_collections.stacktune.gpu.plugins.plugin_utils._interrupt import Guard, Interrupted, write_record

display = Display()

BENCH_KEYS = ("command", "python", "size", "steps", "warmup", "timeout", "device", "workers", "env", "data_dir")
# options of the measurement that are the gate's, not the bench module's
GATE_BENCH_KEYS = ("runner", "steps_by_workload", "live", "live_command")
# How a block that did not run to its end failed; these are measurements of the layer
# (the bench module's ``failure``), anything else is an error of the run.
WORKLOAD_FAILURES = ("exit", "hang", "error", "output")


class ModuleFailed(AnsibleActionFail):
    """A module the gate drives failed; ``module_result`` is its result."""

    def __init__(self, message, module_result):
        super().__init__(message)
        self.module_result = module_result


class LeaseLost(ModuleFailed):
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

    def _runner_workloads(self, workloads, gpu_count, bench):
        """What the runner imports for: this layer's workloads and, with ``runner_for``
        (``{layer: candidate workloads}`` of the run's layers), those of every layer it may
        serve after this one, each resolved for this host as its own layer would be."""
        a = self._task.args
        names = list(workloads)
        runner_for = a.get("runner_for") or {}
        if not isinstance(runner_for, dict):
            raise AnsibleActionFail("runner_for must be a dict of layer: [workloads]")
        for layer, candidates in sorted(runner_for.items()):
            if isinstance(candidates, string_types) or not isinstance(candidates, list):
                raise AnsibleActionFail("runner_for.%s must be a list of workload names" % layer)
            try:
                more = resolve_workloads(candidates, gpu_count, a.get("workload"), bench.get("data_dir"))
            except ValueError as exc:
                raise AnsibleActionFail("runner_for.%s: %s" % (layer, exc)) from None
            names.extend(w for w in more if w not in names)
        return [w for w in names if w != "command"]

    def _start_runner(self, workloads, bench, task_vars, for_live=False):
        """A warm parent for the built-in workloads' blocks (the bench module's runner), or None.

        With ``runner_socket`` (the runner an earlier layer of this run left), that runner is
        used while it answers; otherwise one is started. A live trial needs one whatever its
        workloads are: the runner holds the user's program too, and reads its steps."""
        wanted = self._runner_wanted
        if not for_live and (not bench.get("runner", True) or not wanted or all(w == "command" for w in workloads)):
            return None
        args = {"runner_state": "started", "workload": (wanted or ["cpu_train_step"])[0], "runner_workloads": wanted}
        if self._task.args.get("runner_socket"):
            args["runner_socket"] = self._task.args["runner_socket"]
        if bench.get("python"):
            args["python"] = bench["python"]
        if self._task.args.get("run_id"):
            args["run_id"] = self._task.args["run_id"]
        try:
            res = self._module("stacktune.gpu.bench", args, task_vars)
        except LeaseLost:
            raise
        except ModuleFailed as exc:
            if for_live:
                raise
            display.warning("blocks start fresh interpreters: %s" % exc)
            return None
        if res.get("runner_reused"):
            return res["runner_socket"]  # the run's runner answered: nothing to start
        imports = ", ".join(
            "%s %.1f s%s" % (i.get("module"), i.get("seconds") or 0.0, " (failed)" if i.get("error") else "")
            for i in res.get("runner_imports") or []
        )
        display.display(
            "    %s: block runner ready in %.1f s%s"
            % (
                self._task.args.get("layer") or "calibrate",
                res["runner_start_s"],
                " (imports: %s)" % imports if imports else "",
            )
        )
        return res["runner_socket"]

    def _stop_runner(self, task_vars):
        if getattr(self, "_runner", None):
            args = {"runner_state": "stopped", "runner_socket": self._runner}
            self._execute_module(module_name="stacktune.gpu.bench", module_args=args, task_vars=task_vars)
            self._runner = None

    def _stop_runner_quietly(self, task_vars):
        """On the way out of an error: a runner that cannot be reached ends by itself (idle, lease)."""
        try:
            self._stop_runner(task_vars)
        except Exception:  # noqa: BLE001 - the error being reported matters more
            self._runner = None

    def _bench_args(self, workload, bench, leave_out=()):
        """The bench module's arguments for ``workload``: the run, and the options of ``bench``
        it takes (``command`` only for the user's program), less ``leave_out``."""
        args = {"workload": workload}
        if self._task.args.get("run_id"):
            args["run_id"] = self._task.args["run_id"]
        for key in BENCH_KEYS:
            if key in leave_out or bench.get(key) is None or (key == "command" and workload != "command"):
                continue
            args[key] = bench[key]
        return args

    def _bench(self, workload, bench, task_vars):
        args = self._bench_args(workload, bench)
        if getattr(self, "_runner", None) and workload != "command":
            args["runner_socket"] = self._runner
        if workload in (bench.get("steps_by_workload") or {}):
            args["steps"] = bench["steps_by_workload"][workload]
        try:
            res = self._module("stacktune.gpu.bench", args, task_vars)
        except LeaseLost:
            raise
        except ModuleFailed as exc:
            failed = exc.module_result
            if failed.get("failure") not in WORKLOAD_FAILURES:
                raise
            # the workload did not run to its end: that is a measurement too
            return {
                "failed": True,
                "failure": failed["failure"],
                "error": failed.get("error_line") or failed.get("msg"),
                "workload": workload,
            }
        tp = res.get("throughput") or {}
        return {
            "measured_s": sum(res["samples_ms"]) / 1000.0,
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
        budget = a.get("budget")
        if budget is not None and not isinstance(budget, dict):
            raise AnsibleActionFail("budget must be a dict (stacktune_gate_budget), got %r" % (budget,))
        settings = a.get("gate") or {}
        if not isinstance(settings, dict):
            raise AnsibleActionFail("gate must be a dict of the gate's settings, got %r" % (settings,))
        try:
            # the settings and the budget are options of their own, checked and kept apart (a
            # budget key in gate is an error naming stacktune_gate_budget.<key>)
            gate = check_settings(settings, budget=budget)
        except GateSettingError as exc:
            raise AnsibleActionFail(str(exc)) from None
        bench = a.get("bench") or {}
        if not isinstance(bench, dict):
            raise AnsibleActionFail("bench must be a dict of bench module options")
        unknown = sorted(set(bench) - set(BENCH_KEYS) - set(GATE_BENCH_KEYS))
        if unknown:
            raise AnsibleActionFail("bench: unknown option(s) %s" % ", ".join(unknown))
        candidates = a.get("workloads") or []
        if isinstance(candidates, string_types) or not isinstance(candidates, list):
            raise AnsibleActionFail("workloads must be a list of workload names")
        try:
            gpu_count = int(a.get("gpu_count") or 0)
        except (TypeError, ValueError):
            raise AnsibleActionFail("gpu_count must be an integer, got %r" % (a.get("gpu_count"),)) from None
        workloads = resolve_workloads(candidates, gpu_count, a.get("workload"), bench.get("data_dir"))
        self._runner_wanted = self._runner_workloads(workloads, gpu_count, bench)
        return mode, gate, bench, workloads

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        mode, gate, bench, workloads = self._args()
        if mode == "calibrate":
            return self._calibrate(result, gate, bench, workloads, task_vars)
        a = self._task.args
        if not a.get("layer"):
            raise AnsibleActionFail("layer is required with mode=gate")
        policy = a.get("policy", "improve")
        if policy not in POLICIES:
            raise AnsibleActionFail("policy must be one of %s, got %r" % (", ".join(POLICIES), policy))
        try:
            search = check_search(
                a.get("search"), window_s=gate.budget["window_s"], max_slowdown=gate.settings["max_slowdown"]
            )
        except ValueError as exc:
            raise AnsibleActionFail(str(exc)) from None
        if self._play_context.check_mode:
            plan = "; %s" % search["plan"] if search else ""
            result.update(changed=False, skipped=True, msg="check mode: nothing is measured%s" % plan)
            return result
        changes = a.get("changes") or []
        if not isinstance(changes, list):
            raise AnsibleActionFail("changes must be the list of the layer's setting rows (host_settings settings)")
        later = changes_seen_later(changes)
        if not workloads or later:
            verdict = "keep" if a.get("unmeasurable", "keep") == "keep" else "rollback"
            decision = {"decision": verdict, "policy": policy, "measurable": False}
            if later:
                decision["seen_later"] = [{"id": sid, "effect": effect} for sid, effect in later]
                decision["reason"] = "%s: not measured: %s" % (verdict, unseen_reason(later))
            else:
                decision["reason"] = "%s: not measurable on this host: %s" % (
                    verdict,
                    unmeasurable_reason(a.get("workloads") or [], bench.get("data_dir")),
                )
            decision["summary"] = decision["reason"]
            self._finish(decision, task_vars)
            result.update(changed=True, gate=decision, samples={"without": [], "with": []})
            return result

        guard = Guard()
        state = {"on": True, "switching": False}

        def set_layer(on):
            guard.check()
            with guard.critical():
                state["switching"] = True
                self._engine("reapplied" if on else "suspended", task_vars)
                state["on"], state["switching"] = on, False

        per_arm = int(gate.budget.get("max_blocks") or 0)
        progress = {"n": 0, "most": 2 * per_arm * len(workloads), "arm": {}}

        def measure(workload):
            guard.check()
            # one line per block as it runs, so a run of many minutes can be followed
            progress["n"] += 1
            arm = (workload, state["on"])
            progress["arm"][arm] = progress["arm"].get(arm, 0) + 1
            started = time.monotonic()
            out = self._bench(workload, bench, task_vars)
            out["wall_s"] = time.monotonic() - started
            guard.check()
            what = ""
            if out.get("failed"):
                what = " (%s: %s)" % ("hung" if out["failure"] == "hang" else "failed", out.get("error"))
            elif out.get("void"):
                what = " (void: %s)" % out["reason"]
            else:
                what = " (steps %.2f s)" % out["measured_s"]
            display.display(
                "    %s: %s block %d of at most %d %s the layer (%d of at most %d in all): %.1f s%s"
                % (
                    a["layer"],
                    workload,
                    progress["arm"][arm],
                    per_arm,
                    "with" if state["on"] else "without",
                    progress["n"],
                    progress["most"],
                    time.monotonic() - started,
                    what,
                )
            )
            return out

        # a search switches every row of the layer, also when its first candidate changed nothing
        rows = [dict(r, changed=True) for r in changes or [] if isinstance(r, dict)] if search else changes
        live, live_info = live_plan(rows, workloads, bench, wanted=bench.get("live", True) is not False)
        trial = None
        if live:
            state["unit"] = "window"  # what a stop lands in, for the journal's reason
        else:
            display.display("    %s: %s" % (a["layer"], budget_words(gate.budget, workloads)))
            if policy == "improve" and len(workloads) > 1:
                # one trial per workload: a second one only where the first cannot see the layer or decide
                def trial(w, seconds):
                    budget = dict(gate.budget, max_seconds=seconds)
                    return Trial([w], set_layer, measure, policy, Gate(gate.settings, budget), time.monotonic)

            else:
                trial = Trial(workloads, set_layer, measure, policy, gate, time.monotonic)
        with guard:
            try:
                self._runner = self._start_runner(workloads, bench, task_vars, for_live=live)
                if search:
                    decision, samples = self._search(
                        search, workloads, bench, gate, policy, live, live_info, guard, state, task_vars
                    )
                elif live:
                    decision, samples = self._live(
                        workloads, bench, gate, policy, live_info, set_layer, guard, state, task_vars
                    )
                elif not isinstance(trial, Trial):
                    decision, trials = run_staged(workloads, trial, policy, time.monotonic, gate.budget["max_seconds"])
                    decision["live"] = {"used": False, "why": live_info}
                    samples = {
                        w: trials[w].samples(w) if w in trials else {"without": [], "with": []} for w in workloads
                    }
                else:
                    decision = trial.run()
                    decision["live"] = {"used": False, "why": live_info}
                    samples = {w: trial.samples(w) for w in workloads}
                if live and not state["on"]:
                    # a live trial may end on a window without the layer: on again, so that a
                    # rollback puts back (and counts) what the layer changed, as after blocks
                    set_layer(True)
                if self._task.args.get("keep_runner"):
                    # the next layer of the run uses it; it ends with the run's lease in any case
                    result["runner_socket"] = self._runner
                    self._runner = None
                else:
                    self._stop_runner(task_vars)
                decision["measurable"] = True
                decision.setdefault("workloads_measured", workloads)
                with guard.critical():
                    self._finish(decision, task_vars)
            except LeaseLost as exc:
                # another run holds the host now (or the lock was released by hand): touch nothing
                raise AnsibleActionFail("Stopped measuring layer %s: %s" % (a["layer"], exc)) from None
            except Interrupted as exc:
                self._interrupted(exc, state, task_vars, guard.parent)
            except (WorkloadBroken, SearchBroken) as exc:
                self._stop_runner_quietly(task_vars)
                note = self._put_back(task_vars, "not judged: %s" % exc)
                raise AnsibleActionFail(
                    "Stopped on layer %s: %s. %s. Fix the workload (stacktune_bench_workload and its settings) "
                    "and run again" % (a["layer"], exc, note)
                ) from None
            except AnsibleActionFail as exc:
                self._stop_runner_quietly(task_vars)
                note = self._put_back(task_vars, "not judged: %s" % exc)
                raise AnsibleActionFail("Failed to measure layer %s: %s; %s" % (a["layer"], exc, note)) from None
        result.update(
            changed=True,
            gate=decision,
            samples=samples.get(decision.get("workload"), samples[workloads[0]]),
            samples_by_workload=samples,
        )
        return result

    def _live(self, workloads, bench, gate, policy, drop_s, set_layer, guard, state, task_vars):
        """The live trial: per workload, ONE process runs while the layer is switched between
        windows of its steps (A B B A or B A A B quads at random); the windows are the blocks.
        Returns the combined decision and the steps per workload and arm."""
        a = self._task.args
        s = live_gate(gate)
        window_s = float(gate.budget["window_s"])
        results, samples, cost = {}, {}, {}
        totals = {"with": 0, "without": 0, "toggles": 0, "start_s": 0.0}
        started = time.monotonic()
        display.display(
            "    %s: every change is seen by a running process. %s %.1f s and %d steps are dropped after each switch."
            % (a["layer"], budget_words(gate.budget, workloads, live=True), drop_s, LIVE_DROP_STEPS)
        )
        for w in workloads:
            guard.check()
            t0 = time.monotonic()
            begun = self._live_call("started", w, bench, task_vars)
            totals["start_s"] += time.monotonic() - t0
            window = self._window_taker(
                bench,
                task_vars,
                state,
                guard,
                window_s,
                drop_s,
                s.budget["min_blocks"],
                s.budget["max_blocks"] * window_s,
            )
            rng = random.Random("%s/%s/%s" % (a.get("run_id") or "manual", a["layer"], w))
            # max_seconds is the layer's: each workload's trial gets what the ones before left
            left = Gate(
                s.settings,
                dict(s.budget, max_seconds=max(1, int(s.budget["max_seconds"] - (time.monotonic() - started)))),
            )
            trial = Trial([w], set_layer, window, policy, left, time.monotonic, rng=rng)
            try:
                results[w] = trial.run()
            finally:
                ended = self._live_call("stopped", w, bench, task_vars, quiet=True)
            samples[w] = trial.samples(w)
            results[w]["window_plan"] = window.sizing.get("plan")
            results[w]["window_s"] = window.sizing["window_s"]
            for key, value in (results[w].get("cost") or {}).items():
                if key != "total":
                    cost[key] = value
            totals["with"] = max(totals["with"], results[w]["blocks"]["with"])
            totals["without"] = max(totals["without"], results[w]["blocks"]["without"])
            totals["toggles"] += results[w]["toggles"]
            results[w]["live_start_s"] = begun.get("live_start_s")
            results[w]["live_ended"] = {k: v for k, v in (ended or {}).items() if k in ("rc", "killed", "steps")}
            if results[w].get("decision") == "rollback" and (
                results[w].get("cause") or "worse" in (results[w].get("verdicts") or {}).values()
            ):
                break  # shown worse (or broken) on this workload: the others cannot keep the layer
            if policy == "improve" and decided_on(results[w], policy) and w != workloads[-1]:
                # this workload saw the layer and decided: under improve the next ones are measured
                # only when one cannot see it or cannot decide (no_regression measures every one)
                skipped = workloads[workloads.index(w) + 1 :]
                results[w]["reason"] = "%s; not measured on %s: %s decided" % (
                    results[w]["reason"],
                    ", ".join(skipped),
                    w,
                )
                break
        # every workload's trial has ended: nothing more will be measured, so the combination is final
        decision = combine(results, policy, True) if len(results) > 1 else results[list(results)[0]]
        decision["workloads_measured"] = list(results)
        decision["cost"] = block_cost(cost)
        spent = decision["cost"]["total"]
        decision["live"] = {
            "used": True,
            "window_s": window_s,
            "window_s_by_workload": {w: r.get("window_s") for w, r in results.items()},
            "window_plan": {w: r.get("window_plan") for w, r in results.items()},
            "drop_s": drop_s,
            "drop_steps": LIVE_DROP_STEPS,
            "start_s": round(totals["start_s"], 2),
            "windows_s": spent["wall_s"],
            "measured_s": spent["measured_s"],
            "measured_share": spent.get("measured_share"),
        }
        decision.update(
            method="live",
            blocks={"with": totals["with"], "without": totals["without"]},
            toggles=totals["toggles"],
            seconds=round(time.monotonic() - started, 1),
        )
        return decision, samples

    def _search(self, search, workloads, bench, gate, policy, live, live_info, guard, state, task_vars):
        """A search of candidate values in ONE running program (gate/search.py): each candidate
        an arm, put in place through the settings engine (the layer switched off, then applied
        with the candidate's settings); the host's own value is the layer switched off."""
        if not live:
            raise AnsibleActionFail("a search of %s needs a live trial: %s" % (search["variable"], live_info))
        w = workloads[0]

        def switch(value):
            guard.check()
            with guard.critical():
                state["switching"] = True
                if value is None:
                    if state["on"]:
                        self._engine("suspended", task_vars)
                        state["on"] = False
                else:
                    # one engine call: the layer off, then this candidate on; journaled as the switch it is
                    settings = search["settings"][search["index"][value]]
                    self._engine("switched", task_vars, settings=settings, decision={"value": value})
                    state["on"] = True
                state["arm"], state["switching"] = value, False

        self._live_call("started", w, bench, task_vars)
        try:
            window = self._window_taker(bench, task_vars, state, guard, float(gate.budget["window_s"]), live_info)
            decision = search_live(search, switch, lambda: window(w), gate, policy, a_run=self._task.args)
        finally:
            self._live_call("stopped", w, bench, task_vars, quiet=True)
        if decision["decision"] == "keep":
            switch(decision["search"]["chosen"])  # the chosen value in place, then kept
        else:
            # the first candidate on (what the layer applies when the same candidates are given
            # again): the rollback records it as rejected, so the next run neither applies nor
            # searches them again (layers/candidates.py settled) unless retry_rejected asks
            switch(search["values"][0])
        display.display("    %s: %s" % (self._task.args["layer"], decision["summary"]))
        return decision, {w: {"without": [], "with": []}}

    def _window_taker(self, bench, task_vars, state, guard, window_s, drop_s, first_look=4, budget_s=None):
        """The live trial's ``measure``: one window of the workload's running program. After the
        first look (``first_look`` windows per arm, where an easy change is decided at the first
        length) the windows are sized to the noise (``window_plan``); ``window.sizing`` says how."""
        a = self._task.args
        track = {"fresh": True, "since": time.monotonic(), "on": state["on"], "n": 0}
        sizing = {"window_s": window_s, "first": [], "arms": [], "overhead": []}

        def resize():
            plan = window_plan(
                sizing["first"],
                sum(sizing["overhead"]) / len(sizing["overhead"]),
                window_bounds(window_s),
                arms=sizing["arms"],
                budget_s=budget_s,
            )
            sizing["plan"] = plan
            if plan is not None:
                sizing["window_s"] = plan["window_s"]
            display.display("    %s: %s" % (a["layer"], window_words(plan, window_s)))

        def window(workload):
            guard.check()
            if len(sizing["first"]) == 2 * first_look and "plan" not in sizing:
                resize()
            fresh = track["fresh"] or track["on"] != state.get("arm", state["on"])
            args = {"seconds": sizing["window_s"], "fresh": fresh, "drop_s": drop_s if fresh else 0.0}
            args["drop_steps"] = LIVE_DROP_STEPS if fresh else 0
            try:
                if track.get("ended"):
                    # the program ended in an earlier window: a new one, started in this arm
                    self._live_call("started", workload, bench, task_vars)
                    track["ended"], args["fresh"] = False, True
                out = self._live_call("window", workload, bench, task_vars, live_window=args)
            except ModuleFailed as exc:
                failed = exc.module_result
                if failed.get("failure") not in WORKLOAD_FAILURES:
                    raise
                track["ended"] = True  # the runner ended the session with the failure
                return {"failed": True, "failure": failed["failure"], "error": failed.get("error_line")}
            win = out["window"]
            now = time.monotonic()
            steps = win["samples_ms"]
            track.update(fresh=False, on=state.get("arm", state["on"]), n=track["n"] + 1)
            wall, track["since"] = now - track["since"], now
            if "arm" in state:  # a search: the value in place
                where = "at %s" % ("the host's own value" if state["arm"] is None else state["arm"])
            else:
                where = "%s the layer" % ("with" if state["on"] else "without")
            if len(sizing["first"]) < 2 * first_look:
                sizing["first"].append(steps)
                sizing["arms"].append(state.get("arm", state["on"]))
                sizing["overhead"].append(max(0.0, wall - sum(steps) / 1000.0))
            display.display(
                "    %s: %s window %d %s: %d steps, mean %.3f ms%s"
                % (
                    a["layer"],
                    workload,
                    track["n"],
                    where,
                    len(steps),
                    sum(steps) / len(steps),
                    " (after %d steps not counted: the switch and its settling)" % win.get("dropped", 0)
                    if fresh
                    else "",
                )
            )
            return {
                "samples_ms": steps,
                "wall_s": wall,
                "measured_s": sum(steps) / 1000.0,
                "throughput": None,
                "energy_mj": win.get("energy_mj"),
                "span_s": win.get("span_s"),
            }

        window.sizing = sizing
        return window

    def _live_call(self, what, workload, bench, task_vars, live_window=None, quiet=False):
        """One request of the live session in the runner (bench ``live``)."""
        # a live session runs until it is ended (no steps), the user's program as its live command
        args = self._bench_args(workload, bench, leave_out=("command", "steps"))
        args.update(live=what, runner_socket=self._runner)
        if workload == "command":
            args["command"] = bench.get("live_command")
        if live_window is not None:
            args["live_window"] = live_window
        if not quiet:
            return self._module("stacktune.gpu.bench", args, task_vars)
        try:
            return (self._module("stacktune.gpu.bench", args, task_vars) or {}).get("ended")
        except LeaseLost:
            raise
        except ModuleFailed:
            return None  # the session ends with the runner in any case

    def _put_back(self, task_vars, reason):
        """Put the layer back to its snapshot, unjudged; say what was done."""
        try:
            self._engine("interrupted", task_vars, decision={"reason": reason})
        except LeaseLost as exc:
            return "The layer was left as it is: %s" % exc
        except AnsibleActionFail as exc:
            return "Putting the layer back failed too (%s); run %s" % (exc, command("rollback", task_vars))
        return "The layer was put back to its snapshot: the host is as it was before this layer"

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

    def _finish(self, decision, task_vars):
        """Keep the layer or put it back to its snapshot, with the decision in the journal."""
        summary = {k: v for k, v in decision.items() if k not in ("workloads", "order")}
        if decision["decision"] == "keep":
            self._engine("kept", task_vars, decision=summary)
        else:
            restored = self._engine("restored", task_vars, restore_to="snapshot", decision=summary)
            # what the restore put back, as the journal records it (the report counts these)
            decision["restored"] = [r.get("id") for r in (restored or {}).get("settings") or [] if r.get("changed")]

    def _calibrate(self, result, gate, bench, workloads, task_vars):
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
        self._runner = self._start_runner(workloads, bench, task_vars)
        try:
            out = calibrate(workloads, lambda w: self._bench(w, bench, task_vars), gate, blocks, time.monotonic)
        finally:
            self._stop_runner(task_vars)
        result.update(changed=False, calibration=out)
        return result
