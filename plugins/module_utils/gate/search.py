# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Searching candidate values of one setting inside one running program.

A setting given a list of candidate values (or a range ``{from, to, step}``) is searched: each
candidate is an arm, and so is the host's own value. The arms are switched between windows of
ONE running program (the live trial's windows: ``measure()`` returns one), each round visiting
every arm still in the search once, in an order drawn at random per round. After
``min_rounds`` rounds the arms shown worse than the best are dropped as the search goes; it
stops when the best is resolved against every arm left (shown better, or within the
tolerance), or at ``max_rounds`` / ``max_seconds``. Then the chosen value against the host's
own value is judged as every change is (``blocks.judge_blocks``), under ``improve`` whatever the
layer's policy: a value other than the host's own is taken only for a gain shown (a candidate
that is merely harmless gives no reason to change the host), and a search never keeps what the
gate would not.

Objectives: ``throughput`` (the most throughput whose tail and stalls stay within tolerance of
the host's) and ``efficiency`` (the least energy per step whose throughput is within
``max_slowdown`` of the host's, tail and stalls within tolerance). Energy comes from the
window's ``energy_mj`` (NVML's total-energy counter per GPU, read at the window's edges); a
window without it has energy "not measured", never zero.

Pure Python: ``switch(value)`` (None: the host's own value) and ``measure()`` are the callers'.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import mean, quantile, stdev, t_ppf
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.blocks import arm_effect, judge_blocks
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import (
    DEFAULTS,
    TAIL_DIMENSIONS,
    look_confidence,
)

OBJECTIVES = ("throughput", "efficiency")
# The search's budget when the caller gives none: rounds before the first look (always taken)
# and at most, seconds at most once those are taken, and windows per visit of an arm (a switch costs the settling
# dropped after it: two 3-s windows per visit keep the measured steps above 80% of the time).
SEARCH_BUDGET = {"min_rounds": 2, "max_rounds": 6, "max_seconds": 90, "visit_windows": 2}
# What the host's own value is called in the search's arms and report.
HOST = "host"


class SearchBroken(Exception):
    """The program fails with the host's own value too: nothing can be searched."""


def host_words(host_value):
    """The host's own value as the search's lines name it."""
    return "as found" if host_value is None else str(host_value)


def search_plan(name, candidates, host_value, objective, budget=None, window_s=3):
    """The search in words, for check mode: what is switched, how often and for how long."""
    b = dict(SEARCH_BUDGET, **(budget or {}))
    arms = len([c for c in candidates if c != host_value]) + 1
    return (
        "search %s over %s against the host's own value (%s), objective %s: %d arms switched in ONE running "
        "program, %d-s windows in a random order per round, %d to %d rounds, after %d at most %d s"
        % (
            name,
            ", ".join(str(c) for c in candidates),
            host_words(host_value),
            objective,
            arms,
            window_s,
            b["min_rounds"],
            b["max_rounds"],
            b["min_rounds"],
            b["max_seconds"],
        )
    )


# ------------------------------------------------------------------ per arm


def _half(values, confidence):
    """Half-width of a Student-t interval on the mean of ``values`` (None below two)."""
    if len(values) < 2:
        return None
    return t_ppf(0.5 + confidence / 2.0, len(values) - 1) * stdev(values) / math.sqrt(len(values))


def window_energy(window):
    """``(joules per step, watts)`` of one window, or None when its energy was not measured."""
    mj = window.get("energy_mj")
    steps = window.get("samples_ms") or []
    if not mj or any(v is None for v in mj) or not steps:
        return None
    joules = math.fsum(mj) / 1000.0
    span = window.get("span_s") or math.fsum(steps) / 1000.0
    return joules / len(steps), (joules / span if span > 0 else None)


def arm_summary(windows, stall_ms, confidence=0.95):
    """One arm's row: throughput (steps/s), median, p99, stalls and energy with their noise
    (half-widths of the interval over its windows; energy None when not measured)."""
    if not windows:
        return {"windows": 0}
    steps = sorted(v for w in windows for v in w["samples_ms"])
    tps = [1000.0 / mean(w["samples_ms"]) for w in windows]
    row = {
        "windows": len(windows),
        "steps": len(steps),
        "throughput": mean(tps),
        "throughput_half": _half(tps, confidence),
        "p50_ms": quantile(steps, 0.5),
        "p99_ms": quantile(steps, 0.99),
        "stalls": sum(1 for v in steps if v > stall_ms) / float(len(steps)) if stall_ms else 0.0,
        "j_per_step": None,
        "j_per_step_half": None,
        "watts": None,
        "watts_half": None,
        "energy": "not measured",
    }
    energy = [window_energy(w) for w in windows]
    if all(e is not None for e in energy):
        js = [e[0] for e in energy]
        ws = [e[1] for e in energy if e[1] is not None]
        row.update(
            j_per_step=mean(js),
            j_per_step_half=_half(js, confidence),
            watts=mean(ws) if ws else None,
            watts_half=_half(ws, confidence),
            energy="measured",
        )
    return row


def replay(windows_by_arm, rng):
    """``(switch, measure)`` that replay recorded windows: ``windows_by_arm`` maps a value (None
    for the host's own value) to its recorded windows; each window measured is one of the
    current arm's, drawn at random (benchmarks and tests replay recordings through this)."""
    state = {"arm": None}

    def switch(value):
        state["arm"] = value

    def measure():
        return dict(rng.choice(windows_by_arm[state["arm"]]))

    return switch, measure


class Search:
    """A search of ``candidates`` against the host's own value ``host_value`` in one program.

    ``switch(value)``: put the setting at ``value`` (None: the host's own value) through the
    settings engine. ``measure()``: one window after the switch's settling, ``{"samples_ms":
    [...], "energy_mj": [per GPU] or None, "span_s": s}``, or ``{"failed": True, "failure",
    "error"}``. ``gate``: the checked gate (its settings judge), ``policy``: the layer's.
    ``rng``: a ``random.Random`` for the order of each round. ``clock``: seconds.
    """

    def __init__(
        self,
        candidates,
        host_value,
        switch,
        measure,
        settings=None,
        policy="improve",
        objective="throughput",
        max_slowdown=0.05,
        budget=None,
        rng=None,
        clock=None,
    ):
        if objective not in OBJECTIVES:
            raise ValueError("objective must be one of %s, got %r" % (", ".join(OBJECTIVES), objective))
        if isinstance(max_slowdown, bool) or not isinstance(max_slowdown, (int, float)) or not 0 <= max_slowdown < 1:
            raise ValueError("max_slowdown must be a number in [0, 1), got %r" % (max_slowdown,))
        self.host_value = host_value
        self.candidates = [c for c in candidates if c != host_value]
        if not self.candidates:
            raise ValueError("no candidate differs from the host's own value %r" % (host_value,))
        self.switch = switch
        self.measure = measure
        self.settings = dict(DEFAULTS, **(settings or {}))
        self.policy = policy
        self.objective = objective
        self.max_slowdown = float(max_slowdown)
        self.budget = dict(SEARCH_BUDGET, **(budget or {}))
        self.rng = rng
        self.clock = clock
        self.looks = max(1, self.budget["max_rounds"] - self.budget["min_rounds"] + 1)
        self.conf = look_confidence(self.settings["confidence"], self.looks)

    # ---------------------------------------------------------------- the arms
    def _value(self, arm):
        return None if arm == HOST else self.candidates[arm]

    def _name(self, arm):
        return "the host's own value" if arm == HOST else str(self.candidates[arm])

    def _cmp(self, arm, ref, key):
        """log(arm / ref) of ``key`` per window: ``(estimate, lo, hi)`` or None."""
        a, r = self.win[arm], self.win[ref]
        eff = arm_effect(
            [math.log(w[key]) for w in r],
            [math.log(w[key]) for w in a],
            [w["at"] for w in r],
            [w["at"] for w in a],
            self.conf,
        )
        return None if eff is None else (eff["delta"], eff["lo"], eff["hi"])

    def _judge(self, arm, final):
        """``judge_blocks`` of ``arm`` against the host's own value, as the gate judges a layer."""
        settings = dict(self.settings)
        if self.objective == "efficiency":
            # the throughput and the median may give up max_slowdown; the tail keeps its tolerance
            # a throughput max_slowdown lower is a median step 1 / (1 - max_slowdown) longer, and
            # every step is slower by it: the tail's tolerance is beyond that
            longer = 1.0 / (1.0 - self.max_slowdown) - 1.0
            settings["min_gain"] = min(0.99, max(settings["min_gain"], longer))
            settings["tail_tolerance"] = min(0.99, (1.0 + settings["tail_tolerance"]) * (1.0 + longer) - 1.0)
        return judge_blocks(
            {"blocks": [w["samples_ms"] for w in self.win[HOST]], "at": [w["at"] for w in self.win[HOST]]},
            {"blocks": [w["samples_ms"] for w in self.win[arm]], "at": [w["at"] for w in self.win[arm]]},
            policy="improve",  # the layer's policy (self.policy) is recorded; a new value needs a gain
            final=final,
            looks=self.looks,
            **settings,
        )

    def _energy(self):
        return all(w.get("j") is not None for ws in self.win.values() for w in ws)

    def _feasible(self, arm):
        """For ``efficiency``: ``True`` within ``max_slowdown`` of the host's throughput (by the
        estimate), ``False`` shown beyond it, or the estimate's side while unresolved."""
        if arm == HOST:
            return True, True
        c = self._cmp(arm, HOST, "tp")
        if c is None:
            return True, False
        bound = math.log(1.0 - self.max_slowdown)
        return c[0] >= bound, (c[2] < bound or c[1] >= bound)

    def _best(self, active):
        """The best arm of those still in the search by the objective's estimate."""
        if self.objective == "throughput":
            return max(active, key=lambda a: mean([w["tp"] for w in self.win[a]]))
        feasible = [a for a in active if self._feasible(a)[0]]
        return min(feasible, key=lambda a: mean([w["j"] for w in self.win[a]]))

    def _look(self, active, final):
        """Drop the arms shown worse; True when the best is resolved against every arm left."""
        tol = math.log1p(self.settings["min_gain"])
        if self.objective == "efficiency":
            for arm in list(active):
                ok, sure = self._feasible(arm)
                if not ok and sure:
                    self._drop(
                        active,
                        arm,
                        "throughput more than %.0f%% below the host's (max_slowdown)" % (self.max_slowdown * 100),
                    )
        best = self._best(active)
        key = "tp" if self.objective == "throughput" else "j"
        sign = 1.0 if self.objective == "throughput" else -1.0
        resolved = True
        for arm in list(active):
            if arm == best:
                continue
            c = self._cmp(arm, best, key)
            if c is None:
                resolved = False
                continue
            lo, hi = (c[1], c[2]) if sign > 0 else (-c[2], -c[1])
            if hi < 0:
                if arm != HOST:
                    what = "throughput" if key == "tp" else "energy per step"
                    self._drop(active, arm, "%s shown worse than %s's" % (what, self._name(best)))
            elif not (lo > -tol and hi < tol):
                resolved = False
            if self.objective == "efficiency" and arm in active and not self._feasible(arm)[1]:
                resolved = False
        for arm in list(active):
            if arm == HOST:
                continue
            judged = self._judge(arm, final)
            worse = [d for d in TAIL_DIMENSIONS if judged["verdicts"].get(d) == "worse"]
            if worse:
                self._drop(active, arm, "%s shown worse than with the host's own value" % " and ".join(worse))
                resolved = resolved and arm != best
        if best not in active:
            best = self._best(active)
        if resolved and best != HOST:
            # the choice against the host's own value must be decided too: more rounds while it is not
            resolved = self._decided(best)
        return best, resolved

    def _decided(self, best):
        """Whether the windows decide ``best`` against the host's own value."""
        if self.objective == "throughput":
            return bool(self._judge(best, final=False).get("resolved"))
        c = self._cmp(best, HOST, "j")
        bound = math.log(1.0 - self.settings["min_gain"])
        return c is not None and ((c[2] < 0 and c[0] <= bound) or c[1] > bound)

    def _less_energy(self, best):
        """The gate's rule for better, on energy per step: the interval excludes no change and the
        estimate reaches ``min_gain`` lower."""
        c = self._cmp(best, HOST, "j")
        return c is not None and c[2] < 0 and c[0] <= math.log(1.0 - self.settings["min_gain"])

    def _drop(self, active, arm, why):
        active.remove(arm)
        self.dropped[arm] = why

    # ---------------------------------------------------------------- the run
    def run(self):
        clock = self.clock
        started = clock() if clock else 0.0
        arms = [HOST] + list(range(len(self.candidates)))
        self.win = {a: [] for a in arms}
        self.dropped, self.failures = {}, {}
        active = list(arms)
        position, rounds, best, resolved, current = 0, 0, HOST, False, "unset"
        stop = "max_rounds"

        def take(arm):
            nonlocal position, current
            if arm != current:
                self.switch(self._value(arm))
                current = arm
            out = self.measure()
            position += 1
            if out.get("failed"):
                return out
            steps = out["samples_ms"]
            e = window_energy(out)
            self.win[arm].append(
                dict(out, at=position, tp=1000.0 / mean(steps), j=e[0] if e else None, w=e[1] if e else None)
            )
            return out

        while rounds < self.budget["max_rounds"]:
            order = list(active)
            if self.rng is not None:
                self.rng.shuffle(order)
            for arm in order:
                if arm not in active:
                    continue
                for _visit in range(self.budget["visit_windows"]):
                    out = take(arm)
                    if out.get("failed"):
                        break
                if not out.get("failed"):
                    continue
                if arm == HOST:
                    raise SearchBroken("the program fails with the host's own value: %s" % out.get("error"))
                # a candidate's window failed: does the program run with the host's own value?
                confirm = take(HOST)
                if confirm.get("failed"):
                    raise SearchBroken("the program fails with the host's own value: %s" % confirm.get("error"))
                self.failures[arm] = out.get("error") or out.get("failure")
                self._drop(
                    active,
                    arm,
                    "the program %s with it: %s"
                    % ("hangs" if out.get("failure") == "hang" else "fails", self.failures[arm]),
                )
            rounds += 1
            if rounds == 1 and clock is not None:
                # the looks this search can take, planned from what one round cost before any look:
                # each look's confidence is the gate's shared among them (Bonferroni)
                per_round = max(clock() - started, 1e-9)
                fit = min(self.budget["max_rounds"], int(self.budget["max_seconds"] // per_round))
                self.looks = max(1, fit - self.budget["min_rounds"] + 1)
                self.conf = look_confidence(self.settings["confidence"], self.looks)
            if rounds >= self.budget["min_rounds"]:
                if self.objective == "efficiency" and not self._energy():
                    stop = "energy not measured"
                    break
                best, resolved = self._look(active, final=False)
                if resolved or len(active) == 1:
                    stop = "resolved"
                    break
            if clock is not None and rounds >= self.budget["min_rounds"]:
                # the cap never cuts the rounds the first look needs: without them no arm is compared
                # (seen on a GPU host: six arms of two 3-s windows took 46 s a round, one round of 90 s)
                spent = clock() - started
                if spent + spent / rounds > self.budget["max_seconds"]:
                    stop = "max_seconds"
                    break
        if stop not in ("resolved", "energy not measured") and rounds >= 1:
            if len(active) > 1 and all(len(self.win[a]) >= 2 for a in active):
                best, resolved = self._look(active, final=True)
            elif active:
                best = active[0] if len(active) == 1 else HOST
        if current != HOST:
            self.switch(None)  # the host's own value again before the decision is taken
            current = HOST
        return self._result(best, active, rounds, stop, started)

    def _result(self, best, active, rounds, stop, started):
        stall_ms = (
            self.settings["stall_factor"]
            * quantile(sorted(quantile(sorted(w["samples_ms"]), 0.5) for w in self.win[HOST]), 0.5)
            if self.win[HOST]
            else None
        )
        rows = []
        for arm in [HOST] + list(range(len(self.candidates))):
            row = arm_summary(self.win[arm], stall_ms, self.settings["confidence"])
            row["value"] = self.host_value if arm == HOST else self.candidates[arm]
            row["arm"] = "host" if arm == HOST else "candidate"
            row["status"] = "dropped" if arm in self.dropped else "kept in"
            row["why"] = self.dropped.get(arm, "")
            rows.append(row)
        out = {
            "objective": self.objective,
            "max_slowdown": self.max_slowdown if self.objective == "efficiency" else None,
            "rounds": rounds,
            "stop": stop,
            "windows": sum(len(w) for w in self.win.values()),
            "seconds": round(self.clock() - started, 1) if self.clock else None,
            # the share of the search's wall time spent in measured steps (the rest: switches,
            # the settling dropped after them, the module calls)
            "measured_s": round(math.fsum(sum(w["samples_ms"]) for ws in self.win.values() for w in ws) / 1000.0, 2),
            "failures": {str(self.candidates[a]): e for a, e in self.failures.items()},
            "rows": rows,
        }
        if out["seconds"]:
            out["measured_share"] = round(min(1.0, out["measured_s"] / out["seconds"]), 3)
        if stop == "energy not measured":
            out.update(
                chosen=self.host_value,
                decision="rollback",
                reason="objective efficiency needs energy per step, and energy is not measured on this host "
                "(NVML's total-energy counter); the host's own value is kept",
            )
            rows[0]["status"] = "chosen"
            return out
        if best == HOST:
            out.update(
                chosen=self.host_value,
                decision="rollback",
                reason="the host's own value (%s) is the best by %s%s; it is kept"
                % (
                    host_words(self.host_value),
                    self.objective,
                    "" if stop == "resolved" else " (not resolved: %s)" % stop,
                ),
            )
            rows[0]["status"] = "chosen"
            return out
        judged = self._judge(best, final=True)
        value = self.candidates[best]
        out["judged"] = {k: judged.get(k) for k in ("decision", "reason", "verdicts")}
        keep = self._keeps(best, judged)
        out["chosen"] = value if keep else self.host_value
        rows[1 + best]["status"] = "chosen" if keep else "best, not kept"
        if not keep:
            rows[0]["status"] = "chosen"
        head = "%s is the best by %s%s" % (value, self.objective, "" if stop == "resolved" else " (%s)" % stop)
        if keep:
            out.update(
                decision="keep",
                reason="%s; against the host's own value (%s): %s"
                % (head, host_words(self.host_value), self._why_kept(best, judged)),
            )
        else:
            out.update(
                decision="rollback",
                reason="%s; the gate does not keep it against the host's own value (%s): %s"
                % (head, host_words(self.host_value), self._why_not(best, judged)),
            )
        return out

    def _keeps(self, best, judged):
        if self.objective == "throughput":
            return judged["decision"] == "keep"
        if any(v == "worse" for v in judged["verdicts"].values()) or not self._feasible(best)[0]:
            return False
        return self._less_energy(best)

    def _why_kept(self, best, judged):
        if self.objective == "throughput":
            return judged.get("reason") or "kept"
        c = self._cmp(best, HOST, "j")
        t = self._cmp(best, HOST, "tp")
        return (
            "energy per step %+.1f%% ±%.1f%%, throughput %+.1f%% (within %.0f%%), tail and stalls within tolerance"
            % (
                math.expm1(c[0]) * 100,
                (math.expm1(c[2]) - math.expm1(c[1])) * 50,
                math.expm1(t[0]) * 100,
                self.max_slowdown * 100,
            )
        )

    def _why_not(self, best, judged):
        if self.objective == "throughput":
            return judged.get("reason") or judged.get("decision")
        worse = [d for d, v in judged["verdicts"].items() if v == "worse"]
        if worse:
            return "%s worse than allowed" % ", ".join(worse)
        if not self._feasible(best)[0]:
            return "throughput more than %.0f%% below the host's" % (self.max_slowdown * 100)
        return "energy per step not shown lower by %.0f%%" % (self.settings["min_gain"] * 100)


def choice_line(setting, result):
    """The search's choice in one line for the run's output."""
    rows = result.get("rows") or []
    dropped = sum(1 for r in rows if r.get("status") == "dropped")
    keep = result.get("decision") == "keep"
    return "search %s (%s): %s %s; %d of %d candidates dropped, %d rounds, %s" % (
        setting,
        result.get("objective"),
        "chose" if keep else "kept the host's own value",
        result.get("chosen") if keep else host_words(result.get("chosen")),
        dropped,
        max(0, len(rows) - 1),
        result.get("rounds") or 0,
        result.get("reason"),
    )


def check_search(raw, window_s=3, max_slowdown=0.05):
    """The gate_layer action's ``search`` option, checked: ``{"variable", "candidates": [{"value",
    "settings": [the layer's setting rows with that value]}], "host_value", "objective",
    "max_slowdown", "budget"}``, or None when no search is asked for. Raises ValueError naming
    the key."""
    if not raw:
        return None
    if not isinstance(raw, dict):
        raise ValueError("search must be a dict (variable, candidates, objective ...), got %r" % (raw,))
    unknown = sorted(set(raw) - {"variable", "candidates", "host_value", "objective", "max_slowdown", "budget"})
    if unknown:
        raise ValueError("search: unknown key(s) %s" % ", ".join(unknown))
    name = raw.get("variable")
    if not isinstance(name, str) or not name:
        raise ValueError("search.variable must name the variable searched, got %r" % (name,))
    cands = raw.get("candidates")
    if not isinstance(cands, list) or not cands:
        raise ValueError("search.candidates must be a list of {value, settings}, got %r" % (cands,))
    values, settings = [], []
    for i, c in enumerate(cands):
        if not isinstance(c, dict) or "value" not in c or not isinstance(c.get("settings"), list):
            raise ValueError("search.candidates[%d] must be {value, settings: [setting rows]}, got %r" % (i, c))
        if isinstance(c["value"], (list, dict)):
            raise ValueError("search.candidates[%d].value must be a single value, got %r" % (i, c["value"]))
        values.append(c["value"])
        settings.append(c["settings"])
    objective = raw.get("objective") or "throughput"
    if objective not in OBJECTIVES:
        raise ValueError("search.objective must be one of %s, got %r" % (", ".join(OBJECTIVES), objective))
    slowdown = raw.get("max_slowdown", max_slowdown)
    if isinstance(slowdown, bool) or not isinstance(slowdown, (int, float)) or not 0 <= slowdown < 1:
        raise ValueError("search.max_slowdown must be a number in [0, 1), got %r" % (slowdown,))
    budget = dict(SEARCH_BUDGET)
    for key, value in (raw.get("budget") or {}).items():
        if key not in SEARCH_BUDGET:
            raise ValueError("search.budget: unknown key %s (known: %s)" % (key, ", ".join(SEARCH_BUDGET)))
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("search.budget.%s must be a positive integer, got %r" % (key, value))
        budget[key] = value
    if budget["max_rounds"] < budget["min_rounds"]:
        raise ValueError("search.budget.max_rounds must be at least min_rounds")
    host = raw.get("host_value")
    return {
        "variable": name,
        "values": values,
        "settings": settings,
        "index": {v: i for i, v in enumerate(values)},
        "host_value": host,
        "objective": objective,
        "max_slowdown": float(slowdown),
        "budget": budget,
        "plan": search_plan(name, values, host, objective, budget, window_s),
    }


def search_live(search, switch, measure, gate, policy, a_run=None, clock=None):
    """Run a checked search (``check_search``) with the caller's ``switch`` and ``measure`` and
    return the layer's decision record: the choice as ``decision`` (``keep`` the chosen value
    or ``rollback`` to the host's own), its one line as ``summary``, the rows as ``search``.
    ``clock``: the caller's monotonic clock (the trial loop's), which the cap is counted on."""
    import random  # noqa: PLC0415 - only a search draws its order
    import time  # noqa: PLC0415

    a_run = a_run or {}
    rng = random.Random("%s/%s/%s" % (a_run.get("run_id") or "manual", a_run.get("layer"), search["variable"]))
    res = Search(
        search["values"],
        search["host_value"],
        switch,
        measure,
        settings=gate.settings,
        policy=policy,
        objective=search["objective"],
        max_slowdown=search["max_slowdown"],
        budget=search["budget"],
        rng=rng,
        clock=clock or time.monotonic,
    ).run()
    judged = res.get("judged") or {}
    line = choice_line(search["variable"], res)
    return {
        "decision": res["decision"],
        "policy": policy,
        "method": "search",
        "reason": "%s: %s" % (res["decision"], res["reason"]),
        "summary": line,
        "verdicts": judged.get("verdicts") or dict.fromkeys(("throughput", "p50", "tail", "stalls"), "unknown"),
        "resolved": res["stop"] == "resolved",
        # the candidates as given (one equal to the host's own value is measured as the host's arm)
        "search": dict(res, variable=search["variable"], candidates=list(search["values"])),
        "seconds": res.get("seconds"),
    }
