"""The host's watchdog of a tune run: a cut-off controller's undecided layers are put back once
its lease expires; a run that ends (released, taken over) leaves the watchdog nothing to do.

The host is a constructed tree (the fakeroot fixture: kernel interfaces as plain files); the
spawned watchdog is a real process that imports the collection from this checkout, as it
imports it from its copy of the module's payload on a real host.
"""

import json
import os
import signal
import subprocess
import time

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import watchdog
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import HostLocked, LeaseLost, RunLock

JOURNAL = "/var/lib/stacktune"
SPECS = [{"kind": "sysctl", "key": "vm.swappiness", "value": 10}]


def applied(root, run_id="run-a", ttl=600, state="applied"):
    """A layer applied by run_id under its lease (switched off mid-trial with state=suspended)."""
    RunLock(str(root)).take(run_id, "alice@ctl", ttl, entry="tune")
    engine = Engine(Context("kernel", root=str(root), run_command=None), open_journal(JOURNAL, str(root)))
    engine.apply(SPECS, run_id)
    if state == "suspended":
        engine.suspend(run_id)
    return engine


def swappiness(root):
    with open(os.path.join(str(root), "proc/sys/vm/swappiness")) as handle:
        return handle.read().strip()


def expire(root, run_id="run-a"):
    lock = RunLock(str(root))
    holder = lock.holder()
    raw = dict(holder, expires_ts=time.time() - 1, expires_boot=lock.clock.boot() - 1)
    raw.pop("expired", None)
    # the clock is not ours to move: the lease is written as expired
    lock._write(raw, lock.past())  # pylint: disable=protected-access


@pytest.mark.parametrize("state", ["applied", "suspended"])
def test_an_expired_lease_puts_the_undecided_layer_back(fakeroot, hash_tree, state):
    before = hash_tree(fakeroot / "proc")
    applied(fakeroot, state=state)
    if state == "applied":
        assert swappiness(fakeroot) == "10"
    expire(fakeroot)
    out = watchdog.watch("run-a", JOURNAL, str(fakeroot), sleep=lambda _s: None)
    assert out["put_back"] == ["kernel"]
    assert hash_tree(fakeroot / "proc") == before and swappiness(fakeroot) == "60"
    entry = open_journal(JOURNAL, str(fakeroot)).load("kernel")
    assert entry["state"] == "new"
    reason = entry["interrupted"]["reason"]
    assert reason.startswith("interrupted: the controller was lost: run run-a: its lease expired")
    lock = RunLock(str(fakeroot))
    assert lock.holder() is None and lock.past()[-1]["ended"] == "watchdog"
    # the controller comes back: its lease is gone, it touches nothing
    with pytest.raises(LeaseLost, match="nobody renewing it, and the host put its undecided layers back"):
        lock.renew("run-a")


def test_a_decided_layer_is_left_as_it_is(fakeroot):
    engine = applied(fakeroot)
    engine.keep("run-a", {"decision": "keep", "basis": "gain", "reason": "measured better"})
    expire(fakeroot)
    out = watchdog.watch("run-a", JOURNAL, str(fakeroot), sleep=lambda _s: None)
    assert out["put_back"] == []
    assert swappiness(fakeroot) == "10"


def test_a_run_that_ends_ends_its_watchdog_and_touches_nothing(fakeroot):
    applied(fakeroot)
    looks = []

    def sleep(_s):
        looks.append(1)
        if len(looks) == 3:
            RunLock(str(fakeroot)).release("run-a")

    out = watchdog.watch("run-a", JOURNAL, str(fakeroot), sleep=sleep)
    assert out == {"ended": "the run no longer holds the host"}
    assert swappiness(fakeroot) == "10"


def test_a_lease_taken_over_by_another_run_is_not_touched(fakeroot):
    applied(fakeroot)
    expire(fakeroot)
    RunLock(str(fakeroot)).take("run-b", "bob@ctl", 600)  # the next run took the expired lease first
    out = watchdog.watch("run-a", JOURNAL, str(fakeroot), sleep=lambda _s: None)
    assert "ended" in out and swappiness(fakeroot) == "10"


