# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The on-host journal of the settings engine (/var/lib/stacktune by default).

- ``layers/<layer>.json``: per layer, its state (applying, applied, suspended, kept,
  rolled_back, restored), the settings it owns, the pre-stacktune ``original`` values and
  the ``snapshot`` taken before its latest apply, plus a short history. Written before any
  change (write-ahead) and again after, each time atomically.
- ``events.jsonl``: an append-only log of every apply, restore, decision and interruption.

The host's locks live in /var/lib/stacktune whatever the journal directory, so that two
runs with two journal directories still exclude each other:
- ``lock``: an advisory flock held while a module works, so two module calls never
  interleave.
- ``run.lock``: the lease a whole run holds from start to end (``RunLock``).

Directories are 0700 and files 0600: the journal holds previous file contents.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import fcntl
import fnmatch
import json
import os
import re
import stat
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import atomic_write, fsync_dir, rooted

_LAYER = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
# The first words of the header every file stacktune writes carries (_kind_base.HEADER, and the
# files the layer roles render).
HEADER_LINE = re.compile(r"^# Managed by stacktune \(layer ")
# The names of the files stacktune writes under /etc: drop-ins, whole files, /etc/default/irqbalance.
HEADER_FILES = ("*.conf", "*.cfg", "irqbalance")
HISTORY_KEEP = 50
HOST_DIR = "/var/lib/stacktune"
# The journal directory when none is given: the folder of the host's locks.
JOURNAL_DIR = HOST_DIR
# The node's last acceptance record (acceptance/record.py writes it; the journal's listing reads it).
ACCEPTANCE_FILE = "acceptance.json"
# The options every module of the journal shares (the doc fragment stacktune.gpu.journal
# documents them; tests/unit/plugins/doc_fragments keeps the two the same).
JOURNAL_OPTIONS = {
    "journal_dir": {"type": "path", "default": JOURNAL_DIR},
    "root": {"type": "path", "default": "/"},
    "run_id": {"type": "str"},
    "check_lock_for": {"type": "str"},
    "break_lock": {"type": "bool", "default": False},
}
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


def journal_options(*names, **changes):
    """The shared options ``names`` of JOURNAL_OPTIONS as an argument spec, each a copy;
    ``changes`` adjusts one for a module: ``journal_options("run_id", run_id={"default": "manual"})``."""
    unknown = sorted(set(names).union(changes) - set(JOURNAL_OPTIONS))
    if unknown:
        raise KeyError("no shared journal option %s" % ", ".join(unknown))
    return {name: dict(JOURNAL_OPTIONS[name], **changes.get(name, {})) for name in names}


def host_dir(root="/"):
    """Where the host's locks live (under an alternative root for tests)."""
    return rooted(root or "/", HOST_DIR)


class UntrustedJournal(ValueError):
    """A journal path another user could have written, or that is no stacktune record.

    Restoring from such a file would let its writer choose what stacktune writes as root,
    so it is refused before it is read; the message names the path and the fix.
    """


STATES = ("new", "applying", "applied", "suspended", "kept", "rolled_back", "restored")
SCHEMA = 1


def check_trusted(path, st=None, directory=False):
    """Refuse a journal file or directory that is a link, is owned by another user than the
    one stacktune runs as (root), or is writable by its group or by others."""
    if st is None:
        st = os.lstat(path)
    what = "directory" if directory else "file"
    if stat.S_ISLNK(st.st_mode):
        raise UntrustedJournal("journal %s %s is a symbolic link; give stacktune a directory of its own" % (what, path))
    if directory and not stat.S_ISDIR(st.st_mode) or not directory and not stat.S_ISREG(st.st_mode):
        raise UntrustedJournal("journal %s %s is not a %s" % (what, path, what))
    if st.st_uid != os.geteuid():
        raise UntrustedJournal(
            "journal %s %s belongs to uid %d, not to the user stacktune runs as (uid %d): another user could have "
            "written what stacktune would restore as root; check it, then make it %s's (chown) or move it away"
            % (what, path, st.st_uid, os.geteuid(), "root" if os.geteuid() == 0 else "this user")
        )
    if st.st_mode & 0o022:
        raise UntrustedJournal(
            "journal %s %s is writable by its group or by others (mode %04o)%s; stacktune trusts only a journal no "
            "one else can write: %s"
            % (
                what,
                path,
                stat.S_IMODE(st.st_mode),
                " - a shared directory such as /tmp is no place for it" if st.st_mode & stat.S_ISVTX else "",
                "give stacktune_journal_dir a directory of its own (stacktune creates it 0700)"
                if directory
                else "check the file, then chmod 0600 it",
            )
        )
    return st


