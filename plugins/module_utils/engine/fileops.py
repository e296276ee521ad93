# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""File primitives of the settings engine: rooted paths, atomic writes, byte-exact snapshots."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import errno
import os
import signal
import stat
import tempfile
import time

TEMP_PREFIX = ".stacktune-"
KILL_ENV = "STACKTUNE_TEST_KILL_AT"
PAUSE_ENV = "STACKTUNE_TEST_PAUSE_AT"
PAUSE_MARK = "/run/stacktune-test-paused"


def kill_point(point, layer=None):
    """Test hook: SIGKILL this process at a named point of the engine.

    Set ``STACKTUNE_TEST_KILL_AT`` to ``<point>`` or ``<point>@<layer>`` in the module's
    environment to simulate a crash there (the crash-safety tests in tests/integration
    and tests/unit do). Unset, it does nothing. Points: after_journal_write_ahead,
    mid_unit_write, after_units_written, after_live_written, before_journal_final,
    after_units_restored, before_restore_journal.
    """
    wanted = os.environ.get(KILL_ENV, "")
    if not wanted:
        return
    name, _sep, only = wanted.partition("@")
    if name == point and (not only or only == layer):
        os.kill(os.getpid(), signal.SIGKILL)


def pause_point(point, layer=None, seconds=4.0):
    """Test hook: stop here for a few seconds, so a test can signal the controller meanwhile.

    Set ``STACKTUNE_TEST_PAUSE_AT`` to ``<point>`` or ``<point>@<layer>``; the engine then
    writes /run/stacktune-test-paused when it gets there and waits ``seconds``. Unset, it
    does nothing. Points: mid_suspend (the gate is switching a layer off: the host is back
    at the snapshot, the journal not yet written).
    """
    wanted = os.environ.get(PAUSE_ENV, "")
    if not wanted:
        return
    name, _sep, only = wanted.partition("@")
    if name == point and (not only or only == layer):
        with open(PAUSE_MARK, "w") as handle:
            handle.write("%s@%s\n" % (point, layer))
        time.sleep(seconds)


def rooted(root, path):
    """Map an absolute host path under an alternative root (``/`` means the host itself)."""
    if not path.startswith("/"):
        raise ValueError("path must be absolute: %s" % path)
    if root in ("", "/"):
        return path
    return os.path.join(root, path.lstrip("/"))


class UnsafePath(ValueError):
    """A file stacktune would read for a snapshot or write is not what it seems: a symbolic
    link, a file under a symbolic link, or no regular file. The message names it."""


def check_no_links(root, host_path):
    """Refuse a host path of which a component below ``root`` is a symbolic link.

    Every file the engine snapshots, writes or restores is checked this way first: a link
    there (``/etc/nccl.conf -> /etc/shadow``, a linked parent directory) would make it read a
    file it does not own into the journal, or write somewhere else. Components that do not
    exist yet are fine (the engine creates them). Returns the rooted path.
    """
    if not host_path.startswith("/"):
        raise UnsafePath("path must be absolute: %s" % host_path)
    real = rooted(root, host_path)
    walked = rooted(root, "/")
    for part in [p for p in host_path.split("/") if p]:
        walked = os.path.join(walked, part)
        try:
            st = os.lstat(walked)
        except OSError:
            return real
        if stat.S_ISLNK(st.st_mode):
            shown = "/" + os.path.relpath(walked, rooted(root, "/")) if root not in ("", "/") else walked
            raise UnsafePath(
                "%s is a symbolic link (to %s)%s; stacktune does not read or write through a link: replace it "
                "by the file itself, or manage the file it points to"
                % (shown, os.readlink(walked), "" if shown == host_path else ", on the way to %s" % host_path)
            )
    return real


