# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PCIe paths, ACS, GPUDirect RDMA verdicts and the NVSwitch fabric (hardware/pcie.py), through the facts builder.

Fixtures:
- tests/unit/fixtures/pcie/two_socket_switches_constructed.json: CONSTRUCTED by hand, not
  recorded on a machine (see its "_constructed" note). It declares a two-socket host with
  nested PCIe switches, four GPUs and three RDMA NICs; :func:`materialize` writes it out
  as a sysfs/procfs tree (directories, attribute files, symlinks, binary config space)
  under tmp_path, and the real FileReader walks it. The config space bytes are
  CONSTRUCTED too (:func:`config_space`): a PCIe extended capability list with or without
  an ACS capability, and ACS Control with or without the redirect bits.
- tests/unit/fixtures/topology/h200.json, h200x2.json: recorded on the project's H200
  hosts (no RDMA NIC there), in the format 1 recordings that predate config space,
  peer-memory and fabric inputs.
"""

from __future__ import absolute_import, division, print_function

import copy
import ctypes
import glob
import json
import os
import struct

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import hostprobe as probe
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import acs as pcie_acs
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import fabric as pcie_fabric
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import pcie
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import pcie_render as pcie_pcie_render
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import topology as topo
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import topology_table as topo_topology_table

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures")


def load(*parts):
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return json.load(handle)


@pytest.fixture
def spec():
    return load("pcie", "two_socket_switches_constructed.json")


# --------------------------------------------------------------------------- constructed host


def config_space(kind, control=None):
    """CONSTRUCTED 4096-byte PCIe config space of a bridge.

    Extended capabilities: AER at 0x100, then (``acs_*`` kinds) ACS at 0x148, then a
    Secondary PCIe capability at 0x180 ending the list. ``acs_redirect`` enables
    Source Validation, P2P Request Redirect, P2P Completion Redirect and Upstream
    Forwarding (what Linux sets when an IOMMU is on); ``acs_clean`` only Source Validation.
    """
    data = bytearray(4096)
    struct.pack_into("<HH", data, 0, 0x1000, 0xC030)

    def header(cap_id, next_offset, version=1):
        return cap_id | (version << 16) | (next_offset << 20)

    if kind == "no_acs":
        struct.pack_into("<I", data, 0x100, header(0x0001, 0x180, 2))
    else:
        struct.pack_into("<I", data, 0x100, header(0x0001, 0x148, 2))
        struct.pack_into("<I", data, 0x148, header(pcie_acs.EXT_CAP_ID_ACS, 0x180))
        if control is None:
            control = {"acs_redirect": 0x001D, "acs_clean": 0x0001}[kind]
        struct.pack_into("<HH", data, 0x14C, 0x005F, control)
    struct.pack_into("<I", data, 0x180, header(0x0019, 0))
    return bytes(data)


def write(root, path, data):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb" if isinstance(data, bytes) else "w") as handle:
        handle.write(data)


def link(root, path, target):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    os.symlink(target, full)


def materialize(root, spec, config_bytes=None):
    """Write the CONSTRUCTED host of ``spec`` under ``root``; ``config_bytes`` cuts every config read short."""
    host = spec["host"]
    write(root, "/proc/sys/kernel/osrelease", host["kernel_release"] + "\n")
    write(root, "/proc/cmdline", host["cmdline"] + "\n")
    write(root, "/sys/module/pcie_aspm/parameters/policy", "[default] performance powersave powersupersave\n")
    for node, cpus in sorted(host["numa_nodes"].items()):
        write(root, "/sys/devices/system/node/node%s/cpulist" % node, cpus + "\n")
    if host.get("driver_version"):
        write(root, "/sys/module/nvidia/version", host["driver_version"] + "\n")
    if host.get("nvidia_proc_version"):
        write(root, "/proc/driver/nvidia/version", host["nvidia_proc_version"])
    if host.get("nvidia_taint") is not None:
        write(root, "/sys/module/nvidia/taint", host["nvidia_taint"] + "\n")
    if host.get("peermem"):
        write(root, "/sys/module/nvidia_peermem/version", "1.0\n")
    for dev in spec["devices"]:
        base = "/sys/devices/" + dev["path"]
        bdf = dev["path"].rsplit("/", 1)[-1]
        write(root, base + "/vendor", dev["vendor"] + "\n")
        write(root, base + "/class", dev["class"] + "00\n" if len(dev["class"]) == 6 else dev["class"] + "\n")
        write(root, base + "/numa_node", "%d\n" % dev["numa_node"])
        write(root, base + "/local_cpulist", host["numa_nodes"].get(str(dev["numa_node"]), "0-15") + "\n")
        if "config" in dev:
            data = config_space(dev["config"])
            write(root, base + "/config", data[:config_bytes] if config_bytes else data)
        link(root, "/sys/bus/pci/devices/" + bdf, "../../../devices/" + dev["path"])
        if dev.get("rdma"):
            rdma = base + "/infiniband/" + dev["rdma"]
            link(root, rdma + "/device", "../../../" + bdf)
            for port, state in sorted(dev.get("ports", {}).items()):
                write(root, "%s/ports/%s/state" % (rdma, port), state + "\n")
                write(root, "%s/ports/%s/phys_state" % (rdma, port), "5: LinkUp\n")
                write(root, "%s/ports/%s/rate" % (rdma, port), "400 Gb/sec (4X NDR)\n")
                write(root, "%s/ports/%s/link_layer" % (rdma, port), "InfiniBand\n")
            link(
                root,
                "/sys/class/infiniband/" + dev["rdma"],
                "../../devices/%s/infiniband/%s" % (dev["path"], dev["rdma"]),
            )
        if dev.get("netdev"):
            net = base + "/net/" + dev["netdev"]
            write(root, net + "/type", "32\n" if dev["netdev"].startswith("ib") else "1\n")
            write(root, net + "/operstate", "up\n")
            link(root, net + "/device", "../../../" + bdf)
            link(root, "/sys/class/net/" + dev["netdev"], "../../devices/%s/net/%s" % (dev["path"], dev["netdev"]))


def nvml_of(spec, fabric=None):
    """Raw NVML values for the GPUs of ``spec`` (only what the PCIe facts read)."""
    devices = []
    for dev in spec["devices"]:
        if "gpu" in dev:
            entry = {
                "index": dev["gpu"],
                "name": "CONSTRUCTED GPU",
                "pci_bus_id": "0000" + dev["path"].rsplit("/", 1)[-1],
                "nvlink": None,
                "errors": {},
            }
            if fabric is not None:
                entry["fabric"] = fabric(dev["gpu"])
            devices.append(entry)
    devices.sort(key=lambda d: d["index"])
    return {
        "available": True,
        "error": None,
        "driver_version": spec["host"].get("driver_version"),
        "cuda_driver_version": 13000,
        "device_count": len(devices),
        "devices": devices,
        "topology": None,
        "errors": {},
    }


def facts_of(root, spec, commands=None, fabric=None):
    """Facts of the tree under ``root``, built live and checked to replay identically from the recording."""
    raw = {
        "format": topo.RAW_FORMAT_VERSION,
        "collected_at": "2026-11-29T14:00:00Z",
        "options": {"nics": True, "libraries": False},
        "python": {},
        "nvml": nvml_of(spec, fabric),
        "commands": commands or {},
    }
    reader = probe.FileReader(root=str(root), record=True)
    live = topo.build_facts(reader, raw)
    raw["files"] = reader.recording
    assert topo.assemble(json.loads(json.dumps(raw))) == live
    return live


def pair(facts, gpu, nic):
    return next(p for p in facts["gpudirect"]["pairs"] if p["gpu"] == gpu and p["nic"] == nic)


def ids(facts):
    return sorted((f["id"], f["subject"], f["severity"]) for f in facts["findings"])


# --------------------------------------------------------------------------- path parsing and classes


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0",
            ("0000:05:00.0", "pci0000:00", ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0"]),
        ),
        ("/sys/devices/pci0000:00/0000:00:03.0/virtio2", ("0000:00:03.0", "pci0000:00", [])),
        ("/sys/devices/pci0000:a0/0000:a0:01.0/0000:a1:00.0/net/ib0", ("0000:a1:00.0", "pci0000:a0", ["0000:a0:01.0"])),
        ("/sys/devices/virtual/net/lo", None),
        (None, None),
    ],
)
def test_parse_device_path(path, expected):
    parsed = pcie.parse_device_path(path)
    if expected is None:
        assert parsed is None
    else:
        assert (parsed["address"], parsed["host_bridge"], parsed["bridges"]) == expected


@pytest.mark.parametrize(
    ("bridges", "parents"),
    [
        ([], []),  # on the host bridge itself (a VM's root bus)
        (["0000:00:01.0"], []),  # on a root port: the next node up is the CPU
        (["0000:00:01.0", "0000:01:00.0", "0000:02:08.0"], ["0000:01:00.0"]),  # below one switch
        (
            ["0000:00:01.0", "0000:01:00.0", "0000:02:02.0", "0000:05:00.0", "0000:06:00.0"],
            ["0000:05:00.0", "0000:01:00.0"],
        ),  # below a switch below a switch
    ],
)
def test_switch_parents_skip_downstream_ports(bridges, parents):
    assert pcie.switch_parents(bridges, "0000:99:00.0") == parents


def chain(address, host_bridge, bridges, numa):
    return {"address": address, "host_bridge": host_bridge, "bridges": bridges, "numa_key": numa}


def test_numa_minus_one_compares_as_nccl_does():
    """-1 (no node from firmware) is its own group on a multi-node host, the only node on a one-node host."""
    gpu = chain("0000:03:00.0", "pci0000:00", ["0000:00:01.0"], 0)
    nic = chain("0000:21:00.0", "pci0000:20", ["0000:20:01.0"], -1)
    assert pcie.classify(gpu, nic)[0] == "SYS"
    assert pcie.classify(dict(gpu, numa_key=-1), nic)[0] == "NODE"
    assert pcie._numa_key(-1, 0) == 0
    assert pcie._numa_key(-1, None) == -1
    assert pcie._numa_key(None, None) is None
    assert pcie.classify(gpu, dict(nic, numa_key=None)) == (None, None, [])
    assert pcie.classify(gpu, None) == (None, None, [])


def test_path_classes_of_the_constructed_host(tmp_path, spec):
    """Every class once: PIX (one switch), PXB (nested switches), PHB (one root complex),
    NODE (two host bridges, one NUMA node), SYS (two sockets)."""
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec)
    got = {(p["gpu"], p["nic"]): (p["path"], p["nccl_path"]) for p in facts["gpudirect"]["pairs"]}
    assert got[(0, "mlx5_0")] == ("PIX", "PIX")
    assert got[(1, "mlx5_0")] == ("PXB", "PXB")
    assert got[(2, "mlx5_0")] == ("PHB", "PHB")
    assert got[(0, "mlx5_1")] == ("NODE", "PHB")
    assert got[(0, "eth0")] == ("NODE", "PHB")
    assert got[(0, "mlx5_2")] == ("SYS", "SYS")
    assert got[(3, "mlx5_2")] == ("PIX", "PIX")
    assert got[(3, "mlx5_0")] == ("SYS", "SYS")
    assert pair(facts, 0, "mlx5_0")["common_switch"] == "0000:01:00.0"
    assert pair(facts, 0, "mlx5_0")["path_bridges"] == ["0000:02:00.0", "0000:02:01.0"]
    assert pair(facts, 1, "mlx5_0")["common_switch"] == "0000:01:00.0"
    assert pair(facts, 1, "mlx5_0")["path_bridges"] == ["0000:02:02.0", "0000:05:00.0", "0000:06:00.0", "0000:02:01.0"]
    assert facts["topology"]["pcie_levels"] == [
        ["X", "PXB", "PHB", "SYS"],
        ["PXB", "X", "PHB", "SYS"],
        ["PHB", "PHB", "X", "SYS"],
        ["SYS", "SYS", "SYS", "X"],
    ]
    nearest = {n["gpu"]: (n["path"], n["nics"], n["rdma"]) for n in facts["gpudirect"]["nearest_nic"]}
    assert nearest == {
        0: ("PIX", ["mlx5_0"], True),
        1: ("PXB", ["mlx5_0"], True),
        2: ("PHB", ["mlx5_0"], True),
        3: ("PIX", ["mlx5_2"], True),
    }


def test_pcie_paths_list_every_gpu_and_nic_with_its_bridges(tmp_path, spec):
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec)
    paths = {e["address"]: e for e in facts["pcie_paths"]}
    gpu1 = paths["0000:07:00.0"]
    assert gpu1["role"] == "gpu"
    assert gpu1["names"] == ["gpu1"]
    assert gpu1["host_bridge"] == "pci0000:00"
    assert gpu1["numa_node"] == 0
    assert gpu1["sysfs_path"] == "/sys/devices/" + spec["devices"][9]["path"]
    assert [b["address"] for b in gpu1["bridges"]] == [
        "0000:00:01.0",
        "0000:01:00.0",
        "0000:02:02.0",
        "0000:05:00.0",
        "0000:06:00.0",
    ]
    assert [b["acs"]["present"] for b in gpu1["bridges"]] == [True, False, True, False, True]
    assert paths["0000:04:00.0"]["names"] == ["mlx5_0", "ib0"]
    assert paths["0000:22:00.0"]["names"] == ["eth0"]
    assert paths["0000:84:00.0"]["numa_node"] == 1
    assert sorted(e["role"] for e in facts["pcie_paths"]) == ["gpu"] * 4 + ["nic"] * 4


# --------------------------------------------------------------------------- ACS


def test_acs_bits_are_the_kernels():
    """PCI_ACS_SV ... PCI_ACS_DT of include/uapi/linux/pci_regs.h; ACS is extended capability 0x000D."""
    assert [(bit, short) for bit, _name, short in pcie_acs.ACS_BITS] == [
        (0x01, "SrcValid"),
        (0x02, "TransBlk"),
        (0x04, "ReqRedir"),
        (0x08, "CmpltRedir"),
        (0x10, "UpstreamFwd"),
        (0x20, "EgressCtrl"),
        (0x40, "DirectTrans"),
    ]
    assert pcie_acs.ACS_REDIRECT_MASK == 0x04 | 0x08 | 0x20
    assert pcie_acs.EXT_CAP_ID_ACS == 0x0D


def test_acs_with_redirect_bits():
    acs = pcie_acs.parse_acs(config_space("acs_redirect"))
    assert acs["config"] == "full"
    assert acs["present"] is True
    assert acs["offset"] == 0x148
    assert (acs["capability"], acs["control"]) == (0x005F, 0x001D)
    assert acs["supported"] == [
        "source_validation",
        "translation_blocking",
        "p2p_request_redirect",
        "p2p_completion_redirect",
        "upstream_forwarding",
        "direct_translated_p2p",
    ]
    assert acs["enabled"] == [
        "source_validation",
        "p2p_request_redirect",
        "p2p_completion_redirect",
        "upstream_forwarding",
    ]
    assert acs["redirect"] == ["p2p_request_redirect", "p2p_completion_redirect"]
    assert acs["text"] == "redirects P2P (ReqRedir,CmpltRedir)"


def test_acs_without_redirect_bits():
    acs = pcie_acs.parse_acs(config_space("acs_clean"))
    assert (acs["present"], acs["enabled"], acs["redirect"]) == (True, ["source_validation"], [])
    assert acs["text"] == "no P2P redirect (SrcValid)"
    egress = pcie_acs.parse_acs(config_space("acs_clean", control=0x0020))
    assert egress["redirect"] == ["p2p_egress_control"]
    assert pcie_acs.parse_acs(config_space("acs_clean", control=0))["text"] == "no ACS control bit set"


def test_config_space_without_acs_or_extended_space():
    assert [c["id"] for c in pcie_acs.extended_capabilities(config_space("no_acs"))] == [0x0001, 0x0019]
    acs = pcie_acs.parse_acs(config_space("no_acs"))
    assert (acs["config"], acs["present"], acs["text"]) == ("full", False, "no ACS capability")
    basic = pcie_acs.parse_acs(config_space("acs_redirect")[:256])
    assert (basic["config"], basic["present"]) == ("no_extended_space", False)


def test_truncated_non_root_read():
    """Without CAP_SYS_ADMIN sysfs hands out the first 64 bytes of config space."""
    acs = pcie_acs.parse_acs(config_space("acs_redirect")[:64])
    assert acs["config"] == "not_root"
    assert acs["present"] is None
    assert acs["text"] == "unreadable (not root): 64 bytes of config space readable"
    assert pcie_acs.parse_acs(None)["config"] == "unreadable"


def test_extended_capability_walk_stops_on_a_loop():
    data = bytearray(config_space("no_acs"))
    struct.pack_into("<I", data, 0x180, 0x0019 | (1 << 16) | (0x100 << 20))  # points back to 0x100
    assert [c["offset"] for c in pcie_acs.extended_capabilities(bytes(data))] == [0x100, 0x180]
    assert pcie_acs.extended_capabilities(b"\xff" * 4096) == []


# --------------------------------------------------------------------------- verdicts and findings


def test_verdicts_and_findings_of_the_constructed_host(tmp_path, spec):
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec)
    gpudirect = facts["gpudirect"]
    assert gpudirect["applies"] is True
    assert gpudirect["rdma_nics"] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert gpudirect["peer_memory"]["nvidia_peermem"] is True
    assert gpudirect["peer_memory"]["peermem_source"] == "/sys/module/nvidia_peermem"
    assert gpudirect["peer_memory"]["kernel_module_flavor"] == "open"
    assert gpudirect["peer_memory"]["dma_buf"] is True
    assert gpudirect["rdma_ports"]["mlx5_2"] == [
        {
            "port": 1,
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate": "400 Gb/sec (4X NDR)",
            "link_layer": "InfiniBand",
        }
    ]
    good = pair(facts, 3, "mlx5_2")
    assert (good["verdict"], good["text"]) == ("possible", "GPUDirect RDMA possible")
    acs = pair(facts, 0, "mlx5_0")
    assert acs["verdict"] == "not_possible"
    assert acs["reasons"] == [
        "ACS on 0000:02:00.0 redirects P2P (ReqRedir,CmpltRedir)",
        "ACS on 0000:02:01.0 redirects P2P (ReqRedir,CmpltRedir)",
    ]
    assert acs["text"].startswith("GPUDirect RDMA not possible because ACS on 0000:02:00.0 redirects P2P")
    far = pair(facts, 0, "mlx5_2")
    assert far["reasons"] == [
        "the path is SYS: NCCL uses GPUDirect RDMA only up to PXB by default (NCCL_NET_GDR_LEVEL)"
    ]
    assert pair(facts, 0, "eth0")["verdict"] == "not_applicable"
    assert gpudirect["statement"] == "GPUDirect RDMA possible for 1 of 12 GPU-RDMA NIC pairs"
    assert ids(facts) == [
        ("acs_redirect_on_gpu_nic_path", "host", "warning"),
        ("gpu_nic_far", "gpu2", "info"),
    ]
    finding = next(f for f in facts["findings"] if f["id"] == "acs_redirect_on_gpu_nic_path")
    assert finding["evidence"]["kernel_argument"] == "pci=disable_acs_redir=0000:02:00.0;0000:02:01.0"
    assert finding["evidence"]["pairs"] == ["gpu0-mlx5_0", "gpu1-mlx5_0"]
    assert "BIOS" in finding["message"]
    assert "weakens the isolation between devices" in finding["message"]
    far_finding = next(f for f in facts["findings"] if f["id"] == "gpu_nic_far")
    assert far_finding["evidence"] == {"path": "PHB", "nics": ["mlx5_0"]}
    assert "NCCL_NET_GDR_LEVEL=PHB" in far_finding["message"]


def test_table_lines(tmp_path, spec):
    materialize(tmp_path, spec)
    lines = topo_topology_table.render_table(facts_of(tmp_path, spec)).splitlines()
    assert "nic     pci           gpu0  gpu1  gpu2  gpu3" in lines
    assert "mlx5_0  0000:04:00.0  PIX   PXB   PHB   SYS" in lines
    assert "GPUDirect RDMA possible for 1 of 12 GPU-RDMA NIC pairs" in lines
    assert "  gpu3-mlx5_2: GPUDirect RDMA possible" in lines
    assert "  peer memory: nvidia_peermem loaded; DMA-BUF ready" in lines
    assert "ACS redirect: 0000:02:00.0 ReqRedir,CmpltRedir; 0000:02:01.0 ReqRedir,CmpltRedir" in lines
    assert lines[-1].startswith("  [info] gpu2: GPU 2 has no RDMA NIC near it")


def test_non_root_config_leaves_acs_unknown(tmp_path, spec):
    materialize(tmp_path, spec, config_bytes=64)
    facts = facts_of(tmp_path, spec)
    good = pair(facts, 3, "mlx5_2")
    assert good["verdict"] == "unknown"
    assert good["unknown"] == [
        "ACS of 0000:82:00.0 unreadable (not root): 64 bytes of config space readable",
        "ACS of 0000:82:01.0 unreadable (not root): 64 bytes of config space readable",
    ]
    assert pair(facts, 2, "mlx5_0")["verdict"] == "not_possible"  # PHB: ACS does not decide it
    assert "acs_redirect_on_gpu_nic_path" not in [f["id"] for f in facts["findings"]]
    assert "ACS unknown: 0000:00:01.0, " in topo_topology_table.render_table(facts)


def test_peermem_absent_with_the_proprietary_module(tmp_path, spec):
    host = spec["host"]
    host["peermem"] = False
    host["nvidia_proc_version"] = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Release Build\n"
    host["nvidia_taint"] = "POE"
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec)
    memory = facts["gpudirect"]["peer_memory"]
    assert (memory["nvidia_peermem"], memory["kernel_module_flavor"], memory["dma_buf"]) == (
        False,
        "proprietary",
        False,
    )
    assert pair(facts, 3, "mlx5_2")["reasons"] == [
        "nvidia_peermem is not loaded and DMA-BUF is not available (the proprietary NVIDIA kernel module is loaded "
        "(DMA-BUF needs the open one))"
    ]
    finding = next(f for f in facts["findings"] if f["id"] == "gpudirect_no_peer_memory")
    assert finding["severity"] == "warning"
    assert "modprobe nvidia_peermem" in finding["message"]
    assert "DMA-BUF route" in finding["message"]


def test_peermem_absent_but_dma_buf_ready(tmp_path, spec):
    spec["host"]["peermem"] = False
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec)
    assert facts["gpudirect"]["peer_memory"]["dma_buf"] is True
    assert pair(facts, 3, "mlx5_2")["verdict"] == "possible"
    assert "gpudirect_no_peer_memory" not in [f["id"] for f in facts["findings"]]


def test_legacy_peer_memory_client_counts():
    class Files:
        def listdir(self, path):
            return None

        def read(self, path, max_bytes=None):
            return "1.0\n" if path == "/sys/kernel/mm/memory_peers/nv_mem/version" else None

    memory = pcie.peer_memory(Files(), True, {"kernel_release": "5.4.0-150-generic"}, {"nvml_version": "470.82.01"})
    assert memory["nvidia_peermem"] is True
    assert memory["peermem_source"] == "/sys/kernel/mm/memory_peers/nv_mem/version"
    assert memory["dma_buf"] is False
    assert memory["dma_buf_reasons"] == [
        "kernel 5.4.0-150-generic is older than 5.12",
        "driver 470.82.01 is older than R515",
    ]
    assert memory["dma_buf_unknown"] == ["NVIDIA kernel module flavour unknown"]


@pytest.mark.parametrize(
    ("proc", "taint", "flavor"),
    [
        ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build", None, "open"),
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
            None,
            "proprietary",
        ),
        (None, "POE\n", "proprietary"),
        (None, "OE\n", "open"),
        (None, None, None),
    ],
)
def test_module_flavor(proc, taint, flavor):
    assert pcie.module_flavor(proc, taint) == flavor


def test_nic_port_down_is_a_reason(tmp_path, spec):
    spec["devices"][-1]["ports"] = {"1": "1: DOWN"}
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec)
    assert pair(facts, 3, "mlx5_2")["reasons"] == ["mlx5_2 has no ACTIVE port (port 1 DOWN)"]


def test_unknown_port_state_leaves_the_verdict_open(tmp_path, spec):
    spec["devices"][-1]["ports"] = {"1": "4: ACTIVE"}
    materialize(tmp_path, spec)
    os.remove(
        os.path.join(
            str(tmp_path), "sys/devices", spec["devices"][-1]["path"].lstrip("/"), "infiniband/mlx5_2/ports/1/state"
        )
    )
    facts = facts_of(tmp_path, spec)
    assert pair(facts, 3, "mlx5_2")["verdict"] == "unknown"
    assert pair(facts, 3, "mlx5_2")["unknown"] == ["link state of mlx5_2 unknown (port 1 unknown)"]


def test_iommu_mode_is_reported_and_noted_when_translating(tmp_path, spec):
    materialize(tmp_path / "pt", spec)
    facts = facts_of(tmp_path / "pt", spec)
    assert facts["gpudirect"]["iommu_mode"] == "pt"
    assert pair(facts, 3, "mlx5_2")["notes"] == []
    spec["host"]["cmdline"] = "BOOT_IMAGE=/vmlinuz ro intel_iommu=on"
    materialize(tmp_path / "on", spec)
    facts = facts_of(tmp_path / "on", spec)
    assert facts["gpudirect"]["iommu_mode"] == "on"
    good = pair(facts, 3, "mlx5_2")
    assert (good["verdict"], good["notes"]) == ("possible", [pcie.IOMMU_NOTE])
    assert pair(facts, 0, "eth0")["notes"] == []


def test_no_rdma_nic_at_all(tmp_path, spec):
    for dev in spec["devices"]:
        dev.pop("rdma", None)
        if dev.get("netdev", "").startswith("ib"):
            dev.pop("netdev")
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec)
    gpudirect = facts["gpudirect"]
    assert gpudirect["applies"] is False
    assert gpudirect["statement"] == pcie.NO_RDMA_STATEMENT
    assert gpudirect["rdma_nics"] == []
    assert {p["verdict"] for p in gpudirect["pairs"]} == {"not_applicable"}
    assert [n["nics"] for n in gpudirect["nearest_nic"]] == [["eth0"]] * 3 + [["eth0"]]
    assert not [f for f in facts["findings"] if f["id"].startswith(("gpu_nic", "gpudirect", "acs_"))]
    lines = topo_topology_table.render_table(facts).splitlines()
    assert "GPUDirect RDMA: " + pcie.NO_RDMA_STATEMENT in lines
    assert not [line for line in lines if "peer memory" in line]


def test_a_software_rdma_device_is_no_rdma_nic(tmp_path, spec):
    for dev in spec["devices"]:
        dev.pop("rdma", None)
    materialize(tmp_path, spec)
    os.makedirs(os.path.join(str(tmp_path), "sys/class/infiniband/rxe0"))
    gpudirect = facts_of(tmp_path, spec)["gpudirect"]
    assert gpudirect["applies"] is False
    assert gpudirect["statement"] == pcie.NO_PCI_RDMA_STATEMENT % "rxe0"
    assert gpudirect["rdma_nics"] == []


def test_a_gpu_on_the_other_socket_of_a_misplaced_nic_is_reported_once(tmp_path, spec):
    """The NIC-NUMA finding already names the cause when every nearest NIC sits on a node without GPUs."""
    spec["devices"] = [
        d for d in spec["devices"] if d.get("gpu") not in (3,) and d.get("rdma") not in ("mlx5_0", "mlx5_1")
    ]
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec)
    assert ("nic_numa_mismatch", "nic:ib2", "warning") in ids(facts)
    assert not [f for f in facts["findings"] if f["id"] == "gpu_nic_far"]
    assert facts["gpudirect"]["nearest_nic"][0] == {"gpu": 0, "path": "SYS", "nics": ["mlx5_2"], "rdma": True}


# --------------------------------------------------------------------------- NVSwitch fabric


def nvswitches(spec):
    spec["devices"] += [
        {"path": "pci0000:00/0000:00:03.0", "vendor": "0x8086", "class": "0x060400", "numa_node": 0},
        {"path": "pci0000:00/0000:00:03.0/0000:09:00.0", "vendor": "0x10de", "class": "0x068000", "numa_node": 0},
        {"path": "pci0000:00/0000:00:03.0/0000:0a:00.0", "vendor": "0x10de", "class": "0x068000", "numa_node": 0},
    ]


def fm_commands(version, active="active"):
    return {
        "fabricmanager_unit": {
            "argv": [
                "/usr/bin/systemctl",
                "show",
                "--property=LoadState,ActiveState,SubState",
                pcie_fabric.FABRIC_MANAGER_UNIT,
            ],
            "rc": 0,
            "stdout": "LoadState=loaded\nActiveState=%s\nSubState=%s\n"
            % (active, "running" if active == "active" else "dead"),
            "stderr": None,
        },
        "fabricmanager_version": {
            "argv": ["/usr/bin/nv-fabricmanager", "--version"],
            "rc": 0,
            "stdout": "Fabric Manager version is : %s\n" % version,
            "stderr": None,
        },
    }


def fabric_info(states):
    def info(index):
        state, status = states.get(index, (3, 0))
        return {
            "api": "nvmlDeviceGetGpuFabricInfoV",
            "supported": True,
            "error": None,
            "state": state,
            "status": status,
            "clique_id": 7,
            "cluster_uuid": "00" * 16,
            "health_mask": 0,
        }

    return info


def test_nvswitch_fabric_manager_mismatch_and_a_gpu_outside_the_fabric(tmp_path, spec):
    nvswitches(spec)
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec, commands=fm_commands("570.133.20"), fabric=fabric_info({1: (2, 0)}))
    fabric = facts["fabric"]
    assert fabric["nvswitch"] is True
    assert fabric["nvswitch_pci"] == ["0000:09:00.0", "0000:0a:00.0"]
    manager = fabric["fabric_manager"]
    assert (manager["version"], manager["driver_version"], manager["agree"]) == ("570.133.20", "580.159.04", False)
    assert manager["active_state"] == "active"
    assert manager["version_source"] == "nv-fabricmanager --version"
    assert [(g["index"], g["state"], g["status"], g["clique_id"]) for g in fabric["gpus"]] == [
        (0, "completed", "success", 7),
        (1, "in_progress", None, 7),
        (2, "completed", "success", 7),
        (3, "completed", "success", 7),
    ]
    critical = [(f["id"], f["subject"]) for f in facts["findings"] if f["severity"] == "critical"]
    assert critical == [("fabric_manager_version_mismatch", "host"), ("gpu_fabric_not_ready", "gpu1")]
    mismatch = next(f for f in facts["findings"] if f["id"] == "fabric_manager_version_mismatch")
    assert mismatch["evidence"] == {"fabric_manager_version": "570.133.20", "driver_version": "580.159.04"}
    assert "NVSwitch: 2 on PCI, 0 GPU(s) NVLinked to one; fabric manager active, 570.133.20 DIFFERS from driver " in (
        topo_topology_table.render_table(facts)
    )


def test_nvswitch_fabric_in_order(tmp_path, spec):
    nvswitches(spec)
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec, commands=fm_commands("580.159.04"), fabric=fabric_info({}))
    assert facts["fabric"]["fabric_manager"]["agree"] is True
    assert not [f for f in facts["findings"] if f["severity"] == "critical"]


def test_fabric_manager_stopped_and_a_failed_fabric(tmp_path, spec):
    nvswitches(spec)
    materialize(tmp_path, spec)
    facts = facts_of(
        tmp_path, spec, commands=fm_commands("580.159.04", active="failed"), fabric=fabric_info({0: (3, 18)})
    )
    critical = sorted((f["id"], f["subject"]) for f in facts["findings"] if f["severity"] == "critical")
    assert critical == [("fabric_manager_inactive", "host"), ("gpu_fabric_not_ready", "gpu0")]
    failed = next(f for f in facts["findings"] if f["id"] == "gpu_fabric_not_ready")
    assert failed["evidence"]["status"] == "lib_rm_version_mismatch"


def test_gpus_outside_any_fabric_are_no_finding(tmp_path, spec):
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec, fabric=fabric_info({0: (0, 0), 1: (0, 0), 2: (0, 0), 3: (0, 0)}))
    assert facts["fabric"]["nvswitch"] is False
    assert not [f for f in facts["findings"] if "fabric" in f["id"]]


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("installed 550.54.15-1\n", "550.54.15"),
        ("not-installed \ninstalled 535.183.01-1\n", "535.183.01"),
        ("not-installed \n", None),
    ],
)
def test_fabric_manager_version_from_the_package(text, version):
    assert pcie_fabric.parse_package_version(text) == version
    commands = {"fabricmanager_package": {"argv": ["dpkg-query"], "rc": 0, "stdout": text, "stderr": None}}
    assert pcie_fabric.fabric_manager(commands, "550.54.15")["version"] == version


# --------------------------------------------------------------------------- recording


def test_file_reader_reads_bytes_and_replays_them(tmp_path):
    write(tmp_path, "/cfg", config_space("acs_redirect"))
    reader = probe.FileReader(root=str(tmp_path))
    assert "bytes" not in reader.recording
    assert reader.read_bytes("/cfg", 8) == config_space("acs_redirect")[:8]
    assert reader.read_bytes("/missing") is None
    assert reader.recording["bytes"] == {"/cfg": "0010" + "30c0" + "00" * 4, "/missing": None}
    replay = topo.ReplayReader(json.loads(json.dumps(reader.recording)))
    assert replay.read_bytes("/cfg") == config_space("acs_redirect")[:8]
    assert replay.read_bytes("/cfg", 2) == b"\x00\x10"
    assert replay.read_bytes("/missing") is None
    assert replay.read_bytes("/never") is None
    assert probe.FileReader(root=str(tmp_path), record=False).read_bytes("/cfg") == config_space("acs_redirect")


def test_format_1_recordings_read_new_inputs_as_not_recorded():
    facts = topo.assemble(load("topology", "degraded_8gpu_constructed.json"))
    gpudirect = facts["gpudirect"]
    assert gpudirect["applies"] is True
    assert gpudirect["peer_memory"]["recorded"] is False
    assert gpudirect["peer_memory"]["nvidia_peermem"] is None
    assert {p["verdict"] for p in gpudirect["pairs"] if p["rdma_devices"]} == {"unknown"}
    assert pair(facts, 0, "mlx5_0")["unknown"] == [
        "PCIe path between them unknown",
        "peer memory modules not recorded",
        "link state not recorded",
    ]
    nic = next(e for e in facts["pcie_paths"] if e["address"] == "0000:1a:00.0")
    assert (nic["host_bridge"], [b["acs"]["config"] for b in nic["bridges"]]) == ("pci0000:1a", ["not_recorded"])
    assert facts["fabric"]["fabric_manager"]["recorded"] is False
    assert {g["recorded"] for g in facts["fabric"]["gpus"]} == {False}
    assert not [f for f in facts["findings"] if f["id"] in ("gpu_nic_far", "gpudirect_no_peer_memory")]


@pytest.mark.parametrize("name", ["h200.json", "h200x2.json"])
def test_recorded_h200_hosts_have_no_rdma_nic(name):
    facts = topo.assemble(load("topology", name))
    assert {"pcie_paths", "gpudirect", "fabric"} <= set(facts)
    gpudirect = facts["gpudirect"]
    assert gpudirect["applies"] is False
    assert gpudirect["statement"] == pcie.NO_RDMA_STATEMENT
    assert gpudirect["rdma_nics"] == []
    assert [p["nic"] for p in gpudirect["pairs"]] == ["eth0"] * facts["gpu_count"]
    assert {p["verdict"] for p in gpudirect["pairs"]} == {"not_applicable"}
    assert [e["role"] for e in facts["pcie_paths"]] == ["gpu"] * facts["gpu_count"] + ["nic"]
    eth0 = facts["pcie_paths"][-1]
    assert (eth0["address"], eth0["host_bridge"], eth0["bridges"][0:0]) == ("0000:00:03.0", "pci0000:00", [])
    assert "GPUDirect RDMA: " + pcie.NO_RDMA_STATEMENT in topo_topology_table.render_table(facts).splitlines()
    assert not [f for f in facts["findings"] if f["id"] in ("acs_redirect_on_gpu_nic_path", "gpu_nic_far")]
    switched = name == "h200x2.json"
    assert facts["fabric"]["nvswitch"] is (True if switched else None)
    assert facts["fabric"]["gpus_on_nvswitch"] == ([0, 1] if switched else [])


# --------------------------------------------------------------------------- collectors


class FabricInfoV(ctypes.Structure):
    """Layout of nvmlGpuFabricInfo_v2_t, as pynvml declares it."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint8),
        ("healthMask", ctypes.c_uint32),
    ]


