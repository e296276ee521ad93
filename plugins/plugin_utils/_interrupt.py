# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a measurement that a user or a scheduler stops ends cleanly.

Ansible runs each task in a worker process of its own session. On SIGINT or SIGTERM the
controller forwards the signal to the workers, whose handler kills the worker at once; on
SIGHUP or SIGKILL of the controller the workers are not told at all and run on as orphans.
While the gate measures a layer (``Guard``), the gate's worker turns all of these into an
``Interrupted`` exception instead: SIGINT, SIGTERM, SIGHUP, and the death of its
controller process (its parent changes). A switch of the layer that has begun is finished
first (``Guard.critical``), then the gate puts the layer back to its snapshot, releases
the host and leaves a record here for the controller to print (``write_record``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import signal
import tempfile
import threading
import time

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ORPHAN_SIGNAL = signal.SIGUSR1  # sent to its own main thread by the watcher of the parent
WATCH_EVERY_S = 0.5


class Interrupted(Exception):
    """The run was stopped: ``why`` says by what (a signal's name, or the controller's death)."""

    def __init__(self, why, orphaned=False, held=False):
        super().__init__(why)
        self.why = why
        self.orphaned = orphaned
        self.held = held  # it arrived during a critical part, which was finished first


class Guard(object):
    """While active, SIGINT/SIGTERM/SIGHUP and the controller's death raise Interrupted.

    The first one raises (or, inside ``critical()``, is held until the critical part ends);
    any later one is ignored, so the clean-up that follows is never cut short.
    """

    def __init__(self, parent=None):
        self.parent = os.getppid() if parent is None else parent
        self.why = None
        self.orphaned = False
        self.arrived_held = False
        self._held = 0
        self._previous = {}
        self._stop = threading.Event()
        self._watcher = None

    # ------------------------------------------------------------ signals
    def _handler(self, signum, _frame):
        if self.why is not None:
            return  # already stopping: finish the clean-up
        if signum == ORPHAN_SIGNAL:
            self.orphaned = True
            self.why = "the controller process (pid %d) is gone" % self.parent
        else:
            self.why = signal.Signals(signum).name
        self.arrived_held = bool(self._held)
        if not self._held:
            raise Interrupted(self.why, self.orphaned)

    def _watch(self, main_ident):
        while not self._stop.wait(WATCH_EVERY_S):
            if os.getppid() != self.parent:
                signal.pthread_kill(main_ident, ORPHAN_SIGNAL)
                return

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self  # signals reach only the main thread; nothing to guard here
        for signum in SIGNALS + (ORPHAN_SIGNAL,):
            self._previous[signum] = signal.signal(signum, self._handler)
        self._watcher = threading.Thread(target=self._watch, args=(threading.main_thread().ident,), daemon=True)
        self._watcher.start()
        return self

    def __exit__(self, *_exc):
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(2 * WATCH_EVERY_S)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        return False

    # ------------------------------------------------------------ use
    def check(self):
        """Raise Interrupted when the run was stopped (or the controller died) meanwhile."""
        if self.why is None and os.getppid() != self.parent:
            self.orphaned = True
            self.why = "the controller process (pid %d) is gone" % self.parent
        if self.why is not None:
            raise Interrupted(self.why, self.orphaned, self.arrived_held)

    @contextlib.contextmanager
    def critical(self):
        """A part that must not be cut in the middle (a switch of the layer): a signal that
        arrives during it is held, and raised once it has ended."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        self.check()


def record_dir(controller_pid):
    """Where the workers of one ansible-playbook process leave their interruption records."""
    return os.path.join(tempfile.gettempdir(), "stacktune-%d" % os.getuid(), "interrupted-%d" % controller_pid)


def write_record(controller_pid, host, record):
    """Leave one host's interruption record for the controller (best effort)."""
    directory = record_dir(controller_pid)
    try:
        os.makedirs(directory, 0o700, exist_ok=True)
        path = os.path.join(directory, "%s.json" % host.replace(os.sep, "_"))
        with open(path + ".tmp", "w") as handle:
            json.dump(dict(record, host=host, time=time.time()), handle, sort_keys=True)
        os.rename(path + ".tmp", path)
    except (IOError, OSError):
        pass


def read_records(controller_pid):
    """Every host's record left for this controller process, by host name."""
    directory = record_dir(controller_pid)
    out = {}
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name)) as handle:
                record = json.load(handle)
        except (IOError, OSError, ValueError):
            continue
        out[record.get("host", name[:-5])] = record
    return out


