"""Live sessions: which running process sees a change, and one workload process streamed
through the block runner (a CPU workload and a user's program, for real, on this machine)."""

import os
import sys
import time

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.units import KINDS
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import runner_client
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.live import (
    EnergyMeter,
    LiveOutputError,
    parse_step,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.measure import measure
from ansible_collections.stacktune.gpu.plugins.modules import bench


def engine(root, layer):
    return Engine(Context(layer, root=str(root), run_command=None), open_journal("/var/lib/stacktune", str(root)))


def test_rows_seen_now_say_whether_a_running_process_sees_them(fakeroot):
    specs = [
        {"kind": "sysctl", "key": "vm.swappiness", "value": 10},
        {"kind": "sysfs", "key": "/sys/kernel/mm/transparent_hugepage/enabled", "value": "never"},
        {"kind": "file", "key": "/etc/nccl.conf", "value": "NCCL_SOCKET_IFNAME=eth0\n"},
        {"kind": "file", "key": "/etc/stacktune-test/stall.conf", "value": "every=40\n", "seen_running": True},
        {"kind": "kernel_arg", "key": "pcie_aspm", "value": "off"},
    ]
    rows = {r["id"]: r for r in engine(fakeroot, "kernel").apply(specs, "run1")["settings"]}
    assert rows["sysctl:vm.swappiness"]["seen_running"] is True
    assert rows["sysfs:/sys/kernel/mm/transparent_hugepage/enabled"]["seen_running"] is True
    # a file is read when a process starts, unless the layer says its reader re-reads it
    assert rows["file:/etc/nccl.conf"]["seen_running"] is False
    assert rows["file:/etc/stacktune-test/stall.conf"]["seen_running"] is True
    # a boot argument is seen at the next boot: nothing to say about a running process
    assert rows["kernel_arg:pcie_aspm"]["effect"] == "next_boot"
    assert "seen_running" not in rows["kernel_arg:pcie_aspm"]
    assert all(r["settle_s"] == 0.0 for r in rows.values() if "settle_s" in r)


def test_each_kind_answers_for_itself():
    assert KINDS["nvml"].seen_running({"field": "power_limit_w"}) is True
    assert KINDS["nvml"].seen_running({"field": "compute_mode"}) is False
    assert KINDS["nvml"].settle_s > 0
    assert KINDS["env_var"].seen_running({}) is False
    assert KINDS["kernel_arg"].seen_running({}) is False


def test_seen_running_must_be_a_boolean(fakeroot, hash_tree):
    before = hash_tree(fakeroot)
    with pytest.raises(SpecError, match=r"settings\[0\]\.seen_running must be true or false"):
        engine(fakeroot, "kernel").apply(
            [{"kind": "sysctl", "key": "vm.swappiness", "value": 1, "seen_running": "yes"}], "r"
        )
    assert hash_tree(fakeroot) == before


@pytest.mark.parametrize(
    "line, value",
    [("12.5", 12.5), ('{"step_ms": 3}', 3.0), ("loss 0.3", None), ('{"throughput": 5}', None), ("", None)],
)
def test_step_lines(line, value):
    assert parse_step(line) == value


@pytest.mark.parametrize("line", ["-1", '{"step_ms": "x"}', '{"step_ms": 0}', "nan"])
def test_a_broken_timer_is_an_error(line):
    with pytest.raises(LiveOutputError):
        parse_step(line)


@pytest.fixture
def runner():
    res = measure(bench.default_params(workload="cpu_train_step", runner_state="started", runner_workloads=[]))
    yield res["runner_socket"]
    runner_client.stop_runner(res["runner_socket"])
    folder = os.path.dirname(res["runner_socket"])
    for _wait in range(100):  # the runner removes its folder (and ends any live program) as it exits
        if not os.path.exists(folder):
            break
        time.sleep(0.1)
    assert not os.path.exists(folder)


def test_a_builtin_workload_streams_through_contiguous_and_fresh_windows(runner):
    spec = {"args": {"workload": "cpu_train_step", "warmup": 3, "size": 4}, "env": {}}
    answer, bad = runner_client.live_start(runner, spec, 60)
    assert bad is None and answer["started"]
    first, bad = runner_client.live_window(runner, {"fresh": True, "seconds": 0.3, "drop_steps": 2}, 60)
    assert bad is None and len(first["samples_ms"]) >= 3 and first["dropped"] >= 2
    second, bad = runner_client.live_window(runner, {"fresh": False, "seconds": 0.3}, 60)
    # the same arm right after: the second window starts where the first ended, nothing dropped
    assert bad is None and second["dropped"] == 0 and second["start_t"] == first["end_t"]
    again, _bad = runner_client.live_start(runner, spec, 60)
    assert again.get("reused") is True  # a later layer reuses the running process
    ended = runner_client.live_stop(runner)
    assert ended["rc"] == 0 and not ended["killed"]  # SIGTERM ends the workload's loop cleanly
    assert ended["final"]["workload"] == "cpu_train_step"


def test_a_user_program_that_fails_is_reported_with_its_words(runner, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import sys, time\n"
        "for i in range(30):\n"
        "    time.sleep(0.01)\n"
        "    print('{\"step_ms\": 10.0}', flush=True)\n"
        "sys.stderr.write('RuntimeError: unable to allocate shared memory(shm)\\n')\n"
        "sys.exit(3)\n"
    )
    answer, bad = runner_client.live_start(runner, {"command": [sys.executable, str(prog)], "env": {}}, 60)
    assert bad is None, answer
    _win, bad = runner_client.live_window(runner, {"fresh": True, "seconds": 30}, 60)
    assert bad["failure"] == "exit" and bad["rc"] == 3
    assert "unable to allocate shared memory" in bad["error"]


def test_a_user_program_that_stops_printing_is_a_hang(runner, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text("import time\nprint(5.0, flush=True)\ntime.sleep(600)\n")
    _answer, bad = runner_client.live_start(runner, {"command": [sys.executable, str(prog)], "env": {}}, 60)
    assert bad is None
    _win, bad = runner_client.live_window(runner, {"fresh": True, "seconds": 5, "hang_s": 1.0}, 60)
    assert bad["failure"] == "hang"


def test_without_nvml_a_window_says_energy_not_measured(runner):
    """This machine has no NVML: a window's energy is None (not measured), never zero."""
    spec = {"args": {"workload": "cpu_train_step", "warmup": 3, "size": 4}, "env": {}}
    _answer, bad = runner_client.live_start(runner, spec, 60)
    assert bad is None
    win, bad = runner_client.live_window(runner, {"fresh": True, "seconds": 0.3, "drop_steps": 2}, 60)
    assert bad is None and win["energy_mj"] is None
    assert win["span_s"] == pytest.approx(win["end_t"] - win["start_t"], abs=1e-3)
    runner_client.live_stop(runner)


def test_energy_between_window_edges_is_interpolated():
    """NVML cannot be read here: the meter's readings are given (a counter rising 35 J per
    51.4 ms, one H200's step at 700 W), as the thread reads them on a GPU host."""
    ticks = iter(range(1000))
    meter = EnergyMeter(clock=lambda: 100.0 + next(ticks))  # each look at the clock a second later
    for i in range(11):
        t = i * 0.1
        meter.samples.append((t, [t * 686_000.0, t * 400_000.0]))  # mJ: 686 W and 400 W
    assert meter.between(0.25, 0.75) == [343_000.0, 200_000.0]
    assert meter.between(0.5, 2.0) is None  # no reading after the window's end: not measured
    assert meter.between(-1.0, 0.5) is None