class FabricNvml:
    """pynvml look-alike with only the fabric query (filled through ctypes.byref, as NVML fills it)."""

    c_nvmlGpuFabricInfoV_t = FabricInfoV

    def __init__(self, fail=None):
        self.fail = fail

    def nvmlDeviceGetGpuFabricInfoV(self, handle, ref):
        if self.fail:
            raise RuntimeError(self.fail)
        info = ref._obj
        info.state, info.status, info.cliqueId, info.healthMask = 3, 0, 32766, 0x200
        info.clusterUuid[0] = 0xAB
        return 0


def test_fabric_raw_of_one_gpu():
    raw = probe._fabric_raw(FabricNvml(), 0)
    assert raw == {
        "api": "nvmlDeviceGetGpuFabricInfoV",
        "supported": True,
        "error": None,
        "state": 3,
        "status": 0,
        "clique_id": 32766,
        "cluster_uuid": "ab" + "00" * 15,
        "health_mask": 0x200,
    }
    assert probe._fabric_raw(FabricNvml(fail="Not Supported"), 0) == {
        "api": "nvmlDeviceGetGpuFabricInfoV",
        "supported": False,
        "error": "Not Supported",
    }
    assert probe._fabric_raw(object(), 0) == {
        "api": None,
        "supported": False,
        "error": "nvmlDeviceGetGpuFabricInfo not available in this pynvml",
    }


