# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where node_exporter's textfile collector reads: the directory stacktune writes its metrics to.

``stacktune_metrics_dir: auto`` (the default) asks the host, in this order:

1. ``process``: a running ``node_exporter`` or ``prometheus-node-exporter`` (found by its
   command line in /proc) with ``--collector.textfile.directory`` (``=DIR`` or ``DIR`` as the
   next argument). A Debian/Ubuntu ``prometheus-node-exporter`` started without the flag reads
   its built-in default, /var/lib/prometheus/node-exporter (``package_default``). A process in
   another root (a container) names a directory of its own view and is skipped.
2. ``defaults_file``: the flag in ``ARGS`` of /etc/default/prometheus-node-exporter (what the
   Debian/Ubuntu service passes at its next start).
3. ``distribution``: Debian, Ubuntu and their derivatives (os-release ``ID``/``ID_LIKE``):
   the package's default, /var/lib/prometheus/node-exporter.
4. ``fallback``: /var/lib/node_exporter/textfile_collector.

An explicit directory is ``configured``. Pure functions of the files they are given, so tests
build a /proc and an /etc of their own.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shlex
import stat

VARIABLE = "stacktune_metrics_dir"
AUTO = "auto"
FLAG = "collector.textfile.directory"
PROCESS_NAMES = ("node_exporter", "prometheus-node-exporter")
# /proc/<pid>/comm holds at most 15 characters
COMM_NAMES = tuple(name[:15] for name in PROCESS_NAMES)
DEBIAN_PROCESS = "prometheus-node-exporter"
DEBIAN_DEFAULTS = "/etc/default/prometheus-node-exporter"
DEBIAN_DIR = "/var/lib/prometheus/node-exporter"
FALLBACK_DIR = "/var/lib/node_exporter/textfile_collector"
SOURCES = ("configured", "process", "package_default", "defaults_file", "distribution", "fallback")

_ARGS_LINE = re.compile(r"^\s*(?:export\s+)?ARGS=(.*)$")
_OS_KEY = re.compile(r"^\s*(ID|ID_LIKE)=(.*)$")


def textfile_flag(argv):
    """``(True, DIR)`` when the arguments give ``--collector.textfile.directory`` (the last one
    wins, as node_exporter's flag parser does), ``(False, None)`` when they do not. Both the
    ``--flag=DIR`` and the ``--flag DIR`` forms count, with one dash too (Go's flag syntax)."""
    found, value = False, None
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        name, sep, rest = arg.lstrip("-").partition("=")
        if arg.startswith("-") and name == FLAG:
            if sep:
                found, value = True, rest
            elif i + 1 < len(args):
                found, value = True, args[i + 1]
                i += 1
        i += 1
    return found, value


def _read(path, binary=False):
    with open(path, "rb" if binary else "r") as handle:
        return handle.read()


def processes(proc_root="/proc"):
    """``[(pid, name, argv, same_root)]`` of the running node_exporters, lowest pid first.

    ``name`` is the program's name (``node_exporter`` or ``prometheus-node-exporter``);
    ``same_root`` is False for a process whose root directory is not ours (a container), None
    when that cannot be read. Processes that end while they are read are left out."""
    try:
        pids = sorted(int(entry) for entry in os.listdir(proc_root) if entry.isdigit())
    except OSError:
        return []
    try:
        own_root = os.stat(os.path.join(proc_root, "self", "root"))
    except OSError:
        own_root = None
    out = []
    for pid in pids:
        base = os.path.join(proc_root, str(pid))
        try:
            argv = [a.decode("utf-8", "replace") for a in _read(os.path.join(base, "cmdline"), True).split(b"\0")]
        except (IOError, OSError):
            continue
        while argv and argv[-1] == "":
            argv.pop()
        name = os.path.basename(argv[0]) if argv else ""
        if name not in PROCESS_NAMES:
            try:
                comm = _read(os.path.join(base, "comm")).strip()
            except (IOError, OSError):
                continue
            if comm not in COMM_NAMES:
                continue
            name = PROCESS_NAMES[COMM_NAMES.index(comm)]
        same_root = None
        if own_root is not None:
            try:
                root = os.stat(os.path.join(base, "root"))
                same_root = (root.st_dev, root.st_ino) == (own_root.st_dev, own_root.st_ino)
            except OSError:
                same_root = None
        out.append((pid, name, argv[1:], same_root))
    return out


def defaults_file_args(text):
    """The arguments in ``ARGS=`` of a Debian service defaults file (the last assignment), or
    None when there is none or it is not a plain value (a ``$`` expansion, several words)."""
    value = None
    for line in (text or "").splitlines():
        match = _ARGS_LINE.match(line)
        if not match:
            continue
        try:
            words = shlex.split(match.group(1), comments=True)
        except ValueError:
            value = None
            continue
        if len(words) > 1 or any("$" in w or "`" in w for w in words):
            value = None
            continue
        value = words[0] if words else ""
    if value is None:
        return None
    try:
        return shlex.split(value)
    except ValueError:
        return None


