# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests of the bench module: real CPU blocks, real user commands, and one run through
the ``ansible`` command line as a playbook task would run it."""

from __future__ import absolute_import, division, print_function

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.modules import bench

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


def run_module(capsys, **args):
    """Run the module in-process with these arguments; return (failed, result)."""
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        bench.main()
    out = capsys.readouterr().out
    result = json.loads(out)
    assert (exc.value.code != 0) == bool(result.get("failed")), result
    return bool(result.get("failed")), result


def printer(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


def bench_dirs():
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("stacktune-bench-")}


# --- check mode -------------------------------------------------------------------------


def test_check_mode_skips(capsys):
    failed, res = run_module(capsys, workload="cpu_train_step", _ansible_check_mode=True)
    assert not failed
    assert res["skipped"] is True and res["changed"] is False
    assert "samples_ms" not in res


def test_check_mode_runs_when_asked(capsys):
    failed, res = run_module(
        capsys, workload="cpu_train_step", steps=5, warmup=1, size=4, run_in_check_mode=True, _ansible_check_mode=True
    )
    assert not failed, res
    assert len(res["samples_ms"]) == 5 and res["changed"] is False


# --- built-in CPU workloads -------------------------------------------------------------------


@pytest.mark.parametrize(
    "workload, size, unit",
    [
        ("cpu_dataloader", 16, "samples/s"),
        ("shm_pingpong", 32, "steps/s"),
        ("mem_touch", 8, "GB/s"),
        ("cpu_train_step", 8, "samples/s"),
    ],
)
def test_cpu_workloads(capsys, monkeypatch, tmp_path, workload, size, unit):
    # a temporary folder of this test's own: a bench run elsewhere on the machine cannot interfere
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = bench_dirs()
    failed, res = run_module(capsys, workload=workload, steps=15, warmup=3, size=size, workers=2)
    assert not failed, res
    assert res["changed"] is False
    assert res["workload"] == workload
    assert len(res["samples_ms"]) == 15 and res["warmup_discarded"] == 3
    assert all(v > 0 for v in res["samples_ms"])
    assert res["summary"]["count"] == 15
    assert res["summary"]["min_ms"] == min(res["samples_ms"])
    assert res["summary"]["p99_ms"] is None  # 15 samples are too few for a p99
    assert res["throughput"]["unit"] == unit and res["throughput"]["value"] > 0
    assert res["void"] is False and res["void_reason"] is None
    assert res["conditions"]["before"]["host"]["shm_size_bytes"] > 0
    assert res["details"]["size"] == size
    assert res["elapsed_s"] >= res["details"]["measure_s"] > 0
    # the program's temporary directory is gone afterwards
    assert bench_dirs() <= before


def test_throughput_consistent_with_samples(capsys):
    failed, res = run_module(capsys, workload="cpu_train_step", steps=20, warmup=2, size=8)
    assert not failed, res
    expected = 8 * 20 / (sum(res["samples_ms"]) / 1000.0)
    assert res["throughput"]["value"] == pytest.approx(expected, rel=1e-4)


def test_auto_without_torch_runs_cpu_dataloader(capsys):
    if subprocess.run([sys.executable, "-c", "import torch"], stderr=subprocess.DEVNULL, check=False).returncode == 0:
        pytest.skip("this interpreter has torch")
    failed, res = run_module(capsys, steps=5, warmup=1, size=4, workers=1)
    assert not failed, res
    assert res["workload"] == "cpu_dataloader"


def test_cpus_pin_builtin_workload(capsys):
    failed, res = run_module(capsys, workload="shm_pingpong", steps=5, warmup=1, cpus="0")
    assert not failed, res
    assert res["details"]["cpus"] == [0]
    assert res["conditions"]["before"]["host"]["affinity_cpus"] == 1


def test_program_file_is_private(capsys, tmp_path):
    # An interpreter wrapper that records how the program file was handed over, then runs it.
    record = tmp_path / "record.json"
    wrapper = tmp_path / "python"
    wrapper.write_text(
        "#!%s\nimport json, os, stat, sys\n"
        "st, dst = os.stat(sys.argv[1]), os.stat(os.path.dirname(sys.argv[1]))\n"
        "json.dump({'file': stat.S_IMODE(st.st_mode), 'dir': stat.S_IMODE(dst.st_mode), 'argv': sys.argv[1:],"
        " 'path': sys.argv[1]}, open(%r, 'w'))\n"
        "os.execv(sys.executable, [sys.executable] + sys.argv[1:])\n" % (sys.executable, str(record))
    )
    wrapper.chmod(0o755)
    failed, res = run_module(capsys, workload="mem_touch", steps=2, warmup=0, size=1, python=str(wrapper))
    assert not failed, res
    seen = json.loads(record.read_text())
    assert seen["file"] == 0o600 and seen["dir"] == 0o700
    assert len(seen["argv"]) == 2 and json.loads(seen["argv"][1])["workload"] == "mem_touch"
    assert not os.path.exists(seen["path"]) and not os.path.exists(os.path.dirname(seen["path"]))


def test_file_dataloader_reads_from_its_data_dir_and_leaves_it_as_it_was(capsys, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tar").write_bytes(b"the user's data")
    failed, res = run_module(capsys, workload="file_dataloader", data_dir=str(data), steps=20, warmup=2, size=8)
    assert not failed, res
    assert res["workload"] == "file_dataloader" and len(res["samples_ms"]) == 20
    assert res["throughput"]["unit"] == "GB/s" and res["throughput"]["value"] > 0
    info = res["details"]["info"]
    assert info["data_dir"] == str(data) and info["files"] == 512 and info["batch_files"] == 8
    assert res["details"]["size_meaning"] == "batch size (files of 64-256 KiB)"
    assert os.listdir(str(data)) == ["train.tar"] and (data / "train.tar").read_bytes() == b"the user's data"


@pytest.mark.parametrize(
    "args, failure, word",
    [
        ({}, "options", "workload file_dataloader needs data_dir (the role's stacktune_bench_data_dir)"),
        ({"data_dir": "relative/data"}, "options", "must be an absolute path without '..', got 'relative/data'"),
        ({"data_dir": "/nonexistent/stacktune-data"}, "error", "/nonexistent/stacktune-data does not exist"),
    ],
)
def test_file_dataloader_without_a_usable_data_dir_fails_naming_the_variable(capsys, args, failure, word):
    failed, res = run_module(capsys, workload="file_dataloader", steps=5, warmup=0, **args)
    assert failed and res["failure"] == failure
    assert word in res["msg"] and "stacktune_bench_data_dir" in res["msg"]


# --- failures of built-in workloads ------------------------------------------------------------


def test_gpu_workload_without_torch_fails_clearly(capsys):
    if subprocess.run([sys.executable, "-c", "import torch"], stderr=subprocess.DEVNULL, check=False).returncode == 0:
        pytest.skip("this interpreter has torch")
    failed, res = run_module(capsys, workload="gemm", steps=1, warmup=0)
    assert failed
    assert res["msg"].startswith("Failed to run workload gemm")
    assert "needs PyTorch" in res["msg"]


def test_missing_interpreter_fails(capsys, tmp_path):
    failed, res = run_module(capsys, workload="mem_touch", python=str(tmp_path / "nope"))
    assert failed and res["msg"].startswith("Failed to start workload mem_touch")


@pytest.mark.parametrize(
    "args, word",
    [
        ({"steps": 0}, "steps must be at least 1"),
        ({"cpus": "7-3"}, "backwards"),
        ({"workload": "cpu_dataloader", "workers": 0}, "workers >= 1"),
    ],
)
def test_bad_options_fail_before_running(capsys, args, word):
    failed, res = run_module(capsys, **args)
    assert failed and res["msg"].startswith("Failed to validate bench options") and word in res["msg"]


def test_command_required_for_command_workload(capsys):
    failed, res = run_module(capsys, workload="command")
    assert failed and "command" in res["msg"]


# --- the command workload ------------------------------------------------------------------------


def test_command_plain_numbers_with_warmup(capsys):
    code = """
        print("loading data")
        for i in range(12):
            print(i + 1)
        print("done")
    """
    failed, res = run_module(capsys, workload="command", command=printer(code), warmup=3, steps=200)
    assert not failed, res
    assert res["samples_ms"] == [float(v) for v in range(4, 13)]
    assert res["warmup_discarded"] == 3
    assert res["details"]["step_lines"] == 12 and res["details"]["rc"] == 0
    assert res["throughput"]["unit"] == "steps/s"
    assert res["throughput"]["value"] == pytest.approx(9 / (sum(range(4, 13)) / 1000.0))
    assert res["workload"] == "command"


def test_command_json_lines_with_throughput_and_steps_cap(capsys):
    code = """
        import json
        for i in range(30):
            print(json.dumps({"step": i, "step_ms": 2.0 + (i % 2), "loss": 1.0 / (i + 1)}))
        print(json.dumps({"throughput": 1234.5, "unit": "img/s"}))
    """
    failed, res = run_module(capsys, workload="command", command=printer(code), warmup=2, steps=10)
    assert not failed, res
    assert res["samples_ms"] == [2.0, 3.0] * 5
    assert res["throughput"] == {"value": 1234.5, "unit": "img/s"}
    assert res["summary"]["p50_ms"] == 2.5


def test_command_env_and_cpus(capsys):
    code = """
        import os
        print(os.environ["STEP"])
        print(len(os.sched_getaffinity(0)))
    """
    failed, res = run_module(
        capsys, workload="command", command=printer(code), warmup=0, env={"STEP": "7.25"}, cpus="0"
    )
    assert not failed, res
    assert res["samples_ms"] == [7.25, 1.0]


def test_command_failure_reports_stderr(capsys):
    code = """
        import sys
        print(5.0)
        sys.stderr.write("CUDA error: out of memory\\n")
        sys.exit(4)
    """
    failed, res = run_module(capsys, workload="command", command=printer(code), warmup=0)
    assert failed
    assert res["rc"] == 4
    assert res["msg"].startswith("Failed to run command")
    assert "out of memory" in res["msg"] and "out of memory" in res["stderr_tail"]


def test_command_without_step_lines_explains_format(capsys):
    failed, res = run_module(capsys, workload="command", command=printer('print("epoch 1: loss 0.5")'), warmup=0)
    assert failed
    assert "no step lines" in res["msg"] and "step_ms" in res["msg"]


def test_command_with_too_few_step_lines(capsys):
    failed, res = run_module(capsys, workload="command", command=printer("print(1)\nprint(2)"), warmup=2)
    assert failed and "not more than warmup=2" in res["msg"]


def test_command_broken_step_value_fails(capsys):
    failed, res = run_module(capsys, workload="command", command=printer("print(1)\nprint(-3)"), warmup=0)
    assert failed and "line 2" in res["msg"]


def test_command_not_found(capsys, tmp_path):
    failed, res = run_module(capsys, workload="command", command=[str(tmp_path / "missing")])
    assert failed and res["msg"].startswith("Failed to start command")


@pytest.mark.one_core
def test_command_timeout_kills_process_group(capsys, tmp_path):
    pidfile = tmp_path / "child.pid"
    code = """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open(%r, "w").write(str(child.pid))
        time.sleep(60)
    """ % str(pidfile)
    started = time.time()
    failed, res = run_module(capsys, workload="command", command=printer(code), timeout=2)
    assert failed and "timeout=2" in res["msg"]
    assert time.time() - started < 20
    child = int(pidfile.read_text())
    deadline = time.time() + 5
    while time.time() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child), "the workload's child process survived the timeout"


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# --- as Ansible runs it ------------------------------------------------------------------------------


@pytest.mark.skipif(not os.access(ANSIBLE, os.X_OK), reason="ansible command line not installed next to pytest")
def test_adhoc_run_through_ansible():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_STDOUT_CALLBACK", None)
    proc = subprocess.run(
        [
            ANSIBLE,
            "localhost",
            "-c",
            "local",
            "-m",
            "stacktune.gpu.bench",
            "-a",
            "workload=cpu_dataloader steps=20 warmup=2",
            "-e",
            "ansible_python_interpreter=%s" % sys.executable,
            "-o",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    assert "localhost | SUCCESS =>" in out
    # one-line output, followed by the task timing the repository's ansible.cfg enables
    res, _end = json.JSONDecoder().raw_decode(out.split("SUCCESS =>", 1)[1].lstrip())
    assert res["workload"] == "cpu_dataloader"
    assert len(res["samples_ms"]) == 20 and res["warmup_discarded"] == 2
    assert res["throughput"]["unit"] == "samples/s"
