# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host's locks, in /var/lib/stacktune whatever the journal directory, so that two runs
with two journal directories still exclude each other:

- ``lock``: an advisory flock held while a module works, so two module calls never
  interleave (``HostFlock``, ``host_flock``; ``Journal.lock`` takes it);
- ``run.lock``: the lease a whole run holds from start to end (``RunLock``), renewed by
  every engine write and every measured block (``lease_ticker``);
- ``run.hold``: a flock the run's watchdog holds for the run's whole length (``RunLock.hold``):
  while a process holds it, no other run takes the host, whatever the clocks say or the lease
  record holds.

A lease's expiry is judged on the boot clock (``CLOCK_BOOTTIME``: it never jumps when the wall
clock is stepped) while the host runs the boot that wrote it, and on wall time only across a
reboot; a renewal that sees the wall clock jump records the step in the lease. A lease record
that cannot be read is reported, naming the file, never read as a free host; an empty one is a
released lease (a release that found no free space truncates the record).

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

from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import (
    boot_clock,
    boot_id,
    lease_expired,
    pid_gone,
    pid_namespace,
    pid_stopped,
)
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
# A wall clock that moved this many seconds more (or less) than the boot clock between two
# renewals was stepped (NTP, a resumed VM); the lease records the step.
STEP_S = 5.0
# How long a take waits for the watchdog of a run that has just released the host to end.
HOLD_WAIT_S = 5.0


class Clock(object):
    """The clocks a lease is judged on: ``wall`` (time.time), ``boot`` (CLOCK_BOOTTIME) and
    ``boot_id`` (which boot ``boot`` counts from). Tests give RunLock a stand-in."""

    wall = staticmethod(time.time)
    boot = staticmethod(boot_clock)
    boot_id = staticmethod(boot_id)


class LockTimeout(Exception):
    """Another stacktune module call holds the host's flock."""


class HostLocked(LockTimeout):
    """Another run holds the host's run lock; ``holder`` is its lease."""

    def __init__(self, msg, holder=None):
        super().__init__(msg)
        self.holder = holder


class LeaseLost(HostLocked):
    """This run's lease was released, broken or taken over: it must not touch the host again."""


class LeaseRenewalFailed(Exception):
    """A measured block could not renew its run's lease (a full disk): it stops, saying why."""


class UnreadableLock(HostLocked):
    """The lease record cannot be read: the host may be held, so it is refused, naming the file."""


def controller_alive_here(controller):
    """True when a lease's controller process is known to run on this machine (same boot and
    pid namespace, its pid still the process that started, not stopped): its lease is never
    ended for it. A stopped controller (SIGSTOP, a frozen process group) renews nothing: its
    lease ends at its TTL like a remote controller's."""
    if not isinstance(controller, dict) or not controller.get("pid"):
        return False
    if not controller.get("boot_id") or controller.get("boot_id") != boot_id():
        return False
    if not controller.get("pid_ns") or controller.get("pid_ns") != pid_namespace():
        return False
    return not pid_gone(controller) and not pid_stopped(controller)