def debian_like(os_release_text):
    """Whether os-release names Debian or a derivative (Ubuntu's ID_LIKE is debian)."""
    ids = set()
    for line in (os_release_text or "").splitlines():
        match = _OS_KEY.match(line)
        if match:
            ids.update(match.group(2).strip().strip("\"'").lower().split())
    return "debian" in ids or "ubuntu" in ids


def _optional(path):
    try:
        return _read(path)
    except (IOError, OSError):
        return None


def locate(proc_root="/proc", defaults_file=DEBIAN_DEFAULTS, os_release="/etc/os-release"):
    """The directory node_exporter reads on this host: ``{path, source, detail, warnings}``."""
    warnings = []
    chosen = None
    for pid, name, argv, same_root in processes(proc_root):
        found, value = textfile_flag(argv)
        label = "%s (pid %d)" % (name, pid)
        if same_root is False:
            warnings.append(
                "%s runs in another root directory (a container); its textfile directory %s is a path in its "
                "own view and is not used: set %s to the host directory mounted there"
                % (label, value if found else "(none)", VARIABLE)
            )
            continue
        if found and value:
            candidate = {
                "path": value,
                "source": "process",
                "detail": "%s --%s=%s" % (label, FLAG, value),
            }
        elif not found and name == DEBIAN_PROCESS:
            candidate = {
                "path": DEBIAN_DIR,
                "source": "package_default",
                "detail": "%s without --%s reads the Debian/Ubuntu package's default" % (label, FLAG),
            }
        else:
            warnings.append(
                "%s has no --%s: its textfile collector reads no directory; start it with --%s=DIR "
                "(the directory stacktune writes to is chosen below)" % (label, FLAG, FLAG)
            )
            continue
        if chosen is None:
            chosen = candidate
        elif candidate["path"] != chosen["path"]:
            warnings.append("%s reads %s too; writing to %s only" % (label, candidate["path"], chosen["path"]))
    if chosen is not None:
        chosen["warnings"] = warnings
        return chosen
    args = defaults_file_args(_optional(defaults_file)) if defaults_file else None
    if args is not None:
        found, value = textfile_flag(args)
        if found and value:
            return {
                "path": value,
                "source": "defaults_file",
                "detail": "ARGS in %s gives --%s=%s" % (defaults_file, FLAG, value),
                "warnings": warnings,
            }
    if debian_like(_optional(os_release)):
        return {
            "path": DEBIAN_DIR,
            "source": "distribution",
            "detail": "no running node_exporter; Debian/Ubuntu's prometheus-node-exporter reads %s" % DEBIAN_DIR,
            "warnings": warnings,
        }
    return {
        "path": FALLBACK_DIR,
        "source": "fallback",
        "detail": "no running node_exporter and no distribution default known; start node_exporter with --%s=%s"
        % (FLAG, FALLBACK_DIR),
        "warnings": warnings,
    }


def problem(directory, source, files=(), variable=VARIABLE):
    """Why ``directory`` (and the ``files`` in it) cannot take the metrics, or None.

    Refused: a path that is not absolute or holds '..', a directory that is a symbolic link or
    not a directory, and a metrics file that is a symbolic link or not a regular file. A
    missing directory is fine (it is created). The message names the variable and the source."""
    origin = "%s (%s)" % (variable, source if source == "configured" else "%s, found by %s" % (AUTO, source))
    text = str(directory)
    if not text.startswith("/") or ".." in text.split("/"):
        return "%s must be an absolute path without '..' or %s, got %r" % (origin, AUTO, text)
    try:
        info = os.lstat(text)
    except OSError:
        info = None
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            return "%s: %s is a symbolic link (to %s); give the directory it points to" % (
                origin,
                text,
                os.readlink(text),
            )
        if not stat.S_ISDIR(info.st_mode):
            return "%s: %s exists and is not a directory" % (origin, text)
    for name in files:
        path = os.path.join(text, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            return "%s: %s is a symbolic link; remove it (stacktune writes the file itself)" % (origin, path)
        if not stat.S_ISREG(info.st_mode):
            return "%s: %s exists and is not a regular file" % (origin, path)
    return None


def resolve(value, files=(), **where):
    """``{path, source, detail, warnings}`` for the variable's value (``auto`` or a directory).

    Raises ValueError with :func:`problem`'s message when the directory cannot be used."""
    if value in (None, "", AUTO):
        found = locate(**where)
    else:
        found = {"path": str(value), "source": "configured", "detail": "given", "warnings": []}
    message = problem(found["path"], found["source"], files)
    if message:
        if found["source"] != "configured":
            message += " (%s)" % found["detail"]
        raise ValueError(message)
    found["path"] = os.path.normpath(found["path"])
    return found