def test_collect_commands_for_the_fabric(monkeypatch):
    found = {"systemctl": "/usr/bin/systemctl", "dpkg-query": "/usr/bin/dpkg-query"}
    monkeypatch.setattr(probe, "_which", found.get)
    seen = []

    def run(argv):
        seen.append(argv)
        if argv[0].endswith("systemctl"):
            return 0, "LoadState=loaded\nActiveState=active\nSubState=running\n", ""
        return 0, "installed 580.159.04-1\n", ""

    commands = probe.collect_commands(run, libraries=False, fabric=True)
    assert sorted(commands) == ["fabricmanager_package", "fabricmanager_unit", "fabricmanager_version"]
    assert commands["fabricmanager_version"] == {
        "argv": None,
        "rc": None,
        "stdout": None,
        "stderr": "nv-fabricmanager not found",
    }
    assert seen[0] == [
        "/usr/bin/systemctl",
        "show",
        "--property=LoadState,ActiveState,SubState",
        "nvidia-fabricmanager.service",
    ]
    assert seen[1][:2] == ["/usr/bin/dpkg-query", "-W"]
    manager = pcie_fabric.fabric_manager(commands, "580.159.04")
    assert (manager["active_state"], manager["version"], manager["agree"]) == ("active", "580.159.04", True)
    assert probe.collect_commands(run, libraries=False) == {}