def trusted_dir(path):
    """True when the directory exists (and is trusted: UntrustedJournal otherwise)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise
    check_trusted(path, st, directory=True)
    return True


def read_trusted(path):
    """The bytes of a journal file, or None when there is none; read without following a link
    and refused (UntrustedJournal) when another user could have written it (check_trusted)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno == errno.ELOOP:
            check_trusted(path)
        raise
    with os.fdopen(fd, "rb") as handle:
        check_trusted(path, os.fstat(handle.fileno()))
        return handle.read()


def ensure_private_dir(path):
    """Create a directory 0700 (and its missing parents) when it does not exist; an existing
    one must be trusted (check_trusted) and is never chmod'ed."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
        os.makedirs(path, 0o700)
        os.chmod(path, 0o700)
        return
    check_trusted(path, st, directory=True)


def validate_record(data, path, layer):
    """Refuse a journal record that is no stacktune layer record: naming the file and what is wrong.

    The kinds and the unit paths a record may restore are checked by the engine, which knows
    the kinds (``Engine.trusted``).
    """

    def refuse(why):
        raise UntrustedJournal(
            "journal %s is not a stacktune layer record (%s); stacktune will not restore from it. Look at it and "
            "move it away: the layer's originals are then unknown to stacktune" % (path, why)
        )

    if not isinstance(data, dict) or not data:
        shown = "an empty object" if data == {} else ("null" if data is None else "a %s" % type(data).__name__)
        refuse("it holds %s" % shown)
    schema = data.get("schema")
    if isinstance(schema, int) and not isinstance(schema, bool) and schema > SCHEMA:
        refuse("schema %d, written by a newer stacktune; this one reads schema %d" % (schema, SCHEMA))
    if schema != SCHEMA:
        refuse("schema %r, expected %d" % (schema, SCHEMA))
    if data.get("layer") != layer:
        refuse("it is the record of layer %r" % (data.get("layer"),))
    if data.get("state") not in STATES:
        refuse("state %r is none of %s" % (data.get("state"), ", ".join(STATES)))
    for field, kind in (("settings", list), ("known", dict), ("original", dict), ("history", list)):
        if not isinstance(data.get(field), kind):
            refuse("%s is not a %s" % (field, kind.__name__))
    for name, target in (("original", data["original"]), ("snapshot", data.get("snapshot"))):
        if target is None and name == "snapshot":
            continue
        if not isinstance(target, dict) or not isinstance(target.get("live"), dict):
            refuse("%s has no live values" % name)
        if not isinstance(target.get("units"), dict) or not all(isinstance(u, dict) for u in target["units"].values()):
            refuse("%s has no units" % name)
        for unit in target["units"].values():
            kinds = ("dropin", "file", "line", "boot_entries")
            if unit.get("type") not in kinds or not str(unit.get("path", "")).startswith("/"):
                refuse("%s holds a unit of type %r at %r" % (name, unit.get("type"), unit.get("path")))
            if unit["type"] == "boot_entries" and not isinstance(unit.get("files"), dict):
                refuse("%s's unit %s has no files" % (name, unit["path"]))
            # a boot_entries unit is a snapshot of several files, each checked as a whole file
            for snap in unit["files"].values() if unit["type"] == "boot_entries" else [unit]:
                whole = unit["type"] != "line" and isinstance(snap, dict) and snap.get("exists")
                if (
                    not isinstance(snap, dict)
                    or whole
                    and not (
                        isinstance(snap.get("content_b64"), str) and re.match(r"^0?[0-7]{3,4}$", str(snap.get("mode")))
                    )
                ):
                    refuse("%s's unit %s has no content or mode" % (name, unit["path"]))
    for s in data["settings"] + list(data["known"].values()):
        if not isinstance(s, dict) or not all(isinstance(s.get(k), str) for k in ("id", "kind", "key")):
            refuse("a setting is not a dict with id, kind and key")
    return data


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


def open_journal(journal_dir, root="/"):
    """The journal of a module call: ``journal_dir`` on the host, under ``root`` in tests."""
    return Journal(rooted(root or "/", journal_dir), root=root or "/")


@contextlib.contextmanager
def host_flock(timeout, root="/"):
    """The host's flock (what every module call that writes holds) for a with-block."""
    journal = Journal(host_dir(root), root)
    journal.lock(timeout)
    try:
        yield
    finally:
        journal.unlock()


