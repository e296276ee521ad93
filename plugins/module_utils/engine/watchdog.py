# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host's watch over a tune run: when the run's controller is cut off (its machine powered
off, the network gone: nothing on this host sees a signal), the layers the run left undecided
are put back to their snapshots once its lease expires, instead of staying applied, or
switched off mid-trial, until the next run.

``run_lock`` starts one watchdog per tune run (``watch=true``) when it takes the host: a small
process of its own session, from a copy of the module's own code (the module's payload is
removed when the module returns). It reads the host's lease every ``POLL_S`` seconds and:

- ends as soon as the lease is no longer its run's (released at the end of the run, whether it
  succeeded, failed or was interrupted; taken over; broken by hand);
- holds the host's ``run.hold`` flock from start to end (``RunLock.hold``): while it runs, no
  other run takes the host, whatever the clocks say or the lease record holds;
- never ends a lease whose controller process runs on this machine (same boot and pid
  namespace), whatever the lease's expiry says;
- once its run's lease has expired (judged on the boot clock, which a wall-clock step does not
  move), or, on the controller's own machine, the controller
  process is known to be gone, takes the host's flock, checks again, puts back every layer
  of the run that is still undecided (``Engine.interrupt``: applying, applied or switched off,
  the journal saying why), and releases the lease (its history says ``watchdog``). A controller that comes back
  then finds its lease gone and stops without touching the host (``LeaseLost``).

