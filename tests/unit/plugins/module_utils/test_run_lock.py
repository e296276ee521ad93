"""Two runs against one host: the journal flock and the run lock (a lease) keep them apart."""

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils._journal import HostLocked, Journal, LockTimeout, RunLock

COLLECTIONS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "collections")

HOLDER = """
import sys, time
from ansible_collections.stacktune.gpu.plugins.module_utils._journal import Journal
journal = Journal(sys.argv[1])
journal.lock(5)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
journal.unlock()
"""


def hold_flock(directory, seconds):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(COLLECTIONS))
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, directory, str(seconds)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "held"
    return child


def test_second_module_call_waits_for_the_first(tmp_path):
    directory = str(tmp_path / "journal")
    child = hold_flock(directory, 1.0)
    journal = Journal(directory)
    with pytest.raises(LockTimeout, match="another stacktune run holds"):
        journal.lock(0)
    started = time.time()
    journal.lock(10)  # waits, then gets it
    assert time.time() - started > 0.3
    journal.unlock()
    child.wait(10)


def test_second_run_is_refused_naming_the_first(tmp_path):
    lock = RunLock(Journal(str(tmp_path)))
    lock.take("run-a", "alice@ctl", 600)
    with pytest.raises(HostLocked) as exc:
        lock.take("run-b", "bob@ctl", 600)
    message = str(exc.value)
    assert "run run-a (owner alice@ctl)" in message and "force=true" in message
    with pytest.raises(HostLocked):
        lock.check("run-b")  # every engine write of run-b is refused too
    assert lock.check("run-a")["run_id"] == "run-a"
    released, holder = lock.release("run-b")  # a refused run's cleanup leaves run-a's lease alone
    assert not released and holder["run_id"] == "run-a" and lock.holder()["run_id"] == "run-a"
    released, previous = lock.release("run-a")
    assert released and previous["run_id"] == "run-a"
    assert lock.holder() is None
    lock.take("run-b", "bob@ctl", 600)
    assert lock.holder()["run_id"] == "run-b"


def test_lock_file_is_private(tmp_path):
    lock = RunLock(Journal(str(tmp_path / "j")))
    lock.take("run-a", None, 60)
    assert oct(os.stat(lock.path).st_mode & 0o777) == "0o600"
    assert oct(os.stat(str(tmp_path / "j")).st_mode & 0o777) == "0o700"


def test_expired_lease_of_a_killed_run_is_taken_over(tmp_path):
    lock = RunLock(Journal(str(tmp_path)))
    lock.take("killed-run", None, 1)
    time.sleep(1.1)
    assert lock.holder()["expired"]
    lock.check("run-b")
    _changed, previous = lock.take("run-b", None, 600)
    assert previous["run_id"] == "killed-run" and previous["expired"]


def test_force_breaks_a_live_lease(tmp_path):
    lock = RunLock(Journal(str(tmp_path)))
    lock.take("run-a", None, 600)
    _changed, previous = lock.take("run-b", None, 600, force=True)
    assert previous["run_id"] == "run-a"
    assert lock.holder()["run_id"] == "run-b"


def test_renew_extends_only_the_holders_lease(tmp_path):
    lock = RunLock(Journal(str(tmp_path)))
    lock.take("run-a", "alice", 2)
    first = lock.holder()["expires_ts"]
    time.sleep(0.05)
    lock.renew("run-a")
    assert lock.holder()["expires_ts"] > first
    assert lock.holder()["since"] is not None
    with pytest.raises(HostLocked):
        lock.renew("run-b")


def test_torn_lock_file_is_not_a_lease(tmp_path):
    lock = RunLock(Journal(str(tmp_path)))
    with open(lock.path, "w") as handle:
        handle.write('{"run_id": "x", "exp')
    assert lock.holder() is None
    lock.check("run-b")
