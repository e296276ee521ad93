# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run a program for a bounded time, read its step lines, snapshot it, and diagnose it.

The program runs in its own session and process group and dies with its caller; whatever
happens (an error, a timeout, an interrupt) it is ended: SIGTERM to its process group, then
SIGKILL of the group ``GRACE_S`` later. Nothing else on the host is touched.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import signal
import subprocess
import threading
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.common.process import private_program, start_in_session
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose import snapshot
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.notation import number
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.advice import what_moves
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.profile import derive
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.verdict import decide
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.live import LiveOutputError, parse_step
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.source import program_source

GRACE_S = 5.0
# The warm-up ends early once the program's step times have settled: two consecutive spans of
# SETTLE_SPAN_S, each with at least SETTLE_MIN_STEPS steps, whose median steps agree within
# SETTLE_TOL (so never before two spans after the first step); at the latest after warmup_s.
SETTLE_SPAN_S = 1.0
SETTLE_MIN_STEPS = 5
SETTLE_TOL = 0.03
# The names the messages use for the options; a caller (the role) gives its variables' names.
NAMES = {
    "command": "command",
    "seconds": "seconds",
    "warmup_s": "warmup_s",
    "first_step_timeout": "first_step_timeout",
    "workload": "workload",
}


class DiagnoseError(Exception):
    """The program could not be diagnosed; the message names the variable to fix."""