The block runner and a live trial's workload process end by themselves on the same expiry.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.trust import ensure_private_dir
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import rooted
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, run_argv
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import (
    RunLock,
    UnreadableLock,
    controller_alive_here,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import controller_gone

# Seconds between two looks at the lease.
POLL_S = 2.0
# A watchdog ends after this long whatever it sees (a run is never this long).
MAX_LIFE_S = 2 * 86400
# How long a new watchdog waits for the previous run's watchdog to let go of run.hold.
HOLD_WAIT_S = 30.0
# Where the watchdogs keep their code copy and their pid record, under the journal directory.
WATCH_DIR = "watchdog"
BOOT = (
    "import json, sys; sys.path.insert(0, sys.argv[1]); "
    "from ansible_collections.stacktune.gpu.plugins.module_utils.engine.watchdog import main; "
    "sys.exit(main(json.loads(sys.argv[2])))"
)


def lost_reason(run_id, holder, gone=False):
    if gone and not holder.get("expired"):
        why = "its controller process (pid %s) is gone from this machine" % (holder.get("controller") or {}).get("pid")
    else:
        why = "its lease expired at %s and nothing renewed it" % (holder.get("expires") or "?")
    return "interrupted: the controller was lost: run %s: %s; the host put the layer back by itself" % (run_id, why)


def stopped_note(run_id, entry, put_back, journal):
    """What a run stopped without its controller left, in words the next run shows: the layers
    put back now, every layer's state in the journal, and what to run."""
    try:
        states = ", ".join("%s %s" % (row["layer"], row["state"]) for row in journal.summary()) or "none"
    except (OSError, IOError, ValueError) as exc:
        states = "unknown (%s)" % exc
    return (
        "%s run %s was stopped before it ended: put back by the host now: %s; layers in the journal: %s; run "
        "playbooks/%s.yml again to finish"
        % (
            entry,
            run_id,
            ", ".join(put_back) or "nothing",
            states,
            entry,
        )
    )


def _ends_lease(holder, run_id):
    """(end it, controller gone): whether the watchdog ends run_id's lease now."""
    if holder is None or holder["run_id"] != run_id:
        return False, False
    controller = holder.get("controller")
    if controller_alive_here(controller):
        return False, False  # its controller works on this machine: never ended for a clock
    gone = controller_gone(controller)
    return holder["expired"] or gone, gone


def watch(
    run_id, journal_dir, root="/", poll_s=POLL_S, run_command=None, sleep=time.sleep, clock=time.monotonic, lock=None
):
    """Watch run_id's lease until the run ends (returns ``{"ended": how}``) or its lease expires
    (returns ``{"put_back": [layers]}`` once they are back to their snapshots). The run's
    ``run.hold`` flock is held all along."""
    lock = lock or RunLock(root)
    journal = open_journal(journal_dir, root)
    born = clock()
    lock.hold(HOLD_WAIT_S, run_id)
    try:
        while clock() - born < MAX_LIFE_S:
            try:
                holder = lock.holder()
            except UnreadableLock:
                sleep(poll_s)  # a torn record: keep holding the host (no run takes it meanwhile)
                continue
            if holder is None or holder["run_id"] != run_id:
                return {"ended": "the run no longer holds the host"}
            if _ends_lease(holder, run_id)[0]:
                journal.lock(60)
                try:
                    holder = lock.holder()
                    end, gone = _ends_lease(holder, run_id)
                    if not end:
                        continue  # renewed (or gone) meanwhile: look again
                    reason = lost_reason(run_id, holder, gone)
                    put_back = []
                    for layer in journal.layers():
                        engine = Engine(Context(layer, root=root, run_command=run_command), journal)
                        if engine.interrupt(run_id, reason).get("changed"):
                            put_back.append(layer)
                    note = stopped_note(run_id, holder.get("entry") or "tune", put_back, journal)
                    lock.release(run_id, how="watchdog", note=note)
                    return {"put_back": put_back, "reason": reason, "note": note}
                finally:
                    journal.unlock()
            sleep(poll_s)
        return {"ended": "too old"}
    finally:
        lock.unhold()


def _alive(record_path, clock=time.time):
    """Whether the watchdog that wrote ``record_path`` still runs: its pid runs (not a zombie)
    and is a watchdog, or was started moments ago (a process that has just started may not
    show its command line yet)."""
    try:
        with open(record_path) as handle:
            record = json.load(handle)
        pid = int(record["pid"])
        with open("/proc/%d/stat" % pid) as handle:
            if handle.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
                return False
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            if b"stacktune.gpu.plugins.module_utils.engine.watchdog" in handle.read():
                return True
        return clock() - float(record.get("started") or 0) < 10.0
    except (IOError, OSError, ValueError, KeyError, TypeError, IndexError):
        return False


def _code_root():
    """The directory or zip file that holds ``ansible_collections`` for this process."""
    here = os.path.abspath(__file__)
    return here.split(os.sep + "ansible_collections" + os.sep, 1)[0]


def spawn(run_id, journal_dir, root="/", python=None):
    """Start the watchdog of run_id unless one runs; returns its pid, or None when one ran."""
    ensure_private_dir(rooted(root, journal_dir))  # the journal directory too is private to root
    folder = os.path.join(rooted(root, journal_dir), WATCH_DIR)
    ensure_private_dir(folder)
    record = os.path.join(folder, "%s.json" % run_id)
    if _alive(record):
        return None
    code = _code_root()
    if os.path.isfile(code):  # the module's payload zip, removed when the module returns: keep a copy
        copy = os.path.join(folder, "%s.zip" % run_id)
        shutil.copyfile(code, copy)
        os.chmod(copy, 0o600)
        code = copy
    args = {"run_id": run_id, "journal_dir": journal_dir, "root": root, "record": record, "code": code}
    with open(os.devnull, "rb") as devnull_in, open(os.devnull, "wb") as devnull_out:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [python or sys.executable, "-c", BOOT, code, json.dumps(args)],
            stdin=devnull_in,
            stdout=devnull_out,
            stderr=devnull_out,
            close_fds=True,
            start_new_session=True,
            cwd="/",
        )
    fd = os.open(record + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"pid": proc.pid, "run_id": run_id, "started": time.time()}, handle)
    os.chmod(record + ".tmp", 0o600)
    os.rename(record + ".tmp", record)
    return proc.pid


def main(args):
    """The watchdog process (``BOOT``): watch, then remove its code copy and its record."""
    try:
        watch(args["run_id"], args["journal_dir"], args.get("root") or "/", run_command=run_argv)
    finally:
        for path in (args.get("record"), args.get("code") if str(args.get("code", "")).endswith(".zip") else None):
            if path:
                with contextlib.suppress(OSError):
                    os.unlink(path)
    return 0
