# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Who may have written a file stacktune reads as root: the journal's records and the host's locks.

A file or directory that is a link, belongs to another user, or is writable by its group or
by others is refused (``UntrustedJournal``) before it is read, so that no other user chooses
what stacktune restores or who holds the host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import stat


class UntrustedJournal(ValueError):
    """A journal path another user could have written, or that is no stacktune record.

    Restoring from such a file would let its writer choose what stacktune writes as root,
    so it is refused before it is read; the message names the path and the fix.
    """


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
