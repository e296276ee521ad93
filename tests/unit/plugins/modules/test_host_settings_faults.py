"""host_settings under faults: the module's words for a wall-clock step its renewal saw and for
an apply whose persist fails (a read-only bind mount), on a constructed root."""

from __future__ import absolute_import, division, print_function

import json
import os
import subprocess

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import RunLock
from ansible_collections.stacktune.gpu.plugins.modules import host_settings

SETTINGS = [{"kind": "sysctl", "key": "vm.swappiness", "value": "10"}]


def run_module(capsys, root, **args):
    args = dict({"root": str(root), "journal_dir": "/var/lib/stacktune", "layer": "kernel"}, **args)
    with patch_module_args(args), pytest.raises(SystemExit):
        host_settings.main()
    return json.loads(capsys.readouterr().out)


def test_a_renewal_that_sees_the_wall_clock_jump_says_so(capsys, fakeroot):
    lock = RunLock(str(fakeroot))
    lock.take("run-a", "alice@ctl", 600)
    raw, past = lock._read()  # pylint: disable=protected-access
    # the record as a wall clock stepped 2 h forward since the last renewal leaves it
    lock._write(dict(raw, renewed_ts=raw["renewed_ts"] - 7200), past)  # pylint: disable=protected-access
    out = run_module(capsys, fakeroot, settings=SETTINGS, run_id="run-a")
    assert not out.get("failed"), out
    assert any("the wall clock jumped +7200s since run run-a last renewed its lease" in n for n in out["notes"])
    assert lock.holder()["clock_step"]["seconds"] == 7200


def test_a_failed_persist_fails_the_module_saying_the_host_was_put_back(capsys, fakeroot, hash_tree):
    before = hash_tree(fakeroot)
    target = os.path.join(str(fakeroot), "etc/sysctl.d")
    os.makedirs(target)
    if subprocess.run(["mount", "--bind", target, target], check=False).returncode:
        pytest.skip("a bind mount needs root")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)
        out = run_module(capsys, fakeroot, settings=SETTINGS, run_id="run-a")
    finally:
        subprocess.run(["umount", "-l", target], check=False)
    assert out["failed"]
    assert out["msg"].startswith("Failed to apply layer kernel: persisting the layer's settings failed: [Errno 30]")
    assert "every change of this apply was put back" in out["msg"] and "the journal says restored" in out["msg"]
    assert hash_tree(fakeroot) == before
    assert open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")["state"] == "restored"


# ------------------------------------------------------------------ undo first, record after


def _switched_on(capsys, root):
    """run-a holds the host and has applied the kernel layer (vm.swappiness 10)."""
    RunLock(str(root)).take("run-a", "alice@ctl", 600)
    out = run_module(capsys, root, settings=SETTINGS, run_id="run-a")
    assert not out.get("failed"), out
    return read_swappiness(root)


def read_swappiness(root):
    with open(os.path.join(str(root), "proc/sys/vm/swappiness")) as handle:
        return handle.read().strip()


def tear(root):
    with open(os.path.join(str(root), "var/lib/stacktune/run.lock"), "w") as handle:
        handle.write('{"schema": 2, "holder": {"run_id": "ru')


@pytest.mark.parametrize("state", ["suspended", "interrupted", "restored"])
def test_a_torn_lease_record_never_keeps_a_layer_on_the_host(capsys, fakeroot, state):
    original = "60"
    assert _switched_on(capsys, fakeroot) == "10"
    tear(fakeroot)  # between two switches of the layer
    args = {"restore_to": "snapshot"} if state == "restored" else {}
    out = run_module(capsys, fakeroot, state=state, run_id="run-a", **args)
    assert not out.get("failed"), out
    assert read_swappiness(fakeroot) == original  # put back first
    assert "the layer was put back first; the lease could not be renewed" in out["lease_trouble"]
    assert "stacktune_lock_break=true" in out["lease_trouble"]
    # the record is left as found (no watchdog of run-a holds the host to vouch for a rewrite)
    assert RunLock(str(fakeroot)).readable() is not None