def wait_for(what, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if what():
            return True
        time.sleep(0.2)
    return False


def test_a_spawned_watchdog_outlives_its_parent_and_puts_the_layer_back(fakeroot):
    applied(fakeroot, ttl=60, state="suspended")
    pid = watchdog.spawn("run-a", JOURNAL, str(fakeroot))
    assert pid
    record = os.path.join(str(fakeroot), JOURNAL.lstrip("/"), "watchdog", "run-a.json")
    with open(record) as handle:
        assert json.load(handle)["pid"] == pid
    assert watchdog.spawn("run-a", JOURNAL, str(fakeroot)) is None  # one per run
    # nobody renews the lease: once it runs out, the watchdog puts the layer back and ends
    expire(fakeroot)
    assert wait_for(lambda: RunLock(str(fakeroot)).holder() is None), "the watchdog did not act"
    assert swappiness(fakeroot) == "60"
    assert wait_for(lambda: not os.path.exists(record)), "the watchdog left its record"
    assert wait_for(lambda: not os.path.exists("/proc/%d" % pid) or _zombie(pid))


def _zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().split(")")[1].split()[0] == "Z"
    except OSError:
        return True


def controller_of(pid):
    from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import (
        boot_id,
        pid_namespace,
        process_start,
    )

    return {"host": "ctl", "boot_id": boot_id(), "pid_ns": pid_namespace(), "pid": pid, "pid_start": process_start(pid)}


def test_the_watchdog_holds_the_host_and_never_ends_a_live_controllers_lease(fakeroot):
    """A clock that says the lease ran out ends nothing while the controller runs here, and
    no second run takes the host while the watchdog holds run.hold."""
    lock = RunLock(str(fakeroot))
    lock.take("run-a", "alice@ctl", 60, entry="tune", controller=controller_of(os.getpid()))
    Engine(Context("kernel", root=str(fakeroot)), open_journal(JOURNAL, str(fakeroot))).apply(SPECS, "run-a")
    pid = watchdog.spawn("run-a", JOURNAL, str(fakeroot))
    folder = os.path.join(str(fakeroot), JOURNAL.lstrip("/"))
    assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
    assert oct(os.stat(os.path.join(folder, "watchdog", "run-a.json")).st_mode & 0o777) == "0o600"
    try:
        assert wait_for(lock.held), "the watchdog did not take run.hold"
        expire(fakeroot)  # as a stepped clock would make it look
        time.sleep(2 * watchdog.POLL_S + 0.5)
        assert lock.holder()["run_id"] == "run-a" and swappiness(fakeroot) == "10"  # not ended
        with pytest.raises(HostLocked, match="its watchdog still holds"):
            RunLock(str(fakeroot)).take("run-b", "bob@ctl", 60)
        lock.release("run-a")
        assert wait_for(lambda: not lock.held()), "the watchdog did not end with its run"
        RunLock(str(fakeroot)).take("run-b", "bob@ctl", 60)
    finally:
        if os.path.exists("/proc/%d" % pid) and not _zombie(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_rollback_stopped_by_a_signal_gives_the_host_back_and_says_what_to_run(fakeroot):
    engine = Engine(Context("kernel", root=str(fakeroot)), open_journal(JOURNAL, str(fakeroot)))
    engine.apply(SPECS, "tune-1")
    engine.keep("tune-1", {"decision": "keep", "basis": "gain"})
    controller = subprocess.Popen(["sleep", "60"])  # the rollback's ansible-playbook
    lock = RunLock(str(fakeroot))
    lock.take("rollback-1", "alice@ctl", 600, entry="rollback", controller=controller_of(controller.pid))
    controller.send_signal(signal.SIGTERM)  # ansible-playbook ends without running its rescue
    controller.wait()
    out = watchdog.watch("rollback-1", JOURNAL, str(fakeroot), sleep=lambda _s: None)
    assert "rollback run rollback-1 was stopped" in out["note"] and "kernel kept" in out["note"]
    assert "run playbooks/rollback.yml again to finish" in out["note"]
    assert lock.holder() is None  # the host is free at once, not at the lease's end
    nxt = RunLock(str(fakeroot))
    nxt.take("rollback-2", "alice@ctl", 600, entry="rollback")
    assert any("watchdog ended the last run: rollback run rollback-1 was stopped" in n for n in nxt.notes)
    with pytest.raises(LeaseLost, match="run playbooks/rollback.yml again"):
        lock.renew("rollback-1")


def test_a_torn_lock_record_does_not_end_the_watchdog(fakeroot):
    """The watchdog keeps holding the host while the record cannot be read, and acts once it can."""
    applied(fakeroot)
    lock = RunLock(str(fakeroot))
    raw, past = lock._read()  # pylint: disable=protected-access
    with open(lock.path, "w") as handle:
        handle.write('{"holder": {"run_id": "run-a", "exp')
    looks = []

    def sleep(_s):
        looks.append(1)
        if len(looks) == 3:  # the record is whole again, and the lease has run out
            lock._write(dict(raw, expires_ts=0.0, expires_boot=0.0), past)  # pylint: disable=protected-access

    out = watchdog.watch("run-a", JOURNAL, str(fakeroot), sleep=sleep)
    assert len(looks) == 3 and out["put_back"] == ["kernel"] and swappiness(fakeroot) == "60"
