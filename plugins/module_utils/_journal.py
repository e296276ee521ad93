# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The on-host journal of the settings engine (/var/lib/stacktune by default).

- ``layers/<layer>.json``: per layer, its state (applying, applied, kept, rolled_back,
  restored), the settings it owns, the pre-stacktune ``original`` values and the
  ``snapshot`` taken before its latest apply, plus a short history. Written before any
  change (write-ahead) and again after, each time atomically.
- ``events.jsonl``: an append-only log of every apply, restore and decision.
- ``lock``: an advisory lock held while the engine works, so two module calls never
  interleave.
- ``run.lock``: the run lock a whole tuning run holds from start to end (run id, owner,
  since, expires). While another run holds it, the engine refuses to write for any other
  run id, so two runs against one host never interleave writes. It is a lease: a run that
  was killed leaves it behind until it expires or someone releases it with ``force``.

The directory is 0700 and every file 0600: the journal holds previous file contents.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import json
import os
import re
import time

from ansible_collections.stacktune.gpu.plugins.module_utils._fileops import atomic_write, fsync_dir

_LAYER = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
HISTORY_KEEP = 50


class LockTimeout(Exception):
    """Another stacktune run holds the journal lock."""


class HostLocked(LockTimeout):
    """Another tuning run holds the host's run lock."""


def check_layer_name(layer):
    if not _LAYER.match(layer or ""):
        raise ValueError("layer name %r must be lower-case letters, digits and underscores" % (layer,))


def new_entry(layer):
    return {
        "schema": 1,
        "layer": layer,
        "state": "new",
        "run_id": None,
        "settings": [],
        "known": {},
        "original": {"live": {}, "units": {}},
        "snapshot": None,
        "decision": None,
        "history": [],
    }


class Journal(object):
    def __init__(self, directory):
        self.directory = directory
        self._lock_fd = None

    def ensure(self):
        self._ensure()

    def _ensure(self):
        for path in (self.directory, os.path.join(self.directory, "layers")):
            if not os.path.isdir(path):
                os.makedirs(path, 0o700)
            os.chmod(path, 0o700)

    def path(self, layer):
        check_layer_name(layer)
        return os.path.join(self.directory, "layers", "%s.json" % layer)

    def lock(self, timeout):
        """Take the journal lock, waiting up to timeout seconds."""
        self._ensure()
        fd = os.open(os.path.join(self.directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
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
                    raise LockTimeout(
                        "another stacktune run holds %s (waited %ss)" % (os.path.join(self.directory, "lock"), timeout)
                    ) from None
                time.sleep(0.2)
        self._lock_fd = fd

    def unlock(self):
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def load(self, layer):
        try:
            with open(self.path(layer)) as handle:
                return json.load(handle)
        except (IOError, OSError) as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        except ValueError as exc:
            raise ValueError("journal %s is corrupt: %s" % (self.path(layer), exc)) from None

    def layers(self):
        directory = os.path.join(self.directory, "layers")
        if not os.path.isdir(directory):
            return []
        # a file whose name is no layer name (a copy, an editor's backup) is not a layer
        return sorted(name[:-5] for name in os.listdir(directory) if name.endswith(".json") and _LAYER.match(name[:-5]))

    def summary(self):
        """One row per journaled layer: what it holds now and what last happened to it.

        This is the one reader of the journal's layout for playbooks (drift, verify and
        rollback list the layers through the ``journal_info`` module).
        """
        rows = []
        for layer in self.layers():
            entry = self.load(layer) or new_entry(layer)
            decision = entry.get("decision") or {}
            history = entry.get("history") or []
            rows.append(
                {
                    "layer": layer,
                    "state": entry.get("state"),
                    "run_id": entry.get("run_id"),
                    "settings": len(entry.get("settings") or []),
                    "decision": decision.get("decision"),
                    "updated": (history[-1] or {}).get("time") if history else None,
                }
            )
        return rows

    def save(self, entry):
        self._ensure()
        entry["history"] = entry.get("history", [])[-HISTORY_KEEP:]
        data = json.dumps(entry, indent=1, sort_keys=True).encode("utf-8")
        atomic_write(self.path(entry["layer"]), data, mode=0o600)

    def event(self, record):
        self._ensure()
        path = os.path.join(self.directory, "events.jsonl")
        line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(path, 0o600)
        fsync_dir(self.directory)


def _iso(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class RunLock(object):
    """The lease a whole tuning run holds on a host (``<journal>/run.lock``).

    Reads and writes happen under the journal's flock, so taking it is atomic.
    """

    def __init__(self, journal):
        self.journal = journal
        self.path = os.path.join(journal.directory, "run.lock")

    def holder(self, now=None):
        """The current holder (a dict with ``expired``), or None when free."""
        try:
            with open(self.path) as handle:
                data = json.load(handle)
        except (IOError, OSError) as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        except ValueError:
            return None  # a torn or foreign file is no lease
        if not isinstance(data, dict) or "run_id" not in data:
            return None
        data["expired"] = float(data.get("expires_ts", 0)) <= (now if now is not None else time.time())
        return data

    @staticmethod
    def describe(holder):
        return "run %s (owner %s) since %s, lease until %s" % (
            holder.get("run_id"),
            holder.get("owner") or "unknown",
            holder.get("since"),
            holder.get("expires"),
        )

    def check(self, run_id):
        """Raise HostLocked when another run holds a live lease."""
        holder = self.holder()
        if holder and not holder["expired"] and holder["run_id"] != run_id:
            raise HostLocked(
                "the host is locked by stacktune %s (%s); wait for that run to finish, or, if it was "
                "killed, release the lock with stacktune.gpu.run_lock state=unlocked force=true"
                % (self.describe(holder), self.path)
            )
        return holder

    def take(self, run_id, owner, ttl, force=False, check_mode=False):
        """Take or renew the lease. Returns (changed, previous holder). Raises HostLocked."""
        holder = self.holder()
        if holder and not holder["expired"] and holder["run_id"] != run_id and not force:
            self.check(run_id)
        now = time.time()
        since = holder["since"] if holder and holder["run_id"] == run_id and not holder["expired"] else _iso(now)
        record = {
            "run_id": run_id,
            "owner": owner,
            "pid": os.getpid(),
            "since": since,
            "expires": _iso(now + ttl),
            "expires_ts": now + ttl,
            "ttl": ttl,
        }
        if not check_mode:
            self.journal.ensure()
            atomic_write(self.path, json.dumps(record, sort_keys=True).encode("utf-8"), mode=0o600)
        return True, holder

    def renew(self, run_id):
        """Extend the lease when run_id holds it (every engine write of that run does)."""
        holder = self.check(run_id)
        if holder and holder["run_id"] == run_id and not holder["expired"]:
            self.take(run_id, holder.get("owner"), float(holder.get("ttl", 3600)))

    def release(self, run_id, force=False, check_mode=False):
        """Release the lease. Returns (released, holder found); another run's live lease stays."""
        holder = self.holder()
        if holder is None:
            return False, None
        if holder["run_id"] != run_id and not force and not holder["expired"]:
            # another run's live lease: leave it alone (a refused run's cleanup lands here)
            return False, holder
        if not check_mode:
            os.unlink(self.path)
            fsync_dir(self.journal.directory)
        return True, holder
