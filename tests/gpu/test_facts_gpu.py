# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU topology facts on a real NVIDIA GPU: complete, and true against NVML and sysfs.

Run on a GPU host from the repository root: `pytest -m gpu tests/gpu/test_facts_gpu.py`.
Skipped when pynvml is not importable or NVML does not start.
"""

from __future__ import absolute_import, division, print_function

import json
import os
import shutil
import subprocess
import time

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.hostprobe import capture
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.pcie_render import (
    compare_with_nvidia_smi,
    parse_nvidia_smi_topo,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import assemble
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology_table import render_table

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml():
    pynvml = pytest.importorskip("pynvml", reason="pynvml (nvidia-ml-py) is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip("NVML does not start here: %s" % exc)
    yield pynvml
    pynvml.nvmlShutdown()


@pytest.fixture(scope="module")
def recorded(nvml):
    start = time.perf_counter()
    raw = capture()
    elapsed = time.perf_counter() - start
    return raw, assemble(raw), elapsed


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def test_every_gpu_nvml_sees_is_reported(nvml, recorded):
    raw, facts, _elapsed = recorded
    count = nvml.nvmlDeviceGetCount()
    assert count >= 1
    assert raw["nvml"]["available"] is True
    assert facts["gpu_count"] == count
    assert facts["reason"] is None
    assert [g["index"] for g in facts["gpus"]] == list(range(count))
    for gpu in facts["gpus"]:
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu["index"])
        assert gpu["uuid"] == _text(nvml.nvmlDeviceGetUUID(handle))
        assert gpu["name"] == _text(nvml.nvmlDeviceGetName(handle))


def test_identity_and_bus_ids(recorded):
    _raw, facts, _elapsed = recorded
    for gpu in facts["gpus"]:
        assert gpu["uuid"].startswith("GPU-")
        assert gpu["name"]
        assert gpu["pci_bus_id"]
        assert gpu["pci_bus_id"] == gpu["pci_bus_id"].lower()
        assert os.path.isdir("/sys/bus/pci/devices/" + gpu["pci_bus_id"])


def test_pcie_current_never_exceeds_max(recorded):
    _raw, facts, _elapsed = recorded
    for gpu in facts["gpus"]:
        pcie = gpu["pcie"]
        for key in ("gen_current", "gen_max", "width_current", "width_max"):
            assert isinstance(pcie[key], int), (gpu["index"], key, pcie[key])
        assert 1 <= pcie["gen_current"] <= pcie["gen_max"]
        assert 1 <= pcie["width_current"] <= pcie["width_max"]


def test_numa_and_local_cpus(recorded):
    _raw, facts, _elapsed = recorded
    online = set()
    for node in facts["host"]["numa_nodes"]:
        online.update(node["cpus"])
    node_ids = [n["node"] for n in facts["host"]["numa_nodes"]]
    for gpu in facts["gpus"]:
        assert gpu["local_cpus"]
        assert set(gpu["local_cpus"]) <= online
        if len(node_ids) == 1:
            assert gpu["numa_node"] == node_ids[0]
        elif gpu["numa_node"] is not None:
            assert gpu["numa_node"] in node_ids


def test_driver_sides_agree_when_both_are_known(recorded):
    _raw, facts, _elapsed = recorded
    driver = facts["driver"]
    assert driver["nvml_version"]
    assert driver["cuda_driver_version"]
    if driver["kernel_module_version"] is not None:
        assert driver["agree"] is True
        assert driver["nvml_version"] == driver["kernel_module_version"]


def test_power_and_memory_are_plausible(recorded):
    _raw, facts, _elapsed = recorded
    for gpu in facts["gpus"]:
        power = gpu["power"]
        if None not in (power["limit_w"], power["min_limit_w"], power["max_limit_w"]):
            assert power["min_limit_w"] <= power["limit_w"] <= power["max_limit_w"]
        assert gpu["memory"]["total_mib"] > 0
        assert gpu["throttle_reasons"] is not None
        assert gpu["temperature_c"] is None or 0 < gpu["temperature_c"] < 120


def test_recording_replays_offline_and_is_fast(recorded):
    raw, facts, elapsed = recorded
    assert assemble(json.loads(json.dumps(raw))) == facts
    assert render_table(facts).count("\n") > len(facts["gpus"])
    assert elapsed < 5.0, "collecting the facts took %.2f s" % elapsed


def test_path_classes_agree_with_nvidia_smi_topo(recorded):
    """GPU-GPU and GPU-NIC classes of the facts are the ones `nvidia-smi topo -m` prints on this host."""
    _raw, facts, _elapsed = recorded
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        pytest.skip("nvidia-smi is not on PATH")
    proc = subprocess.run(
        [nvidia_smi, "topo", "-m"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(os.environ, LC_ALL="C"),
    )
    assert proc.returncode == 0, proc.stderr
    matrix = parse_nvidia_smi_topo(proc.stdout)
    n = facts["gpu_count"]
    assert all(("GPU%d" % i, "GPU%d" % i) in matrix for i in range(n)), proc.stdout
    for row in facts["topology"]["pcie_levels"]:
        assert None not in row, "a GPU's PCIe path is unknown: %s" % facts["pcie_paths"]
    assert compare_with_nvidia_smi(facts, matrix) == [], proc.stdout
    for name in facts["gpudirect"]["rdma_nics"]:
        assert ("GPU0", name) in matrix, "nvidia-smi does not list RDMA NIC %s:\n%s" % (name, proc.stdout)


def test_gpudirect_facts_are_complete(recorded):
    _raw, facts, _elapsed = recorded
    gpudirect = facts["gpudirect"]
    assert gpudirect["statement"]
    for entry in facts["pcie_paths"]:
        if entry["role"] == "gpu":
            assert entry["host_bridge"], entry
    if gpudirect["rdma_nics"]:
        assert gpudirect["applies"] is True
        for pair in gpudirect["pairs"]:
            if pair["rdma_devices"]:
                assert pair["path"] in ("PIX", "PXB", "PHB", "NODE", "SYS"), pair
                assert pair["verdict"] in ("possible", "not_possible", "unknown"), pair
    else:
        assert gpudirect["applies"] is False
        assert "no RDMA NIC" in gpudirect["statement"]
    if facts["fabric"]["nvswitch"]:
        assert [g["recorded"] for g in facts["fabric"]["gpus"]] == [True] * facts["gpu_count"]
