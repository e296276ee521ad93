# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers, facts assembly, findings and the table of _topology, on recorded inputs.

Fixtures (tests/unit/fixtures/topology/):
- no_gpu_debian.json: recorded on a GPU-less Debian 12 VM with tests/gpu/capture_topology.py.
- degraded_8gpu_constructed.json: CONSTRUCTED by hand (see its "_constructed" note): an
  8-GPU node with a Gen3 x8 link, a driver mismatch and a GPU without a NUMA node.
- h200.json: recorded on the project's H200 host with include_raw=true.
- h200x2.json: recorded with tests/gpu/capture_topology.py on a host with two H200s joined
  by NVLink through NVSwitch (`nvidia-smi topo -m` there: GPU0-GPU1 NV18).
"""

from __future__ import absolute_import, division, print_function

import copy
import json
import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import constants as topo_constants
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import parsers as topo_parsers
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import topology as topo
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import topology_table as topo_topology_table
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.cpulist import parse_cpulist

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "topology")


def load(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return json.load(handle)


@pytest.fixture
def degraded_raw():
    return load("degraded_8gpu_constructed.json")


@pytest.fixture
def no_gpu_raw():
    return load("no_gpu_debian.json")


# --------------------------------------------------------------------------- schema

TOP_KEYS = {
    "schema_version",
    "cpu",
    "block",
    "collected_at",
    "reason",
    "gpu_count",
    "host",
    "driver",
    "libraries",
    "gpus",
    "topology",
    "nics",
    "pcie_paths",
    "gpudirect",
    "fabric",
    "findings",
}
HOST_KEYS = {
    "kernel_release",
    "os",
    "cpu_model",
    "cpu_microcode",
    "bios",
    "board",
    "cmdline",
    "iommu",
    "aspm_policy",
    "numa_nodes",
    "cpu_count",
}
GPU_KEYS = {
    "index",
    "name",
    "uuid",
    "serial",
    "vbios",
    "pci_bus_id",
    "numa_node",
    "local_cpulist",
    "local_cpus",
    "pcie",
    "nvlink",
    "power",
    "clocks",
    "ecc",
    "persistence_mode",
    "compute_mode",
    "mig",
    "temperature_c",
    "throttle_reasons",
    "memory",
}
PCIE_KEYS = {
    "gen_current",
    "gen_max",
    "width_current",
    "width_max",
    "sysfs_speed_current",
    "sysfs_speed_max",
    "sysfs_width_current",
    "sysfs_width_max",
}
POWER_KEYS = {"limit_w", "default_limit_w", "min_limit_w", "max_limit_w", "enforced_limit_w", "draw_w"}
CLOCK_KEYS = {
    "sm_mhz",
    "mem_mhz",
    "sm_max_mhz",
    "mem_max_mhz",
    "app_sm_mhz",
    "app_mem_mhz",
    "default_app_sm_mhz",
    "default_app_mem_mhz",
}
ECC_KEYS = {
    "mode_current",
    "mode_pending",
    "volatile_corrected",
    "volatile_uncorrected",
    "aggregate_corrected",
    "aggregate_uncorrected",
    "remapped_rows_pending",
    "remapped_rows_failure",
}
NIC_KEYS = {
    "name",
    "kind",
    "pci_address",
    "numa_node",
    "local_cpulist",
    "driver",
    "speed_mbps",
    "operstate",
    "rdma_device",
}
FINDING_KEYS = {"id", "severity", "subject", "message", "evidence"}
PCIE_PATH_KEYS = {"address", "role", "names", "sysfs_path", "host_bridge", "numa_node", "bridges"}
GPUDIRECT_KEYS = {
    "applies",
    "statement",
    "rdma_nics",
    "rdma_ports",
    "peer_memory",
    "iommu_mode",
    "pairs",
    "nearest_nic",
}
PAIR_KEYS = {
    "gpu",
    "gpu_address",
    "nic",
    "nic_address",
    "rdma_devices",
    "netdevs",
    "path",
    "nccl_path",
    "common_switch",
    "path_bridges",
    "verdict",
    "reasons",
    "unknown",
    "notes",
    "text",
}


def assert_schema(facts):
    """Every key of the documented layout is present (values may be null)."""
    assert set(facts) == TOP_KEYS
    assert facts["schema_version"] == 1
    assert set(facts["host"]) == HOST_KEYS
    assert set(facts["host"]["os"]) == {"id", "version_id", "pretty_name"}
    assert set(facts["host"]["bios"]) == {"vendor", "version", "date"}
    assert set(facts["host"]["board"]) == {"vendor", "name", "product_name"}
    assert set(facts["host"]["iommu"]) == {"mode", "source"}
    assert facts["host"]["iommu"]["mode"] in ("pt", "on", "off", "unknown")
    for node in facts["host"]["numa_nodes"]:
        assert set(node) == {"node", "cpulist", "cpus", "mem_total_kib"}
    assert set(facts["driver"]) == {"nvml_version", "kernel_module_version", "agree", "cuda_driver_version"}
    assert set(facts["libraries"]) == {"cuda_runtime", "cudnn", "nccl", "sources"}
    assert set(facts["libraries"]["sources"]) == {"cuda_runtime", "cudnn", "nccl"}
    assert facts["gpu_count"] == len(facts["gpus"])
    for gpu in facts["gpus"]:
        assert set(gpu) == GPU_KEYS
        assert set(gpu["pcie"]) == PCIE_KEYS
        assert set(gpu["power"]) == POWER_KEYS
        assert set(gpu["clocks"]) == CLOCK_KEYS
        assert set(gpu["ecc"]) == ECC_KEYS
        assert set(gpu["nvlink"]) == {"supported", "links"}
        assert set(gpu["memory"]) == {"total_mib", "used_mib"}
    n = facts["gpu_count"]
    matrix = facts["topology"]["p2p_levels"]
    assert len(matrix) == n
    assert all(len(row) == n and row[i] == "X" for i, row in enumerate(matrix))
    for nic in facts["nics"]:
        assert set(nic) == NIC_KEYS
    assert len(matrix) == len(facts["topology"]["pcie_levels"])
    for entry in facts["pcie_paths"]:
        assert set(entry) == PCIE_PATH_KEYS
    assert set(facts["gpudirect"]) == GPUDIRECT_KEYS
    for pair in facts["gpudirect"]["pairs"]:
        assert set(pair) == PAIR_KEYS
        assert pair["verdict"] in ("possible", "not_possible", "unknown", "not_applicable")
    assert set(facts["fabric"]) == {"nvswitch", "nvswitch_pci", "gpus_on_nvswitch", "fabric_manager", "gpus"}
    for finding in facts["findings"]:
        assert set(finding) == FINDING_KEYS
        assert finding["severity"] in topo.SEVERITIES
    # Facts travel as JSON (ansible_facts, the saved reports).
    assert json.loads(json.dumps(facts)) == facts


def finding_ids(facts):
    return sorted((f["id"], f["subject"], f["severity"]) for f in facts["findings"])


# --------------------------------------------------------------------------- parsers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-3,8-11\n", [0, 1, 2, 3, 8, 9, 10, 11]),
        ("5", [5]),
        ("0-1", [0, 1]),
        ("0-47,96-143", list(range(48)) + list(range(96, 144))),
        ("0-11:2/4", [0, 1, 4, 5, 8, 9]),  # the kernel's U/G: 2 of every 4
        ("0-1023:2/256", [0, 1, 256, 257, 512, 513, 768, 769]),
        ("", []),
        ("\n", []),
        ("3-1", None),
        ("a-b", None),
        ("0-7:2", None),  # the kernel reads no stride without a group size
        ("0-7:3/2", None),
        (None, None),
    ],
)
def test_sysfs_cpu_lists_have_the_one_parser(text, expected):
    """hardware/cpulist.py parses every CPU list (ValueError when malformed); topology reads an
    unreadable sysfs list as none."""
    assert topo._sysfs_cpus(text) == expected
    if expected is None and text is not None:
        with pytest.raises(ValueError, match="malformed CPU list"):
            parse_cpulist(text)


@pytest.mark.parametrize(
    ("text", "gen"),
    [
        ("2.5 GT/s PCIe\n", 1),
        ("2.5 GT/s\n", 1),
        ("5.0 GT/s PCIe", 2),
        ("8.0 GT/s PCIe", 3),
        ("16.0 GT/s PCIe", 4),
        ("32.0 GT/s PCIe", 5),
        ("64.0 GT/s PCIe", 6),
        ("Unknown", None),
        ("Unknown speed", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_pcie_gen(text, gen):
    assert topo_parsers.parse_pcie_gen(text) == gen


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("[default] performance powersave powersupersave \n", "default"),
        ("default performance [powersave] powersupersave \n", "powersave"),
        ("always [madvise] never\n", "madvise"),
        ("performance\n", "performance"),
        ("default performance", None),
        (None, None),
    ],
)
def test_parse_bracketed(text, value):
    assert topo_parsers.parse_bracketed(text) == value


@pytest.mark.parametrize(
    ("cmdline", "mode"),
    [
        ("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet", None),
        ("intel_iommu=on", "on"),
        ("intel_iommu=on,sm_on", "on"),
        ("intel_iommu=on iommu=pt", "pt"),
        ("amd_iommu=on iommu=pt", "pt"),
        ("iommu.passthrough=1", "pt"),
        ("iommu.passthrough=0", "on"),
        ("intel_iommu=off", "off"),
        ("amd_iommu=off iommu=pt", "off"),
        ("iommu=off", "off"),
        ("iommu=force", "on"),
        # Parameters after "--" belong to init, not the kernel.
        ("quiet -- intel_iommu=on", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_iommu_cmdline(cmdline, mode):
    assert topo_parsers.parse_iommu_cmdline(cmdline) == mode


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("580.159.04\n", "580.159.04"),
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n",
            "550.54.15",
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
            "(dvs-builder@U22-I3-AF03-09-1)  Thu Oct 30 00:53:14 UTC 2025\nGCC version:  gcc version 13.3.0\n",
            "580.159.04",
        ),
        ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n", "535.183.01"),
        ("garbage", None),
        (None, None),
    ],
)
def test_parse_driver_version(text, version):
    assert topo_parsers.parse_driver_version(text) == version


def test_parse_cpuinfo_takes_the_first_cpu():
    text = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"
        "microcode\t: 0xa101148\n\nprocessor\t: 1\nmodel name\t: other\nmicrocode\t: 0x1\n"
    )
    assert topo_parsers.parse_cpuinfo(text) == {"model": "AMD EPYC 9654 96-Core Processor", "microcode": "0xa101148"}


def test_parse_cpuinfo_without_microcode_line():
    # arm64 /proc/cpuinfo has neither line.
    text = "processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n"
    assert topo_parsers.parse_cpuinfo(text) == {"model": None, "microcode": None}


def test_parse_os_release_strips_quotes():
    text = 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n# comment\n'
    assert topo_parsers.parse_os_release(text) == {
        "id": "ubuntu",
        "version_id": "24.04",
        "pretty_name": "Ubuntu 24.04.1 LTS",
    }
    assert topo_parsers.parse_os_release(None) == {"id": None, "version_id": None, "pretty_name": None}


def test_parse_node_meminfo():
    assert (
        topo_parsers.parse_node_meminfo_total_kib("Node 0 MemTotal:        6121684 kB\nNode 0 MemFree: 1 kB\n")
        == 6121684
    )
    assert topo_parsers.parse_node_meminfo_total_kib(None) is None


@pytest.mark.parametrize(
    ("bus_id", "normal"),
    [
        ("00000000:05:00.0", "0000:05:00.0"),
        ("00000000:3A:00.0", "0000:3a:00.0"),
        ("0000:3a:00.0", "0000:3a:00.0"),
        ("00000001:C1:00.0", "0001:c1:00.0"),
        ("3a:00.0", "0000:3a:00.0"),
        ("", None),
        (None, None),
    ],
)
def test_normalize_bus_id(bus_id, normal):
    assert topo_parsers.normalize_bus_id(bus_id) == normal


@pytest.mark.parametrize(
    ("path", "address"),
    [
        ("/sys/devices/pci0000:00/0000:00:03.0/virtio2", "0000:00:03.0"),
        ("/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0", "0000:17:00.0"),
        ("/sys/devices/virtual/net/ifb0", None),
        (None, None),
    ],
)
def test_pci_address_from_path(path, address):
    assert topo_parsers.pci_address_from_path(path) == address


@pytest.mark.parametrize(("value", "text"), [(13000, "13.0"), (12040, "12.4"), (11080, "11.8"), (None, None)])
def test_format_cuda_version(value, text):
    assert topo_parsers.format_cuda_version(value) == text


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0, []),
        (0x1, ["gpu_idle"]),
        (0x4 | 0x40, ["sw_power_cap", "hw_thermal_slowdown"]),
        (0x88, ["hw_slowdown", "hw_power_brake_slowdown"]),
        (0x1000, ["unknown_0x1000"]),
        (None, None),
    ],
)
def test_decode_clocks_event_reasons(mask, names):
    assert topo_parsers.decode_clocks_event_reasons(mask) == names


def test_parse_ldconfig_and_library_versions():
    text = (
        "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n"
        "\tlibcudart.so.13 (libc6,x86-64) => /usr/local/cuda-13.0/lib/libcudart.so.13\n"
        "553 libs found in cache `/etc/ld.so.cache'\n"
    )
    assert topo_parsers.parse_ldconfig(text) == [
        ("libnccl.so.2", "libc6,x86-64", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"),
        ("libcudart.so.13", "libc6,x86-64", "/usr/local/cuda-13.0/lib/libcudart.so.13"),
    ]
    assert topo_parsers.library_version_from_filename("libnccl.so.2.28.3", "nccl") == "2.28.3"
    assert topo_parsers.library_version_from_filename("libcudnn.so.9", "cudnn") == "9"
    assert topo_parsers.library_version_from_filename("libcudnn_ops.so.9.1.0", "cudnn") is None
    assert topo_constants.version_order("12.4.127") > topo_constants.version_order("12.4.99")


def test_replay_reader_answers_only_what_was_recorded():
    reader = topo.ReplayReader(
        {"files": {"/a": "1\n", "/b": None}, "dirs": {"/d": ["y", "x"]}, "realpaths": {"/l": "/real"}}
    )
    assert reader.read("/a") == "1\n"
    assert reader.read("/b") is None
    assert reader.read("/never") is None
    assert reader.listdir("/d") == ["x", "y"]
    assert reader.listdir("/never") is None
    assert reader.realpath("/l") == "/real"
    assert reader.readlink("/l") is None


# --------------------------------------------------------------------------- recorded VM


def test_no_gpu_debian_recording(no_gpu_raw):
    facts = topo.assemble(no_gpu_raw)
    assert_schema(facts)
    assert facts["gpu_count"] == 0
    assert facts["gpus"] == []
    assert facts["reason"].startswith("NVML unavailable: ")
    assert facts["reason"].endswith("no NVIDIA GPU on the PCI bus")
    host = facts["host"]
    assert host["os"]["id"] == "debian"
    assert host["os"]["version_id"] == "12"
    assert host["kernel_release"].startswith("6.")
    assert host["cpu_count"] == 2
    assert host["numa_nodes"] == [{"node": 0, "cpulist": "0-1", "cpus": [0, 1], "mem_total_kib": 6121684}]
    assert host["aspm_policy"] == "default"
    assert host["iommu"] == {"mode": "off", "source": "sysfs"}
    assert host["bios"] == {"vendor": None, "version": None, "date": None}  # no DMI in this VM
    assert facts["driver"] == {
        "nvml_version": None,
        "kernel_module_version": None,
        "agree": None,
        "cuda_driver_version": None,
    }
    # The VM carries a pip-layout CUDA 13 runtime: the file name has only the major version,
    # the full one comes from the wheel's dist-info next to it.
    assert facts["libraries"]["cuda_runtime"] == "13.0.96"
    assert facts["libraries"]["cudnn"] is None
    eth0 = [n for n in facts["nics"] if n["name"] == "eth0"][0]
    assert eth0["pci_address"] == "0000:00:03.0"
    assert eth0["driver"] == "virtio_net"
    assert eth0["kind"] == "ethernet"
    assert all(n["name"] != "lo" for n in facts["nics"])
    assert [(f["id"], f["severity"]) for f in facts["findings"]] == [("nvml_unavailable", "info")]


def test_replay_is_deterministic(no_gpu_raw, degraded_raw):
    for raw in (no_gpu_raw, degraded_raw):
        assert topo.assemble(copy.deepcopy(raw)) == topo.assemble(raw)


# --------------------------------------------------------------------------- constructed node


def test_degraded_node_facts(degraded_raw):
    facts = topo.assemble(degraded_raw)
    assert_schema(facts)
    assert facts["gpu_count"] == 8
    assert facts["reason"] is None
    gpu2 = facts["gpus"][2]
    assert gpu2["pci_bus_id"] == "0000:3a:00.0"
    assert gpu2["pcie"] == {
        "gen_current": 3,
        "gen_max": 5,
        "width_current": 8,
        "width_max": 16,
        "sysfs_speed_current": "8.0 GT/s PCIe",
        "sysfs_speed_max": "32.0 GT/s PCIe",
        "sysfs_width_current": 8,
        "sysfs_width_max": 16,
    }
    assert [g["numa_node"] for g in facts["gpus"]] == [0, 0, 0, 0, 1, None, 1, 1]
    assert facts["gpus"][4]["local_cpus"] == list(range(48, 96)) + list(range(144, 192))
    gpu0 = facts["gpus"][0]
    assert gpu0["power"] == {
        "limit_w": 700.0,
        "default_limit_w": 700.0,
        "min_limit_w": 200.0,
        "max_limit_w": 700.0,
        "enforced_limit_w": 700.0,
        "draw_w": 71.25,
    }
    assert gpu0["memory"] == {"total_mib": 81559, "used_mib": 539}
    assert gpu0["mig"] == {"current": False, "pending": False}
    assert gpu0["compute_mode"] == "default"
    assert gpu0["throttle_reasons"] == ["gpu_idle"]
    assert gpu0["nvlink"]["supported"] is True
    assert len(gpu0["nvlink"]["links"]) == 18
    # Every GPU reaches every other through NVSwitch with 18 links.
    assert facts["topology"]["p2p_levels"][0] == ["X"] + ["NV18"] * 7
    assert facts["driver"] == {
        "nvml_version": "550.90.07",
        "kernel_module_version": "550.54.15",
        "agree": False,
        "cuda_driver_version": "12.4",
    }
    assert facts["libraries"]["cuda_runtime"] == "12.4.127"
    assert facts["libraries"]["nccl"] == "2.21.5"  # ldconfig wins over the venv's 2.20.5
    assert facts["libraries"]["cudnn"] == "9.1.0.70"
    assert facts["libraries"]["sources"]["cudnn"].startswith("/opt/pytorch/.venv/lib/python3.10/site-packages/")
    host = facts["host"]
    assert host["iommu"] == {"mode": "pt", "source": "cmdline"}
    assert host["aspm_policy"] == "powersave"
    assert host["cpu_microcode"] == "0x2b0004b1"
    assert host["cpu_count"] == 192
    assert host["bios"]["version"] == "1.7.0"
    ib2 = [n for n in facts["nics"] if n["name"] == "ib2"][0]
    assert ib2 == {
        "name": "ib2",
        "kind": "infiniband",
        "pci_address": "0000:9c:00.0",
        "numa_node": 1,
        "local_cpulist": "48-95,144-191",
        "driver": "mlx5_core",
        "speed_mbps": 400000,
        "operstate": "up",
        "rdma_device": "mlx5_2",
    }


def test_degraded_node_findings(degraded_raw):
    facts = topo.assemble(degraded_raw)
    assert finding_ids(facts) == sorted(
        [
            ("driver_version_mismatch", "host", "critical"),
            ("aspm_enabled", "host", "warning"),
            ("pcie_link_degraded", "gpu2", "warning"),
            ("gpu_numa_no_local_cpus", "gpu5", "warning"),
        ]
    )
    assert facts["findings"][0]["id"] == "driver_version_mismatch"  # most severe first
    pcie = [f for f in facts["findings"] if f["id"] == "pcie_link_degraded"][0]
    assert pcie["message"] == "GPU 2 (0000:3a:00.0) PCIe link runs at Gen3 x8, below its maximum Gen5 x16"
    assert pcie["evidence"] == {"gen_current": 3, "gen_max": 5, "width_current": 8, "width_max": 16}


def _device(raw, index):
    return raw["nvml"]["devices"][index]


def _set(path, value):
    def change(raw):
        target = raw
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _file(path, text):
    return _set(["files", "files", path], text)


def _devices(key, value, indexes=range(8)):
    def change(raw):
        for i in indexes:
            _device(raw, i)[key] = value

    return change


@pytest.mark.parametrize(
    ("change", "added", "removed"),
    [
        pytest.param(
            _devices("clocks_event_reasons", 0x40 | 0x4, [6]),
            [("gpu_throttled", "gpu6", "warning")],
            [],
            id="hw-thermal-slowdown",
        ),
        pytest.param(
            _devices("clocks_event_reasons", 0x4, [6]),
            [],
            [],
            id="sw-power-cap-is-not-a-problem",
        ),
        pytest.param(
            _devices("ecc_volatile_uncorrected", 2, [7]),
            [("ecc_uncorrected_errors", "gpu7", "critical")],
            [],
            id="volatile-uncorrected-ecc",
        ),
        pytest.param(
            _devices("ecc_aggregate_uncorrected", 1, [7]),
            [("ecc_uncorrected_errors", "gpu7", "warning")],
            [],
            id="aggregate-uncorrected-ecc",
        ),
        pytest.param(
            _devices("remapped_rows", [0, 1, 1, 0], [3]),
            [("remapped_rows_pending", "gpu3", "warning")],
            [],
            id="remapped-rows-pending",
        ),
        pytest.param(
            _devices("remapped_rows", [0, 8, 0, 1], [3]),
            [("remapped_rows_failure", "gpu3", "critical")],
            [],
            id="remapped-rows-failure",
        ),
        pytest.param(
            _devices("persistence_mode", 0, [1]),
            [("persistence_mode_off", "gpu1", "info")],
            [],
            id="persistence-off",
        ),
        pytest.param(
            _devices("ecc_mode", [1, 0], [0]),
            [("ecc_mode_pending", "gpu0", "info")],
            [],
            id="ecc-mode-pending",
        ),
        pytest.param(
            _file("/sys/module/pcie_aspm/parameters/policy", "default [performance] powersave powersupersave\n"),
            [],
            [("aspm_enabled", "host", "warning")],
            id="aspm-performance",
        ),
        pytest.param(
            _file("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  x\n"),
            [],
            [("driver_version_mismatch", "host", "critical")],
            id="driver-reloaded",
        ),
        pytest.param(
            _file("/sys/bus/pci/devices/0000:ab:00.0/numa_node", "1\n"),
            [],
            [("gpu_numa_no_local_cpus", "gpu5", "warning")],
            id="numa-node-known",
        ),
    ],
)
def test_findings_follow_the_inputs(degraded_raw, change, added, removed):
    before = set(finding_ids(topo.assemble(degraded_raw)))
    changed = copy.deepcopy(degraded_raw)
    change(changed)
    after = set(finding_ids(topo.assemble(changed)))
    assert after - before == set(added)
    assert before - after == set(removed)


def test_idle_speed_drop_is_info_but_lane_drop_is_warning(degraded_raw):
    raw = copy.deepcopy(degraded_raw)
    _device(raw, 0)["pcie_gen_current"] = 1  # idle GPUs drop to Gen1 to save power
    _device(raw, 2)["pcie_width_current"] = 16  # GPU 2 keeps only its Gen3 speed drop, idle too
    found = {f["subject"]: f for f in topo.assemble(raw)["findings"] if f["id"] == "pcie_link_degraded"}
    assert found["gpu0"]["severity"] == "info"
    assert "while idle" in found["gpu0"]["message"]
    assert found["gpu2"]["severity"] == "info"
    _device(raw, 0)["clocks_event_reasons"] = 0x4  # under load (power cap), still Gen1
    found = {f["subject"]: f for f in topo.assemble(raw)["findings"] if f["id"] == "pcie_link_degraded"}
    assert found["gpu0"]["severity"] == "warning"


def test_nic_on_a_node_without_gpus(degraded_raw):
    raw = copy.deepcopy(degraded_raw)
    for bus in ("0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"):
        raw["files"]["files"]["/sys/bus/pci/devices/%s/numa_node" % bus] = "0\n"
    found = [f for f in topo.assemble(raw)["findings"] if f["id"] == "nic_numa_mismatch"]
    assert sorted(f["subject"] for f in found) == ["nic:ib2", "nic:ib3"]
    assert found[0]["evidence"] == {"nic_numa_node": 1, "gpu_numa_nodes": [0]}


def test_numa_node_from_local_cpus_when_sysfs_and_nvml_have_none(degraded_raw):
    raw = copy.deepcopy(degraded_raw)
    # GPU 5 keeps numa_node -1 but lists only node 1's CPUs as local.
    raw["files"]["files"]["/sys/bus/pci/devices/0000:ab:00.0/local_cpulist"] = "48-95,144-191\n"
    facts = topo.assemble(raw)
    assert facts["gpus"][5]["numa_node"] == 1
    assert "gpu_numa_no_local_cpus" not in [f["id"] for f in facts["findings"]]


def test_nvml_numa_node_fills_in_before_local_cpus(degraded_raw):
    raw = copy.deepcopy(degraded_raw)
    _device(raw, 5)["numa_node"] = 0
    assert topo.assemble(raw)["gpus"][5]["numa_node"] == 0


def test_a_failed_nvml_query_nulls_only_that_field(degraded_raw):
    raw = copy.deepcopy(degraded_raw)
    dev = _device(raw, 4)
    dev["power_usage_mw"] = None
    dev["serial"] = None
    dev["errors"].update({"power_usage_mw": "Not Supported", "serial": "Not Supported"})
    gpu = topo.assemble(raw)["gpus"][4]
    assert gpu["power"]["draw_w"] is None
    assert gpu["serial"] is None
    assert gpu["power"]["limit_w"] == 700.0
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"


def test_sysfs_fills_in_when_nvml_has_no_pcie_values(degraded_raw):
    raw = copy.deepcopy(degraded_raw)
    for key in ("pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max"):
        _device(raw, 2)[key] = None
    pcie = topo.assemble(raw)["gpus"][2]["pcie"]
    assert (pcie["gen_current"], pcie["gen_max"], pcie["width_current"], pcie["width_max"]) == (3, 5, 8, 16)


def test_nvml_missing_with_nvidia_gpus_on_the_bus_is_critical(no_gpu_raw):
    raw = copy.deepcopy(no_gpu_raw)
    files = raw["files"]
    files["dirs"]["/sys/bus/pci/devices"] = ["0000:00:00.0", "0000:00:05.0"]
    files["files"]["/sys/bus/pci/devices/0000:00:05.0/vendor"] = "0x10de\n"
    files["files"]["/sys/bus/pci/devices/0000:00:05.0/class"] = "0x030200\n"
    facts = topo.assemble(raw)
    assert facts["gpus"] == []
    assert facts["reason"].endswith("1 NVIDIA GPU(s) on the PCI bus (0000:00:05.0)")
    assert facts["findings"][0]["id"] == "nvml_unavailable"
    assert facts["findings"][0]["severity"] == "critical"
    assert facts["findings"][0]["evidence"] == {"nvidia_pci_devices": ["0000:00:05.0"]}


def test_options_switch_off_nics_and_libraries(degraded_raw):
    raw = copy.deepcopy(degraded_raw)
    raw["options"] = {"nics": False, "libraries": False}
    facts = topo.assemble(raw)
    assert facts["nics"] == []
    assert facts["libraries"] == {
        "cuda_runtime": None,
        "cudnn": None,
        "nccl": None,
        "sources": {"cuda_runtime": None, "cudnn": None, "nccl": None},
    }


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        ([[None, 10], [10, None]], "PIX"),
        ([[None, 20], [20, None]], "PXB"),
        ([[None, 30], [30, None]], "PHB"),
        ([[None, 40], [40, None]], "NODE"),
        ([[None, 50], [50, None]], "SYS"),
        ([[None, None], [None, None]], None),
    ],
)
def test_p2p_levels_without_nvlink(degraded_raw, levels, expected):
    raw = copy.deepcopy(degraded_raw)
    raw["nvml"]["devices"] = raw["nvml"]["devices"][:2]
    for dev in raw["nvml"]["devices"]:
        dev["nvlink"] = None
    raw["nvml"]["topology"] = levels
    facts = topo.assemble(raw)
    assert facts["topology"]["p2p_levels"] == [["X", expected], [expected, "X"]]
    assert facts["gpus"][0]["nvlink"] == {"supported": False, "links": []}


def test_p2p_direct_nvlink_counts_links(degraded_raw):
    raw = copy.deepcopy(degraded_raw)
    raw["nvml"]["devices"] = raw["nvml"]["devices"][:2]
    raw["nvml"]["topology"] = [[None, 50], [50, None]]
    a, b = raw["nvml"]["devices"]
    a["nvlink"] = [
        {"link": i, "active": True, "remote_pci_bus_id": b["pci_bus_id"], "remote_device_type": 0} for i in range(4)
    ]
    b["nvlink"] = [
        {"link": i, "active": True, "remote_pci_bus_id": a["pci_bus_id"], "remote_device_type": 0} for i in range(4)
    ]
    assert topo.assemble(raw)["topology"]["p2p_levels"] == [["X", "NV4"], ["NV4", "X"]]


# --------------------------------------------------------------------------- table and filters


def test_table_of_the_degraded_node(degraded_raw):
    table = topo_topology_table.render_table(topo.assemble(degraded_raw))
    lines = table.splitlines()
    assert lines[0].split() == [
        "idx",
        "name",
        "bus",
        "id",
        "PCIe",
        "cur",
        "/",
        "max",
        "NUMA",
        "local",
        "CPUs",
        "power",
        "persist",
        "temp",
        "throttle",
    ]
    gpu_rows = [line for line in lines if "NVIDIA H100" in line]
    assert len(gpu_rows) == 8
    assert "0000:3a:00.0  Gen3 x8 / Gen5 x16" in gpu_rows[2]
    assert gpu_rows[5].split()[11:13] == ["-", "0-191"]  # GPU 5: no NUMA node, all CPUs local
    assert "driver        nvml 550.90.07 / module 550.54.15 (MISMATCH)" in lines
    assert "NCCL          2.21.5" in lines
    assert "IOMMU         pt (cmdline)" in lines
    assert any(line.startswith("ib0") and "mlx5_0" in line for line in lines)
    assert "  [critical] host: NVML reports driver 550.90.07 but the loaded kernel module is 550.54.15; " in table


def test_table_without_gpus(no_gpu_raw):
    facts = topo.assemble(no_gpu_raw)
    lines = topo_topology_table.render_table(facts).splitlines()
    assert lines[0] == "GPUs: none (%s)" % facts["reason"]
    assert "CUDA runtime  13.0.96" in lines
    assert lines[-1] == "  [info] host: NVML is unavailable and no NVIDIA GPU is on the PCI bus"


@pytest.mark.parametrize(
    ("severity", "ids"),
    [
        ("info", ["driver_version_mismatch", "aspm_enabled", "pcie_link_degraded", "gpu_numa_no_local_cpus"]),
        ("warning", ["driver_version_mismatch", "aspm_enabled", "pcie_link_degraded", "gpu_numa_no_local_cpus"]),
        ("critical", ["driver_version_mismatch"]),
    ],
)
def test_filter_findings(degraded_raw, severity, ids):
    facts = topo.assemble(degraded_raw)
    assert [f["id"] for f in topo.filter_findings(facts, severity)] == ids


def test_filter_findings_rejects_unknown_severity():
    with pytest.raises(ValueError, match="min_severity must be one of"):
        topo.filter_findings({"findings": []}, "fatal")


# --------------------------------------------------------------------------- the H200 recording


def test_h200_recording():
    facts = topo.assemble(load("h200.json"))
    assert_schema(facts)
    assert facts["gpu_count"] == 1
    gpu = facts["gpus"][0]
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["pcie"]["gen_current"] == gpu["pcie"]["gen_max"] == 5
    assert gpu["pcie"]["width_current"] == gpu["pcie"]["width_max"] == 16
    assert gpu["uuid"].startswith("GPU-")
    driver = facts["driver"]
    assert driver["nvml_version"] == driver["kernel_module_version"]
    assert driver["nvml_version"].startswith("580.")
    assert driver["agree"] is True
    assert driver["cuda_driver_version"].startswith("13.")
    assert gpu["local_cpus"]
    assert facts["host"]["numa_nodes"]
    node_ids = [n["node"] for n in facts["host"]["numa_nodes"]]
    # sysfs says -1 in this VM and NVML does not support the query: the node comes from
    # the GPU's local CPUs, as nvidia-smi topo -m shows it.
    assert gpu["numa_node"] in node_ids
    assert set(gpu["local_cpus"]) <= {cpu for n in facts["host"]["numa_nodes"] for cpu in n["cpus"]}
    assert facts["topology"]["p2p_levels"] == [["X"]]
    assert not [f for f in facts["findings"] if f["id"] in ("driver_version_mismatch", "pcie_link_degraded")]


def test_two_h200_over_nvswitch_recording():
    """Recorded on two H200s; `nvidia-smi topo -m` on that host printed NV18 between them."""
    facts = topo.assemble(load("h200x2.json"))
    assert facts["gpu_count"] == 2
    assert facts["topology"]["p2p_levels"] == [["X", "NV18"], ["NV18", "X"]]
    for gpu in facts["gpus"]:
        assert gpu["nvlink"]["supported"] is True
        assert [link["active"] for link in gpu["nvlink"]["links"]] == [True] * 18
        assert (gpu["pcie"]["gen_current"], gpu["pcie"]["width_current"]) == (5, 16)
    assert facts["findings"] == []
    # No RDMA NIC in that VM: one statement, no per-pair verdicts.
    assert facts["gpudirect"]["applies"] is False
    assert facts["gpudirect"]["statement"].startswith("no RDMA NIC on this host")
    assert facts["fabric"]["gpus_on_nvswitch"] == [0, 1]
    table = topo_topology_table.render_table(facts)
    assert "p2p   gpu0  gpu1\n" in table
    assert "gpu0  X     NV18\ngpu1  NV18  X\n" in table


def test_one_gpu_prints_no_p2p_matrix(no_gpu_raw):
    assert "p2p" not in topo_topology_table.render_table(topo.assemble(no_gpu_raw))