def same_controller(a, b):
    """Whether two controller records name one process (a missing record matches any)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return True
    keys = [k for k in ("host", "boot_id", "pid", "pid_start") if a.get(k) is not None and b.get(k) is not None]
    return all(a[k] == b[k] for k in keys)


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
        deadline = time.monotonic() + max(0, timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if time.monotonic() >= deadline:
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
        "watchdog": "its lease ran out at %s with nobody renewing it, and the host put its undecided layers back" % when
        + (" (%s)" % ended["note"] if ended.get("note") else ""),
    }.get(ended.get("ended"), "its lease ended at %s" % when)


def describe_holder(holder):
    """One line naming a lease's run, who holds it from where, and until when."""
    controller = holder.get("controller") or {}
    parts = ["owner %s" % (holder.get("owner") or "unknown")]
    if controller.get("host"):
        parts.append("controller %s pid %s" % (controller["host"], controller.get("pid", "?")))
    if holder.get("entry"):
        parts.append("%s.yml" % holder["entry"])
    line = "run %s (%s) since %s, lease until %s" % (
        holder.get("run_id"),
        ", ".join(parts),
        holder.get("since"),
        holder.get("expires"),
    )
    step = holder.get("clock_step")
    if isinstance(step, dict):
        line += " (the wall clock jumped %+ds at %s; the lease is judged on the boot clock)" % (
            step.get("seconds", 0),
            step.get("time"),
        )
    return line


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

    def __init__(self, root="/", clock=None):
        self.directory = host_dir(root)
        self.path = os.path.join(self.directory, "run.lock")
        self.hold_path = os.path.join(self.directory, "run.hold")
        self.clock = clock or Clock()
        self.notes = []
        self._hold_fd = None

    # ---------------------------------------------------------------- file
    def _read(self, tolerate_torn=False):
        """(holder, past) as recorded. A record that cannot be read raises UnreadableLock
        (``tolerate_torn``: read as free, for a run that breaks the lock anyway)."""
        # the lock decides who may change the host: read like the journal's records, never
        # through a link and only when no other user could have written it
        raw = read_trusted(self.path) if trusted_dir(self.directory) else None
        if raw is None or not raw.strip():
            return None, []  # no record, or one a release truncated
        try:
            data = json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            if tolerate_torn:
                return None, []
            raise UnreadableLock(
                "the host's run lock %s cannot be read (%s): another run may hold the host, so it is refused; "
                "if no stacktune run is running, %s" % (self.path, exc, LOCK_BREAK_HINT)
            ) from None
        if not isinstance(data, dict):
            if tolerate_torn:
                return None, []
            raise UnreadableLock(
                "the host's run lock %s holds no lease record (a %s): refused; if no stacktune run is running, %s"
                % (self.path, type(data).__name__, LOCK_BREAK_HINT)
            )
        if "run_id" in data:  # the layout before ``past`` was kept
            return data, []
        holder = data.get("holder") if isinstance(data.get("holder"), dict) else None
        past = [p for p in data.get("past") or [] if isinstance(p, dict)]
        return holder, past

    def _write(self, holder, past):
        ensure_private_dir(self.directory)
        data = {"schema": 2, "holder": holder, "past": past[-self.PAST_KEEP :]}
        atomic_write(self.path, json.dumps(data, sort_keys=True).encode("utf-8"), mode=0o600)

    def _live(self, raw):
        """A lease as read, with ``expired`` computed; None when there is none. Judged on the
        boot clock when the lease was written in this boot, on wall time across a reboot."""
        if raw is None or "run_id" not in raw:
            return None
        holder = dict(raw)
        holder["expired"] = lease_expired(holder, self.clock.wall, self.clock.boot, self.clock.boot_id)
        return holder

    def holder(self, tolerate_torn=False):
        """The current holder (a dict with ``expired``), or None when free (``tolerate_torn``: an
        unreadable record reads as free, for a run that breaks the lock anyway)."""
        return self._live(self._read(tolerate_torn=tolerate_torn)[0])

    def past(self, tolerate_torn=False):
        return self._read(tolerate_torn=tolerate_torn)[1]

    def readable(self):
        """None when the record can be read, else why not (the UnreadableLock's words)."""
        try:
            self._read()
        except UnreadableLock as exc:
            return str(exc)
        return None

    def repair(self, run_id, ttl, why):
        """Rewrite an unreadable record as run_id's lease: only for the run whose watchdog holds
        ``run.hold`` (``renew`` checks), so that the host is never left refusing every run.
        The record's history of past leases is lost, and said."""
        self.take(run_id, None, ttl, force=True)
        self.notes.append(
            "the host's run lock %s could not be read (%s); it was rewritten for run %s, whose watchdog holds "
            "the host (the history of past leases is lost)" % (self.path, why, run_id)
        )

    describe = staticmethod(describe_holder)

    def _refusal(self, holder, why=""):
        return HostLocked(
            "the host is locked by stacktune %s (%s)%s; wait for that run to finish, or, if it is gone, %s"
            % (describe_holder(holder), self.path, why, LOCK_BREAK_HINT),
            holder=holder,
        )

    # ---------------------------------------------------------------- the run's hold
    def _open_hold(self):
        ensure_private_dir(self.directory)
        fd = os.open(self.hold_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            check_trusted(self.hold_path, os.fstat(fd))
        except UntrustedJournal:
            os.close(fd)
            raise
        return fd

    def held(self):
        """Whether a process (a run's watchdog) holds ``run.hold`` now."""
        if not os.path.exists(self.hold_path):
            return False
        fd = self._open_hold()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (IOError, OSError) as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return True
            raise
        finally:
            os.close(fd)  # closing drops the flock taken here
        return False

    def hold(self, timeout, run_id=None):
        """Hold ``run.hold`` for as long as this object lives (or ``unhold``): the run's watchdog
        does, for the run's whole length, with its run id written in the file (``held_by``).
        Waits up to timeout s for an ending run's watchdog; returns whether it is held."""
        fd = self._open_hold()
        deadline = self.clock.boot() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._hold_fd = fd
                if run_id is not None:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, str(run_id).encode("utf-8"), 0)
                return True
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or self.clock.boot() >= deadline:
                    os.close(fd)
                    return False
            time.sleep(0.2)

    def held_by(self):
        """The run id whose watchdog holds ``run.hold`` now, or None (not held, or held by a
        process that did not say)."""
        if not self.held():
            return None
        raw = read_trusted(self.hold_path) if trusted_dir(self.directory) else None
        return (raw or b"").decode("utf-8", "replace").strip() or None

    def unhold(self):
        if self._hold_fd is not None:
            os.close(self._hold_fd)
            self._hold_fd = None

    def _wait_unheld(self, wait_s=HOLD_WAIT_S):
        """False while a process still holds ``run.hold`` after wait_s (a run that just released
        the host: its watchdog ends within a poll)."""
        deadline = self.clock.boot() + wait_s
        while self.held():
            if self.clock.boot() >= deadline:
                return False
            time.sleep(0.2)
        return True

    # ---------------------------------------------------------------- checks
    def check(self, run_id):
        """Raise HostLocked when another run holds a live lease; return the holder."""
        holder = self.holder()
        if holder and not holder["expired"] and holder["run_id"] != run_id:
            raise self._refusal(holder)
        return holder

    def ended(self, run_id, tolerate_torn=False):
        """How the lease of run_id ended (the last ``past`` record of it), or None."""
        for record in reversed(self.past(tolerate_torn=tolerate_torn)):
            if record.get("run_id") == run_id:
                return record
        return None

    # ---------------------------------------------------------------- changes
    def take(self, run_id, owner, ttl, force=False, check_mode=False, takeover=None, controller=None, entry=None):
        """Take or renew the lease. Returns (changed, previous holder). Raises HostLocked.

        ``force`` breaks another run's live lease; ``takeover`` (a run id) takes over that
        run's lease only, because its controller process is known to be gone. A lease with the
        same run id taken from another controller process is another run's: refused.
        """
        raw, past = self._read(tolerate_torn=force)
        holder = self._live(raw)
        other = holder is not None and (
            holder["run_id"] != run_id or not same_controller(controller, holder.get("controller"))
        )
        forced = force or (holder is not None and takeover == holder["run_id"])
        if other and not holder["expired"] and not forced:
            raise self._refusal(holder)
        if (other or holder is None) and not forced and not check_mode and not self._wait_unheld():
            # exclusion does not rest on a time: a run whose watchdog still runs holds the host
            if holder is not None:
                raise self._refusal(
                    holder, "; its lease looks run out, but its watchdog still holds %s" % self.hold_path
                )
            raise HostLocked(
                "a stacktune process holds the host (%s) though its lease record %s names no run; wait for it "
                "to end, or, if no stacktune run is running, %s" % (self.hold_path, self.path, LOCK_BREAK_HINT)
            )
        now, boot = self.clock.wall(), self.clock.boot()
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
            "boot_id": self.clock.boot_id(),
            "expires_boot": boot + ttl,
            "renewed_ts": now,
            "renewed_boot": boot,
            "ttl": ttl,
        }
        step = self._clock_step(kept, now, boot)
        if step is not None:
            record["clock_step"] = step
        elif kept.get("clock_step"):
            record["clock_step"] = kept["clock_step"]
        last = past[-1] if past else {}
        if holder is None and last.get("ended") == "watchdog" and last.get("note"):
            self.notes.append("the host's watchdog ended the last run: %s" % last["note"])
        if not check_mode:
            self._write(record, past)
        return True, holder

    def _clock_step(self, kept, now, boot):
        """The wall clock's jump since the lease's last renewal (a dict), or None."""
        if kept.get("boot_id") != self.clock.boot_id() or "renewed_boot" not in kept or "renewed_ts" not in kept:
            return None
        step = (now - float(kept["renewed_ts"])) - (boot - float(kept["renewed_boot"]))
        if abs(step) < STEP_S:
            return None
        self.notes.append(
            "the wall clock jumped %+ds since run %s last renewed its lease; the lease is judged on the boot "
            "clock, so the step neither ends nor extends it" % (round(step), kept.get("run_id"))
        )
        return {"seconds": int(round(step)), "time": _iso(now)}

    def renew(self, run_id, ttl=None):
        """Extend run_id's lease (every engine write and every measured block of a run does).

        Raises LeaseLost when run_id held the host and its lease was released, broken or
        taken over since, and HostLocked when another run holds it now. A run id that never
        held the host (a direct module call) may write while no other run holds it.
        """
        try:
            holder = self.holder()
        except UnreadableLock as exc:
            # a record is bookkeeping; the watchdog's hold is what excludes: the run that holds
            # run.hold rewrites an unreadable record as its own and goes on
            if self.held_by() != run_id:
                raise
            self.repair(run_id, float(ttl or 300), str(exc).split(": another run may hold the host", 1)[0])
            return None
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

    def release(self, run_id, force=False, check_mode=False, how=None, note=None):
        """Release the lease. Returns (released, holder found); another run's live lease stays.
        ``how`` names the end in the lease's history (``expired``: put back by the host's watchdog).

        A release never needs free space: when the record cannot be written (a full disk), it
        is truncated instead (an empty record is a free host; the history is lost, and said)."""
        try:
            holder = self._live(self._read()[0])
        except UnreadableLock as exc:
            if not force or check_mode:
                # nobody can tell whose lease it was: left as found (refusing every run) and said
                self.notes.append("the run lock was not released: %s" % exc)
                return False, None
            # stacktune_lock_break: the unreadable record is replaced by a free one, and said
            self._write(None, [])
            self.notes.append("the unreadable run lock was replaced by a free one: %s" % exc)
            return True, None
        if holder is None:
            return False, None
        if holder["run_id"] != run_id and not force and not holder["expired"]:
            # another run's live lease: leave it alone (a refused run's cleanup lands here)
            return False, holder
        if not check_mode:
            past = self.past()
            if how is None:
                how = "released" if holder["run_id"] == run_id else ("expired" if holder["expired"] else "broken")
            ended = {"run_id": holder["run_id"], "ended": how, "by": run_id, "time": _iso(self.clock.wall())}
            if note:
                ended["note"] = note
            past.append(ended)
            try:
                self._write(None, past)
            except (IOError, OSError) as exc:
                os.truncate(self.path, 0)  # frees no block is needed for: the host is free
                self.notes.append(
                    "the run lock %s could not be rewritten (%s): it was emptied instead, which frees the host "
                    "(the history of past leases is lost)" % (self.path, exc)
                )
        return True, holder


def lease_ticker(run_id, root="/", renew_every=20.0, flock_timeout=10):
    """A function for a long program's run_process ``tick``: it checks on every call (a read,
    no lock) that run_id still holds the host, and renews its lease every ``renew_every`` s.

    It raises HostLocked (LeaseLost) as soon as the run no longer holds the host, so a block
    whose run was stopped or taken over ends within one tick, and LeaseRenewalFailed when the
    lease cannot be written (a full disk), naming the error. When another module call holds
    the host's flock, a renewal waits for the next tick.
    """
    lock = RunLock(root)
    last = {"renewed": None}

    def tick():
        try:
            holder = lock.holder()
        except UnreadableLock:
            holder = None  # the renewal below repairs it for the run that holds run.hold, or refuses
            last["renewed"] = None
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
        except (IOError, OSError) as exc:
            raise LeaseRenewalFailed("could not renew run %s's lease in %s: %s" % (run_id, lock.path, exc)) from None

    return tick
