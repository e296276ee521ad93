# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The block runner with the CPU workloads (real processes, no GPU needed): blocks forked from
the warm parent give the same result as fresh ones, a hang is killed, and the runner ends when
asked or as soon as its run no longer holds the host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys
import time

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.common import hostproc
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import files
from ansible_collections.stacktune.gpu.plugins.module_utils.common import process
from ansible_collections.stacktune.gpu.plugins.modules import bench
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import runner_client
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import BenchFailure
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.measure import measure
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.source import program_source
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import program as workload_program


def params(**extra):
    given = dict({"workload": "cpu_train_step", "steps": 30, "warmup": 3, "python": sys.executable}, **extra)
    return bench.default_params(**given)


@pytest.fixture
def runner():
    started = measure(params(runner_state="started"))
    yield started
    measure(params(runner_state="stopped", runner_socket=started["runner_socket"]))


def test_a_block_in_the_runner_is_a_block_of_its_own(runner):
    fresh = measure(params())
    warm = measure(params(runner_socket=runner["runner_socket"]))
    assert warm["workload"] == fresh["workload"] == "cpu_train_step"
    assert len(warm["samples_ms"]) == len(fresh["samples_ms"]) == 30
    assert set(warm) == set(fresh)
    other = measure(params(workload="shm_pingpong", runner_socket=runner["runner_socket"]))
    assert other["workload"] == "shm_pingpong"


@pytest.mark.one_core
def test_a_file_block_in_the_runner_and_one_killed_there_leave_nothing(runner, tmp_path):
    """The runner kills a block by its process group (SIGKILL): the file workload's private
    directory stays behind, and the next block removes it before it writes its own."""
    data = tmp_path / "data"
    data.mkdir()
    sock = runner["runner_socket"]
    block = measure(params(workload="file_dataloader", data_dir=str(data), size=8, runner_socket=sock))
    assert block["workload"] == "file_dataloader" and len(block["samples_ms"]) == 30
    assert block["throughput"]["unit"] == "GB/s" and os.listdir(str(data)) == []
    with pytest.raises(BenchFailure) as exc:
        measure(params(workload="file_dataloader", data_dir=str(data), steps=10**7, timeout=4, runner_socket=sock))
    assert exc.value.extra["failure"] == "hang"
    left = os.listdir(str(data))
    assert len(left) == 1 and left[0].startswith(files.FILE_PREFIX)
    again = measure(params(workload="file_dataloader", data_dir=str(data), size=8, runner_socket=sock))
    assert again["details"]["info"]["stale_removed"] == left
    assert os.listdir(str(data)) == []


@pytest.mark.one_core
def test_a_hang_in_the_runner_is_killed(runner):
    with pytest.raises(BenchFailure) as exc:
        measure(params(steps=10**7, timeout=1, runner_socket=runner["runner_socket"]))
    assert exc.value.extra["failure"] == "hang"
    # the runner still answers afterwards
    assert measure(params(runner_socket=runner["runner_socket"]))["workload"] == "cpu_train_step"


def test_stopping_the_runner_removes_its_folder(runner):
    folder = os.path.dirname(runner["runner_socket"])
    measure(params(runner_state="stopped", runner_socket=runner["runner_socket"]))
    deadline = time.time() + 5
    while os.path.exists(folder) and time.time() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(folder)


def start_serving(tmp_path, holder):
    lock = tmp_path / "run.lock"
    lock.write_text(json.dumps({"holder": holder, "past": []}))
    sock = os.path.join(runner_client.runner_folder(), "runner.sock")
    cfg = {"serve": {"socket": sock, "run_id": "r1", "lock_path": str(lock), "idle_s": 60, "preload": []}}
    program = os.path.join(os.path.dirname(sock), "p.py")
    with open(program, "w") as out:
        out.write(program_source())
    proc = process.start_detached([sys.executable, program, json.dumps(cfg)], str(tmp_path), str(tmp_path / "log"))
    deadline = time.time() + 10
    while not os.path.exists(sock) and time.time() < deadline:
        time.sleep(0.05)
    return proc, sock