class NoNvml:
    def nvmlInit(self):
        raise RuntimeError("NVML Shared Library Not Found")


def test_capture_asks_for_the_fabric_manager_only_on_nvswitch_hosts(tmp_path, spec, monkeypatch):
    monkeypatch.setattr(probe, "_which", lambda name: "/usr/bin/" + name)

    def run(argv):
        return 0, "Fabric Manager version is : 580.159.04\n", ""

    materialize(tmp_path / "plain", spec)
    raw = probe.capture(libraries=False, run=run, nvml=NoNvml(), root=str(tmp_path / "plain"))
    assert raw["commands"] == {}
    assert raw["format"] == 2
    assert set(raw["files"]) == {"files", "dirs", "links", "realpaths"}  # no GPU: no bridge config read
    switched = copy.deepcopy(spec)
    nvswitches(switched)
    materialize(tmp_path / "switched", switched)
    raw = probe.capture(libraries=False, run=run, nvml=NoNvml(), root=str(tmp_path / "switched"))
    assert sorted(raw["commands"]) == ["fabricmanager_unit", "fabricmanager_version"]
    facts = topo.assemble(json.loads(json.dumps(raw)))
    assert facts["fabric"]["fabric_manager"]["version"] == "580.159.04"
    assert facts["fabric"]["nvswitch_pci"] == ["0000:09:00.0", "0000:0a:00.0"]


