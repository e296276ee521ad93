# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PCIe paths between GPUs and NICs, ACS, GPUDirect RDMA readiness and the NVSwitch fabric.

Pure functions over a file reader (``read``, ``read_bytes``, ``listdir``, ``realpath``,
as ``hostprobe.FileReader`` and ``topology.ReplayReader`` offer them) and over values
already in the facts; nothing here touches the host on its own.

Path classes are named as ``nvidia-smi topo -m`` names them:

* ``PIX``: at most one PCIe switch between the two devices (both hang below the same
  switch; the switch's upstream and downstream ports count as one bridge);
* ``PXB``: several switches, without crossing the PCIe host bridge;
* ``PHB``: through a PCIe host bridge (the CPU's root complex);
* ``NODE``: between two host bridges of the same NUMA node;
* ``SYS``: across NUMA nodes (the inter-socket link).

Switches are found as NCCL finds them when it reads sysfs: from a device it goes up two
path components at a time (the switch's downstream port, then its upstream port) and
stops at the root complex, so devices below one switch share a parent (``PIX``) and a
switch below another switch adds a level (``PXB``). NCCL keeps one CPU node per NUMA
node, so ``NODE`` is ``PHB`` to NCCL; the pairs carry both names.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import (
    PCI_ADDRESS,
    version_prefix,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.acs import (
    ACS_SHORT,
    CONFIG_MAX_BYTES,
    not_recorded_acs,
    parse_acs,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.fabric import FABRIC_MANAGER_UNIT, build_fabric
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.parsers import parse_int, parse_str
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.findings import finding

HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")

PATH_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")
NCCL_PATH = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}
# NCCL's default NCCL_NET_GDR_LEVEL on PCIe hosts: GPUDirect RDMA only when the GPU and
# the NIC are at most PXB apart.
GDR_MAX_PATH = "PXB"

# Where a peer-memory client announces itself; NCCL's IB transport looks for any of
# these before it registers GPU memory with the NIC through nvidia_peermem.
PEERMEM_MODULE_DIR = "/sys/module/nvidia_peermem"
PEERMEM_LEGACY_FILES = (
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
)
# GPUDirect RDMA through DMA-BUF instead of nvidia_peermem needs: the RDMA subsystem's
# dma-buf memory registration (Linux 5.12, with rdma-core's ibv_reg_dmabuf_mr); the
# open flavour of the NVIDIA kernel modules (the proprietary flavour does not export GPU
# memory as dma-buf: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED stays 0); and an R515 or newer
# driver (CUDA 11.7 driver API, cuMemGetHandleForAddressRange). NCCL uses it when all
# hold and NCCL_DMABUF_ENABLE is not 0. rdma-core's version is not checked here.
DMA_BUF_MIN_KERNEL = (5, 12)
DMA_BUF_MIN_DRIVER = 515

IOMMU_NOTE = (
    "the IOMMU translates DMA (mode on): GPU-NIC peer-to-peer requests go through it; passthrough (iommu=pt) "
    "keeps them off it"
)
NO_RDMA_STATEMENT = "no RDMA NIC on this host (/sys/class/infiniband lists none), so GPUDirect RDMA does not apply"
NO_PCI_RDMA_STATEMENT = (
    "no RDMA NIC on the PCI bus (/sys/class/infiniband lists only %s, without a PCI function), "
    "so GPUDirect RDMA does not apply"
)
NO_GPU_STATEMENT = "no GPU on this host, so GPUDirect RDMA does not apply"
NO_NICS_STATEMENT = "NICs were not gathered (nics=false)"


def parse_device_path(path):
    """Host bridge and bridge chain of a PCI device from its sysfs path.

    ``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:05:00.0`` ->
    host bridge ``pci0000:00``, bridges ``[0000:00:01.0, 0000:01:00.0, 0000:02:08.0]``
    (root port first), address ``0000:05:00.0``. Components after the last PCI address
    (``virtio2``, ``net/eth0``) are dropped. None when the path holds no PCI address.
    """
    if not path:
        return None
    parts = [p for p in path.split("/") if p]
    last = None
    for i, part in enumerate(parts):
        if PCI_ADDRESS.match(part):
            last = i
    if last is None:
        return None
    host_bridge = next((p for p in parts[:last] if HOST_BRIDGE.match(p)), None)
    start = parts.index(host_bridge) + 1 if host_bridge else 0
    chain = [p for p in parts[start : last + 1] if PCI_ADDRESS.match(p)]
    return {
        "address": chain[-1],
        "host_bridge": host_bridge,
        "bridges": chain[:-1],
        "sysfs_path": "/" + "/".join(parts[: last + 1]),
    }


def switch_parents(bridges, address):
    """PCI nodes above a device as NCCL builds them from sysfs, nearest first.

    Walking up two path components at a time skips each switch's downstream port and
    lands on its upstream port; reaching the host bridge ends the walk (the CPU).
    """
    components = list(bridges) + [address]
    parents = []
    index = len(components) - 1
    while index >= 2:
        index -= 2
        parents.append(components[index])
    return parents


def path_rank(path_class):
    return PATH_CLASSES.index(path_class) if path_class in PATH_CLASSES else None


def classify(a, b):
    """Path class between two device entries (``host_bridge``, ``bridges``, ``address``, ``numa_key``).

    Returns ``(class, common_switch, path_bridges)``; class is None when either path is
    unknown. ``path_bridges`` are the bridges a peer-to-peer transfer crosses below the
    common switch (PIX/PXB), where ACS redirection would turn it back upstream.
    """
    if not a or not b or not a.get("host_bridge") or not b.get("host_bridge"):
        return None, None, []
    if a["host_bridge"] != b["host_bridge"]:
        if a.get("numa_key") is None or b.get("numa_key") is None:
            return None, None, []
        return ("NODE" if a["numa_key"] == b["numa_key"] else "SYS"), None, []
    parents_a = switch_parents(a["bridges"], a["address"])
    parents_b = switch_parents(b["bridges"], b["address"])
    common = next((p for p in parents_a if p in parents_b), None)
    if common is None:
        return "PHB", None, []
    below = []
    for entry in (a, b):
        chain = entry["bridges"]
        for bridge in chain[chain.index(common) + 1 :]:
            if bridge not in below:
                below.append(bridge)
    if parents_a.index(common) == 0 and parents_b.index(common) == 0:
        return "PIX", common, below
    return "PXB", common, below


def module_flavor(proc_version, taint):
    """Flavour of the NVIDIA kernel module ("open", "proprietary" or None), from its version text or taint."""
    if proc_version and "Open Kernel Module" in proc_version:
        return "open"
    if proc_version and "Kernel Module" in proc_version:
        return "proprietary"
    if taint is not None:
        # The proprietary module taints the kernel with P; the open one (MIT/GPL) does not.
        return "proprietary" if "P" in taint else "open"
    return None


def _port_state(text):
    """Name of a numbered sysfs state ("4: ACTIVE" -> "ACTIVE")."""
    value = parse_str(text)
    return value.split(":", 1)[-1].strip() or None if value else None


def rdma_ports(fs, device):
    """State and rate of each port of an RDMA device; None when the ports cannot be listed."""
    base = "/sys/class/infiniband/%s/ports" % device
    names = fs.listdir(base)
    if names is None:
        return None
    ports = []
    for name in sorted(names, key=lambda n: int(n) if n.isdigit() else 0):
        port = "%s/%s/" % (base, name)
        ports.append(
            {
                "port": int(name) if name.isdigit() else name,
                "state": _port_state(fs.read(port + "state")),
                "phys_state": _port_state(fs.read(port + "phys_state")),
                "rate": parse_str(fs.read(port + "rate")),
                "link_layer": parse_str(fs.read(port + "link_layer")),
            }
        )
    return ports


def _numa_key(raw_numa, single_node):
    """NUMA node as path classes compare it: -1 (no node from firmware) is the host's only
    node on a one-node host, otherwise a group of its own, as NCCL keeps it."""
    if raw_numa is None:
        return single_node
    if raw_numa >= 0:
        return raw_numa
    return single_node if single_node is not None else -1


def _device_entry(fs, address, role, names, single_node, hint_path=None):
    parsed = parse_device_path(fs.realpath("/sys/bus/pci/devices/" + address))
    if parsed is None and hint_path:
        parsed = parse_device_path(hint_path)
    raw_numa = parse_int(fs.read("/sys/bus/pci/devices/%s/numa_node" % address))
    key = _numa_key(raw_numa, single_node)
    return {
        "address": address,
        "role": role,
        "names": list(names),
        "sysfs_path": parsed["sysfs_path"] if parsed else None,
        "host_bridge": parsed["host_bridge"] if parsed else None,
        "numa_node": key if key is not None and key >= 0 else None,
        "numa_key": key,
        "bridges": [{"address": b, "acs": None} for b in parsed["bridges"]] if parsed else None,
    }


def _chain(entry):
    if entry is None or entry["bridges"] is None:
        return None
    return {
        "address": entry["address"],
        "host_bridge": entry["host_bridge"],
        "bridges": [b["address"] for b in entry["bridges"]],
        "numa_key": entry["numa_key"],
    }


def pci_nics(fs, nics):
    """NICs on PCI, RDMA devices and network interfaces of one function merged, and the RDMA devices off PCI.

    Returns ``(nics, rdma_without_pci)``; the second lists RDMA devices with no PCI
    function behind them (software RoCE/iWARP such as rxe or siw).
    """
    by_address = {}
    order = []

    def slot(address):
        if address not in by_address:
            by_address[address] = {"address": address, "rdma_devices": [], "netdevs": [], "hint": None}
            order.append(address)
        return by_address[address]

    without_pci = []
    for device in fs.listdir("/sys/class/infiniband") or []:
        path = fs.realpath("/sys/class/infiniband/%s/device" % device)
        parsed = parse_device_path(path)
        if parsed:
            entry = slot(parsed["address"])
            entry["rdma_devices"].append(device)
            entry["hint"] = entry["hint"] or path
        else:
            without_pci.append(device)
    for nic in nics:
        address = nic.get("pci_address")
        if address:
            entry = slot(address)
            entry["netdevs"].append(nic.get("name"))
            entry["hint"] = entry["hint"] or fs.realpath("/sys/class/net/%s/device" % nic.get("name"))
    out = []
    for address in sorted(order):
        entry = by_address[address]
        entry["name"] = (entry["rdma_devices"] or entry["netdevs"])[0]
        out.append(entry)
    return out, without_pci


# --------------------------------------------------------------------------- GPUDirect RDMA


def peer_memory(fs, recorded, host, driver):
    """Ways to register GPU memory with an RDMA NIC: nvidia_peermem and DMA-BUF."""
    out = {
        "recorded": recorded,
        "nvidia_peermem": None,
        "peermem_source": None,
        "kernel_module_flavor": None,
        "dma_buf": None,
        "dma_buf_reasons": [],
        "dma_buf_unknown": [],
    }
    if not recorded:
        return out
    if fs.listdir(PEERMEM_MODULE_DIR) is not None:
        out["nvidia_peermem"], out["peermem_source"] = True, PEERMEM_MODULE_DIR
    else:
        out["nvidia_peermem"] = False
        for path in PEERMEM_LEGACY_FILES:
            if fs.read(path) is not None:
                out["nvidia_peermem"], out["peermem_source"] = True, path
                break
    flavor = module_flavor(fs.read("/proc/driver/nvidia/version"), fs.read("/sys/module/nvidia/taint"))
    out["kernel_module_flavor"] = flavor
    reasons, unknown = out["dma_buf_reasons"], out["dma_buf_unknown"]
    kernel = version_prefix(host.get("kernel_release"), 2)
    if kernel is None:
        unknown.append("kernel release unknown")
    elif kernel < DMA_BUF_MIN_KERNEL:
        reasons.append("kernel %s is older than 5.12" % host.get("kernel_release"))
    if flavor == "proprietary":
        reasons.append("the proprietary NVIDIA kernel module is loaded (DMA-BUF needs the open one)")
    elif flavor is None:
        unknown.append("NVIDIA kernel module flavour unknown")
    driver_version = driver.get("kernel_module_version") or driver.get("nvml_version")
    major = (version_prefix(driver_version, 1) or (None,))[0]
    if major is None:
        unknown.append("driver version unknown")
    elif major < DMA_BUF_MIN_DRIVER:
        reasons.append("driver %s is older than R515" % driver_version)
    out["dma_buf"] = False if reasons else (None if unknown else True)
    return out


def _link_problem(nic, ports):
    if nic["rdma_devices"]:
        if ports is None:
            return None, "link state of %s unknown" % nic["name"]
        if not ports:
            return "%s has no port" % nic["name"], None
        if not any(p.get("state") == "ACTIVE" for p in ports):
            states = ", ".join("port %s %s" % (p["port"], p.get("state") or "unknown") for p in ports)
            if any(p.get("state") is None for p in ports):
                return None, "link state of %s unknown (%s)" % (nic["name"], states)
            return "%s has no ACTIVE port (%s)" % (nic["name"], states), None
    return None, None


def pair_verdict(pair, memory, acs_by_bridge, link_problem, link_unknown):
    """Reasons (definite) and unknowns that decide one GPU-RDMA NIC pair."""
    reasons, unknown = [], []
    path = pair["path"]
    if path is None:
        unknown.append("PCIe path between them unknown")
    elif path_rank(path) > path_rank(GDR_MAX_PATH):
        reasons.append(
            "the path is %s: NCCL uses GPUDirect RDMA only up to %s by default (NCCL_NET_GDR_LEVEL)"
            % (path, GDR_MAX_PATH)
        )
    if path in ("PIX", "PXB"):
        for bridge in pair["path_bridges"]:
            acs = acs_by_bridge.get(bridge) or {}
            if acs.get("redirect"):
                reasons.append(
                    "ACS on %s redirects P2P (%s)" % (bridge, ",".join(ACS_SHORT[n] for n in acs["redirect"]))
                )
            elif acs.get("present") is None:
                unknown.append("ACS of %s %s" % (bridge, acs.get("text") or "unknown"))
    if not memory["recorded"]:
        unknown.append("peer memory modules not recorded")
    elif not memory["nvidia_peermem"] and memory["dma_buf"] is False:
        reasons.append(
            "nvidia_peermem is not loaded and DMA-BUF is not available (%s)" % "; ".join(memory["dma_buf_reasons"])
        )
    elif not memory["nvidia_peermem"] and memory["dma_buf"] is None:
        unknown.append(
            "nvidia_peermem is not loaded and DMA-BUF readiness is unknown (%s)" % "; ".join(memory["dma_buf_unknown"])
        )
    if link_problem:
        reasons.append(link_problem)
    if link_unknown:
        unknown.append(link_unknown)
    if reasons:
        return "not_possible", reasons, unknown, "GPUDirect RDMA not possible because " + "; ".join(reasons)
    if unknown:
        return "unknown", reasons, unknown, "GPUDirect RDMA undetermined: " + "; ".join(unknown)
    return "possible", reasons, unknown, "GPUDirect RDMA possible"


# --------------------------------------------------------------------------- facts


def build(fs, raw, host, driver, gpus, nics):
    """``pcie_paths``, ``gpudirect`` and ``fabric`` facts.

    Inputs that recordings of format 1 did not hold (config space, peer-memory modules,
    RDMA ports, NVML fabric state, fabric manager) read as "not recorded" there, never
    as absent.
    """
    recorded = (raw.get("format") or 1) >= 2
    nics_gathered = (raw.get("options") or {}).get("nics", True)
    numa_nodes = [n.get("node") for n in host.get("numa_nodes") or []]
    single = numa_nodes[0] if len(numa_nodes) == 1 else None

    entries = []
    gpu_entries = []
    for gpu in gpus:
        address = gpu.get("pci_bus_id")
        entry = _device_entry(fs, address, "gpu", ["gpu%s" % gpu.get("index")], single) if address else None
        gpu_entries.append(entry)
        if entry:
            entries.append(entry)
    nic_list, rdma_off_pci = pci_nics(fs, nics) if nics_gathered else ([], [])
    nic_entries = []
    for nic in nic_list:
        entry = _device_entry(
            fs, nic["address"], "nic", nic["rdma_devices"] + nic["netdevs"], single, hint_path=nic["hint"]
        )
        nic_entries.append(entry)
        entries.append(entry)

    # ACS matters on the paths GPU traffic takes: the GPUs' own, and the RDMA NICs' when
    # there are GPUs to talk to.
    acs_by_bridge = {}
    rdma_addresses = {n["address"] for n in nic_list if n["rdma_devices"]} if gpus else set()
    for entry in entries:
        if entry["role"] != "gpu" and entry["address"] not in rdma_addresses:
            continue
        for bridge in entry["bridges"] or []:
            if bridge["address"] not in acs_by_bridge:
                if recorded:
                    data = fs.read_bytes("/sys/bus/pci/devices/%s/config" % bridge["address"], CONFIG_MAX_BYTES)
                    acs_by_bridge[bridge["address"]] = parse_acs(data)
                else:
                    acs_by_bridge[bridge["address"]] = not_recorded_acs()
            bridge["acs"] = acs_by_bridge[bridge["address"]]

    memory = peer_memory(fs, recorded, host, driver)
    rdma_nics = [n for n in nic_list if n["rdma_devices"]]
    ports = {}
    for nic in rdma_nics:
        ports[nic["address"]] = rdma_ports(fs, nic["rdma_devices"][0]) if recorded else None

    iommu_mode = (host.get("iommu") or {}).get("mode")
    pairs = []
    for gpu, gpu_entry in zip(gpus, gpu_entries):
        for nic, nic_entry in zip(nic_list, nic_entries):
            path, common, below = classify(_chain(gpu_entry), _chain(nic_entry))
            pair = {
                "gpu": gpu.get("index"),
                "gpu_address": gpu.get("pci_bus_id"),
                "nic": nic["name"],
                "nic_address": nic["address"],
                "rdma_devices": nic["rdma_devices"],
                "netdevs": nic["netdevs"],
                "path": path,
                "nccl_path": NCCL_PATH.get(path),
                "common_switch": common,
                "path_bridges": below,
                "verdict": "not_applicable",
                "reasons": [],
                "unknown": [],
                "notes": [],
                "text": None,
            }
            if nic["rdma_devices"]:
                problem, unknown_link = (
                    _link_problem(nic, ports.get(nic["address"])) if recorded else (None, "link state not recorded")
                )
                verdict, reasons, unknown, text = pair_verdict(pair, memory, acs_by_bridge, problem, unknown_link)
                pair.update({"verdict": verdict, "reasons": reasons, "unknown": unknown, "text": text})
                if iommu_mode == "on":
                    pair["notes"].append(IOMMU_NOTE)
            pairs.append(pair)

    nearest = []
    for gpu in gpus:
        own = [p for p in pairs if p["gpu"] == gpu.get("index")]
        rdma_only = [p for p in own if p["rdma_devices"]]
        candidates = [p for p in (rdma_only or own) if p["path"] is not None]
        best = min((path_rank(p["path"]) for p in candidates), default=None)
        nearest.append(
            {
                "gpu": gpu.get("index"),
                "path": PATH_CLASSES[best] if best is not None else None,
                "nics": [p["nic"] for p in candidates if path_rank(p["path"]) == best] if best is not None else [],
                "rdma": bool(rdma_only),
            }
        )

    if not nics_gathered:
        applies, statement = None, NO_NICS_STATEMENT
    elif not rdma_nics and rdma_off_pci:
        applies, statement = False, NO_PCI_RDMA_STATEMENT % ", ".join(rdma_off_pci)
    elif not rdma_nics:
        applies, statement = False, NO_RDMA_STATEMENT
    elif not gpus:
        applies, statement = False, NO_GPU_STATEMENT
    else:
        applies = True
        rdma_pairs = [p for p in pairs if p["rdma_devices"]]
        possible = sum(1 for p in rdma_pairs if p["verdict"] == "possible")
        statement = "GPUDirect RDMA possible for %d of %d GPU-RDMA NIC pairs" % (possible, len(rdma_pairs))

    chains = [_chain(e) for e in gpu_entries]
    levels = [
        ["X" if i == j else classify(chains[i], chains[j])[0] for j in range(len(chains))] for i in range(len(chains))
    ]
    for entry in entries:
        entry.pop("numa_key", None)
    return {
        "pcie_levels": levels,
        "pcie_paths": entries,
        "gpudirect": {
            "applies": applies,
            "statement": statement,
            "rdma_nics": [n["name"] for n in rdma_nics],
            "rdma_ports": {n["name"]: ports.get(n["address"]) for n in rdma_nics},
            "peer_memory": memory,
            "iommu_mode": iommu_mode,
            "pairs": pairs,
            "nearest_nic": nearest,
        },
        "fabric": build_fabric(fs, raw, driver, recorded),
    }


# --------------------------------------------------------------------------- findings


def derive_findings(facts, covered_nics=()):
    """Findings of the PCIe path, GPUDirect and fabric facts.

    ``covered_nics``: NIC names another finding already blames for sitting on a NUMA node
    without GPUs; a GPU whose nearest NICs are all among them gets no second finding.
    """
    out = []
    gpudirect = facts.get("gpudirect") or {}
    pairs = [p for p in gpudirect.get("pairs") or [] if p.get("rdma_devices")]
    paths = facts.get("pcie_paths") or []
    acs = {}
    for entry in paths:
        for bridge in entry.get("bridges") or []:
            acs[bridge["address"]] = bridge.get("acs") or {}

    redirecting = []
    affected = []
    for pair in pairs:
        if pair.get("path") not in ("PIX", "PXB"):
            continue
        hits = [b for b in pair.get("path_bridges") or [] if (acs.get(b) or {}).get("redirect")]
        if hits:
            affected.append("gpu%s-%s" % (pair["gpu"], pair["nic"]))
            redirecting.extend(b for b in hits if b not in redirecting)
    if redirecting:
        argument = "pci=disable_acs_redir=%s" % ";".join(redirecting)
        out.append(
            finding(
                "acs_redirect_on_gpu_nic_path",
                "warning",
                "host",
                "ACS redirects peer-to-peer traffic at %s on the PCIe path of %s: GPUDirect RDMA traffic is "
                "sent up to the root complex instead of across the switch. Disable ACS redirection in the BIOS, "
                "or boot with %s; either weakens the isolation between devices (IOMMU groups merge, and VMs or "
                "containers given devices behind these ports can reach each other's devices)"
                % (", ".join(redirecting), ", ".join(affected), argument),
                {
                    "bridges": redirecting,
                    "pairs": affected,
                    "kernel_argument": argument,
                    "redirect_bits": {b: acs[b].get("redirect") for b in redirecting},
                },
            )
        )

    memory = gpudirect.get("peer_memory") or {}
    if gpudirect.get("applies") and memory.get("nvidia_peermem") is False and memory.get("dma_buf") is False:
        out.append(
            finding(
                "gpudirect_no_peer_memory",
                "warning",
                "host",
                "GPU memory cannot be registered with the RDMA NICs: nvidia_peermem is not loaded and DMA-BUF is "
                "not available (%s). Load it with `modprobe nvidia_peermem` (and list it in "
                "/etc/modules-load.d/ to keep it), or take the DMA-BUF route: open NVIDIA kernel modules, R515 or "
                "newer driver, Linux 5.12 or newer" % "; ".join(memory.get("dma_buf_reasons") or []),
                {
                    "nvidia_peermem": False,
                    "dma_buf": False,
                    "dma_buf_reasons": memory.get("dma_buf_reasons"),
                    "kernel_module_flavor": memory.get("kernel_module_flavor"),
                },
            )
        )

    for near in gpudirect.get("nearest_nic") or []:
        path = near.get("path")
        if not near.get("rdma") or path not in ("PHB", "NODE", "SYS"):
            continue
        if path == "SYS" and near.get("nics") and set(near["nics"]) <= set(covered_nics):
            continue
        out.append(
            finding(
                "gpu_nic_far",
                "warning" if path == "SYS" else "info",
                "gpu%s" % near.get("gpu"),
                "GPU %s has no RDMA NIC near it: the nearest (%s) is %s, so its network traffic crosses %s and "
                "NCCL does not use GPUDirect RDMA by default. Put a NIC under the same PCIe switch as the GPU "
                "(slot placement), or measure NCCL_NET_GDR_LEVEL=%s before keeping it"
                % (
                    near.get("gpu"),
                    ", ".join(near.get("nics") or []),
                    path,
                    "the inter-socket link" if path == "SYS" else "the CPU root complex",
                    NCCL_PATH[path],
                ),
                {"path": path, "nics": near.get("nics")},
            )
        )

    fabric = facts.get("fabric") or {}
    manager = fabric.get("fabric_manager") or {}
    relevant = bool(fabric.get("nvswitch_pci")) or manager.get("active_state") == "active"
    if manager.get("agree") is False and relevant:
        out.append(
            finding(
                "fabric_manager_version_mismatch",
                "critical",
                "host",
                "NVIDIA Fabric Manager %s does not match driver %s; Fabric Manager refuses to run with another "
                "driver version. Install the fabricmanager package of exactly the driver's version"
                % (manager.get("version"), manager.get("driver_version")),
                {"fabric_manager_version": manager.get("version"), "driver_version": manager.get("driver_version")},
            )
        )
    if fabric.get("nvswitch_pci") and manager.get("recorded") and manager.get("active_state") not in (None, "active"):
        out.append(
            finding(
                "fabric_manager_inactive",
                "critical",
                "host",
                "%d NVSwitch(es) are on the PCI bus but %s is %s; without it the NVLink fabric is not set up "
                "and CUDA reports the system not ready. Start and enable it: systemctl enable --now %s"
                % (len(fabric["nvswitch_pci"]), manager.get("unit"), manager.get("active_state"), manager.get("unit")),
                {
                    "nvswitch_pci": fabric.get("nvswitch_pci"),
                    "load_state": manager.get("load_state"),
                    "active_state": manager.get("active_state"),
                },
            )
        )
    for gpu in fabric.get("gpus") or []:
        if not gpu.get("supported") or gpu.get("state") in (None, "not_supported"):
            continue
        if gpu["state"] == "completed" and gpu.get("status") == "success":
            continue
        out.append(
            finding(
                "gpu_fabric_not_ready",
                "critical",
                "gpu%s" % gpu.get("index"),
                "GPU %s NVLink fabric state is %s (status %s): the GPU has not joined the NVSwitch fabric; check "
                "Fabric Manager (journalctl -u %s) and the NVSwitches"
                % (gpu.get("index"), gpu.get("state"), gpu.get("status"), FABRIC_MANAGER_UNIT),
                {"state": gpu.get("state"), "status": gpu.get("status"), "clique_id": gpu.get("clique_id")},
            )
        )
    return out
