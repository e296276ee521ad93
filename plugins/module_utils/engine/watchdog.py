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
- once its run's lease has expired (or, on the controller's own machine, the controller
  process is known to be gone: same boot and pid namespace), takes the host's flock, checks again, puts back every layer
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
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import RunLock
from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import controller_gone

# Seconds between two looks at the lease.
POLL_S = 2.0
# A watchdog ends after this long whatever it sees (a run is never this long).
MAX_LIFE_S = 2 * 86400
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


def watch(run_id, journal_dir, root="/", poll_s=POLL_S, run_command=None, sleep=time.sleep, clock=time.time):
    """Watch run_id's lease until the run ends (returns ``{"ended": how}``) or its lease expires
    (returns ``{"put_back": [layers]}`` once they are back to their snapshots)."""
    lock = RunLock(root)
    journal = open_journal(journal_dir, root)
    born = clock()
    while clock() - born < MAX_LIFE_S:
        holder = lock.holder()
        if holder is None or holder["run_id"] != run_id:
            return {"ended": "the run no longer holds the host"}
        if holder["expired"] or controller_gone(holder.get("controller")):
            journal.lock(60)
            try:
                holder = lock.holder()
                gone = holder is not None and controller_gone(holder.get("controller"))
                if holder is None or holder["run_id"] != run_id or not (holder["expired"] or gone):
                    continue  # renewed (or gone) meanwhile: look again
                reason = lost_reason(run_id, holder, gone)
                put_back = []
                for layer in journal.layers():
                    engine = Engine(Context(layer, root=root, run_command=run_command), journal)
                    if engine.interrupt(run_id, reason).get("changed"):
                        put_back.append(layer)
                lock.release(run_id, how="watchdog")
                return {"put_back": put_back, "reason": reason}
            finally:
                journal.unlock()
        sleep(poll_s)
    return {"ended": "too old"}


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
    with open(record + ".tmp", "w") as handle:
        json.dump({"pid": proc.pid, "run_id": run_id, "started": time.time()}, handle)
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
