"""Two runs against one host: the host's flock and its run lock (a lease) keep them apart."""

import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import (
    HostLocked,
    LeaseLost,
    LockTimeout,
    RunLock,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.trust import UntrustedJournal

COLLECTIONS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "collections")

HOLDER = """
import sys, time
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
journal = open_journal(sys.argv[2], root=sys.argv[1])
journal.lock(5)
print("held", flush=True)
time.sleep(float(sys.argv[3]))
journal.unlock()
"""


def hold_flock(root, journal_dir, seconds):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(COLLECTIONS))
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, root, journal_dir, str(seconds)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "held"
    return child


def test_second_module_call_waits_for_the_first_whatever_its_journal(tmp_path):
    root = str(tmp_path)
    child = hold_flock(root, "/var/lib/stacktune", 1.0)
    journal = open_journal("/srv/other-journal", root)  # another journal directory, the same host
    with pytest.raises(LockTimeout, match="another stacktune module holds .*/var/lib/stacktune/lock"):
        journal.lock(0)
    started = time.time()
    journal.lock(10)  # waits, then gets it
    assert time.time() - started > 0.3
    journal.unlock()
    child.wait(10)


def test_second_run_is_refused_naming_the_first(tmp_path):
    lock = RunLock(str(tmp_path))
    controller = {"host": "ctl", "user": "alice", "pid": 4242}
    lock.take("run-a", "alice@ctl", 600, controller=controller, entry="tune")
    with pytest.raises(HostLocked) as exc:
        lock.take("run-b", "bob@ctl", 600)
    message = str(exc.value)
    assert "locked by stacktune run run-a (owner alice@ctl, controller ctl pid 4242, tune.yml)" in message
    assert message.endswith("run again with -e stacktune_lock_break=true")
    assert exc.value.holder["run_id"] == "run-a"
    with pytest.raises(HostLocked):
        lock.check("run-b")  # every engine write of run-b is refused too
    with pytest.raises(HostLocked):
        lock.renew("run-b")
    assert lock.check("run-a")["run_id"] == "run-a"
    released, holder = lock.release("run-b")  # a refused run's cleanup leaves run-a's lease alone
    assert not released and holder["run_id"] == "run-a" and lock.holder()["run_id"] == "run-a"
    released, previous = lock.release("run-a")
    assert released and previous["run_id"] == "run-a"
    assert lock.holder() is None
    lock.take("run-b", "bob@ctl", 600)
    assert lock.holder()["run_id"] == "run-b"


def test_one_lock_per_host_whatever_the_journal_directory(tmp_path):
    """Two runs with two journal directories share the host's one lease."""
    root = str(tmp_path)
    assert RunLock(root).path == os.path.join(root, "var/lib/stacktune/run.lock")
    RunLock(root).take("run-a", None, 600)
    with pytest.raises(HostLocked):
        RunLock(root).take("run-b", None, 600)


def test_lock_file_is_private(tmp_path):
    lock = RunLock(str(tmp_path))
    lock.take("run-a", None, 60)
    assert oct(os.stat(lock.path).st_mode & 0o777) == "0o600"
    assert oct(os.stat(lock.directory).st_mode & 0o777) == "0o700"


def test_expired_lease_of_a_killed_run_is_taken_over(tmp_path):
    lock = RunLock(str(tmp_path))
    lock.take("killed-run", None, 1)
    time.sleep(1.1)
    assert lock.holder()["expired"]
    lock.check("run-b")
    _changed, previous = lock.take("run-b", None, 600)
    assert previous["run_id"] == "killed-run" and previous["expired"]
    assert lock.ended("killed-run")["ended"] == "expired"


def test_force_breaks_a_live_lease_and_the_old_run_can_no_longer_write(tmp_path):
    lock = RunLock(str(tmp_path))
    lock.take("run-a", None, 600)
    _changed, previous = lock.take("run-b", None, 600, force=True)
    assert previous["run_id"] == "run-a"
    assert lock.holder()["run_id"] == "run-b"
    # run-a's worker, still alive somewhere, is refused its next write: it must stop
    with pytest.raises(LeaseLost, match="run run-b broke its lease .*stops without touching the host"):
        lock.renew("run-a")


def test_takeover_takes_only_the_named_run(tmp_path):
    lock = RunLock(str(tmp_path))
    lock.take("run-a", None, 600)
    with pytest.raises(HostLocked):
        lock.take("run-b", None, 600, takeover="some-other-run")
    lock.take("run-b", None, 600, takeover="run-a")
    assert lock.holder()["run_id"] == "run-b"
    with pytest.raises(LeaseLost, match="took the host over"):
        lock.renew("run-a")


def test_a_released_run_is_refused_later_writes(tmp_path):
    """The orphan of a killed controller must not write after its lock was released by hand."""
    lock = RunLock(str(tmp_path))
    lock.take("run-a", None, 600)
    lock.release("manual", force=True)
    assert lock.holder() is None
    with pytest.raises(LeaseLost, match="run run-a no longer holds the host"):
        lock.renew("run-a")
    lock.renew("manual")  # a direct call that never held the host may write while it is free


def test_renew_extends_only_the_holders_lease(tmp_path):
    lock = RunLock(str(tmp_path))
    lock.take("run-a", "alice", 2, controller={"host": "ctl", "pid": 1})
    first = lock.holder()["expires_ts"]
    time.sleep(0.05)
    lock.renew("run-a")
    holder = lock.holder()
    assert holder["expires_ts"] > first
    assert holder["since"] is not None and holder["owner"] == "alice" and holder["controller"]["pid"] == 1
    with pytest.raises(HostLocked):
        lock.renew("run-b")


def test_own_expired_lease_is_renewed_when_nobody_took_it(tmp_path):
    lock = RunLock(str(tmp_path))
    lock.take("run-a", None, 1)
    time.sleep(1.1)
    lock.renew("run-a", ttl=600)
    assert not lock.holder()["expired"]


def test_torn_lock_file_is_not_a_lease(tmp_path):
    lock = RunLock(str(tmp_path))
    os.makedirs(lock.directory)
    with open(lock.path, "w") as handle:
        handle.write('{"run_id": "x", "exp')
    assert lock.holder() is None
    lock.check("run-b")


def test_lease_of_the_earlier_layout_is_still_read(tmp_path):
    lock = RunLock(str(tmp_path))
    os.makedirs(lock.directory)
    with open(lock.path, "w") as handle:
        json.dump({"run_id": "old", "owner": "x", "expires_ts": time.time() + 60, "since": "t"}, handle)
    with pytest.raises(HostLocked, match="run old"):
        lock.check("new")


def test_a_linked_lock_file_is_refused_and_its_target_left_alone(tmp_path):
    """The lock decides who may change the host: it is read like a journal record, never through a link."""
    lock = RunLock(str(tmp_path))
    os.makedirs(lock.directory, mode=0o700)
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"schema": 2, "holder": None, "past": []}))
    os.symlink(str(target), lock.path)
    with pytest.raises(UntrustedJournal, match="run.lock is a symbolic link"):
        lock.holder()
    with pytest.raises(UntrustedJournal, match="symbolic link"):
        lock.take("run-a", None, 60)
    assert json.loads(target.read_text()) == {"schema": 2, "holder": None, "past": []}
    assert os.path.islink(lock.path)


def test_a_lock_file_others_can_write_is_refused(tmp_path):
    lock = RunLock(str(tmp_path))
    lock.take("run-a", None, 60)
    lock.release("run-a")
    os.chmod(lock.path, 0o666)
    with pytest.raises(UntrustedJournal, match="writable by its group or by others"):
        lock.take("run-b", None, 60)