@pytest.mark.one_core
def test_the_runner_ends_when_its_run_loses_the_host(tmp_path):
    proc, sock = start_serving(tmp_path, {"run_id": "r1", "expires_ts": time.time() + 600})
    assert proc.poll() is None
    (tmp_path / "run.lock").write_text(json.dumps({"holder": None, "past": [{"run_id": "r1", "ended": "released"}]}))
    proc.wait(10)
    assert not os.path.exists(os.path.dirname(sock))


@pytest.mark.one_core
def test_the_runner_ends_when_its_controller_on_this_machine_is_gone(tmp_path):
    """A controller killed between two layers (SIGKILL: nothing releases the lease) leaves the
    run's runner idle; it ends as soon as it sees that the lease's controller process, on this
    machine and in its pid namespace, is gone, not when the lease expires minutes later."""
    import subprocess

    controller = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ident = {
        "host": "here",
        "boot_id": hostproc.boot_id(),
        "pid_ns": hostproc.pid_namespace(),
        "pid": controller.pid,
        "pid_start": hostproc.process_start(controller.pid),
    }
    assert hostproc.controller_gone(ident) is False
    proc, sock = start_serving(tmp_path, {"run_id": "r1", "expires_ts": time.time() + 600, "controller": ident})
    time.sleep(1.5)
    assert proc.poll() is None  # its controller lives: it serves
    controller.kill()
    controller.wait()
    assert hostproc.controller_gone(ident) is True
    proc.wait(10)
    assert not os.path.exists(os.path.dirname(sock))


@pytest.mark.parametrize(
    "change",
    [
        {"boot_id": "another-boot"},  # another machine, or this one before a reboot: cannot tell
        {"pid_ns": "pid:[1]"},  # another pid namespace (a container): its pids are not ours
        {"pid_ns": None},  # a lease written before the namespace was recorded
        {"pid": "x"},
    ],
)
def test_a_controller_nothing_here_can_see_is_never_taken_for_gone(change):
    ident = {"boot_id": hostproc.boot_id(), "pid_ns": hostproc.pid_namespace(), "pid": 2**22 - 1}
    assert hostproc.controller_gone(ident) is True  # a pid nothing runs, in our namespace
    assert hostproc.controller_gone(dict(ident, **change)) is False
    assert hostproc.controller_gone(None) is False


def test_a_killed_runners_folder_is_swept_and_a_live_ones_kept(runner, tmp_path):
    """SIGKILL leaves a runner's folder behind; the next runner's start removes it, never a live
    one's, nor that of a runner another run is starting (no socket yet: two runs starting runners
    at once removed each other's folders)."""
    import socket

    dead = tmp_path / (runner_client.RUNNER_PREFIX + "dead")
    dead.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:
        gone.bind(str(dead / "runner.sock"))  # bound, never listening again: what a killed runner leaves
    (dead / "out-1").write_text("{}")
    no_socket = tmp_path / (runner_client.RUNNER_PREFIX + "nosocket")
    no_socket.mkdir(mode=0o700)
    old = time.time() - runner_client.RUNNER_START_TIMEOUT_S - 1
    os.utime(str(no_socket), (old, old))  # killed before its socket came, longer ago than a start takes
    starting = tmp_path / (runner_client.RUNNER_PREFIX + "starting")
    starting.mkdir(mode=0o700)  # another run's runner, started a moment ago: no socket yet
    other = tmp_path / "stacktune-other"
    other.mkdir()
    live = os.path.dirname(runner["runner_socket"])
    assert set(runner_client.sweep_runner_folders(str(tmp_path))) == {str(dead), str(no_socket)}
    assert not dead.exists() and not no_socket.exists() and other.exists() and starting.exists()
    # the live runner of the fixture, in its own base folder, answers and stays
    assert str(live) not in runner_client.sweep_runner_folders(os.path.dirname(live))
    assert os.path.exists(runner["runner_socket"])


