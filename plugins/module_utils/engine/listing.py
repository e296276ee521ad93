# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The journal as one read: its layers, the last acceptance record, and (optionally) every
layer verified against the host and the lock checked. ``journal_info`` returns it; the drift
report reads it and writes the host's metrics in the same module run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import (
    ACCEPTANCE_FILE,
    open_journal,
    unowned_files,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import HostLocked, RunLock
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context


class ListingFailed(Exception):
    """The journal or the lock could not be read; ``msg`` for fail_json, ``extra`` its other keys."""

    def __init__(self, msg, **extra):
        super().__init__(msg)
        self.msg = msg
        self.extra = extra


def read_journal(
    journal_dir, root="/", run_command=None, verify=False, unowned_in=(), check_lock_for=None, break_lock=False
):
    """``{"layers", "acceptance", ["acceptance_error"], ["verified"], ["unowned"], ["lock_holder"]}``.

    ``check_lock_for``: the run id of a read-only run; refused (ListingFailed with
    ``lock_holder``) while another run holds the host, unless ``break_lock``. ``verify``: each
    readable layer verified (``Engine.verify``, which changes nothing).
    """
    journal = open_journal(journal_dir, root)
    result = {}
    if check_lock_for:
        lock = RunLock(root)
        try:
            result["lock_holder"] = lock.holder()
            if not break_lock:
                lock.check(check_lock_for)
        except HostLocked as exc:
            raise ListingFailed("Failed to check the run lock: %s" % exc, lock_holder=exc.holder) from None
        except (OSError, IOError, ValueError) as exc:
            raise ListingFailed("Failed to check the run lock: %s" % exc) from None
    try:
        result["layers"] = journal.summary()
        result["acceptance"], error = journal.record(ACCEPTANCE_FILE)
        if error:
            result["acceptance_error"] = error
        if verify:
            result["verified"] = [
                Engine(Context(row["layer"], root=root, run_command=run_command), journal, check_mode=True).verify()
                for row in result["layers"]
                if row["state"] != "unreadable"
            ]
        if unowned_in:
            result["unowned"] = unowned_files(unowned_in, journal.owned_paths(), root=root)
    except (OSError, IOError, ValueError) as exc:
        raise ListingFailed("Failed to read the journal %s: %s" % (journal_dir, exc)) from None
    return result