class Journal(object):
    def __init__(self, directory, root="/"):
        self.directory = directory
        self.host_dir = host_dir(root)
        self._lock_fd = None

    def ensure(self):
        self._ensure()

    def _ensure(self):
        for path in (self.directory, os.path.join(self.directory, "layers")):
            ensure_private_dir(path)

    def path(self, layer):
        check_layer_name(layer)
        return os.path.join(self.directory, "layers", "%s.json" % layer)

    def lock(self, timeout):
        """Take the host's flock, waiting up to timeout seconds."""
        ensure_private_dir(self.host_dir)
        path = os.path.join(self.host_dir, "lock")
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
        self._lock_fd = fd

    def unlock(self):
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def record(self, name):
        """A JSON object the journal directory holds beside the layers (``acceptance.json``):
        ``(object, None)``; ``({}, None)`` when there is none; ``({}, why)`` when it is there but
        cannot be trusted (check_trusted) or is no JSON object. Read without following a link."""
        path = os.path.join(self.directory, name)
        try:
            raw = read_trusted(path)
            if raw is None:
                return {}, None
            data = json.loads(raw.decode("utf-8"))
        except UntrustedJournal as exc:
            return {}, str(exc)
        except (OSError, IOError) as exc:
            return {}, "cannot read %s: %s" % (path, exc.strerror or exc)
        except ValueError as exc:
            return {}, "%s is not JSON: %s" % (path, exc)
        if not isinstance(data, dict):
            return {}, "%s holds no JSON object" % path
        return data, None

    def load(self, layer):
        """A layer's record, or None when the journal has none; refused (UntrustedJournal) when
        another user could have written it or it is no stacktune record."""
        path = self.path(layer)
        if not trusted_dir(self.directory) or not trusted_dir(os.path.dirname(path)):
            return None
        raw = read_trusted(path)
        if raw is None:
            return None
        try:
            data = json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            raise UntrustedJournal(
                "journal %s is corrupt (%s); stacktune will not restore from it" % (path, exc)
            ) from None
        return validate_record(data, path, layer)

    def layers(self):
        directory = os.path.join(self.directory, "layers")
        if not trusted_dir(self.directory) or not trusted_dir(directory):
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
            try:
                entry = self.load(layer) or new_entry(layer)
            except (UntrustedJournal, OSError) as exc:
                # one unreadable record must not hide the others (rollback by name goes on)
                rows.append({"layer": layer, "state": "unreadable", "error": str(exc), "settings": 0})
                continue
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

    def owned_paths(self):
        """Host paths of the files the readable records would put back (their ``original``
        and ``snapshot`` units): the files stacktune knows it owns. A record restored to its
        original owns none; an unreadable record is left out."""
        paths = set()
        for layer in self.layers():
            try:
                entry = self.load(layer)
            except (UntrustedJournal, OSError):
                continue
            for target in (entry or {}).get("original"), (entry or {}).get("snapshot"):
                for unit in ((target or {}).get("units") or {}).values():
                    paths.add(unit["path"])
        return sorted(paths)

    def save(self, entry):
        self._ensure()
        entry["history"] = entry.get("history", [])[-HISTORY_KEEP:]
        data = json.dumps(entry, indent=1, sort_keys=True).encode("utf-8")
        atomic_write(self.path(entry["layer"]), data, mode=0o600)

    def event(self, record):
        self._ensure()
        path = os.path.join(self.directory, "events.jsonl")
        line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            check_trusted(path, os.fstat(fd))
            os.write(fd, line)
            os.fsync(fd)
        except OSError as exc:
            raise OSError(exc.errno, "%s: %s" % (path, exc.strerror)) from None
        finally:
            os.close(fd)
        fsync_dir(self.directory)


def carries_header(path, limit=64 * 1024):
    """Whether a regular file (never followed through a link) has a line that starts with
    stacktune's header, within its first ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return False
        text = handle.read(limit).decode("latin-1")
    return any(HEADER_LINE.match(line) for line in text.splitlines())


def unowned_files(directories, owned, root="/", depth=3, patterns=HEADER_FILES):
    """Files under ``directories`` (host paths, searched ``depth`` levels deep: 1 is the
    directory itself) whose name matches ``patterns``, that carry stacktune's header and
    are not in ``owned``: stacktune wrote them, but no journal knows their original.
    Returns sorted host paths; links are neither followed nor reported."""
    owned = set(owned)
    found = set()
    for directory in directories:
        top = rooted(root or "/", directory)
        if not os.path.isdir(top) or os.path.islink(top):
            continue
        for here, dirs, files in os.walk(top):
            rel = os.path.relpath(here, top)
            level = 1 if rel == "." else rel.count(os.sep) + 2  # the depth of the files found here
            if level >= depth:
                dirs[:] = []
            for name in files:
                if not any(fnmatch.fnmatch(name, pattern) for pattern in patterns):
                    continue
                host = os.path.normpath(os.path.join(directory, "" if rel == "." else rel, name))
                if host not in owned and carries_header(os.path.join(here, name)):
                    found.add(host)
    return sorted(found)


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
    host. Callers hold the host's flock (``Journal.lock``) around every method.
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

    def release(self, run_id, force=False, check_mode=False):
        """Release the lease. Returns (released, holder found); another run's live lease stays."""
        holder = self.holder()
        if holder is None:
            return False, None
        if holder["run_id"] != run_id and not force and not holder["expired"]:
            # another run's live lease: leave it alone (a refused run's cleanup lands here)
            return False, holder
        if not check_mode:
            past = self.past()
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