def read_text(path):
    """Return the text of a file, or None when it does not exist or cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def env_file_value(value):
    """A value of a shell-style KEY=value file (/etc/default/*, os-release): stripped, and
    without the quotes around it."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value


def writable(path):
    """Tell whether a file can be written, and why not: (ok, reason)."""
    if not os.path.exists(path):
        return False, "%s does not exist" % path
    if os.access(path, os.W_OK):
        return True, None
    try:
        fd = os.open(path, os.O_WRONLY)
        os.close(fd)
        return True, None
    except OSError as exc:
        if exc.errno == errno.EROFS:
            return False, "%s is on a read-only filesystem" % os.path.dirname(path)
        return False, "%s is not writable: %s" % (path, os.strerror(exc.errno))


def write_live(path, value):
    """Write a value to a kernel interface file (/proc/sys, /sys, /proc/irq) in one write."""
    data = value if value.endswith("\n") else value + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, data.encode("utf-8"))
    finally:
        os.close(fd)


def read_regular(path):
    """Bytes and stat of a regular file, read without following a link; None when absent.

    Raises UnsafePath for a link, a directory, a device or a FIFO at ``path``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None, None
        if exc.errno == errno.ELOOP:
            raise UnsafePath("%s is a symbolic link; stacktune does not read through a link" % path) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath("%s is not a regular file; stacktune manages regular files only" % path)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def read_unit_text(path):
    """Text of a persistence unit (never through a link), or None when it does not exist."""
    data, _st = read_regular(path)
    return None if data is None else data.decode("utf-8", "replace")


def snapshot_file(path):
    """Byte-exact snapshot of a file (content, mode, owner) or of its absence, read without
    following a link (UnsafePath for a link or anything that is no regular file)."""
    data, st = read_regular(path)
    if data is None:
        return {"exists": False, "parent_exists": os.path.isdir(os.path.dirname(path))}
    return {
        "exists": True,
        "content_b64": base64.b64encode(data).decode("ascii"),
        "mode": "%04o" % stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
    }


def snapshot_text(snap):
    """Text of a file snapshot, or None for an absent file."""
    if not snap.get("exists"):
        return None
    return base64.b64decode(snap["content_b64"]).decode("utf-8", "replace")


def sweep_temp(directory):
    """Remove temporary files a killed run left in a directory; return how many.

    Only names this module creates (``.stacktune-*``) are touched. The engine holds the
    journal lock while it writes, so any such file found here belongs to a dead run.
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    count = 0
    for name in names:
        if name.startswith(TEMP_PREFIX):
            try:
                os.unlink(os.path.join(directory, name))
                count += 1
            except OSError:
                pass
    return count


def atomic_write(path, data, mode=0o644, uid=0, gid=0, kill_at=None, layer=None):
    """Write bytes to path through a temporary file in the same directory and a rename.

    The directory is created (0755) when missing. The file is fsynced before the rename
    and the directory after it, so a crash leaves either the old or the new content
    (and at most a ``.stacktune-*`` temporary file, which the next write sweeps away).
    """
    directory = os.path.dirname(path)
    try:
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        sweep_temp(directory)
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=directory)
    except OSError as exc:
        raise OSError(exc.errno, "cannot write %s: %s" % (path, exc.strerror)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if os.geteuid() == 0:
            os.chown(tmp, uid, gid)
        if kill_at:
            kill_point(kill_at, layer)
        os.rename(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None and str(path) not in str(exc):
            # a full or read-only filesystem: name the file, not only the errno
            raise OSError(exc.errno, "cannot write %s: %s" % (path, exc.strerror)) from None
        raise
    fsync_dir(directory)


def fsync_dir(directory):
    """Flush a directory entry change to disk (best effort on filesystems that refuse it)."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def remove(path):
    """Remove a file if it exists; return True when something was removed."""
    sweep_temp(os.path.dirname(path))
    try:
        os.unlink(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise
    fsync_dir(os.path.dirname(path))
    return True


def restore_file(path, snap):
    """Put a file back exactly as a snapshot recorded it (or remove it if it was absent)."""
    if not snap.get("exists"):
        removed = remove(path)
        parent = os.path.dirname(path)
        if snap.get("parent_exists") is False and os.path.isdir(parent) and not os.listdir(parent):
            os.rmdir(parent)
            fsync_dir(os.path.dirname(parent))
            removed = True
        return removed
    data = base64.b64decode(snap["content_b64"])
    atomic_write(path, data, int(snap["mode"], 8), snap.get("uid", 0), snap.get("gid", 0))
    return True
