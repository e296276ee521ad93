# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stacktune.gpu.gpu_topology_facts run for real on the machine that runs the tests.

The module only reads, so it runs against the live host: on a machine without an NVIDIA
GPU (CI) it must still succeed with gpus: [] and a reason. The recorded fixtures cover
the GPU paths (tests/unit/plugins/module_utils/hardware/test_topology.py).
"""

from __future__ import absolute_import, division, print_function

import json
import os
import subprocess
import sys

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import topology as topo
from ansible_collections.stacktune.gpu.plugins.modules import gpu_topology_facts

MODULE_PATH = gpu_topology_facts.__file__
COLLECTIONS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "collections"))


def run_module(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        gpu_topology_facts.main()
    return json.loads(capsys.readouterr().out)


def test_default_run_returns_facts_without_raw(capsys):
    result = run_module(capsys, {})
    assert result["changed"] is False
    assert "failed" not in result
    assert "raw" not in result
    facts = result["ansible_facts"]["stacktune"]
    assert facts["schema_version"] == 1
    assert facts["gpu_count"] == len(facts["gpus"])
    assert facts["host"]["kernel_release"] == os.uname()[2]
    if facts["gpu_count"] == 0:
        assert facts["reason"]
        assert facts["findings"][0]["id"] == "nvml_unavailable"
    assert isinstance(facts["pcie_paths"], list)
    assert facts["gpudirect"]["statement"]
    assert set(facts["fabric"]) == {"nvswitch", "nvswitch_pci", "gpus_on_nvswitch", "fabric_manager", "gpus"}


def test_include_raw_replays_to_the_returned_facts(capsys):
    result = run_module(capsys, {"include_raw": True})
    raw = result["raw"]
    assert set(raw) >= {"files", "nvml", "commands", "options", "collected_at"}
    assert raw["format"] == topo.RAW_FORMAT_VERSION
    assert raw["options"] == {"nics": True, "libraries": True}
    assert topo.assemble(raw) == result["ansible_facts"]["stacktune"]
    ldconfig = raw["commands"]["ldconfig_p"]
    if ldconfig["argv"] is not None:
        assert ldconfig["argv"][1:] == ["-p"]
        assert ldconfig["rc"] == 0


def test_nics_and_libraries_can_be_skipped(capsys):
    result = run_module(capsys, {"nics": False, "libraries": False, "include_raw": True})
    facts = result["ansible_facts"]["stacktune"]
    assert facts["nics"] == []
    assert facts["libraries"]["cuda_runtime"] is None
    # Only the fabric manager may be asked, and only on an NVSwitch host.
    assert set(result["raw"]["commands"]) <= {"fabricmanager_unit", "fabricmanager_version", "fabricmanager_package"}
    assert facts["gpudirect"]["applies"] is None
    assert facts["gpudirect"]["pairs"] == []


def test_check_mode_gathers_the_same_facts(capsys):
    result = run_module(capsys, {"_ansible_check_mode": True})
    assert result["changed"] is False
    assert result["ansible_facts"]["stacktune"]["schema_version"] == 1


def test_bad_option_type_fails_cleanly(capsys):
    result = run_module(capsys, {"include_raw": "sometimes"})
    assert result["failed"] is True
    assert "include_raw" in result["msg"]


def test_unexpected_error_becomes_fail_json(capsys, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("sysfs vanished")

    monkeypatch.setattr(gpu_topology_facts, "capture", broken)
    result = run_module(capsys, {})
    assert result["failed"] is True
    assert result["msg"] == "Failed to gather GPU topology facts: sysfs vanished"
    assert "Traceback" not in json.dumps(result)


def test_module_runs_as_a_script(tmp_path):
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"nics": False}}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    proc = subprocess.run(
        [sys.executable, MODULE_PATH, str(args)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ansible_facts"]["stacktune"]["nics"] == []
    assert result["changed"] is False


def test_files_root_reads_a_constructed_tree(capsys, tmp_path):
    """With files_root, the files come from the tree: an intel_pstate CPU and /data on an NVMe partition."""

    def write(path, text):
        full = tmp_path / path.lstrip("/")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)

    cpu = "/sys/devices/system/cpu"
    write(cpu + "/cpufreq/policy0/scaling_driver", "intel_pstate\n")
    write(cpu + "/cpufreq/policy0/scaling_governor", "powersave\n")
    write(cpu + "/cpufreq/policy0/scaling_available_governors", "performance powersave\n")
    for index, (name, latency) in enumerate((("POLL", 0), ("C6", 133))):
        write("%s/cpu0/cpuidle/state%d/name" % (cpu, index), name + "\n")
        write("%s/cpu0/cpuidle/state%d/latency" % (cpu, index), "%d\n" % latency)
    write("/proc/self/mountinfo", "30 1 259:1 / /data rw,relatime - xfs /dev/nvme0n1p1 rw\n")
    disk = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/nvme/nvme0/nvme0n1"
    write(disk + "/queue/scheduler", "[none] mq-deadline\n")
    write(disk + "/queue/read_ahead_kb", "128\n")
    write(disk + "/nvme0n1p1/partition", "1\n")
    (tmp_path / "sys/block").mkdir()
    (tmp_path / "sys/dev/block").mkdir(parents=True)
    (tmp_path / "sys/block/nvme0n1").symlink_to("../devices" + disk[len("/sys/devices") :])
    (tmp_path / "sys/dev/block/259:1").symlink_to("../../devices" + disk[len("/sys/devices") :] + "/nvme0n1p1")

    result = run_module(capsys, {"files_root": str(tmp_path), "nics": False, "libraries": False, "include_raw": True})
    facts = result["ansible_facts"]["stacktune"]
    assert facts["cpu"]["driver"] == "intel_pstate"
    assert [p["governor"] for p in facts["cpu"]["policies"]] == ["powersave"]
    assert [(s["name"], s["latency_us"]) for s in facts["cpu"]["idle_states"]] == [("POLL", 0), ("C6", 133)]
    assert [(m["mount"], m["disk"]) for m in facts["block"]["mounts"]] == [("/data", "nvme0n1")]
    assert facts["block"]["disks"]["nvme0n1"]["scheduler"] == "none"
    assert facts["block"]["disks"]["nvme0n1"]["read_ahead_kb"] == 128
    # the recording names the host paths, not the tree's
    assert "/proc/self/mountinfo" in result["raw"]["files"]["files"]
    assert topo.assemble(result["raw"]) == facts