def test_a_folder_that_goes_while_the_sweep_looks_is_passed_over(tmp_path, monkeypatch):
    """A runner that stops removes its own folder; when that happens between the sweep's listing
    and its look at the folder, the sweep passes over it instead of failing the next runner's start
    (seen in CI: FileNotFoundError from a folder listed a moment before)."""
    gone = runner_client.RUNNER_PREFIX + "gone"
    real_listdir = os.listdir
    monkeypatch.setattr(runner_client.os, "listdir", lambda base: real_listdir(base) + [gone])
    link = tmp_path / (runner_client.RUNNER_PREFIX + "link")
    target = tmp_path / "elsewhere"
    target.mkdir()
    link.symlink_to(target)
    assert runner_client.sweep_runner_folders(str(tmp_path)) == []
    assert link.is_symlink() and target.exists()


def test_a_runner_imports_what_its_workloads_need_and_says_what_it_took():
    # CPU workloads need nothing beyond the standard library: a runner for them imports no torch
    assert workload_program.runner_preload(["cpu_train_step", "shm_pingpong"]) == []
    # GPU workloads: torch first, then each workload's own set-up imports, once each
    assert workload_program.runner_preload(["train_step", "dataloader", "train_step"]) == [
        "torch",
        "torch._dynamo",
        "torch.optim",
        "torch.utils.data",
    ]
    assert workload_program.runner_preload(["gemm"]) == ["torch"]


def test_the_runner_reports_its_imports(runner):
    assert runner["runner_imports"] == []  # cpu_train_step: nothing to import
    assert runner["runner_start_s"] >= 0


def test_an_import_that_fails_is_reported_and_the_runner_still_starts(tmp_path):
    imports = workload_program._preload(["json", "stacktune_no_such_module"], str(tmp_path))
    assert [i["module"] for i in imports] == ["json", "stacktune_no_such_module"]
    assert imports[0]["error"] is None
    assert "ModuleNotFoundError" in imports[1]["error"]
    with open(os.path.join(str(tmp_path), "ready.json")) as handle:
        assert json.load(handle)["imports"] == imports


def test_a_layer_of_the_same_run_uses_the_runner_that_answers(runner):
    sock = runner["runner_socket"]
    assert runner_client.runner_answers(sock, []) == (True, True)
    again = measure(params(runner_state="started", runner_socket=sock, runner_workloads=["shm_pingpong"]))
    assert again["runner_reused"] is True and again["runner_socket"] == sock
    assert measure(params(runner_socket=sock))["workload"] == "cpu_train_step"


def test_a_runner_without_the_imports_asked_for_is_replaced(runner):
    old = runner["runner_socket"]
    # gemm needs torch, which this runner (for a CPU workload) never imported
    assert runner_client.runner_answers(old, ["torch"]) == (True, False)
    new = measure(params(runner_state="started", runner_socket=old, runner_workloads=["gemm"]))
    try:
        assert "runner_reused" not in new and new["runner_socket"] != old
        deadline = time.time() + 5
        while os.path.exists(os.path.dirname(old)) and time.time() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(os.path.dirname(old)), "the old runner was stopped"
    finally:
        measure(params(runner_state="stopped", runner_socket=new["runner_socket"]))


def test_a_runner_that_is_gone_is_started_anew(tmp_path):
    gone = str(tmp_path / "stacktune-runner-gone" / "runner.sock")
    assert runner_client.runner_answers(gone, []) == (False, False)
    new = measure(params(runner_state="started", runner_socket=gone))
    try:
        assert "runner_reused" not in new and new["runner_socket"] != gone
    finally:
        measure(params(runner_state="stopped", runner_socket=new["runner_socket"]))
