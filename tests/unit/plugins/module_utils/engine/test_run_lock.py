"""Two runs against one host: the host's flock and its run lock (a lease) keep them apart."""

import errno
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
    Clock,
    LockTimeout,
    RunLock,
    UnreadableLock,
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


def test_torn_lock_file_is_refused_naming_it_never_a_free_host(tmp_path):
    lock = RunLock(str(tmp_path))
    lock.take("run-a", None, 600)
    with open(lock.path, "w") as handle:
        handle.write('{"run_id": "x", "exp')
    for call in (lock.holder, lambda: lock.check("run-b"), lambda: lock.take("run-b", None, 600)):
        with pytest.raises(UnreadableLock, match="run lock %s cannot be read.*stacktune_lock_break" % lock.path):
            call()
    assert lock.release("run-b") == (False, None)  # a refused run's clean-up leaves it too
    assert any("not released" in n and "cannot be read" in n for n in lock.notes)
    with open(lock.path) as handle:
        assert handle.read() == '{"run_id": "x", "exp'  # refused: left as found
    with open(lock.path, "w") as handle:
        handle.write("[1, 2]")
    with pytest.raises(UnreadableLock, match="holds no lease record"):
        lock.holder()
    lock.take("run-b", None, 600, force=True)  # breaking the lock replaces it
    assert lock.holder()["run_id"] == "run-b"


class SteppedClock(Clock):
    """A stand-in clock the lock reads: the wall clock steps, the boot clock does not."""

    def __init__(self):
        self.step = 0.0

    def wall(self):
        return time.time() + self.step


def test_a_wall_clock_step_neither_ends_nor_extends_a_lease(tmp_path):
    clock = SteppedClock()
    lock = RunLock(str(tmp_path), clock=clock)
    lock.take("run-a", None, 60, controller={"host": "ctl", "pid": 1})
    clock.step = 2 * 3600.0  # an NTP correction or a VM resume: two hours forward
    assert not lock.holder()["expired"]
    with pytest.raises(HostLocked, match="locked by stacktune run run-a"):
        lock.take("run-b", None, 60)
    lock.renew("run-a")  # the renewal notices the jump and says so
    assert lock.holder()["clock_step"]["seconds"] == 7200
    assert any("wall clock jumped +7200s" in n for n in lock.notes), lock.notes
    assert "the wall clock jumped +7200s" in lock.describe(lock.holder())
    clock.step = -3600.0  # and back (and more): the lease does not last longer for it
    assert not lock.holder()["expired"]
    raw, past = lock._read()  # pylint: disable=protected-access
    raw["expires_boot"] = clock.boot() - 1  # its boot-clock time ran out
    lock._write(raw, past)  # pylint: disable=protected-access
    assert lock.holder()["expired"]


def test_a_lease_of_another_boot_is_judged_on_wall_time(tmp_path):
    lock = RunLock(str(tmp_path))
    lock.take("run-a", None, 60)
    raw, past = lock._read()  # pylint: disable=protected-access
    lock._write(dict(raw, boot_id="an-earlier-boot", expires_boot=0.0), past)  # pylint: disable=protected-access
    assert not lock.holder()["expired"]  # wall time says 60 s left
    lock._write(dict(raw, boot_id="an-earlier-boot", expires_ts=time.time() - 1), past)  # pylint: disable=protected-access
    assert lock.holder()["expired"]


def test_a_second_holder_with_the_same_run_id_is_refused(tmp_path):
    lock = RunLock(str(tmp_path))
    first = {"host": "ctl", "pid": 100, "pid_start": 5}
    lock.take("20260101T000000Z", None, 600, controller=first)
    with pytest.raises(HostLocked, match="locked by stacktune run 20260101T000000Z"):
        lock.take("20260101T000000Z", None, 600, controller={"host": "ctl", "pid": 101, "pid_start": 9})
    lock.take("20260101T000000Z", None, 600, controller=first)  # the same controller renews
    assert lock.holder()["controller"] == first


