# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's control loop for one layer: the block runner's life, the trials in blocks or in
live windows, a search of candidate values, and the keep or restore at the end.

It works on plain values and two callables, so it runs without Ansible: ``engine(state,
**options)`` switches the layer through the settings engine (the ``host_settings`` module's
``state`` and options) and ``bench(args, check=True)`` runs one request of the ``bench``
module (a block, a live window, the runner started or stopped). Both return the module's
result; a failed module raises ``ModuleFailed`` (``LeaseLost`` when this run no longer holds
the host). The action plugin ``stacktune.gpu.gate_layer`` turns the task into these values
and passes callables that run the modules on the host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import random
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.calibration import (
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
    block_cost,
    combine,
    decided_on,
    live_plan,
    run_staged,
    resolve_workloads,
    unmeasurable_reason,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import POLICIES
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.search import check_search, search_live
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.wording import (
    changes_seen_later,
    seconds_words,
    unseen_reason,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.decision import budget_words

BENCH_KEYS = ("command", "python", "size", "steps", "warmup", "timeout", "device", "workers", "env", "data_dir")
# options of the measurement that are the gate's, not the bench module's
GATE_BENCH_KEYS = ("runner", "steps_by_workload", "live", "live_command")
# How a block that did not run to its end failed; these are measurements of the layer
# (the bench module's ``failure``), anything else is an error of the run.
WORKLOAD_FAILURES = ("exit", "hang", "error", "output")


class TrialError(Exception):
    """The trial cannot go on (a bad option, a module that failed): the layer goes back unjudged."""


class ModuleFailed(TrialError):
    """A module the gate drives failed; ``module_result`` is its result."""

    def __init__(self, message, module_result=None):
        super().__init__(message)
        self.module_result = module_result


class LeaseLost(ModuleFailed):
    """This run no longer holds the host: stop at once, touching nothing."""


class NoGuard:
    """A run without signal handling: nothing stops it between steps."""

    why = None

    def check(self):
        return None

    @staticmethod
    def critical():
        return contextlib.nullcontext()


def _is_list(value):
    return isinstance(value, list)


def check_args(args):
    """The gate_layer task's options as the loop takes them: ``(mode, gate, bench, workloads)``
    (``gate`` a checked ``Gate``, ``workloads`` those that run here). Raises ``TrialError``
    naming the option; a workload name that is not one raises ``ValueError``."""
    mode = args.get("mode", "gate")
    if mode not in ("gate", "calibrate"):
        raise TrialError("mode must be gate or calibrate, got %r" % (mode,))
    budget = args.get("budget")
    if budget is not None and not isinstance(budget, dict):
        raise TrialError("budget must be a dict (stacktune_gate_budget), got %r" % (budget,))
    settings = args.get("gate") or {}
    if not isinstance(settings, dict):
        raise TrialError("gate must be a dict of the gate's settings, got %r" % (settings,))
    try:
        # the settings and the budget are options of their own, checked and kept apart (a
        # budget key in gate is an error naming stacktune_gate_budget.<key>)
        gate = check_settings(settings, budget=budget)
    except GateSettingError as exc:
        raise TrialError(str(exc)) from None
    bench = args.get("bench") or {}
    if not isinstance(bench, dict):
        raise TrialError("bench must be a dict of bench module options")
    unknown = sorted(set(bench) - set(BENCH_KEYS) - set(GATE_BENCH_KEYS))
    if unknown:
        raise TrialError("bench: unknown option(s) %s" % ", ".join(unknown))
    candidates = args.get("workloads") or []
    if isinstance(candidates, str) or not isinstance(candidates, list):
        raise TrialError("workloads must be a list of workload names")
    try:
        gpu_count = int(args.get("gpu_count") or 0)
    except (TypeError, ValueError):
        raise TrialError("gpu_count must be an integer, got %r" % (args.get("gpu_count"),)) from None
    workloads = resolve_workloads(candidates, gpu_count, args.get("workload"), bench.get("data_dir"))
    return mode, gate, bench, workloads


def check_gate_args(args, gate):
    """A gate's own options: ``(policy, search)``, ``search`` the checked search or None."""
    if not args.get("layer"):
        raise TrialError("layer is required with mode=gate")
    policy = args.get("policy", "improve")
    if policy not in POLICIES:
        raise TrialError("policy must be one of %s, got %r" % (", ".join(POLICIES), policy))
    try:
        search = check_search(
            args.get("search"), window_s=gate.budget["window_s"], max_slowdown=gate.settings["max_slowdown"]
        )
    except ValueError as exc:
        raise TrialError(str(exc)) from None
    return policy, search


def keep_basis(decision):
    """Why a kept layer stays (engine/keeping.py ``BASES``): ``unmeasured`` where no trial ran,
    ``gain`` where the trial showed an improvement (a search keeps its winner on its objective),
    else ``no_harm`` (kept under ``no_regression`` with nothing shown better)."""
    if decision.get("measurable") is False:
        return "unmeasured"
    if decision.get("search"):
        return "gain"
    verdicts = decision.get("verdicts") or {}
    return "gain" if any(v == "better" for v in verdicts.values()) else "no_harm"


def _unseen_running(changes):
    """The layer's written rows when none of them is seen by a process already running (each is
    read when a program starts, or later), else None."""
    written = [r for r in changes or [] if isinstance(r, dict) and r.get("changed")]
    if not written or any(r.get("effect") in (None, "now") and r.get("seen_running") is not False for r in written):
        return None
    return written


SIZES = ("full", "check")


def sized(gate, size):
    """The gate for a trial of this size: ``full`` is the budget as given; ``check`` (a layer the
    diagnosis says cannot move the program) takes one look at ``min_blocks`` blocks or windows
    per arm, which bounds the tail and the stalls in the least time."""
    if size not in SIZES:
        raise TrialError("size must be one of %s, got %r" % (", ".join(SIZES), size))
    if size == "full":
        return gate
    least = gate.budget["min_blocks"]
    return Gate(gate.settings, dict(gate.budget, max_blocks=least, max_windows=least))


def not_measured(args, workloads, bench, policy):
    """The decision on a layer no trial in this run can measure, or None when the layer is to be
    measured: no workload runs here, every change is seen only later, or every change is read
    when a program starts and the program measured does not use it (``not_used``: the
    diagnosis's words). A search that cannot run puts the host's own value back."""
    changes = args.get("changes") or []
    if not isinstance(changes, list):
        raise TrialError("changes must be the list of the layer's setting rows (host_settings settings)")
    later = changes_seen_later(changes)
    not_used = args.get("not_used") or ""
    unused = bool(not_used) and _unseen_running(changes) is not None
    if workloads and not later and not unused:
        return None
    verdict = "keep" if args.get("unmeasurable", "keep") == "keep" else "rollback"
    decision = {"decision": verdict, "policy": policy, "measurable": False}
    if later:
        decision["seen_later"] = [{"id": sid, "effect": effect} for sid, effect in later]
        decision["unmeasured"] = "seen_later"
        decision["reason"] = "%s: not measured: %s" % (verdict, unseen_reason(later))
    elif unused:
        decision["unmeasured"] = "not_used"
        decision["reason"] = "%s: not measured: %s; kept as the host's configuration for the programs that do" % (
            verdict,
            not_used,
        )
    else:
        decision["unmeasured"] = "no_workload"
        decision["reason"] = "%s: not measurable on this host: %s" % (
            verdict,
            unmeasurable_reason(args.get("workloads") or [], bench.get("data_dir")),
        )
    if args.get("search"):
        # a search the user asked for is never skipped silently: the host's own value goes back
        return search_not_run(args["search"], policy, decision["reason"].split(": ", 1)[1])
    decision["summary"] = decision["reason"]
    return decision


def search_not_run(search, policy, why):
    """The decision on a search that cannot run here: the layer goes back to the host's own
    value, unjudged (the next run searches again), and the words say why."""
    name = (search or {}).get("variable") or "the layer's candidates"
    reason = "put back: the search of %s could not run, so the host keeps its own value: %s" % (name, why)
    return {
        "decision": "rollback",
        "policy": policy,
        "measurable": False,
        "search_not_run": True,
        "reason": reason,
        "summary": reason,
    }


def runner_names(runner_for, gpu_count, override=None, data_dir=None, first=()):
    """The workloads a run's block runner is started for: ``first`` (the layer measured now),
    then every layer's of ``runner_for`` (``{layer: candidate workloads}``) resolved for this
    host as its own layer would be (``override``: ``stacktune_bench_workload``), in order, the
    user's ``command`` left out (it is not imported)."""
    names = list(first)
    if not isinstance(runner_for, dict):
        raise TrialError("runner_for must be a dict of layer: [workloads]")
    for layer, candidates in sorted(runner_for.items()):
        if isinstance(candidates, str) or not isinstance(candidates, list):
            raise TrialError("runner_for.%s must be a list of workload names" % layer)
        try:
            more = resolve_workloads(candidates, gpu_count, override, data_dir)
        except ValueError as exc:
            raise TrialError("runner_for.%s: %s" % (layer, exc)) from None
        names.extend(w for w in more if w not in names)
    return [w for w in names if w != "command"]


class TrialLoop:
    """One layer's measurement, from the runner's start to the keep or the restore.

    ``args``: the task's options (``layer``, ``run_id``, ``runner_socket``, ``runner_for``,
    ``keep_runner``, ``changes``, ...); ``engine`` and ``bench``: the callables of the module
    docstring; ``say`` and ``warn``: where progress lines and warnings go; ``guard``: stops the
    loop between steps (``check()``) and holds a stop off while the layer switches
    (``critical()``); ``clock``: seconds, monotonic. ``state`` says where the loop is (the layer
    on or off, switching, block or window) for a stop to report."""

    def __init__(self, args, engine, bench, say=None, warn=None, guard=None, clock=time.monotonic):
        self.args = args
        self.engine = engine
        self.bench = bench
        self.say = say or (lambda line: None)
        self.warn = warn or (lambda line: None)
        self.guard = guard or NoGuard()
        self.clock = clock
        self.runner = None
        self.wanted = []
        self.state = {"on": True, "switching": False}

    def set_layer(self, on):
        """The layer on (``reapplied``) or off (``suspended``) through the engine."""
        guard, state = self.guard, self.state
        guard.check()
        with guard.critical():
            state["switching"] = True
            self.engine("reapplied" if on else "suspended")
            state["on"], state["switching"] = on, False

    def block_taker(self, bench, gate, workloads):
        """The trial in blocks' ``measure``: one block of ``workload``, with a line as it ends."""
        guard, state, a = self.guard, self.state, self.args
        per_arm = int(gate.budget.get("max_blocks") or 0)
        progress = {"n": 0, "most": 2 * per_arm * len(workloads), "arm": {}}

        def measure(workload):
            guard.check()
            # one line per block as it runs, so a run of many minutes can be followed
            progress["n"] += 1
            arm = (workload, state["on"])
            progress["arm"][arm] = progress["arm"].get(arm, 0) + 1
            started = self.clock()
            out = self.block(workload, bench)
            out["wall_s"] = self.clock() - started
            guard.check()
            what = ""
            if out.get("failed"):
                what = " (%s: %s)" % ("hung" if out["failure"] == "hang" else "failed", out.get("error"))
            elif out.get("void"):
                what = " (void: %s)" % out["reason"]
            else:
                what = " (steps %s)" % seconds_words(out["measured_s"])
            self.say(
                "    %s: %s block %d of at most %d %s the layer (%d of at most %d in all): %.1f s%s"
                % (
                    a["layer"],
                    workload,
                    progress["arm"][arm],
                    per_arm,
                    "with" if state["on"] else "without",
                    progress["n"],
                    progress["most"],
                    self.clock() - started,
                    what,
                )
            )
            return out

        return measure

    def measure(self, workloads, bench, gate, policy, search):
        """Measure the layer: ``(decision, samples by workload, runner left for the next layer
        or None)``. The layer ends on (a rollback puts back what it changed); the runner is
        stopped unless ``keep_runner`` asks to leave it to the next layer."""
        a, state, set_layer = self.args, self.state, self.set_layer
        measure = self.block_taker(bench, gate, workloads)
        changes = a.get("changes") or []
        # a search switches every row of the layer, also when its first candidate changed nothing
        applied = [r for r in changes if isinstance(r, dict)]
        rows = [dict(r, changed=True) for r in applied] if search else changes
        if (
            search
            and search.get("host_value") is None
            and applied
            and len(set(search["values"])) > 1
            and not any(r.get("changed") for r in applied)
        ):
            # the layer applied its first candidate and changed nothing: that is the host's own value,
            # measured once as the host's arm (not a second time as a candidate)
            search = dict(search, host_value=search["values"][0])
        live, live_info = live_plan(rows, workloads, bench, wanted=bench.get("live", True) is not False)
        if search and not live:
            # a search runs in one running program; where none can run it, the host keeps its own value
            decision = search_not_run(search, policy, "it needs a live trial: %s" % live_info)
            return decision, {w: {"without": [], "with": []} for w in workloads}, None
        trial = None
        if live:
            state["unit"] = "window"  # what a stop lands in, for the journal's reason
        else:
            self.say("    %s: %s" % (a["layer"], budget_words(gate.budget, workloads)))
            if policy == "improve" and len(workloads) > 1:
                # one trial per workload: a second one only where the first cannot see the layer or decide
                def trial(w, seconds):
                    budget = dict(gate.budget, max_seconds=seconds)
                    return Trial([w], set_layer, measure, policy, Gate(gate.settings, budget), self.clock)

            else:
                trial = Trial(workloads, set_layer, measure, policy, gate, self.clock)
        self.runner = self.start_runner(workloads, bench, for_live=live)
        if search:
            decision, samples = self.search(search, workloads, bench, gate, policy, live, live_info)
        elif live:
            decision, samples = self.live(workloads, bench, gate, policy, live_info)
        elif not isinstance(trial, Trial):
            decision, trials = run_staged(workloads, trial, policy, self.clock, gate.budget["max_seconds"])
            decision["live"] = {"used": False, "why": live_info}
            samples = {w: trials[w].samples(w) if w in trials else {"without": [], "with": []} for w in workloads}
        else:
            decision = trial.run()
            decision["live"] = {"used": False, "why": live_info}
            samples = {w: trial.samples(w) for w in workloads}
        if live and not state["on"]:
            # a live trial may end on a window without the layer: on again, so that a
            # rollback puts back (and counts) what the layer changed, as after blocks
            set_layer(True)
        kept = None
        if a.get("keep_runner"):
            # the next layer of the run uses it; it ends with the run's lease in any case
            kept, self.runner = self.runner, None
        else:
            self.stop_runner()
        decision["measurable"] = True
        decision.setdefault("workloads_measured", workloads)
        return decision, samples, kept

    def runner_workloads(self, workloads, gpu_count, bench):
        """What the runner imports for: this layer's workloads and, with ``runner_for``
        (``{layer: candidate workloads}`` of the run's layers), those of every layer it may
        serve after this one, each resolved for this host as its own layer would be."""
        return runner_names(
            self.args.get("runner_for") or {}, gpu_count, self.args.get("workload"), bench.get("data_dir"), workloads
        )

    def start_runner(self, workloads, bench, for_live=False):
        """A warm parent for the built-in workloads' blocks (the bench module's runner), or None.

        With ``runner_socket`` (the runner an earlier layer of this run left), that runner is
        used while it answers; otherwise one is started. A live trial needs one whatever its
        workloads are: the runner holds the user's program too, and reads its steps."""
        wanted = self.wanted
        if not for_live and (not bench.get("runner", True) or not wanted or all(w == "command" for w in workloads)):
            return None
        args = {"runner_state": "started", "workload": (wanted or ["cpu_train_step"])[0], "runner_workloads": wanted}
        if self.args.get("runner_socket"):
            args["runner_socket"] = self.args["runner_socket"]
        if bench.get("python"):
            args["python"] = bench["python"]
        if self.args.get("run_id"):
            args["run_id"] = self.args["run_id"]
        try:
            res = self.bench(args)
        except LeaseLost:
            raise
        except ModuleFailed as exc:
            if for_live:
                raise
            self.warn("blocks start fresh interpreters: %s" % exc)
            return None
        if res.get("runner_reused"):
            return res["runner_socket"]  # the run's runner answered: nothing to start
        imports = ", ".join(
            "%s %.1f s%s" % (i.get("module"), i.get("seconds") or 0.0, " (failed)" if i.get("error") else "")
            for i in res.get("runner_imports") or []
        )
        self.say(
            "    %s: block runner ready in %.1f s%s"
            % (
                self.args.get("layer") or "calibrate",
                res["runner_start_s"],
                " (imports: %s)" % imports if imports else "",
            )
        )
        return res["runner_socket"]

    def stop_runner(self):
        if self.runner:
            args = {"runner_state": "stopped", "runner_socket": self.runner}
            self.bench(args, check=False)
            self.runner = None

    def stop_runner_quietly(self):
        """On the way out of an error: a runner that cannot be reached ends by itself (idle, lease)."""
        try:
            self.stop_runner()
        except Exception:  # noqa: BLE001 - the error being reported matters more
            self.runner = None

    def bench_args(self, workload, bench, leave_out=()):
        """The bench module's arguments for ``workload``: the run, and the options of ``bench``
        it takes (``command`` only for the user's program), less ``leave_out``."""
        args = {"workload": workload}
        if self.args.get("run_id"):
            args["run_id"] = self.args["run_id"]
        for key in BENCH_KEYS:
            if key in leave_out or bench.get(key) is None or (key == "command" and workload != "command"):
                continue
            args[key] = bench[key]
        return args

    def block(self, workload, bench):
        args = self.bench_args(workload, bench)
        if self.runner and workload != "command":
            args["runner_socket"] = self.runner
        if workload in (bench.get("steps_by_workload") or {}):
            args["steps"] = bench["steps_by_workload"][workload]
        try:
            res = self.bench(args)
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

    def live(self, workloads, bench, gate, policy, drop_s):
        """The live trial: per workload, ONE process runs while the layer is switched between
        windows of its steps (A B B A or B A A B quads at random); the windows are the blocks.
        Returns the combined decision and the steps per workload and arm."""
        guard, set_layer = self.guard, self.set_layer
        a = self.args
        s = live_gate(gate)
        window_s = float(gate.budget["window_s"])
        results, samples, cost = {}, {}, {}
        totals = {"with": 0, "without": 0, "toggles": 0, "start_s": 0.0}
        started = self.clock()
        self.say(
            "    %s: every change is seen by a running process. %s %.1f s and %d steps are dropped after each switch."
            % (a["layer"], budget_words(gate.budget, workloads, live=True), drop_s, LIVE_DROP_STEPS)
        )
        for w in workloads:
            guard.check()
            t0 = self.clock()
            begun = self.live_call("started", w, bench)
            totals["start_s"] += self.clock() - t0
            window = self.window_taker(
                bench,
                window_s,
                drop_s,
                s.budget["min_blocks"],
                s.budget["max_blocks"] * window_s,
            )
            rng = random.Random("%s/%s/%s" % (a.get("run_id") or "manual", a["layer"], w))
            # max_seconds is the layer's: each workload's trial gets what the ones before left
            left = Gate(
                s.settings,
                dict(s.budget, max_seconds=max(1, int(s.budget["max_seconds"] - (self.clock() - started)))),
            )
            trial = Trial([w], set_layer, window, policy, left, self.clock, rng=rng)
            try:
                results[w] = trial.run()
            finally:
                ended = self.live_call("stopped", w, bench, quiet=True)
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
            seconds=round(self.clock() - started, 1),
        )
        return decision, samples

    def search(self, search, workloads, bench, gate, policy, live, live_info):
        """A search of candidate values in ONE running program (gate/search.py): each candidate
        an arm, put in place through the settings engine (the layer switched off, then applied
        with the candidate's settings); the host's own value is the layer switched off."""
        guard, state = self.guard, self.state
        w = workloads[0]

        def switch(value):
            guard.check()
            with guard.critical():
                state["switching"] = True
                if value is None:
                    if state["on"]:
                        self.engine("suspended")
                        state["on"] = False
                else:
                    # one engine call: the layer off, then this candidate on; journaled as the switch it is
                    settings = search["settings"][search["index"][value]]
                    self.engine("switched", settings=settings, decision={"value": value})
                    state["on"] = True
                state["arm"], state["switching"] = value, False

        self.live_call("started", w, bench)
        try:
            # the rounds are planned on this length: longer windows would leave the cap for fewer arms
            window = self.window_taker(bench, float(gate.budget["window_s"]), live_info, first_look=None)
            decision = search_live(search, switch, lambda: window(w), gate, policy, a_run=self.args, clock=self.clock)
        finally:
            self.live_call("stopped", w, bench, quiet=True)
        if decision["decision"] == "keep":
            switch(decision["search"]["chosen"])  # the chosen value in place, then kept
        else:
            # the first candidate on (what the layer applies when the same candidates are given
            # again): the rollback records it as rejected, so the next run neither applies nor
            # searches them again (layers/candidates.py settled) unless retry_rejected asks
            switch(search["values"][0])
        self.say("    %s: %s" % (self.args["layer"], decision["summary"]))
        return decision, {w: {"without": [], "with": []}}

    def window_taker(self, bench, window_s, drop_s, first_look=4, budget_s=None):
        """The live trial's ``measure``: one window of the workload's running program. After the
        first look (``first_look`` windows per arm, where an easy change is decided at the first
        length) the windows are sized to the noise (``window_plan``); ``window.sizing`` says how.
        ``first_look=None`` keeps the first length (a search plans its rounds on it)."""
        a, guard, state = self.args, self.guard, self.state
        track = {"fresh": True, "since": self.clock(), "on": state["on"], "n": 0}
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
            self.say("    %s: %s" % (a["layer"], window_words(plan, window_s)))

        def window(workload):
            guard.check()
            if first_look and len(sizing["first"]) == 2 * first_look and "plan" not in sizing:
                resize()
            fresh = track["fresh"] or track["on"] != state.get("arm", state["on"])
            args = {"seconds": sizing["window_s"], "fresh": fresh, "drop_s": drop_s if fresh else 0.0}
            args["drop_steps"] = LIVE_DROP_STEPS if fresh else 0
            try:
                if track.get("ended"):
                    # the program ended in an earlier window: a new one, started in this arm
                    self.live_call("started", workload, bench)
                    track["ended"], args["fresh"] = False, True
                out = self.live_call("window", workload, bench, live_window=args)
            except ModuleFailed as exc:
                failed = exc.module_result
                if failed.get("failure") not in WORKLOAD_FAILURES:
                    raise
                track["ended"] = True  # the runner ended the session with the failure
                return {"failed": True, "failure": failed["failure"], "error": failed.get("error_line")}
            win = out["window"]
            now = self.clock()
            steps = win["samples_ms"]
            track.update(fresh=False, on=state.get("arm", state["on"]), n=track["n"] + 1)
            wall, track["since"] = now - track["since"], now
            if "arm" in state:  # a search: the value in place
                where = "at %s" % ("the host's own value" if state["arm"] is None else state["arm"])
            else:
                where = "%s the layer" % ("with" if state["on"] else "without")
            if first_look and len(sizing["first"]) < 2 * first_look:
                sizing["first"].append(steps)
                sizing["arms"].append(state.get("arm", state["on"]))
                sizing["overhead"].append(max(0.0, wall - sum(steps) / 1000.0))
            self.say(
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

    def live_call(self, what, workload, bench, live_window=None, quiet=False):
        """One request of the live session in the runner (bench ``live``).

        The user's program of a live trial is ``stacktune_bench_live_command``, given to this
        loop as ``bench.live_command`` and to the bench module as its ``command`` (a live
        session runs until it is ended, so without ``steps``)."""
        args = self.bench_args(workload, bench, leave_out=("command", "steps"))
        args.update(live=what, runner_socket=self.runner)
        if workload == "command":
            args["command"] = bench.get("live_command")
        if live_window is not None:
            args["live_window"] = live_window
        if not quiet:
            return self.bench(args)
        try:
            return (self.bench(args) or {}).get("ended")
        except LeaseLost:
            raise
        except ModuleFailed:
            return None  # the session ends with the runner in any case

    def finish(self, decision):
        """Keep the layer or put it back to its snapshot, with the decision in the journal.
        A keep says why the layer stays (``basis``: engine/keeping.py), which the engine checks."""
        if decision["decision"] == "keep":
            decision.setdefault("basis", keep_basis(decision))
        summary = {k: v for k, v in decision.items() if k not in ("workloads", "order")}
        if decision.get("search_not_run"):
            # unjudged: the journal goes back to what it held before this run's apply, so the
            # next run searches again instead of taking the candidates as rejected
            restored = self.engine("interrupted", decision={"reason": decision["reason"]})
            decision["restored"] = [r.get("id") for r in (restored or {}).get("settings") or [] if r.get("changed")]
        elif decision["decision"] == "keep":
            self.engine("kept", decision=summary)
        else:
            restored = self.engine("restored", restore_to="snapshot", decision=summary)
            # what the restore put back, as the journal records it (the report counts these)
            decision["restored"] = [r.get("id") for r in (restored or {}).get("settings") or [] if r.get("changed")]