def test_a_torn_lease_record_refuses_a_change_and_another_runs_undo(capsys, fakeroot):
    _switched_on(capsys, fakeroot)
    tear(fakeroot)
    out = run_module(capsys, fakeroot, state="reapplied", run_id="run-a")
    assert out["failed"] and "cannot be read" in out["msg"]
    # a run that did not apply the layer does not put it back on a record nobody can read
    out = run_module(capsys, fakeroot, state="interrupted", run_id="run-b")
    assert out["failed"] and read_swappiness(fakeroot) == "10"


def test_the_runs_watchdog_vouches_for_it_and_the_record_is_rewritten(capsys, fakeroot):
    _switched_on(capsys, fakeroot)
    tear(fakeroot)
    lock = RunLock(str(fakeroot))
    assert lock.hold(1, "run-b")  # another run's watchdog holds run.hold: run-a's record is not rewritten
    try:
        out = run_module(capsys, fakeroot, state="reapplied", run_id="run-a")
        assert out["failed"] and "cannot be read" in out["msg"]
    finally:
        lock.unhold()
    assert lock.hold(1, "run-a")  # stands for run-a's watchdog holding run.hold
    try:
        out = run_module(capsys, fakeroot, state="suspended", run_id="run-a")
        assert not out.get("failed"), out
        assert read_swappiness(fakeroot) == "60" and "lease_trouble" not in out
        assert any("it was rewritten for run run-a, whose watchdog holds the host" in n for n in out["notes"])
        assert RunLock(str(fakeroot)).holder()["run_id"] == "run-a"
        # the run goes on: the layer is switched on again under the rewritten lease
        out = run_module(capsys, fakeroot, state="reapplied", run_id="run-a")
        assert not out.get("failed"), out
        assert read_swappiness(fakeroot) == "10"
    finally:
        lock.unhold()


def test_a_lease_that_cannot_be_written_never_keeps_a_layer_on_the_host(capsys, fakeroot, monkeypatch):
    _switched_on(capsys, fakeroot)

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunLock, "_write", full)
    out = run_module(capsys, fakeroot, state="restored", restore_to="snapshot", run_id="run-a")
    assert not out.get("failed"), out
    assert read_swappiness(fakeroot) == "60"
    assert "the lease could not be renewed in" in out["lease_trouble"] and "No space left" in out["lease_trouble"]
    # a change is refused on the same disk
    out = run_module(capsys, fakeroot, settings=SETTINGS, run_id="run-a")
    assert out["failed"] and "No space left" in out["msg"] and read_swappiness(fakeroot) == "60"


def test_lock_break_replaces_an_unreadable_record(fakeroot):
    RunLock(str(fakeroot)).take("run-a", "alice@ctl", 600)
    tear(fakeroot)
    lock = RunLock(str(fakeroot))
    assert lock.release("run-x", force=True) == (True, None)
    assert lock.readable() is None and lock.holder() is None
    assert any("replaced by a free one" in n for n in lock.notes)


def test_a_journal_that_cannot_record_a_put_back_still_puts_the_layer_back(capsys, fakeroot, monkeypatch):
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import Journal

    _switched_on(capsys, fakeroot)

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Journal, "save", full)
    out = run_module(capsys, fakeroot, state="interrupted", run_id="run-a")
    assert not out.get("failed"), out
    assert read_swappiness(fakeroot) == "60"
    assert (
        "layer kernel is back on the host as it was before the run, but the journal could not record it"
        in (out["lease_trouble"])
    )
    monkeypatch.undo()
    # the next run finds the layer still applied, puts it back again and changes nothing on the host
    assert open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")["state"] == "applied"
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context

    journal = open_journal("/var/lib/stacktune", str(fakeroot))
    outcome = Engine(Context("kernel", root=str(fakeroot)), journal).recover("run-b")  # what taking the host does
    assert outcome["changed"] and read_swappiness(fakeroot) == "60"
    assert journal.load("kernel")["state"] != "applied"
