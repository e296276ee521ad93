"""No clock step ends a measurement: a lease is judged on the boot clock within the boot that
wrote it (the lock, the watchdog and the block runner read it the same way), and the runner's
idle time is on the monotonic clock. Stand-in clocks."""

import json

from ansible_collections.stacktune.gpu.plugins.module_utils.common import hostproc
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import program

LEASE = {"run_id": "run-a", "boot_id": "b1", "expires_boot": 1300.0, "expires_ts": 1_000_300.0}


def test_a_wall_clock_step_neither_ends_nor_extends_a_lease():
    def boot():
        return 1000.0  # 300 s before the lease's end on the boot clock

    def this():
        return "b1"

    for wall in (1_000_000.0, 1_000_000.0 + 7200, 1_000_000.0 - 7200):  # no step, +2 h, -2 h
        assert not hostproc.lease_expired(LEASE, lambda w=wall: w, boot, this)
    assert hostproc.lease_expired(LEASE, lambda: 1_000_000.0, lambda: 1300.5, this)
    # across a reboot the boot clock of the lease means nothing: wall time decides
    assert hostproc.lease_expired(LEASE, lambda: 1_000_301.0, lambda: 5.0, lambda: "b2")
    assert not hostproc.lease_expired(LEASE, lambda: 1_000_299.0, lambda: 5.0, lambda: "b2")


def test_the_block_runner_reads_the_lease_on_the_boot_clock(tmp_path, monkeypatch):
    """The runner ended its run's blocks when the wall clock jumped 2 h (a lease judged on wall
    time looked expired); now it judges the lease as the lock does."""
    now = hostproc.boot_clock()
    lease = dict(LEASE, boot_id=hostproc.boot_id(), expires_boot=now + 300, expires_ts=0.0)
    path = tmp_path / "run.lock"
    path.write_text(json.dumps({"schema": 2, "holder": lease, "past": []}))
    assert program._lease_holder(str(path)) == "run-a"  # pylint: disable=protected-access
    path.write_text(json.dumps({"schema": 2, "holder": dict(lease, expires_boot=now - 1), "past": []}))
    assert program._lease_holder(str(path)) is None  # pylint: disable=protected-access


def test_a_frozen_controller_loses_the_host_at_its_leases_end():
    """A controller stopped with SIGSTOP renews nothing: the watchdog treats it like one on another
    machine (its lease ends at its TTL), and as alive again once it is continued."""
    import signal
    import subprocess
    import time

    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import controller_alive_here

    proc = subprocess.Popen(["sleep", "30"])  # pylint: disable=consider-using-with
    try:
        record = {
            "pid": proc.pid,
            "pid_start": hostproc.process_start(proc.pid),
            "boot_id": hostproc.boot_id(),
            "pid_ns": hostproc.pid_namespace(),
        }
        assert controller_alive_here(record)
        proc.send_signal(signal.SIGSTOP)
        for _attempt in range(50):
            if hostproc.pid_stopped(record):
                break
            time.sleep(0.02)
        assert not controller_alive_here(record)
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.1)
        assert controller_alive_here(record)
    finally:
        proc.kill()
        proc.wait()


def test_a_torn_record_does_not_end_the_block_runner(tmp_path):
    path = tmp_path / "run.lock"
    path.write_text('{"schema": 2, "holder": {"run_id": "ru')
    assert program._lease_holder(str(path)) == program.UNREADABLE  # pylint: disable=protected-access
    assert program._lease_holder(str(tmp_path / "absent")) is None  # pylint: disable=protected-access
