# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host's locks, in /var/lib/stacktune whatever the journal directory, so that two runs
with two journal directories still exclude each other:

- ``lock``: an advisory flock held while a module works, so two module calls never
  interleave (``HostFlock``, ``host_flock``; ``Journal.lock`` takes it);
- ``run.lock``: the lease a whole run holds from start to end (``RunLock``), renewed by
  every engine write and every measured block (``lease_ticker``).

Both are read and written like the journal: never through a link, 0600 in a 0700 directory
(``engine/trust.py``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import fcntl
import json
import os
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import atomic_write, rooted
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.trust import (
    UntrustedJournal,
    check_trusted,
    ensure_private_dir,
    read_trusted,
    trusted_dir,
)

HOST_DIR = "/var/lib/stacktune"
# The end of every refusal; the run_lock action replaces it with the exact command.
LOCK_BREAK_HINT = "run again with -e stacktune_lock_break=true"


class LockTimeout(Exception):
    """Another stacktune module call holds the host's flock."""


class HostLocked(LockTimeout):
    """Another run holds the host's run lock; ``holder`` is its lease."""

    def __init__(self, msg, holder=None):
        super().__init__(msg)
        self.holder = holder


class LeaseLost(HostLocked):
    """This run's lease was released, broken or taken over: it must not touch the host again."""


def host_dir(root="/"):
    """Where the host's locks live (under an alternative root for tests)."""
    return rooted(root or "/", HOST_DIR)


class HostFlock(object):
    """The host's flock, ``/var/lib/stacktune/lock`` (under ``root``): held while a module
    call works, so two module calls never interleave."""

    def __init__(self, root="/"):
        self.directory = host_dir(root)
        self.path = os.path.join(self.directory, "lock")
        self._fd = None

    def acquire(self, timeout):
        """Take the flock, waiting up to timeout seconds (LockTimeout after that)."""
        ensure_private_dir(self.directory)
        path = self.path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            check_trusted(path, os.fstat(fd))
        except UntrustedJournal:
            os.close(fd)
            raise
        deadline = time.time() + max(0, timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if time.time() >= deadline:
                    os.close(fd)
                    raise LockTimeout("another stacktune module holds %s (waited %ss)" % (path, timeout)) from None
                time.sleep(0.2)
        self._fd = fd

    def release(self):
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


@contextlib.contextmanager
def host_flock(timeout, root="/"):
    """The host's flock (what every module call that writes holds) for a with-block."""
    flock = HostFlock(root)
    flock.acquire(timeout)
    try:
        yield
    finally:
        flock.release()


def _iso(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _how(ended):
    """How a lease ended, in words (a ``past`` record of RunLock)."""
    by, when = ended.get("by"), ended.get("time")
    return {
        "released": "it released the host at %s" % when,
        "taken_over": "run %s took the host over at %s, its controller being gone" % (by, when),
        "broken": "run %s broke its lease at %s (stacktune_lock_break)" % (by, when),
        "expired": "its lease ran out and run %s took the host at %s" % (by, when),
        "watchdog": "its lease ran out at %s with nobody renewing it, and the host put its undecided layers back"
        % when,
    }.get(ended.get("ended"), "its lease ended at %s" % when)


def describe_holder(holder):
    """One line naming a lease's run, who holds it from where, and until when."""
    controller = holder.get("controller") or {}
    parts = ["owner %s" % (holder.get("owner") or "unknown")]
    if controller.get("host"):
        parts.append("controller %s pid %s" % (controller["host"], controller.get("pid", "?")))
    if holder.get("entry"):
        parts.append("%s.yml" % holder["entry"])
    return "run %s (%s) since %s, lease until %s" % (
        holder.get("run_id"),
        ", ".join(parts),
        holder.get("since"),
        holder.get("expires"),
    )


class RunLock(object):
    """The lease a whole run holds on a host: ``/var/lib/stacktune/run.lock`` (under ``root``).

    There is one per host, whatever the journal directory, so two runs never share a host
    by using two journals. The file holds the current holder (run id, owner, the controller
    host, user and pid, the entry point, the lease's end) and ``past``: how the last leases
    ended (released, taken over, broken). A run whose lease ended is refused every later
    write (LeaseLost), so a worker that outlived its controller stops without touching the
    host. Callers hold the host's flock (``host_flock``, ``Journal.lock``) around every method.
    """

    PAST_KEEP = 20

    def __init__(self, root="/"):
        self.directory = host_dir(root)
        self.path = os.path.join(self.directory, "run.lock")

    # ---------------------------------------------------------------- file
    def _read(self):
        # the lock decides who may change the host: read like the journal's records, never
        # through a link and only when no other user could have written it
        raw = read_trusted(self.path) if trusted_dir(self.directory) else None
        if raw is None:
            return None, []
        try:
            data = json.loads(raw.decode("utf-8"))
        except ValueError:
            return None, []  # a torn file is no lease (writes are atomic; only a foreign file is torn)
        if not isinstance(data, dict):
            return None, []
        if "run_id" in data:  # the layout before ``past`` was kept
            return data, []
        holder = data.get("holder") if isinstance(data.get("holder"), dict) else None
        past = [p for p in data.get("past") or [] if isinstance(p, dict)]
        return holder, past

    def _write(self, holder, past):
        ensure_private_dir(self.directory)
        data = {"schema": 2, "holder": holder, "past": past[-self.PAST_KEEP :]}
        atomic_write(self.path, json.dumps(data, sort_keys=True).encode("utf-8"), mode=0o600)

    @staticmethod
    def _live(raw, now=None):
        """A lease as read, with ``expired`` computed; None when there is none."""
        if raw is None or "run_id" not in raw:
            return None
        holder = dict(raw)
        holder["expired"] = float(holder.get("expires_ts", 0)) <= (now if now is not None else time.time())
        return holder

    def holder(self, now=None):
        """The current holder (a dict with ``expired``), or None when free."""
        return self._live(self._read()[0], now)

    def past(self):
        return self._read()[1]

    describe = staticmethod(describe_holder)

    def _refusal(self, holder):
        return HostLocked(
            "the host is locked by stacktune %s (%s); wait for that run to finish, or, if it is gone, %s"
            % (describe_holder(holder), self.path, LOCK_BREAK_HINT),
            holder=holder,
        )

    # ---------------------------------------------------------------- checks
    def check(self, run_id):
        """Raise HostLocked when another run holds a live lease; return the holder."""
        holder = self.holder()
        if holder and not holder["expired"] and holder["run_id"] != run_id:
            raise self._refusal(holder)
        return holder

    def ended(self, run_id):
        """How the lease of run_id ended (the last ``past`` record of it), or None."""
        for record in reversed(self.past()):
            if record.get("run_id") == run_id:
                return record
        return None

    # ---------------------------------------------------------------- changes
    def take(self, run_id, owner, ttl, force=False, check_mode=False, takeover=None, controller=None, entry=None):
        """Take or renew the lease. Returns (changed, previous holder). Raises HostLocked.

        ``force`` breaks another run's live lease; ``takeover`` (a run id) takes over that
        run's lease only, because its controller process is known to be gone.
        """
        raw, past = self._read()
        holder = self._live(raw)
        other = holder is not None and holder["run_id"] != run_id
        if other and not holder["expired"] and not force and takeover != holder["run_id"]:
            raise self._refusal(holder)
        now = time.time()
        if other:
            how = "expired" if holder["expired"] else ("taken_over" if takeover == holder["run_id"] else "broken")
            past.append({"run_id": holder["run_id"], "ended": how, "by": run_id, "time": _iso(now)})
        kept = holder if holder is not None and not other else {}  # a renewal keeps who and where
        record = {
            "run_id": run_id,
            "owner": owner if owner is not None else kept.get("owner"),
            "controller": controller if controller is not None else kept.get("controller"),
            "entry": entry if entry is not None else kept.get("entry"),
            "since": kept.get("since") or _iso(now),
            "expires": _iso(now + ttl),
            "expires_ts": now + ttl,
            "ttl": ttl,
        }
        if not check_mode:
            self._write(record, past)
        return True, holder

    def renew(self, run_id, ttl=None):
        """Extend run_id's lease (every engine write and every measured block of a run does).

        Raises LeaseLost when run_id held the host and its lease was released, broken or
        taken over since, and HostLocked when another run holds it now. A run id that never
        held the host (a direct module call) may write while no other run holds it.
        """
        holder = self.holder()
        if holder is not None and holder["run_id"] == run_id:
            self.take(run_id, None, float(ttl or holder.get("ttl") or 300))
            return holder
        ended = self.ended(run_id)
        if ended is not None:
            raise LeaseLost(
                "run %s no longer holds the host: %s; it stops without touching the host" % (run_id, _how(ended)),
                holder=holder,
            )
        if holder is not None and not holder["expired"]:
            raise self._refusal(holder)
        return holder

    def release(self, run_id, force=False, check_mode=False, how=None):
        """Release the lease. Returns (released, holder found); another run's live lease stays.
        ``how`` names the end in the lease's history (``expired``: put back by the host's watchdog)."""
        holder = self.holder()
        if holder is None:
            return False, None
        if holder["run_id"] != run_id and not force and not holder["expired"]:
            # another run's live lease: leave it alone (a refused run's cleanup lands here)
            return False, holder
        if not check_mode:
            past = self.past()
            if how is None:
                how = "released" if holder["run_id"] == run_id else ("expired" if holder["expired"] else "broken")
            past.append({"run_id": holder["run_id"], "ended": how, "by": run_id, "time": _iso(time.time())})
            self._write(None, past)
        return True, holder


def lease_ticker(run_id, root="/", renew_every=20.0, flock_timeout=10):
    """A function for a long program's run_process ``tick``: it checks on every call (a read,
    no lock) that run_id still holds the host, and renews its lease every ``renew_every`` s.

    It raises HostLocked (LeaseLost) as soon as the run no longer holds the host, so a block
    whose run was stopped or taken over ends within one tick. When another module call holds
    the host's flock, a renewal waits for the next tick.
    """
    lock = RunLock(root)
    last = {"renewed": None}

    def tick():
        holder = lock.holder()
        due = last["renewed"] is None or time.monotonic() - last["renewed"] >= renew_every
        if holder is not None and holder["run_id"] == run_id and not due:
            return
        try:
            with host_flock(flock_timeout, root):
                lock.renew(run_id)
            last["renewed"] = time.monotonic()
        except HostLocked:
            raise
        except LockTimeout:
            pass

    return tick