class Program:
    """One running program: its step lines as they arrive, the tail of its error output."""

    def __init__(self, argv, clock=time.monotonic, cwd=None):
        self.clock = clock
        self.t0 = clock()
        self.steps = []
        self.err = []
        self.broken = None
        self.cond = threading.Condition()
        self.proc = start_in_session(argv, cwd=cwd)
        self.threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._errors, daemon=True),
        ]
        for t in self.threads:
            t.start()

    def now(self):
        return self.clock() - self.t0

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace")
            try:
                value = parse_step(line)
            except LiveOutputError as exc:
                with self.cond:
                    self.broken = str(exc)
                    self.cond.notify_all()
                break
            if value is not None:
                with self.cond:
                    self.steps.append([round(self.now(), 6), round(value, 4)])
                    self.cond.notify_all()

    def _errors(self):
        for raw in self.proc.stderr:
            self.err.append(raw.decode("utf-8", "replace").rstrip())
            del self.err[:-20]

    def ended(self):
        return self.proc.poll() is not None

    def stderr_tail(self, lines=5):
        tail = " | ".join(line for line in self.err[-lines:] if line)
        return (": " + tail[-600:]) if tail else ""

    def stop(self):
        """SIGTERM to the program's process group, SIGKILL of the group GRACE_S later (its
        workers too, also when the leader has already ended)."""
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=GRACE_S)
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=GRACE_S)
        for stream in (self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()


def _ticker(tick, clock, every=1.0):
    """``tick`` (the run's lease check and renewal) at most once per ``every`` s; a no-op without one."""
    last = {"t": None}

    def maybe():
        if tick is None:
            return
        now = clock()
        if last["t"] is None or now - last["t"] >= every:
            last["t"] = now
            tick()

    return maybe


def _sleep_while_alive(prog, seconds, sleep, tick, done=None):
    end = prog.now() + seconds
    while prog.now() < end and not prog.ended() and prog.broken is None:
        if done is not None and done():
            return
        tick()
        sleep(min(0.1, max(0.0, end - prog.now())))


def _median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


def settled(steps, now):
    """Whether the step times have settled at ``now``: the steps (``[t, ms]``, t on the
    program's clock) of the last two spans of SETTLE_SPAN_S each number SETTLE_MIN_STEPS or
    more, and their median steps agree within SETTLE_TOL."""
    last = [ms for t, ms in steps if now - SETTLE_SPAN_S < t <= now]
    before = [ms for t, ms in steps if now - 2 * SETTLE_SPAN_S < t <= now - SETTLE_SPAN_S]
    if len(last) < SETTLE_MIN_STEPS or len(before) < SETTLE_MIN_STEPS:
        return False
    a, b = _median(last), _median(before)
    return b > 0 and abs(a / b - 1.0) <= SETTLE_TOL


def record(
    argv,
    seconds,
    warmup_s,
    first_step_timeout,
    sample_hz=2.0,
    nvml=None,
    names=None,
    clock=time.monotonic,
    sleep=time.sleep,
    cwd=None,
    tick=None,
):
    """Run ``argv``; wait for its first step line, let it warm up until its step times have
    settled (:func:`settled`, checked from two spans after the first step) or for ``warmup_s``,
    whichever comes first, then snapshot it at ``sample_hz`` for ``seconds``. Returns
    ``{"steps", "samples", "first_step_s", "warmup_s", "settled"}`` (times on one clock from
    the program's start; ``warmup_s`` the warm-up it had, ``settled`` whether it ended early).
    Raises DiagnoseError for a program that ends, prints no step line, or stops printing them;
    the program is ended in every case.
    ``tick``: called about once a second while the program runs (a tune's lease: it renews
    it, and raises HostLocked once the run no longer holds the host)."""
    n = dict(NAMES, **(names or {}))
    tick = _ticker(tick, clock)
    try:
        prog = Program(argv, clock=clock, cwd=cwd)
    except OSError as exc:
        raise DiagnoseError("%s: cannot start %s: %s" % (n["command"], argv[0], exc)) from None
    try:
        deadline = prog.now() + first_step_timeout
        while not prog.steps and not prog.ended() and prog.broken is None and prog.now() < deadline:
            tick()
            sleep(0.05)
        if prog.ended():
            prog.threads[0].join(timeout=2.0)  # the lines it printed before it ended
        if not prog.steps:
            _check(prog, n, "before its first step line")
            raise DiagnoseError(
                "%s: the program printed no step line in %d s (%s): it must print one step time per line "
                "(a number of ms, or JSON with step_ms) as each step ends, flushed%s"
                % (n["command"], first_step_timeout, n["first_step_timeout"], prog.stderr_tail())
            )
        first = prog.now()
        calm = {"at": None}

        def done():
            if prog.now() - first >= 2 * SETTLE_SPAN_S and settled(prog.steps, prog.now()):
                calm["at"] = prog.now()
            return calm["at"] is not None

        _sleep_while_alive(prog, warmup_s, sleep, tick, done)
        warm = prog.now() - first
        _check(prog, n, "during its warm-up (%s %s s after its first step)" % (n["warmup_s"], warmup_s))
        samples, period = [], 1.0 / sample_hz
        start = prog.now()
        while True:
            t = prog.now()
            if t - start > seconds:
                break
            tick()
            samples.append(snapshot.take(prog.proc.pid, t, nvml, clock=prog.now, deep=not samples))
            _check(prog, n, "during the profile (%s %s s)" % (n["seconds"], seconds))
            sleep(max(0.0, period - (prog.now() - t)))
        got = [s for s in prog.steps if s[0] >= start]
        if len(got) < 2:
            raise DiagnoseError(
                "%s: the program printed %d step line(s) in the %s s of the profile (%s): it stopped printing steps, "
                "or a step takes longer than the profile" % (n["command"], len(got), seconds, n["seconds"])
            )
        return {
            "steps": list(prog.steps),
            "samples": samples,
            "first_step_s": round(first, 3),
            "warmup_s": round(warm, 3),
            "settled": calm["at"] is not None,
        }
    finally:
        prog.stop()


def _check(prog, n, when):
    if prog.broken is not None:
        raise DiagnoseError(
            "%s: the program printed a step line that is not a step time %s: %s" % (n["command"], when, prog.broken)
        )
    if prog.ended():
        prog.threads[1].join(timeout=1.0)  # its last error lines
        raise DiagnoseError(
            "%s: the program ended (exit code %s) %s: it must run until it is ended%s"
            % (n["command"], prog.proc.returncode, when, prog.stderr_tail())
        )


def builtin_argv(python, path, workload, max_s):
    """The workload program's argv for a built-in workload in live mode (it prints step lines)."""
    return [python, path, json.dumps({"workload": workload, "live": True, "warmup": 5, "max_s": max_s})]


def diagnose(
    command=None,
    workload=None,
    python="python3",
    seconds=20.0,
    warmup_s=5.0,
    first_step_timeout=120.0,
    sample_hz=2.0,
    names=None,
    use_nvml=True,
    thresholds=None,
    tick=None,
):
    """Run the user's ``command`` (an argv) or the built-in ``workload`` in live mode, profile
    it and decide where it is bound. Returns the diagnosis (JSON-able). ``tick``: see record."""
    nvml = snapshot.Nvml.open() if use_nvml else None
    meta = snapshot.host_meta()
    try:
        if command:
            got = record(command, seconds, warmup_s, first_step_timeout, sample_hz, nvml, names, tick=tick)
            program = {"command": list(command)}
        else:
            max_s = first_step_timeout + warmup_s + seconds + 30
            with private_program(program_source(), "stacktune-diagnose-") as (folder, path):
                argv = builtin_argv(python, path, workload, max_s)
                got = record(argv, seconds, warmup_s, first_step_timeout, sample_hz, nvml, names, cwd=folder, tick=tick)
            program = {"workload": workload}
    finally:
        if nvml is not None:
            nvml.close()
    program.update(warmup_s=got["warmup_s"], warmup_settled=got["settled"])
    return assemble(
        got["samples"],
        meta,
        got["steps"],
        program,
        nvml_note=snapshot.Nvml.why_not if nvml is None else None,
        thresholds=thresholds,
        first_step_s=got["first_step_s"],
    )


def assemble(samples, meta, steps, program, nvml_note=None, thresholds=None, first_step_s=None):
    """The diagnosis from recorded snapshots: the profile, the verdict, what can move it."""
    profile = derive(samples, meta["ncpu"], meta["clk_tck"], meta.get("nodes"), steps)
    verdict = decide(profile, thresholds)
    out = dict(verdict)
    out["moves"] = what_moves(verdict["verdict"], profile)
    out["program"] = dict(program, first_step_s=first_step_s)
    out["profile"] = profile
    if nvml_note:
        out["nvml"] = nvml_note
    out["line"] = one_line(out)
    return out


def one_line(diagnosis):
    """The verdict in one line with its deciding evidence."""
    evidence = [e for e in diagnosis.get("evidence", []) if not e.startswith("no GPU readings")][:3]
    steps = (diagnosis.get("profile") or {}).get("steps") or {}
    line = "diagnosis: %s" % diagnosis["title"]
    if steps.get("count"):
        line += " (step p50 %s ms, p99 %s ms)" % (number(steps.get("p50_ms")), number(steps.get("p99_ms")))
    if evidence:
        line += ": " + "; ".join(evidence)
    return line


# (low, high) of each number option; the role's argument spec carries the same ranges
RANGES = {
    "seconds": (2.0, 300.0),
    "warmup_s": (0.0, 600.0),
    "first_step_timeout": (1.0, 3600.0),
    "sample_hz": (0.2, 20.0),
}


def check_options(command, workload, live_workloads, names=None, **numbers):
    """Refuse options that cannot give a diagnosis, naming the variable (DiagnoseError)."""
    n = dict(NAMES, **(names or {}))
    if command and workload:
        raise DiagnoseError("%s and %s: give one program, not both" % (n["command"], n["workload"]))
    if command:
        if not all(isinstance(a, str) and a for a in command):
            raise DiagnoseError(
                "%s must be a list of non-empty strings (an argv, no shell), got %r" % (n["command"], command)
            )
    elif not workload:
        raise DiagnoseError("%s or %s: name the program to diagnose" % (n["command"], n["workload"]))
    elif workload not in live_workloads:
        raise DiagnoseError(
            "%s: %r is not a built-in workload that runs live (%s)"
            % (n["workload"], workload, ", ".join(live_workloads))
        )
    for key, value in numbers.items():
        low, high = RANGES[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise DiagnoseError("%s must be a number from %s to %s, got %r" % (n.get(key, key), low, high, value))