HOLD = """
import sys, time
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import RunLock
lock = RunLock(sys.argv[1])
assert lock.hold(5)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_held_run_hold_refuses_a_second_run_whatever_the_record_says(tmp_path):
    """Exclusion rests on a process holding run.hold (the run's watchdog), not on the record."""
    lock = RunLock(str(tmp_path))
    lock.take("run-a", None, 1)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(COLLECTIONS))
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path), "60"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "held"
        raw, past = lock._read()  # pylint: disable=protected-access
        lock._write(dict(raw, expires_ts=0.0, expires_boot=0.0), past)  # pylint: disable=protected-access
        assert lock.holder()["expired"] and lock.held()
        with pytest.raises(HostLocked, match="its lease looks run out, but its watchdog still holds .*run.hold"):
            lock.take("run-b", None, 60)
        lock._write(None, past)  # pylint: disable=protected-access
        with pytest.raises(HostLocked, match="a stacktune process holds the host .*run.hold"):
            lock.take("run-b", None, 60)
        assert lock.holder() is None
    finally:
        child.kill()
        child.wait()
    assert not lock.held()  # the holder is gone: its flock went with it
    lock.take("run-b", None, 60)
    assert lock.holder()["run_id"] == "run-b"


@pytest.fixture
def full_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only) filled to the last block: a real ENOSPC."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=False).returncode:
        pytest.skip("mounting a tmpfs needs root")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory):
    """Write until the file system has no block left (ENOSPC)."""
    fd = os.open(os.path.join(str(directory), "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 512)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_release_on_a_full_disk_frees_the_host(full_tmpfs):
    lock = RunLock(str(full_tmpfs))
    lock.take("run-a", None, 600)
    fill(full_tmpfs)
    with pytest.raises(OSError, match="No space left"):
        lock.take("run-a", None, 600)  # a renewal needs a new file: it fails
    released, _holder = lock.release("run-a")
    assert released and os.path.getsize(lock.path) == 0
    assert any("could not be rewritten" in n and "No space left" in n for n in lock.notes)
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


def test_a_lease_renewal_on_a_full_disk_says_so(full_tmpfs, monkeypatch):
    """The measured block's renewal meets a full disk: the block stops naming it, never 'unknown error'."""
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import LeaseRenewalFailed, lease_ticker
    from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import measure
    from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import BenchFailure

    lock = RunLock(str(full_tmpfs))
    lock.take("run-a", None, 600)
    fill(full_tmpfs)
    with pytest.raises(LeaseRenewalFailed, match="could not renew run run-a's lease in .*No space left on device"):
        lease_ticker("run-a", root=str(full_tmpfs))()
    monkeypatch.setattr(measure, "lease_ticker", lambda run_id: lease_ticker(run_id, root=str(full_tmpfs)))
    with pytest.raises(BenchFailure, match="Failed to measure a block: could not renew .*No space left on device"):
        measure.run_process("workload x", [sys.executable, "-c", "pass"], dict(os.environ), 30, run_id="run-a")
    assert lock.holder()["run_id"] == "run-a"  # nothing else changed: the run's rescue gives the host back


def test_a_measured_blocks_renewal_rewrites_a_torn_record_for_the_run_whose_watchdog_holds_the_host(fakeroot):
    """A block's lease ticker meets a torn run.lock: the run named by the holder of run.hold has the
    record rewritten and goes on; another run's ticker is refused."""
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import lease_ticker

    lock = RunLock(str(fakeroot))
    lock.take("run-a", "alice@ctl", 600)
    with open(lock.path, "w") as handle:
        handle.write('{"schema": 2, "holder": {"run_id": "ru')
    watchdog_of_a = RunLock(str(fakeroot))
    assert watchdog_of_a.hold(1, "run-a") and lock.held_by() == "run-a"
    try:
        with pytest.raises(HostLocked):
            lease_ticker("run-b", str(fakeroot))()
        lease_ticker("run-a", str(fakeroot))()
        assert lock.holder()["run_id"] == "run-a"
    finally:
        watchdog_of_a.unhold()
    assert lock.held_by() is None
