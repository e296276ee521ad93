# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests of the bench logic (workloads/bench.py) and of the workload program (workloads/).

The CPU workloads are run for real, as the separate program the module runs, under the
system's bare python3 when there is one (no third-party packages), so the stdlib-only
promise is tested too.
"""

from __future__ import absolute_import, division, print_function

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import bench as _bench
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import constants
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import base as workloads_base
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import registry
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.source import write_program

BARE_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
# the workload program as the bench module ships it, written once for these tests
PROGRAM = write_program(tempfile.mkdtemp(prefix="stacktune-test-program-"))


def base_params(**over):
    params = {
        "workload": "cpu_dataloader",
        "steps": 200,
        "warmup": 20,
        "python": None,
        "device": 0,
        "size": None,
        "workers": 4,
        "cpus": None,
        "command": None,
        "timeout": 600,
        "env": {},
        "run_in_check_mode": False,
    }
    params.update(over)
    return params


# --- throttle reasons ----------------------------------------------------------------


def test_throttle_bits_match_nvml_constants():
    pynvml = pytest.importorskip("pynvml")
    # The bit values NVML's own Python binding publishes; ours must name the same bits.
    expected = {
        "gpu_idle": pynvml.nvmlClocksThrottleReasonGpuIdle,
        "applications_clocks_setting": pynvml.nvmlClocksThrottleReasonApplicationsClocksSetting,
        "sw_power_cap": pynvml.nvmlClocksThrottleReasonSwPowerCap,
        "hw_slowdown": pynvml.nvmlClocksThrottleReasonHwSlowdown,
        "sync_boost": pynvml.nvmlClocksThrottleReasonSyncBoost,
        "sw_thermal_slowdown": pynvml.nvmlClocksThrottleReasonSwThermalSlowdown,
        "hw_thermal_slowdown": pynvml.nvmlClocksThrottleReasonHwThermalSlowdown,
        "hw_power_brake_slowdown": pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown,
        "display_clock_setting": pynvml.nvmlClocksThrottleReasonDisplayClockSetting,
    }
    ours = {name: bit for bit, name in constants.CLOCKS_EVENT_REASONS}
    for name, bit in expected.items():
        assert ours[name] == bit, name
    assert workloads_base.decode_throttle_reasons(pynvml.nvmlClocksThrottleReasonAll) == [
        name for _bit, name in constants.CLOCKS_EVENT_REASONS
    ]


@pytest.mark.parametrize(
    "mask, names",
    [
        (0, []),
        (0x1, ["gpu_idle"]),
        (0x4 | 0x40, ["sw_power_cap", "hw_thermal_slowdown"]),
        (0x1000 | 0x8, ["hw_slowdown", "unknown_0x1000"]),
    ],
)
def test_decode_throttle_reasons(mask, names):
    assert workloads_base.decode_throttle_reasons(mask) == names


def gpu_conditions(before=(), during=(), after=()):
    """Conditions in the shape Monitor produces, for one GPU with the given reasons."""

    def snap(reasons):
        return {"host": {}, "gpus": [{"index": 0, "sm_clock_mhz": 1980, "throttle_reasons": list(reasons)}]}

    return {
        "before": snap(before),
        "after": snap(after),
        "during": {"0": {"polls": 12, "throttle_reasons_seen": list(during)}},
        "nvml": "ok",
    }


@pytest.mark.parametrize(
    "conditions, void, word",
    [
        (gpu_conditions(before=["gpu_idle"], during=["sw_power_cap"], after=["sw_power_cap"]), False, None),
        (gpu_conditions(during=["applications_clocks_setting", "sync_boost"]), False, None),
        (gpu_conditions(during=["sw_power_cap", "hw_thermal_slowdown"]), True, "hw_thermal_slowdown"),
        (gpu_conditions(after=["hw_power_brake_slowdown"]), True, "hw_power_brake_slowdown"),
        (gpu_conditions(before=["hw_slowdown"]), True, "GPU 0: hw_slowdown"),
        (gpu_conditions(during=["sw_thermal_slowdown"]), True, "sw_thermal_slowdown"),
        ({"before": {"host": {"loadavg_1m": 9.0}, "gpus": []}, "after": None, "during": {}}, False, None),
        (None, False, None),
    ],
)
def test_decide_void(conditions, void, word):
    got_void, reason = _bench.decide_void(conditions)
    assert got_void is void
    if word:
        assert word in reason
    else:
        assert reason is None


def test_throttle_reasons_seen_merges_phases_per_gpu():
    cond = gpu_conditions(before=["gpu_idle"], during=["sw_power_cap"], after=["sw_power_cap"])
    cond["during"]["1"] = {"throttle_reasons_seen": ["hw_slowdown"]}
    assert _bench.throttle_reasons_seen(cond) == {"0": ["gpu_idle", "sw_power_cap"], "1": ["hw_slowdown"]}


# --- option validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, cpus",
    [("0", [0]), ("0-3", [0, 1, 2, 3]), ("0-1, 4,6-7", [0, 1, 4, 6, 7]), ("3,3,2", [2, 3])],
)
def test_parse_cpu_list(text, cpus):
    assert _bench.parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "3-1", "1,,2", "1-", "-2", "0-x"])
def test_parse_cpu_list_rejects(text):
    with pytest.raises(ValueError):
        _bench.parse_cpu_list(text)


def test_validate_options_normalises():
    out = _bench.validate_options(base_params(cpus="0-1", env={"A": 1, "B": None}))
    assert out["cpus"] == [0, 1]
    assert out["env"] == {"A": "1", "B": ""}


@pytest.mark.parametrize(
    "over, word",
    [
        ({"steps": 0}, "steps"),
        ({"warmup": -1}, "warmup"),
        ({"size": 0}, "size"),
        ({"workers": -2}, "workers"),
        ({"workload": "cpu_dataloader", "workers": 0}, "workers >= 1"),
        ({"device": -1}, "device"),
        ({"timeout": 0}, "timeout"),
        ({"cpus": "2-1"}, "backwards"),
        ({"workload": "command", "command": []}, "command"),
        ({"workload": "command", "command": [""]}, "command"),
        ({"env": {"A=B": "x"}}, "env"),
        ({"workload": "nope"}, "workload"),
    ],
)
def test_validate_options_rejects(over, word):
    with pytest.raises(ValueError, match=word):
        _bench.validate_options(base_params(**over))


def test_the_data_dir_is_checked_and_needed_by_the_file_workload():
    out = _bench.validate_options(base_params(workload="file_dataloader", data_dir="/data/stacktune"))
    assert out["data_dir"] == "/data/stacktune"
    assert json.loads(_bench.program_args(out, "file_dataloader"))["data_dir"] == "/data/stacktune"
    assert _bench.validate_options(base_params(data_dir=""))["data_dir"] is None
    for over, word in (
        ({"workload": "file_dataloader"}, "needs data_dir \\(the role's stacktune_bench_data_dir\\)"),
        ({"workload": "file_dataloader", "data_dir": ""}, "needs data_dir"),
        ({"workload": "file_dataloader", "data_dir": "data"}, "must be an absolute path without '..', got 'data'"),
        ({"data_dir": "/data/../etc"}, "stacktune_bench_data_dir\\) must be an absolute path"),
        ({"workload": "file_dataloader", "data_dir": "/d", "workers": 0}, "file_dataloader needs workers >= 1"),
    ):
        with pytest.raises(ValueError, match=word):
            _bench.validate_options(base_params(**over))


def test_every_workload_has_a_default_size_and_its_meaning():
    assert set(registry.DEFAULT_SIZE) == set(registry.GPU_WORKLOADS + registry.CPU_WORKLOADS)
    assert set(registry.SIZE_MEANING) == set(registry.DEFAULT_SIZE)


# --- command output -----------------------------------------------------------------------


def test_parse_plain_numbers_ignores_other_lines():
    text = "starting\n12.5\n  13\nepoch 1 done\n1e1\n\nnan-ish text\n"
    assert _bench.parse_command_output(text) == ([12.5, 13.0, 10.0], None)


def test_parse_json_lines_and_throughput():
    text = "\n".join(
        [
            json.dumps({"step_ms": 4.0, "loss": 1.2}),
            json.dumps({"event": "checkpoint"}),
            json.dumps({"step_ms": 5}),
            "[1, 2]",
            "{not json",
            json.dumps({"throughput": 900.0, "unit": "img/s"}),
            json.dumps({"throughput": 950.5, "unit": "img/s"}),
        ]
    )
    steps, tp = _bench.parse_command_output(text)
    assert steps == [4.0, 5.0]
    assert tp == {"value": 950.5, "unit": "img/s"}


def test_parse_throughput_without_unit():
    assert _bench.parse_command_output('{"throughput": 3}\n1\n')[1] == {"value": 3.0, "unit": "units/s"}


@pytest.mark.parametrize("line", ["-1", '{"step_ms": -0.5}', '{"step_ms": "fast"}', '{"step_ms": true}', "inf", "nan"])
def test_parse_rejects_broken_step_values(line):
    with pytest.raises(ValueError, match="line 2"):
        _bench.parse_command_output("1.0\n%s\n" % line)


def test_split_warmup():
    assert _bench.split_warmup([9.0, 8.0, 1.0, 2.0, 3.0], 2, 10) == [1.0, 2.0, 3.0]
    assert _bench.split_warmup([9.0, 8.0, 1.0, 2.0, 3.0], 2, 2) == [1.0, 2.0]
    with pytest.raises(ValueError, match="step_ms"):
        _bench.split_warmup([1.0, 2.0], 2, 10)


# --- throughput -----------------------------------------------------------------------------


def test_throughput_gemm_matches_measured_h200_figure():
    # bf16 8192^3 GEMM at p50 1.637 ms on an H200 is about 670 TFLOP/s.
    tp = _bench.compute_throughput([1.637] * 10, 2.0 * 8192**3, "FLOP")
    assert tp["unit"] == "TFLOP/s"
    assert tp["value"] == pytest.approx(671.7, abs=0.1)


def test_throughput_copy_and_samples():
    # 256 MiB pinned copy measured at 55.5 GB/s takes 4.837 ms.
    nbytes = 256 * 1024 * 1024
    tp = _bench.compute_throughput([nbytes / 55.5e9 * 1000.0] * 3, nbytes, "B")
    assert tp == {"value": pytest.approx(55.5), "unit": "GB/s"}
    # total work over total time, not the mean of per-step rates
    tp = _bench.compute_throughput([10.0, 30.0], 64.0, "samples")
    assert tp == {"value": pytest.approx(128 / 0.040), "unit": "samples/s"}
    assert _bench.compute_throughput([0.0, 0.0], 1.0, "steps") == {"value": None, "unit": "steps/s"}


def test_build_result_shape():
    res = _bench.build_result(
        "gemm", [1.0, 2.0, 3.0], 5, {"value": 1.0, "unit": "steps/s"}, gpu_conditions(during=["hw_slowdown"]), 1.23456
    )
    assert res["changed"] is False
    assert res["samples_ms"] == [1.0, 2.0, 3.0]
    assert res["warmup_discarded"] == 5
    assert res["summary"]["count"] == 3 and res["summary"]["p50_ms"] == 2.0
    assert res["void"] is True and "hw_slowdown" in res["void_reason"]
    assert res["elapsed_s"] == 1.235


def test_parse_program_output():
    doc = {"samples_ms": [1.0], "work_per_step": 1.0, "work_unit": "steps", "conditions": {}}
    assert _bench.parse_program_output("noise\n" + json.dumps(doc) + "\n\n") == doc
    assert _bench.parse_program_output('{"error": "no GPU"}') == {"error": "no GPU"}
    with pytest.raises(ValueError, match="printed nothing"):
        _bench.parse_program_output(" \n")
    with pytest.raises(ValueError, match="no JSON"):
        _bench.parse_program_output("Segmentation fault\n")
    with pytest.raises(ValueError, match="lacks"):
        _bench.parse_program_output('{"samples_ms": []}')


def test_program_args_round_trip():
    params = _bench.validate_options(base_params(workload="mem_touch", steps=3, warmup=1, size=4, cpus="0"))
    args = json.loads(_bench.program_args(params, "mem_touch"))
    assert args == {"workload": "mem_touch", "steps": 3, "warmup": 1, "size": 4, "workers": 4, "device": 0, "cpus": [0]}


# --- the workload program, run for real -------------------------------------------------------


def run_program(args, python=BARE_PYTHON, tmp_path=None):
    target = PROGRAM
    if tmp_path is not None:  # run from a copy, as the module does
        target = str(tmp_path / "stacktune_workload.py")
        shutil.copy(PROGRAM, target)
    proc = subprocess.run([python, target, json.dumps(args)], capture_output=True, timeout=120, check=False)
    return proc.returncode, _bench.parse_program_output(proc.stdout.decode()), proc.stderr.decode()


@pytest.mark.parametrize(
    "workload, size, unit",
    [
        ("cpu_dataloader", 16, "samples"),
        ("shm_pingpong", 64, "steps"),
        ("mem_touch", 8, "B"),
        ("cpu_train_step", 8, "samples"),
    ],
)
def test_cpu_workload_program_runs_on_bare_python(tmp_path, workload, size, unit):
    rc, doc, err = run_program(
        {"workload": workload, "steps": 12, "warmup": 3, "size": size, "workers": 2, "device": 0}, tmp_path=tmp_path
    )
    assert rc == 0, (doc, err)
    assert doc["workload"] == workload
    assert doc["warmup"] == 3
    assert doc["size"] == size
    assert len(doc["samples_ms"]) == 12
    assert all(v > 0 and math.isfinite(v) for v in doc["samples_ms"])
    assert doc["work_unit"] == unit
    assert doc["conditions"]["nvml"] == "not used"
    host = doc["conditions"]["before"]["host"]
    assert host["cpu_count"] >= 1 and host["shm_size_bytes"] > 0
    assert doc["conditions"]["after"]["host"]["loadavg_1m"] is not None
    tp = _bench.compute_throughput(doc["samples_ms"], doc["work_per_step"], doc["work_unit"])
    assert tp["value"] == pytest.approx(
        doc["work_per_step"] * 12 / (sum(doc["samples_ms"]) / 1000.0) / (1e9 if unit == "B" else 1.0)
    )


def test_file_dataloader_program_runs_on_bare_python_and_leaves_nothing(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    args = {"workload": "file_dataloader", "steps": 12, "warmup": 2, "size": 4, "workers": 2, "data_dir": str(data)}
    rc, doc, err = run_program(args, tmp_path=tmp_path)
    assert rc == 0, (doc, err)
    assert doc["workload"] == "file_dataloader" and doc["size"] == 4 and doc["work_unit"] == "B"
    assert len(doc["samples_ms"]) == 12
    assert doc["info"]["files"] == 512 and doc["info"]["data_dir"] == str(data)
    assert os.listdir(str(data)) == []
    rc, doc, _err = run_program(dict(args, data_dir=str(data / "missing")), tmp_path=tmp_path)
    assert rc == 2 and "stacktune_bench_data_dir" in doc["error"] and "does not exist" in doc["error"]


def test_cpu_train_step_learns_and_counts_warmup():
    rc, doc, err = run_program({"workload": "cpu_train_step", "steps": 30, "warmup": 10, "size": 8})
    assert rc == 0, err
    info = doc["info"]
    assert info["loss_last"] < info["loss_first"] / 10
    assert len(doc["samples_ms"]) == 30


def test_cpu_workload_program_pins_cpus():
    rc, doc, err = run_program({"workload": "shm_pingpong", "steps": 3, "warmup": 0, "cpus": [0]})
    assert rc == 0, err
    assert doc["cpus"] == [0]


def test_program_auto_without_torch_is_cpu_dataloader():
    rc, doc, err = run_program({"workload": "auto", "steps": 4, "warmup": 1, "size": 4, "workers": 1})
    assert rc == 0, err
    assert doc["workload"] == "cpu_dataloader"
    assert doc["size"] == 4


def test_program_gpu_workload_without_torch_says_so():
    if subprocess.run([BARE_PYTHON, "-c", "import torch"], stderr=subprocess.DEVNULL, check=False).returncode == 0:
        pytest.skip("this interpreter has torch")
    rc, doc, _err = run_program({"workload": "gemm", "steps": 1, "warmup": 0})
    assert rc == 2
    assert "needs PyTorch" in doc["error"]


def test_program_reports_bad_arguments_as_json():
    rc, doc, _err = run_program({"workload": "mem_touch"})  # no steps
    assert rc == 1
    assert "KeyError" in doc["error"] and "traceback" in doc


def test_monitor_without_gpu_keeps_host_conditions():
    monitor = workloads_base.Monitor([{"index": 0, "uuid": None}])
    if monitor.nvml_status == "ok":
        pytest.skip("NVML works here; the GPU tier covers it")
    monitor.begin()
    monitor.end()
    res = monitor.result()
    assert res["nvml"].startswith("unavailable")
    assert res["before"]["gpus"] == [] and res["before"]["host"]["cpu_count"] >= 1
    assert res["during"] == {}