# --------------------------------------------------------------------------- nvidia-smi topo -m

# CONSTRUCTED in the layout `nvidia-smi topo -m` prints (tab-separated, NIC legend), for
# the constructed host above.
TOPO_M = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tNIC2\tNIC3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tPXB\tPHB\tSYS\tPIX\tNODE\tSYS\tNODE\t0-7\t0\t\tN/A\n"
    "GPU1\tPXB\t X \tPHB\tSYS\tPXB\tNODE\tSYS\tNODE\t0-7\t0\t\tN/A\n"
    "GPU2\tPHB\tPHB\t X \tSYS\tPHB\tNODE\tSYS\tNODE\t0-7\t0\t\tN/A\n"
    "GPU3\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tPIX\tSYS\t8-15\t1\t\tN/A\n"
    "NIC0\tPIX\tPXB\tPHB\tSYS\t X \tNODE\tSYS\tNODE\n"
    "\n"
    "Legend:\n\n"
    "  X    = Self\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "\n"
    "NIC Legend:\n\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_1\n"
    "  NIC2: mlx5_2\n"
    "  NIC3: eth0\n"
)


def test_parse_nvidia_smi_topo():
    matrix = pcie_pcie_render.parse_nvidia_smi_topo("\x1b[4m" + TOPO_M.replace("\n", "\x1b[0m\n", 1))
    assert matrix[("GPU0", "GPU1")] == "PXB"
    assert matrix[("GPU0", "GPU0")] == "X"
    assert matrix[("GPU1", "mlx5_0")] == "PXB"
    assert matrix[("mlx5_0", "GPU0")] == "PIX"
    assert ("GPU0", "CPU Affinity") not in matrix
    assert pcie_pcie_render.parse_nvidia_smi_topo("") == {}


