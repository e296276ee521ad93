# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The workload program's live session: one workload process for a whole live trial.

A part of the assembled workload program (``workloads/source.py``), run by the block runner
(``program.py``). The gate's live trial switches a layer on and off while ONE process of the
workload runs, and judges windows of its steps: no start-up per block, and the noise of a
window is the noise of the steps, not of process start-ups (docs/gate.md, "Live trials").

The process is a built-in workload forked from the runner in live mode, or the user's own
program (``stacktune_bench_command``). Either prints one line per step as it is measured (a
bare number of milliseconds or ``{"step_ms": 12.5}``), flushed, and runs until it is ended:
SIGTERM, then SIGKILL of its process group after a grace period. A reader thread stamps each
line with the runner's monotonic clock as it arrives. A window request takes the steps that
arrive in the next ``seconds``: after a switch of the layer (``fresh``) it first drops what
arrives within ``drop_s`` and then ``drop_steps`` more steps (the step that spanned the switch
and the settling after it); a window of the same arm right after another (``fresh`` false)
starts where the last one ended, so the time between two requests is measured, not lost.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import math
import os
import signal
import subprocess
import threading
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import die_with_parent, libc_prctl


# Seconds a live program is given to end after SIGTERM before its process group is killed.
LIVE_GRACE_S = 10.0
# Bytes of the live program's standard error kept for a failure's message.
ERR_TAIL = 2000


# NVML's total-energy counter is read this often while a live session runs (it updates about
# every 100 ms); a window's energy is the counter's rise between its edges, interpolated.
ENERGY_PERIOD_S = 0.05
# Seconds a window's answer waits for the counter's first reading after its end.
ENERGY_WAIT_S = 0.3


class EnergyMeter(object):
    """NVML's total-energy counter (mJ) of every GPU, read every ``ENERGY_PERIOD_S`` in a
    thread of the runner while a live session runs. ``start()`` returns None where NVML
    (pynvml) cannot be imported or read: energy is then not measured, never zero."""

    def __init__(self, clock=time.monotonic, read=None):
        self.clock = clock
        self.read = read
        self.samples = []  # (time, [mJ per GPU])
        self.cond = threading.Condition()
        self.stopped = False

    @classmethod
    def start(cls, clock=time.monotonic):
        try:
            import pynvml  # noqa: PLC0415 - the GPU host's library, where it is installed

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            if not handles:
                return None
            meter = cls(clock, lambda: [pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles])
            meter.read()
        except Exception:  # noqa: BLE001 - no NVML, no GPU, or no energy counter: not measured
            return None
        thread = threading.Thread(target=meter._loop, name="stacktune-live-energy")
        thread.daemon = True
        thread.start()
        return meter

    def _loop(self):
        while not self.stopped:
            try:
                mj = self.read()
            except Exception:  # noqa: BLE001 - a failed reading leaves a gap, never a zero
                mj = None
            if mj is not None:
                with self.cond:
                    self.samples.append((self.clock(), list(mj)))
                    del self.samples[: max(0, len(self.samples) - 20000)]
                    self.cond.notify_all()
            time.sleep(ENERGY_PERIOD_S)

    def stop(self):
        self.stopped = True

    def at(self, t):
        """The counters at time ``t``, interpolated between the readings around it, or None."""
        with self.cond:
            samples = list(self.samples)
        after = next((i for i, s in enumerate(samples) if s[0] >= t), None)
        if after is None or after == 0:
            return samples[0][1] if samples and samples[0][0] == t else None
        (t0, a), (t1, b) = samples[after - 1], samples[after]
        f = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        return [x + (y - x) * f for x, y in zip(a, b)]

    def between(self, t0, t1, wait_s=ENERGY_WAIT_S):
        """mJ per GPU spent from ``t0`` to ``t1`` (waiting up to ``wait_s`` for a reading after
        ``t1``), or None when the readings do not cover the span."""
        deadline = self.clock() + wait_s
        with self.cond:
            while not (self.samples and self.samples[-1][0] >= t1) and self.clock() < deadline:
                self.cond.wait(ENERGY_PERIOD_S)
        a, b = self.at(t0), self.at(t1)
        if a is None or b is None:
            return None
        return [round(y - x, 1) for x, y in zip(a, b)]


class LiveOutputError(ValueError):
    """A live program printed a step time that cannot be one (its timer is broken)."""