# ---------------------------------------------------------------- the controller's side

CONTROLLER_WAIT_S = 120.0  # how long the controller waits for its workers' clean-up


def _write(text):
    with contextlib.suppress(OSError):  # the terminal is gone (SIGHUP)
        os.write(1, text.encode("utf-8", "replace"))


def summary_lines(signame, records):
    """What the controller prints once its workers have cleaned up after a signal."""
    lines = ["stacktune: stopped by %s. What each host was left in:" % signame]
    for host, record in sorted(records.items()):
        lines.append(
            "  %s: %s was being measured (%s). %s."
            % (host, record.get("layer"), record.get("why"), record.get("layer_outcome"))
        )
        kept = record.get("kept") or []
        lines.append(
            "    Kept earlier in this run: %s. The lock is %s. Undo the rest: %s"
            % (", ".join(kept) if kept else "nothing", record.get("lock"), record.get("undo"))
        )
    lines.append(
        "  Any other host was stopped between measurements: what it was applying is put back by the "
        "next run from this controller, which takes its lock over (or undo it: make rollback, or "
        "playbooks/rollback.yml for your inventory, with -e stacktune_lock_break=true)."
    )
    return lines


def between_lines(signame, task, hosts):
    """What the controller prints after a signal when no host was measuring a layer but the run
    had taken ``hosts`` (the task it stopped in: ``task``)."""
    return [
        'stacktune: stopped by %s during "%s"; no layer was being measured. Taken by this run: %s.'
        % (signame, task or "a task", ", ".join(sorted(hosts))),
        "  Each host's watchdog ends the run there: it puts back a layer applied and not yet decided "
        "and frees the lock, at once where the controller ran on the host itself, elsewhere once the "
        "lease runs out (stacktune_lock_ttl), unless the next run from this controller takes the lock "
        "over first. Layers already decided stay; undo them with make rollback (playbooks/rollback.yml).",
    ]


def install_controller_handlers(context=None):
    """In the ansible-playbook process: on SIGINT, SIGTERM or SIGHUP, pass the signal to the
    workers, wait for those that measure a layer to put it back (``CONTROLLER_WAIT_S`` at
    most), print what each host was left in, then stop the way Ansible does. ``context``: a
    callable returning ``(task, hosts)``, the task running and the hosts the run had taken
    (the callback tracks them): with no host measuring, :func:`between_lines` says what
    happens to those."""
    import multiprocessing  # pylint: disable=import-outside-toplevel

    state = {"busy": False}

    def handler(signum, frame, previous):
        if state["busy"]:
            return
        state["busy"] = True
        workers = [w for w in multiprocessing.active_children() if w.pid]
        for worker in workers:
            with contextlib.suppress(OSError):
                os.kill(worker.pid, signum)
        deadline = time.time() + CONTROLLER_WAIT_S
        for worker in workers:
            worker.join(max(0.0, deadline - time.time()))
        records = read_records(os.getpid())
        if records:
            _write("\n".join(summary_lines(signal.Signals(signum).name, records)) + "\n")
        elif context is not None:
            task, hosts = context()
            if hosts:
                _write("\n".join(between_lines(signal.Signals(signum).name, task, hosts)) + "\n")
        with contextlib.suppress(OSError):
            for name in os.listdir(record_dir(os.getpid())):
                os.unlink(os.path.join(record_dir(os.getpid()), name))
            os.rmdir(record_dir(os.getpid()))
        state["busy"] = False
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    for signum in SIGNALS:
        previous = signal.getsignal(signum)
        signal.signal(signum, lambda s, f, previous=previous: handler(s, f, previous))
