# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The recording collectors of _hostprobe: files, NVML, commands, and record -> replay.

Files are real: a small host tree under tmp_path, read through the real FileReader.
NVML cannot exist on the machines that run the unit tests, so FakeNvml stands in for
pynvml. It serves the NVML values of the CONSTRUCTED 8-GPU fixture
(tests/unit/fixtures/topology/degraded_8gpu_constructed.json) through the same function
names and calling conventions as nvidia-ml-py 13, so the tests check that the collector
turns pynvml answers into exactly the raw layout the facts builder reads.
"""

from __future__ import absolute_import, division, print_function

import copy
import json
import os
import shutil

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import hostprobe as probe
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import topology as topo

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "topology")


def load(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return json.load(handle)


class NVMLError(Exception):
    """Stands in for pynvml.NVMLError: str() is NVML's error string."""


class _Struct:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class FakeNvml:
    """pynvml look-alike serving recorded raw NVML values (see the module docstring)."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, nvml_raw, init_error=None):
        self.raw = nvml_raw
        self.devices = nvml_raw["devices"]
        self.init_error = init_error
        self.calls = []
        self.shutdown = 0

    # -- helpers
    def _value(self, handle, key):
        dev = self.devices[handle]
        if key in dev.get("errors", {}):
            raise NVMLError(dev["errors"][key])
        return dev[key]

    # -- system
    def nvmlInit(self):
        if self.init_error:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdown += 1

    def nvmlSystemGetDriverVersion(self):
        return self.raw["driver_version"]

    def nvmlSystemGetNVMLVersion(self):
        return self.raw["nvml_version"]

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self.raw["cuda_driver_version"]

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    # -- device
    def nvmlDeviceGetName(self, h):
        return self._value(h, "name")

    def nvmlDeviceGetUUID(self, h):
        return self._value(h, "uuid")

    def nvmlDeviceGetSerial(self, h):
        return self._value(h, "serial")

    def nvmlDeviceGetVbiosVersion(self, h):
        return self._value(h, "vbios")

    def nvmlDeviceGetPciInfo(self, h):
        # nvidia-ml-py returns busId as bytes in some versions, str in others.
        return _Struct(busId=self._value(h, "pci_bus_id").encode())

    def nvmlDeviceGetNumaNodeId(self, h):
        return self._value(h, "numa_node")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._value(h, "pcie_gen_current")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._value(h, "pcie_gen_max")

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return self._value(h, "pcie_gen_gpu_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._value(h, "pcie_width_current")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._value(h, "pcie_width_max")

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._value(h, "power_limit_mw")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._value(h, "power_default_limit_mw")

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return tuple(self._value(h, "power_constraints_mw"))

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._value(h, "power_enforced_limit_mw")

    def nvmlDeviceGetPowerUsage(self, h):
        return self._value(h, "power_usage_mw")

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._value(h, "clock_sm_mhz" if clock == 1 else "clock_mem_mhz")

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return self._value(h, "clock_sm_max_mhz" if clock == 1 else "clock_mem_max_mhz")

    def nvmlDeviceGetApplicationsClock(self, h, clock):
        return self._value(h, "app_clock_sm_mhz" if clock == 1 else "app_clock_mem_mhz")

    def nvmlDeviceGetDefaultApplicationsClock(self, h, clock):
        return self._value(h, "default_app_clock_sm_mhz" if clock == 1 else "default_app_clock_mem_mhz")

    def nvmlDeviceGetEccMode(self, h):
        return list(self._value(h, "ecc_mode"))

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter):
        name = "ecc_%s_%s" % (
            "volatile" if counter == 0 else "aggregate",
            "corrected" if error_type == 0 else "uncorrected",
        )
        return self._value(h, name)

    def nvmlDeviceGetRemappedRows(self, h):
        return tuple(self._value(h, "remapped_rows"))

    def nvmlDeviceGetPersistenceMode(self, h):
        return self._value(h, "persistence_mode")

    def nvmlDeviceGetComputeMode(self, h):
        return self._value(h, "compute_mode")

    def nvmlDeviceGetMigMode(self, h):
        return list(self._value(h, "mig_mode"))

    def nvmlDeviceGetTemperatureV(self, h, sensor):
        return self._value(h, "temperature_c")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._value(h, "clocks_event_reasons")

    def nvmlDeviceGetMemoryInfo(self, h):
        return _Struct(total=self._value(h, "memory_total_bytes"), used=self._value(h, "memory_used_bytes"))

    def nvmlDeviceGetNvLinkState(self, h, link):
        links = self.devices[h]["nvlink"]
        if links is None:
            raise NVMLError("Not Supported")
        if link >= len(links):
            raise NVMLError("Invalid Argument")
        return 1 if links[link]["active"] else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return _Struct(busId=self.devices[h]["nvlink"][link]["remote_pci_bus_id"])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return self.devices[h]["nvlink"][link]["remote_device_type"]

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self.raw["topology"][a][b]


@pytest.fixture
def degraded_raw():
    return load("degraded_8gpu_constructed.json")


# --------------------------------------------------------------------------- NVML


def test_collect_nvml_returns_the_raw_layout(degraded_raw):
    fake = FakeNvml(degraded_raw["nvml"])
    out = probe.collect_nvml(fake)
    assert out == degraded_raw["nvml"]
    assert fake.shutdown == 1
    assert json.loads(json.dumps(out)) == out


def test_unsupported_queries_give_null_for_that_field_only(degraded_raw):
    nvml_raw = copy.deepcopy(degraded_raw["nvml"])
    nvml_raw["devices"][3]["errors"].update({"power_usage_mw": "Not Supported", "serial": "No permission"})
    out = probe.collect_nvml(FakeNvml(nvml_raw))
    dev = out["devices"][3]
    assert dev["power_usage_mw"] is None
    assert dev["serial"] is None
    assert dev["errors"]["power_usage_mw"] == "Not Supported"
    assert dev["errors"]["serial"] == "No permission"
    assert dev["power_limit_mw"] == 700000
    assert out["devices"][2]["serial"] == nvml_raw["devices"][2]["serial"]


def test_old_pynvml_names_throttle_reasons(degraded_raw):
    class OldNames(FakeNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None  # absent before nvidia-ml-py 12.535

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
            return 0x40

        nvmlDeviceGetTemperatureV = None

        def nvmlDeviceGetTemperature(self, h, sensor):
            return 77

    out = probe.collect_nvml(OldNames(degraded_raw["nvml"]))
    dev = out["devices"][0]
    assert dev["clocks_event_reasons_api"] == "nvmlDeviceGetCurrentClocksThrottleReasons"
    assert dev["clocks_event_reasons"] == 0x40
    assert dev["temperature_c"] == 77


def test_nvlink_not_supported_gives_none(degraded_raw):
    nvml_raw = copy.deepcopy(degraded_raw["nvml"])
    nvml_raw["devices"][0]["nvlink"] = None
    out = probe.collect_nvml(FakeNvml(nvml_raw))
    assert out["devices"][0]["nvlink"] is None
    assert out["devices"][0]["errors"]["nvlink"] == "Not Supported"
    assert len(out["devices"][1]["nvlink"]) == 18


def test_nvml_init_failure_is_reported_not_raised(degraded_raw):
    fake = FakeNvml(degraded_raw["nvml"], init_error="NVML Shared Library Not Found")
    out = probe.collect_nvml(fake)
    assert out["available"] is False
    assert out["error"] == "NVML initialisation failed: NVML Shared Library Not Found"
    assert out["devices"] == []


def test_missing_pynvml_is_reported(monkeypatch):
    def no_pynvml():
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(probe, "_import_pynvml", no_pynvml)
    out = probe.collect_nvml()
    assert out["available"] is False
    assert "pynvml (nvidia-ml-py) is not importable" in out["error"]
    assert "No module named 'pynvml'" in out["error"]


@pytest.mark.skipif(os.path.exists("/proc/driver/nvidia/version"), reason="this machine has an NVIDIA driver")
def test_real_pynvml_without_a_driver():
    pytest.importorskip("pynvml")
    out = probe.collect_nvml()
    assert out["available"] is False
    assert out["error"].startswith("NVML initialisation failed: ")
    assert out["devices"] == []


# --------------------------------------------------------------------------- commands


def test_collect_commands_keeps_only_library_lines():
    seen = []

    def run(argv):
        seen.append(argv)
        return (
            0,
            "3 libs found in cache `/etc/ld.so.cache'\n"
            "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n"
            "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n"
            "\tlibcudnn_ops.so.9 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9\n",
            "",
        )

    out = probe.collect_commands(run, ldconfig="/sbin/ldconfig")
    assert seen == [["/sbin/ldconfig", "-p"]]
    assert out["ldconfig_p"]["rc"] == 0
    # cuDNN's sub-libraries (libcudnn_ops ...) carry no version of their own worth keeping.
    assert out["ldconfig_p"]["stdout"] == "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n"
    assert probe.collect_commands(run, libraries=False) == {}
    assert len(seen) == 1


def test_collect_commands_runs_the_real_ldconfig():
    out = probe.collect_commands()["ldconfig_p"]
    if out["argv"] is None:
        pytest.skip("no ldconfig on this machine")
    assert out["rc"] == 0
    assert all(probe.LDCONFIG_KEEP.search(line) for line in out["stdout"].splitlines())


def test_default_runner_reports_a_missing_program():
    rc, out, err = probe.default_runner(["/nonexistent/stacktune-no-such-program"])
    assert rc == 127
    assert out == ""
    assert err


# --------------------------------------------------------------------------- files


def write(root, path, text):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)


def link(root, path, target):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    os.symlink(target, full)


@pytest.fixture
def hosttree(tmp_path):
    """A two-node host with one GPU (0000:17:00.0) and one InfiniBand NIC, as plain files and links."""
    root = tmp_path / "host"
    write(root, "/proc/sys/kernel/osrelease", "6.8.0-45-generic\n")
    write(root, "/etc/os-release", 'ID=ubuntu\nVERSION_ID="24.04"\nPRETTY_NAME="Ubuntu 24.04.1 LTS"\n')
    write(
        root, "/proc/cpuinfo", "processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\nmicrocode\t: 0xa101148\n"
    )
    write(root, "/proc/cmdline", "BOOT_IMAGE=/vmlinuz ro amd_iommu=on iommu=pt\n")
    write(root, "/sys/devices/system/cpu/online", "0-7\n")
    write(root, "/sys/module/pcie_aspm/parameters/policy", "[default] performance powersave powersupersave\n")
    write(root, "/sys/module/nvidia/version", "580.159.04\n")
    write(root, "/sys/class/dmi/id/bios_version", "1.9.2\n")
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        write(root, "/sys/devices/system/node/node%d/cpulist" % node, cpus + "\n")
        write(root, "/sys/devices/system/node/node%d/meminfo" % node, "Node %d MemTotal:  1000 kB\n" % node)
    write(root, "/sys/devices/system/node/online", "0-1\n")
    gpu = "/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0"
    for name, text in (
        ("numa_node", "0\n"),
        ("local_cpulist", "0-3\n"),
        ("current_link_speed", "32.0 GT/s PCIe\n"),
        ("max_link_speed", "32.0 GT/s PCIe\n"),
        ("current_link_width", "16\n"),
        ("max_link_width", "16\n"),
        ("vendor", "0x10de\n"),
        ("class", "0x030200\n"),
    ):
        write(root, gpu + "/" + name, text)
    nic = "/sys/devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0"
    write(root, nic + "/numa_node", "1\n")
    write(root, nic + "/local_cpulist", "4-7\n")
    write(root, nic + "/net/ib0/type", "32\n")
    write(root, nic + "/net/ib0/operstate", "up\n")
    write(root, nic + "/net/ib0/speed", "400000\n")
    write(root, "/sys/bus/pci/drivers/mlx5_core/bind", "")
    link(root, nic + "/driver", "../../../../bus/pci/drivers/mlx5_core")
    link(root, nic + "/net/ib0/device", "../../../0000:a1:00.0")
    link(root, nic + "/infiniband/mlx5_0/device", "../../../0000:a1:00.0")
    link(root, "/sys/class/net/ib0", "../../devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0/net/ib0")
    link(root, "/sys/class/infiniband/mlx5_0", "../../devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0/infiniband/mlx5_0")
    link(root, "/sys/bus/pci/devices/0000:17:00.0", "../../../devices/pci0000:16/0000:16:01.0/0000:17:00.0")
    link(root, "/sys/bus/pci/devices/0000:a1:00.0", "../../../devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0")
    return root


def test_file_reader_records_every_answer(hosttree):
    reader = probe.FileReader(root=str(hosttree))
    assert reader.read("/proc/sys/kernel/osrelease") == "6.8.0-45-generic\n"
    assert reader.read("/proc/missing") is None
    assert reader.listdir("/sys/devices/system/node") == ["node0", "node1", "online"]
    assert reader.listdir("/sys/nothing") is None
    assert reader.readlink("/sys/class/net/ib0") == "../../devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0/net/ib0"
    assert reader.realpath("/sys/class/net/ib0/device") == "/sys/devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0"
    assert reader.realpath("/sys/class/net/eth9/device") is None
    assert reader.recording == {
        "files": {"/proc/sys/kernel/osrelease": "6.8.0-45-generic\n", "/proc/missing": None},
        "dirs": {"/sys/devices/system/node": ["node0", "node1", "online"], "/sys/nothing": None},
        "links": {"/sys/class/net/ib0": "../../devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0/net/ib0"},
        "realpaths": {
            "/sys/class/net/ib0/device": "/sys/devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0",
            "/sys/class/net/eth9/device": None,
        },
    }


def test_file_reader_without_recording(hosttree):
    reader = probe.FileReader(root=str(hosttree), record=False)
    assert reader.read("/proc/cmdline").startswith("BOOT_IMAGE")
    assert reader.recording == {"files": {}, "dirs": {}, "links": {}, "realpaths": {}}


def test_file_reader_limits_and_decodes(tmp_path):
    write(tmp_path, "/big", "x" * 100)
    with open(os.path.join(str(tmp_path), "bin"), "wb") as handle:
        handle.write(b"ok\xff\n")
    reader = probe.FileReader(root=str(tmp_path))
    assert reader.read("/big", max_bytes=10) == "x" * 10
    assert reader.read("/bin") == "ok\ufffd\n"


def test_file_reader_keeps_links_inside_the_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    link(root, "/escape", str(outside))
    assert probe.FileReader(root=str(root)).realpath("/escape") is None


@pytest.mark.skipif(not os.path.isdir("/sys/class/net"), reason="needs sysfs")
def test_file_reader_on_the_live_host():
    reader = probe.FileReader()
    assert reader.read("/proc/sys/kernel/osrelease") == os.uname()[2] + "\n"
    assert "lo" in reader.listdir("/sys/class/net")


# --------------------------------------------------------------------------- record -> replay


def host_nvml(degraded_raw):
    """NVML values for the one GPU of hosttree: GPU 0 of the constructed fixture, moved to 0000:17:00.0."""
    nvml_raw = copy.deepcopy(degraded_raw["nvml"])
    dev = nvml_raw["devices"][0]
    dev["pci_bus_id"] = "00000000:17:00.0"
    dev["nvlink"] = None
    dev["errors"]["nvlink"] = "Not Supported"
    nvml_raw.update(
        {"devices": [dev], "driver_version": "580.159.04", "cuda_driver_version": 13000, "topology": [[None]]}
    )
    return nvml_raw


def test_capture_replays_to_the_same_facts(hosttree, degraded_raw):
    def run(argv):
        return 0, "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n", ""

    raw = probe.capture(
        run=run, nvml=FakeNvml(host_nvml(degraded_raw)), root=str(hosttree), collected_at="2026-11-29T14:00:00Z"
    )
    live = topo.build_facts(probe.FileReader(root=str(hosttree), record=False), raw)
    # What travels (module result, fixture file) is JSON; the replay must not need anything else.
    shutil.rmtree(str(hosttree))
    replayed = topo.assemble(json.loads(json.dumps(raw)))
    assert replayed == live
    assert replayed["collected_at"] == "2026-11-29T14:00:00Z"
    assert replayed["gpu_count"] == 1
    gpu = replayed["gpus"][0]
    assert gpu["pci_bus_id"] == "0000:17:00.0"
    assert gpu["numa_node"] == 0
    assert gpu["local_cpus"] == [0, 1, 2, 3]
    assert gpu["pcie"]["sysfs_speed_current"] == "32.0 GT/s PCIe"
    assert replayed["driver"] == {
        "nvml_version": "580.159.04",
        "kernel_module_version": "580.159.04",
        "agree": True,
        "cuda_driver_version": "13.0",
    }
    assert replayed["host"]["iommu"] == {"mode": "pt", "source": "cmdline"}
    assert replayed["host"]["cpu_count"] == 8
    assert replayed["nics"] == [
        {
            "name": "ib0",
            "kind": "infiniband",
            "pci_address": "0000:a1:00.0",
            "numa_node": 1,
            "local_cpulist": "4-7",
            "driver": "mlx5_core",
            "speed_mbps": 400000,
            "operstate": "up",
            "rdma_device": "mlx5_0",
        }
    ]
    # The NIC sits on node 1, the only GPU on node 0.
    assert [f["id"] for f in replayed["findings"]] == ["nic_numa_mismatch"]


def test_capture_without_nics_and_libraries_reads_less(hosttree, degraded_raw):
    def run(argv):
        raise AssertionError("no command may run when libraries=false")

    raw = probe.capture(
        nics=False, libraries=False, run=run, nvml=FakeNvml(host_nvml(degraded_raw)), root=str(hosttree)
    )
    assert raw["commands"] == {}
    assert not [p for p in raw["files"]["dirs"] if p.startswith("/sys/class/net")]
    facts = topo.assemble(raw)
    assert facts["nics"] == []
    assert facts["libraries"]["sources"] == {"cuda_runtime": None, "cudnn": None, "nccl": None}


def test_capture_on_this_machine_is_json_and_replays():
    raw = probe.capture()
    text = json.dumps(raw)
    facts = topo.assemble(json.loads(text))
    assert facts == topo.assemble(raw)
    assert facts["host"]["kernel_release"] == os.uname()[2]
    if not raw["nvml"]["available"]:
        assert facts["gpus"] == []
        assert facts["reason"].startswith("NVML unavailable: ")
