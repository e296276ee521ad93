# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stacktune.gpu.run_lock for a controller that comes back after the host's watchdog ended its
lease: the run is refused the host (locked), and the report's check and the run's end (checked,
unlocked) succeed saying how the lease ended. The host is a constructed tree (fakeroot); the
watchdog is the real one, run once in this process."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import watchdog
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import RunLock
from ansible_collections.stacktune.gpu.plugins.modules import run_lock

JOURNAL = "/var/lib/stacktune"


def run_module(capsys, root, **args):
    args = dict(args, root=str(root), journal_dir=JOURNAL)
    with patch_module_args(args), pytest.raises(SystemExit):
        run_lock.main()
    return json.loads(capsys.readouterr().out)


def ended_by_watchdog(root, run_id="run-a"):
    """run_id took the host, then its lease ran out and the host's watchdog released it."""
    lock = RunLock(str(root))
    lock.take(run_id, "alice@ctl", 600, entry="tune")
    # the clocks are not ours to move: the lease is written as expired on both the boot clock
    # (what the lock judges by in the boot it was taken in) and wall time (across a reboot)
    raw = dict(lock.holder(), expires_ts=time.time() - 1, expires_boot=lock.clock.boot() - 1)
    raw.pop("expired", None)
    lock._write(raw, lock.past())  # pylint: disable=protected-access
    watchdog.watch(run_id, JOURNAL, str(root), sleep=lambda _s: None)
    assert lock.holder() is None and lock.past()[-1]["ended"] == "watchdog"


def test_a_run_that_holds_the_host_has_no_lease_ended(capsys, fakeroot):
    taken = run_module(capsys, fakeroot, run_id="run-a", state="locked", entry="tune")
    assert not taken.get("failed") and taken["lease_ended"] is None
    checked = run_module(capsys, fakeroot, run_id="run-a", state="checked")
    assert not checked.get("failed") and checked["lease_ended"] is None
    released = run_module(capsys, fakeroot, run_id="run-a", state="unlocked")
    assert released["lease_ended"] is None and RunLock(str(fakeroot)).holder() is None
    # a run that released the host itself has nothing to say either
    assert run_module(capsys, fakeroot, run_id="run-a", state="unlocked")["lease_ended"] is None


def test_a_controller_back_after_the_watchdog_is_told_and_refused(capsys, fakeroot):
    ended_by_watchdog(fakeroot)
    checked = run_module(capsys, fakeroot, run_id="run-a", state="checked")
    assert not checked.get("failed") and checked["lease_lost"] is True
    assert checked["lease_ended"].startswith("the host's watchdog ended the run: its lease ran out at ")
    retaken = run_module(capsys, fakeroot, run_id="run-a", state="locked", entry="tune", recover=False)
    assert retaken["failed"] and retaken["lease_lost"] is True
    assert "run run-a no longer holds the host: the host's watchdog ended the run" in retaken["msg"]
    assert RunLock(str(fakeroot)).holder() is None, "the lost run took the host back"
    released = run_module(capsys, fakeroot, run_id="run-a", state="unlocked")
    assert not released.get("failed") and "watchdog" in released["lease_ended"]
    # another run may take the host; the lost run's check still says how its lease ended
    run_module(capsys, fakeroot, run_id="run-b", state="locked", entry="tune")
    again = run_module(capsys, fakeroot, run_id="run-a", state="checked")
    assert not again.get("failed") and "watchdog" in again["lease_ended"]


def test_lock_break_takes_a_host_whose_record_cannot_be_read(capsys, fakeroot):
    """The way out the refusal names works: stacktune_lock_break=true (force) takes the host from
    a torn record, for a rollback as for a tune, and says what it replaced."""
    RunLock(str(fakeroot)).take("run-a", "alice@ctl", 600, entry="tune")
    path = fakeroot / "var/lib/stacktune/run.lock"
    path.write_text('{"schema": 2, "holder": {"run_id": "ru')
    refused = run_module(capsys, fakeroot, state="locked", run_id="rollback-1")
    assert refused["failed"] and "cannot be read" in refused["msg"] and "stacktune_lock_break=true" in refused["msg"]
    taken = run_module(capsys, fakeroot, state="locked", run_id="rollback-1", force=True, recover=False)
    assert not taken.get("failed"), taken
    assert RunLock(str(fakeroot)).holder()["run_id"] == "rollback-1"
    released = run_module(capsys, fakeroot, state="unlocked", run_id="rollback-1")
    assert not released.get("failed") and RunLock(str(fakeroot)).holder() is None