def test_our_classes_agree_with_nvidia_smi_on_the_constructed_host(tmp_path, spec):
    materialize(tmp_path, spec)
    facts = facts_of(tmp_path, spec)
    assert pcie_pcie_render.compare_with_nvidia_smi(facts, pcie_pcie_render.parse_nvidia_smi_topo(TOPO_M)) == []
    moved = TOPO_M.replace("GPU3\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tPIX", "GPU3\tSYS\tSYS\tSYS\t X \tSYS\tSYS\tPXB")
    assert pcie_pcie_render.compare_with_nvidia_smi(facts, pcie_pcie_render.parse_nvidia_smi_topo(moved)) == [
        ("GPU3", "mlx5_2", "PIX", "PXB")
    ]


def test_nvlink_cells_are_held_against_the_nvml_matrix():
    facts = topo.assemble(load("topology", "h200x2.json"))
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNV18\t0-31\t0\t\tN/A\n"
    text += "GPU1\tNV18\t X \t0-31\t0\t\tN/A\n"
    assert pcie_pcie_render.compare_with_nvidia_smi(facts, pcie_pcie_render.parse_nvidia_smi_topo(text)) == []
    assert pcie_pcie_render.compare_with_nvidia_smi(
        facts, pcie_pcie_render.parse_nvidia_smi_topo(text.replace("NV18", "NV12"))
    ) == [
        ("GPU0", "GPU1", "NV18", "NV12"),
        ("GPU1", "GPU0", "NV18", "NV12"),
    ]


