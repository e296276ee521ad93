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

The host's locks (the flock a module call holds, the lease of a run) are ``engine/lock.py``'s;
a journal takes the flock around its writes (``Journal.lock``). Who may have written a
journal file is ``engine/trust.py``'s question.

Directories are 0700 and files 0600: the journal holds previous file contents.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import json
import os
import re
import stat

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import atomic_write, fsync_dir, rooted
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import HOST_DIR, HostFlock

# The bench module reads these names of the lock from here; everything else imports them from engine/lock.py.
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import (  # noqa: F401 pylint: disable=unused-import
    HostLocked,
    RunLock,
    lease_ticker,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.trust import (
    UntrustedJournal,
    check_trusted,
    ensure_private_dir,
    read_trusted,
    trusted_dir,
)

_LAYER = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")
# The first words of the header every file stacktune writes carries (_kind_base.HEADER, and the
# files the layer roles render).
HEADER_LINE = re.compile(r"^# Managed by stacktune \(layer ")
# The names of the files stacktune writes under /etc: drop-ins, whole files, /etc/default/irqbalance.
HEADER_FILES = ("*.conf", "*.cfg", "irqbalance")
HISTORY_KEEP = 50
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


def journal_options(*names, **changes):
    """The shared options ``names`` of JOURNAL_OPTIONS as an argument spec, each a copy;
    ``changes`` adjusts one for a module: ``journal_options("run_id", run_id={"default": "manual"})``."""
    unknown = sorted(set(names).union(changes) - set(JOURNAL_OPTIONS))
    if unknown:
        raise KeyError("no shared journal option %s" % ", ".join(unknown))
    return {name: dict(JOURNAL_OPTIONS[name], **changes.get(name, {})) for name in names}


STATES = ("new", "applying", "applied", "suspended", "kept", "rolled_back", "restored")
SCHEMA = 1


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


class Journal(object):
    def __init__(self, directory, root="/"):
        self.directory = directory
        self._flock = HostFlock(root)

    def _ensure(self):
        for path in (self.directory, os.path.join(self.directory, "layers")):
            ensure_private_dir(path)

    def path(self, layer):
        check_layer_name(layer)
        return os.path.join(self.directory, "layers", "%s.json" % layer)

    def lock(self, timeout):
        """Take the host's flock (``lock.HostFlock``), waiting up to timeout seconds."""
        self._flock.acquire(timeout)

    def unlock(self):
        self._flock.release()

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
            row = {
                "layer": layer,
                "state": entry.get("state"),
                "run_id": entry.get("run_id"),
                "settings": len(entry.get("settings") or []),
                "decision": decision.get("decision"),
                "updated": (history[-1] or {}).get("time") if history else None,
                "search": None,
            }
            found = decision.get("search") if decision.get("method") == "search" else None
            if isinstance(found, dict):
                # what a later run needs to leave a settled search as it is (layers/candidates.py)
                row["search"] = {
                    "variable": found.get("variable"),
                    "candidates": found.get("candidates")
                    or [r.get("value") for r in found.get("rows") or [] if r.get("arm") == "candidate"],
                    "chosen": found.get("chosen"),
                    "decision": decision.get("decision"),
                }
            rows.append(row)
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