def parse_step(line):
    """The step time in ms that one line of a live program carries, or None for another line.

    Raises LiveOutputError for a step line whose value is not a positive finite number."""
    text = line.strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        if not isinstance(doc, dict) or "step_ms" not in doc:
            return None
        value = doc["step_ms"]
    else:
        try:
            value = float(text)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LiveOutputError("step_ms must be a number, got %r" % (value,))
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise LiveOutputError("a step time must be a positive finite number of ms, got %r" % (value,))
    return value


def _tail(path):
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - ERR_TAIL))
            return handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return ""


def _last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


class LiveSession(object):
    """One live workload process, its steps as they arrive, and the windows taken of them.

    ``spec``: ``{"command": [argv] or None, "args": {program arguments} or None, "env": {},
    "key": text}``; ``fork_builtin(args, env, out_fd, err_fd)`` starts a built-in workload in a
    forked child and returns its pid (the runner's, which knows its own sockets to close).
    """

    def __init__(self, spec, folder, fork_builtin, clock=time.monotonic):
        self.spec = spec
        self.key = spec.get("key")
        self.folder = folder
        self.fork_builtin = fork_builtin
        self.clock = clock
        self.err_path = os.path.join(folder, "live-err")
        self.cond = threading.Condition()
        self.arrivals = []  # (arrival time, step ms)
        self.cursor = 0  # index of the first step no window has taken
        self.cursor_t = None  # arrival time of the last step a window took
        self.ended = False
        self.rc = None
        self.final = None
        self.error = None  # what made the session unusable (bad output)
        self.pid = None
        self.proc = None
        self.started_at = None
        self._reader = None
        self.energy = None  # the EnergyMeter while the session runs, where NVML can be read

    # ------------------------------------------------------------------ start and end
    def start(self):
        read_fd, write_fd = os.pipe()
        err_fd = os.open(self.err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (self.spec.get("env") or {}).items()})
        try:
            if self.spec.get("command"):
                prctl, parent = libc_prctl(), os.getpid()
                self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
                    list(self.spec["command"]),
                    stdin=subprocess.DEVNULL,
                    stdout=write_fd,
                    stderr=err_fd,
                    env=env,
                    close_fds=True,
                    start_new_session=True,
                    preexec_fn=lambda: die_with_parent(prctl, parent),  # noqa: PLW1509 - no lock is taken in it
                )
                self.pid = self.proc.pid
            else:
                self.pid = self.fork_builtin(self.spec.get("args") or {}, self.spec.get("env") or {}, write_fd, err_fd)
        finally:
            os.close(write_fd)
            os.close(err_fd)
        self.started_at = self.clock()
        self.energy = EnergyMeter.start(self.clock) if self.spec.get("energy", True) else None
        self._reader = threading.Thread(target=self._read, args=(read_fd,), name="stacktune-live-reader")
        self._reader.daemon = True
        self._reader.start()

    def _read(self, read_fd):
        with os.fdopen(read_fd, "r", errors="replace") as stream:
            for line in stream:
                try:
                    value = parse_step(line)
                except LiveOutputError as exc:
                    with self.cond:
                        self.error = str(exc)
                        self.cond.notify_all()
                    self.kill()
                    break
                if value is None:
                    text = line.strip()
                    if text.startswith("{") and ('"samples_ms"' in text or '"error"' in text):
                        with contextlib.suppress(ValueError):
                            self.final = json.loads(text)
                    continue
                with self.cond:
                    self.arrivals.append((self.clock(), value))
                    self.cond.notify_all()
        rc = self._wait()
        with self.cond:
            self.rc, self.ended = rc, True
            self.cond.notify_all()

    def _wait(self):
        if self.proc is not None:
            return self.proc.wait()
        try:
            _pid, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            return None
        return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8

    def alive(self):
        with self.cond:
            return not self.ended and self.error is None

    def kill(self):
        with contextlib.suppress(OSError, TypeError):
            os.killpg(self.pid, signal.SIGKILL)

    def stop(self, grace=LIVE_GRACE_S):
        """End the program: SIGTERM, then SIGKILL of its group after ``grace`` s; what it said."""
        if not self.ended:
            with contextlib.suppress(OSError, TypeError):
                os.kill(self.pid, signal.SIGTERM)
            deadline = self.clock() + grace
            with self.cond:
                while not self.ended and self.clock() < deadline:
                    self.cond.wait(0.2)
        if self.energy is not None:
            self.energy.stop()
        killed = not self.ended
        if killed:
            self.kill()
        if self._reader is not None:
            self._reader.join(15)
        with contextlib.suppress(OSError, TypeError):
            os.killpg(self.pid, signal.SIGKILL)  # what it left behind in its group
        return {"rc": self.rc, "killed": killed, "steps": len(self.arrivals), "final": self.final}

    # ------------------------------------------------------------------ windows
    def failure(self):
        """The session's failure as the bench module reports a block's, or None."""
        if self.error is not None:
            return {"failure": "output", "error": "the live program's output: %s" % self.error}
        if self.ended:
            err = _tail(self.err_path)
            final = self.final if isinstance(self.final, dict) else {}
            words = final.get("error") or _last_line(err)
            how = "exit status %s" % self.rc if self.rc is None or self.rc >= 0 else "killed by signal %d" % -self.rc
            return {
                "failure": "error" if final.get("error") else "exit",
                "error": ("%s (%s)" % (words, how)) if words else "it ended (%s)" % how,
                "stderr_tail": err[-1000:],
                "rc": self.rc,
            }
        return None

    def wait_first(self, timeout, gone=None):
        """Wait until the program prints its first step; None when it did, else its failure."""
        deadline = self.clock() + timeout
        with self.cond:
            while not self.arrivals:
                if self.ended or self.error is not None:
                    return self.failure()
                if self.clock() > deadline:
                    self.kill()
                    return {"failure": "hang", "error": "no step line within %d s of its start" % timeout}
                if gone is not None and gone():
                    return {"failure": "gone", "error": "the request was given up"}
                self.cond.wait(0.2)
        return None

    def window(self, fresh, seconds, drop_s=0.0, drop_steps=0, min_steps=3, hang_s=60.0, gone=None):
        """The steps of one window (see the module docstring), or a failure dict."""
        now = self.clock()
        with self.cond:
            if fresh or self.cursor_t is None:
                begin_t = now + float(drop_s)
                first = len(self.arrivals)
                while True:
                    while first < len(self.arrivals) and self.arrivals[first][0] < begin_t:
                        first += 1
                    if first < len(self.arrivals) or self.clock() >= begin_t:
                        break
                    bad = self._waiting(gone, hang_s)
                    if bad:
                        return bad
                dropped_until = first + int(drop_steps)
                while len(self.arrivals) < dropped_until + 1:
                    bad = self._waiting(gone, hang_s)
                    if bad:
                        return bad
                dropped = dropped_until - self.cursor
                start = dropped_until
                start_t = self.arrivals[dropped_until - 1][0] if dropped_until > 0 else begin_t
                start_t = max(start_t, begin_t)
            else:
                start, start_t, dropped = self.cursor, self.cursor_t, 0
            end_t = start_t + float(seconds)
            while True:
                n = len(self.arrivals) - start
                if n >= min_steps and self.arrivals[-1][0] >= end_t:
                    break
                bad = self._waiting(gone, hang_s)
                if bad:
                    return bad
            stop = start
            while stop < len(self.arrivals) and (self.arrivals[stop][0] < end_t or stop - start < min_steps):
                stop += 1
            steps = [ms for _t, ms in self.arrivals[start:stop]]
            self.cursor, self.cursor_t = stop, self.arrivals[stop - 1][0]
            end_t = self.cursor_t
        return {
            "samples_ms": steps,
            "start_t": start_t,
            "end_t": end_t,
            "span_s": round(end_t - start_t, 4),
            "dropped": dropped,
            "asked_t": now,
            # NVML's counter per GPU between the window's edges; None: not measured (never zero)
            "energy_mj": self.energy.between(start_t, end_t) if self.energy is not None else None,
        }

    def _waiting(self, gone, hang_s):
        """One wait for the next step inside a window; a failure dict when there will be none."""
        if self.error is not None or self.ended:
            return self.failure() or {"failure": "exit", "error": "it ended"}
        last = self.arrivals[-1][0] if self.arrivals else self.started_at
        if self.clock() - last > hang_s:
            self.kill()
            return {"failure": "hang", "error": "no step for %d s" % hang_s}
        if gone is not None and gone():
            return {"failure": "gone", "error": "the request was given up"}
        self.cond.wait(0.2)
        return None