# The recordings that carry `nvidia-smi topo -m` (the one-H200 host, recorded as root).
RECORDINGS_WITH_TOPO = ("h200_format2.json",)


def test_the_recordings_with_topo_are_all_listed():
    carrying = [
        os.path.basename(p)
        for p in sorted(glob.glob(os.path.join(FIXTURES, "topology", "*.json")))
        if ((load("topology", os.path.basename(p)).get("commands") or {}).get("nvidia_smi_topo") or {}).get("stdout")
    ]
    assert carrying == list(RECORDINGS_WITH_TOPO)


@pytest.mark.parametrize("path", RECORDINGS_WITH_TOPO)
def test_recorded_hosts_agree_with_nvidia_smi(path):
    raw = load("topology", os.path.basename(path))
    matrix = pcie_pcie_render.parse_nvidia_smi_topo(raw["commands"]["nvidia_smi_topo"]["stdout"])
    assert pcie_pcie_render.compare_with_nvidia_smi(topo.assemble(raw), matrix) == []


def test_recorded_h200_format2_as_root():
    """h200_format2.json: recorded as root on the one-H200 host on 2026-12-01 (tests/gpu/gpu-host-run.sh capture)."""
    facts = topo.assemble(load("topology", "h200_format2.json"))
    gpu = facts["pcie_paths"][0]
    # the VM puts the GPU straight on the root bus: no bridge, so no ACS to read on its path
    assert (gpu["address"], gpu["host_bridge"], gpu["bridges"]) == ("0000:00:06.0", "pci0000:00", [])
    peer = facts["gpudirect"]["peer_memory"]
    assert (peer["recorded"], peer["nvidia_peermem"], peer["kernel_module_flavor"], peer["dma_buf"]) == (
        True,
        False,
        "open",
        True,
    )
    assert facts["gpudirect"]["statement"] == pcie.NO_RDMA_STATEMENT
    fabric = facts["fabric"]
    assert fabric["nvswitch"] is False
    assert [(g["index"], g["state"]) for g in fabric["gpus"]] == [(0, "not_supported")]
    assert not [f for f in facts["findings"] if f["severity"] != "info"]
