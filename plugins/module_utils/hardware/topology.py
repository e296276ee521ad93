# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU topology facts: parsers, the facts builder, findings and a plain-text table.

Nothing here touches the host. :func:`build_facts` walks sysfs/procfs through a reader
object (``read``, ``read_bytes``, ``listdir``, ``readlink``, ``realpath``) and combines what it reads with
the raw NVML values and command outputs of a raw dict. The live reader
(``hostprobe.FileReader``) records every answer; :class:`ReplayReader` answers from such
a recording, so ``assemble(raw)`` rebuilds the same facts offline.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import posixpath
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import pcie as _pcie
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.cpu_io_facts import block, cpu_power
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import (
    NVIDIA_VENDOR,
    NVLINK_DEVICE_TYPE_SWITCH,
    SLOWDOWN_REASONS,
    version_order,
    version_text,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.cpulist import parse_cpulist
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.parsers import (
    decode_clocks_event_reasons,
    format_cuda_version,
    library_version_from_filename,
    normalize_bus_id,
    parse_bracketed,
    parse_cpuinfo,
    parse_driver_version,
    parse_int,
    parse_iommu_cmdline,
    parse_ldconfig,
    parse_node_meminfo_total_kib,
    parse_os_release,
    parse_pcie_gen,
    parse_str,
    pci_address_from_path,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.findings import finding

SCHEMA_VERSION = 1
# 2: config space bytes, peer-memory modules, RDMA ports, NVML fabric state and the
# fabric manager commands are recorded; format 1 recordings replay with those "not recorded".
RAW_FORMAT_VERSION = 2

SEVERITIES = ("info", "warning", "critical")

# NVML_TOPOLOGY_* common-ancestor levels, named as `nvidia-smi topo -m` names them.
TOPOLOGY_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}

NIC_KINDS = {1: "ethernet", 32: "infiniband"}
ARPHRD_LOOPBACK = 772

GPU_PCI_CLASSES = ("0x0300", "0x0302")  # VGA controller, 3D controller

LIBRARIES = (("cuda_runtime", "cudart"), ("cudnn", "cudnn"), ("nccl", "nccl"))
# Python distributions that ship the same libraries (e.g. torch's dependencies).
LIBRARY_DISTRIBUTIONS = {
    "cuda_runtime": re.compile(r"^nvidia_cuda_runtime(?:_cu\d+)?-(\d[0-9a-zA-Z.+]*)\.dist-info$"),
    "cudnn": re.compile(r"^nvidia_cudnn(?:_cu\d+)?-(\d[0-9a-zA-Z.+]*)\.dist-info$"),
    "nccl": re.compile(r"^nvidia_nccl(?:_cu\d+)?-(\d[0-9a-zA-Z.+]*)\.dist-info$"),
}
PYTHON_LIB_DIR = re.compile(r"^python3\.\d+$")

CPUINFO_MAX_BYTES = 16 * 1024


class ReplayReader:
    """Answer ``read``/``read_bytes``/``listdir``/``readlink``/``realpath`` from a recording.

    The recording is the ``recording`` of a ``hostprobe.FileReader``: ``{"files": {path:
    text|None}, "dirs": {path: [names]|None}, "links": {...}, "realpaths": {...}}``, and
    ``"bytes": {path: hex|None}`` for binary reads. A path that was never recorded reads
    as missing (None).
    """

    def __init__(self, recording):
        recording = recording or {}
        self.files = recording.get("files") or {}
        self.dirs = recording.get("dirs") or {}
        self.links = recording.get("links") or {}
        self.realpaths = recording.get("realpaths") or {}
        self.bytes = recording.get("bytes") or {}

    def read(self, path, max_bytes=None):
        return self.files.get(path)

    def read_bytes(self, path, max_bytes=None):
        text = self.bytes.get(path)
        if text is None:
            return None
        data = binascii.unhexlify(text)
        return data[:max_bytes] if max_bytes is not None else data

    def listdir(self, path):
        names = self.dirs.get(path)
        return sorted(names) if names is not None else None

    def readlink(self, path):
        return self.links.get(path)

    def realpath(self, path):
        return self.realpaths.get(path)


def _sysfs_cpus(text):
    """A CPU list read from sysfs, or None when the file is missing or not a CPU list."""
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except ValueError:
        return None


def _watts(milliwatts):
    return round(milliwatts / 1000.0, 3) if milliwatts is not None else None


def _mib(num_bytes):
    return num_bytes // (1024 * 1024) if num_bytes is not None else None


def _bool(value):
    return bool(value) if value is not None else None


# --------------------------------------------------------------------------- builder


def _host(fs):
    cpu = parse_cpuinfo(fs.read("/proc/cpuinfo", max_bytes=CPUINFO_MAX_BYTES))
    os_release = fs.read("/etc/os-release")
    if os_release is None:
        os_release = fs.read("/usr/lib/os-release")
    dmi = "/sys/class/dmi/id/"
    cmdline = parse_str(fs.read("/proc/cmdline"))
    online = _sysfs_cpus(fs.read("/sys/devices/system/cpu/online"))
    return {
        "kernel_release": parse_str(fs.read("/proc/sys/kernel/osrelease")),
        "os": parse_os_release(os_release),
        "cpu_model": cpu["model"],
        "cpu_microcode": cpu["microcode"],
        "bios": {
            "vendor": parse_str(fs.read(dmi + "bios_vendor")),
            "version": parse_str(fs.read(dmi + "bios_version")),
            "date": parse_str(fs.read(dmi + "bios_date")),
        },
        "board": {
            "vendor": parse_str(fs.read(dmi + "board_vendor")),
            "name": parse_str(fs.read(dmi + "board_name")),
            "product_name": parse_str(fs.read(dmi + "product_name")),
        },
        "cmdline": cmdline,
        "iommu": _iommu(fs, cmdline),
        "aspm_policy": parse_bracketed(fs.read("/sys/module/pcie_aspm/parameters/policy")),
        "numa_nodes": _numa_nodes(fs),
        "cpu_count": len(online) if online else None,
    }


def _iommu(fs, cmdline):
    groups = fs.listdir("/sys/kernel/iommu_groups")
    if groups:
        first = sorted(groups, key=lambda g: int(g) if g.isdigit() else 0)[0]
        domain = parse_str(fs.read("/sys/kernel/iommu_groups/%s/type" % first))
        if domain is not None:
            return {"mode": "pt" if domain == "identity" else "on", "source": "sysfs"}
    if groups is not None and not groups:
        return {"mode": "off", "source": "sysfs"}
    mode = parse_iommu_cmdline(cmdline)
    if mode is not None:
        return {"mode": mode, "source": "cmdline"}
    if groups:
        return {"mode": "on", "source": "sysfs"}
    return {"mode": "unknown", "source": None}


def _numa_nodes(fs):
    names = [n for n in fs.listdir("/sys/devices/system/node") or [] if re.match(r"^node\d+$", n)]
    nodes = []
    for name in sorted(names, key=lambda n: int(n[4:])):
        base = "/sys/devices/system/node/" + name
        cpulist = parse_str(fs.read(base + "/cpulist")) or ""
        nodes.append(
            {
                "node": int(name[4:]),
                "cpulist": cpulist,
                "cpus": _sysfs_cpus(cpulist) or [],
                "mem_total_kib": parse_node_meminfo_total_kib(fs.read(base + "/meminfo")),
            }
        )
    return nodes


def _nvidia_pci_gpus(fs):
    """PCI addresses of NVIDIA display/3D controllers, from sysfs alone."""
    found = []
    for address in fs.listdir("/sys/bus/pci/devices") or []:
        base = "/sys/bus/pci/devices/" + address
        if parse_str(fs.read(base + "/vendor")) != NVIDIA_VENDOR:
            continue
        pci_class = parse_str(fs.read(base + "/class")) or ""
        if pci_class[:6] in GPU_PCI_CLASSES:
            found.append(normalize_bus_id(address))
    return found


def _node_holding(cpus, numa_nodes):
    """The one NUMA node whose CPUs include all of ``cpus`` (as nvidia-smi's NUMA affinity), else None."""
    if not cpus:
        return None
    wanted = set(cpus)
    holders = [n["node"] for n in numa_nodes if wanted <= set(n["cpus"])]
    return holders[0] if len(holders) == 1 else None


def _gpu(fs, dev, numa_nodes=()):
    bus_id = normalize_bus_id(dev.get("pci_bus_id"))
    base = "/sys/bus/pci/devices/%s" % bus_id if bus_id else None

    def attr(name):
        return fs.read(base + "/" + name) if base else None

    sys_numa = parse_int(attr("numa_node"))
    nvml_numa = dev.get("numa_node")
    local_cpulist = parse_str(attr("local_cpulist"))
    local_cpus = _sysfs_cpus(local_cpulist) or []
    # The PCI device's node (the CPUs local to it) comes first; NVML's answer fills in
    # when sysfs has none (-1 on single-node hosts and in many virtual machines), then the
    # one node that holds all of the device's local CPUs.
    if sys_numa is not None and sys_numa >= 0:
        numa_node = sys_numa
    elif nvml_numa is not None and nvml_numa >= 0:
        numa_node = nvml_numa
    else:
        numa_node = _node_holding(local_cpus, numa_nodes)
    speed_cur, speed_max = parse_str(attr("current_link_speed")), parse_str(attr("max_link_speed"))
    width_cur, width_max = parse_int(attr("current_link_width")), parse_int(attr("max_link_width"))

    def pick(nvml_value, sysfs_value):
        return nvml_value if nvml_value is not None else sysfs_value

    constraints = dev.get("power_constraints_mw") or [None, None]
    ecc_mode = dev.get("ecc_mode") or [None, None]
    rows = dev.get("remapped_rows")
    mig = dev.get("mig_mode")
    links = dev.get("nvlink")
    return {
        "index": dev.get("index"),
        "name": dev.get("name"),
        "uuid": dev.get("uuid"),
        "serial": dev.get("serial"),
        "vbios": dev.get("vbios"),
        "pci_bus_id": bus_id,
        "numa_node": numa_node,
        "local_cpulist": local_cpulist,
        "local_cpus": local_cpus,
        "pcie": {
            "gen_current": pick(dev.get("pcie_gen_current"), parse_pcie_gen(speed_cur)),
            "gen_max": pick(dev.get("pcie_gen_max"), parse_pcie_gen(speed_max)),
            "width_current": pick(dev.get("pcie_width_current"), width_cur),
            "width_max": pick(dev.get("pcie_width_max"), width_max),
            "sysfs_speed_current": speed_cur,
            "sysfs_speed_max": speed_max,
            "sysfs_width_current": width_cur,
            "sysfs_width_max": width_max,
        },
        "nvlink": {
            "supported": links is not None,
            "links": [
                {
                    "link": link.get("link"),
                    "active": bool(link.get("active")),
                    "remote_pci_bus_id": normalize_bus_id(link.get("remote_pci_bus_id")),
                }
                for link in links or []
            ],
        },
        "power": {
            "limit_w": _watts(dev.get("power_limit_mw")),
            "default_limit_w": _watts(dev.get("power_default_limit_mw")),
            "min_limit_w": _watts(constraints[0]),
            "max_limit_w": _watts(constraints[1]),
            "enforced_limit_w": _watts(dev.get("power_enforced_limit_mw")),
            "draw_w": _watts(dev.get("power_usage_mw")),
        },
        "clocks": {
            "sm_mhz": dev.get("clock_sm_mhz"),
            "mem_mhz": dev.get("clock_mem_mhz"),
            "sm_max_mhz": dev.get("clock_sm_max_mhz"),
            "mem_max_mhz": dev.get("clock_mem_max_mhz"),
            "app_sm_mhz": dev.get("app_clock_sm_mhz"),
            "app_mem_mhz": dev.get("app_clock_mem_mhz"),
            "default_app_sm_mhz": dev.get("default_app_clock_sm_mhz"),
            "default_app_mem_mhz": dev.get("default_app_clock_mem_mhz"),
        },
        "ecc": {
            "mode_current": _bool(ecc_mode[0]),
            "mode_pending": _bool(ecc_mode[1]),
            "volatile_corrected": dev.get("ecc_volatile_corrected"),
            "volatile_uncorrected": dev.get("ecc_volatile_uncorrected"),
            "aggregate_corrected": dev.get("ecc_aggregate_corrected"),
            "aggregate_uncorrected": dev.get("ecc_aggregate_uncorrected"),
            "remapped_rows_pending": _bool(rows[2]) if rows else None,
            "remapped_rows_failure": _bool(rows[3]) if rows else None,
        },
        "persistence_mode": _bool(dev.get("persistence_mode")),
        "compute_mode": COMPUTE_MODES.get(dev.get("compute_mode")) if dev.get("compute_mode") is not None else None,
        "mig": {"current": bool(mig[0]), "pending": bool(mig[1])} if mig else None,
        "temperature_c": dev.get("temperature_c"),
        "throttle_reasons": decode_clocks_event_reasons(dev.get("clocks_event_reasons")),
        "memory": {"total_mib": _mib(dev.get("memory_total_bytes")), "used_mib": _mib(dev.get("memory_used_bytes"))},
    }


def _p2p_levels(nvml, devices, gpus):
    n = len(gpus)
    levels = (nvml or {}).get("topology") or []
    bus_ids = [g["pci_bus_id"] for g in gpus]
    switch_links = []
    for dev in devices:
        switch_links.append(
            sum(
                1
                for link in dev.get("nvlink") or []
                if link.get("active") and link.get("remote_device_type") == NVLINK_DEVICE_TYPE_SWITCH
            )
        )
    matrix = []
    for i in range(n):
        row = []
        for j in range(n):
            if i == j:
                row.append("X")
                continue
            direct = sum(
                1
                for link in gpus[i]["nvlink"]["links"]
                if link["active"] and link["remote_pci_bus_id"] and link["remote_pci_bus_id"] == bus_ids[j]
            )
            if not direct and switch_links[i] and switch_links[j]:
                direct = min(switch_links[i], switch_links[j])
            if direct:
                row.append("NV%d" % direct)
                continue
            level = levels[i][j] if i < len(levels) and j < len(levels[i]) else None
            row.append(TOPOLOGY_LEVELS.get(level) if level is not None else None)
        matrix.append(row)
    return matrix


def _driver(fs, nvml):
    module_version = parse_driver_version(fs.read("/sys/module/nvidia/version"))
    if module_version is None:
        module_version = parse_driver_version(fs.read("/proc/driver/nvidia/version"))
    nvml_version = (nvml or {}).get("driver_version")
    agree = None
    if nvml_version and module_version:
        agree = nvml_version.strip() == module_version
    return {
        "nvml_version": nvml_version,
        "kernel_module_version": module_version,
        "agree": agree,
        "cuda_driver_version": format_cuda_version((nvml or {}).get("cuda_driver_version")),
    }


def _site_dirs(fs, python_prefix):
    prefixes = []
    if python_prefix:
        prefixes.append(python_prefix.rstrip("/"))
    for name in fs.listdir("/opt") or []:
        for sub in ("/.venv", "/venv", ""):
            prefixes.append("/opt/" + name + sub)
    prefixes.extend(["/usr/local"])
    dirs = []
    seen = set()
    for prefix in prefixes:
        if prefix in seen:
            continue
        seen.add(prefix)
        for entry in fs.listdir(prefix + "/lib") or []:
            if PYTHON_LIB_DIR.match(entry):
                for leaf in ("site-packages", "dist-packages"):
                    dirs.append("%s/lib/%s/%s" % (prefix, entry, leaf))
    dirs.append("/usr/lib/python3/dist-packages")
    return dirs


def _version_from_dist_info(fs, library_path, key, major):
    """Full version from a dist-info near a library whose file name has only the major version.

    Looks in the directories above the library (up to four levels) and in their
    ``dist-info`` subdirectory, as laid out by NVIDIA's wheels (site-packages/nvidia/...)
    and by CUDA toolkits built from them (/usr/local/cuda-13.0/dist-info).
    """
    pattern = LIBRARY_DISTRIBUTIONS[key]
    directory = posixpath.dirname(library_path)
    for _level in range(4):
        directory = posixpath.dirname(directory)
        if not directory or directory == "/":
            break
        for candidate in (directory + "/dist-info", directory):
            for name in fs.listdir(candidate) or []:
                match = pattern.match(name)
                if match and version_text(match.group(1), 1) == major:
                    return match.group(1)
    return None


def _libraries(fs, raw):
    versions = {key: None for key, _lib in LIBRARIES}
    sources = {key: None for key, _lib in LIBRARIES}
    result = {"cuda_runtime": None, "cudnn": None, "nccl": None, "sources": sources}
    if not (raw.get("options") or {}).get("libraries", True):
        return result
    ldconfig = ((raw.get("commands") or {}).get("ldconfig_p") or {}).get("stdout")
    entries = parse_ldconfig(ldconfig)
    for key, lib in LIBRARIES:
        best = None
        for soname, _flags, path in entries:
            if not re.match(r"^lib%s\.so(\.\d+)*$" % re.escape(lib), soname):
                continue
            real = fs.realpath(path) or path
            version = library_version_from_filename(posixpath.basename(real), lib)
            if version is None:
                version = library_version_from_filename(soname, lib)
            if version is not None and "." not in version:
                # pip-style CUDA layouts name the file by major version only; the wheel's
                # dist-info next to it carries the full one.
                version = _version_from_dist_info(fs, real, key, version) or version
            if version is not None and (best is None or version_order(version) > version_order(best[0])):
                best = (version, real)
        if best is not None:
            versions[key], sources[key] = best
    missing = [key for key, _lib in LIBRARIES if versions[key] is None]
    if missing:
        for site in _site_dirs(fs, (raw.get("python") or {}).get("prefix")):
            names = fs.listdir(site)
            if not names:
                continue
            for key in list(missing):
                for name in names:
                    match = LIBRARY_DISTRIBUTIONS[key].match(name)
                    if match:
                        versions[key] = match.group(1)
                        sources[key] = site + "/" + name
                        missing.remove(key)
                        break
            if not missing:
                break
    result.update(versions)
    return result


def _nics(fs):
    rdma = {}
    for device in fs.listdir("/sys/class/infiniband") or []:
        address = pci_address_from_path(fs.realpath("/sys/class/infiniband/%s/device" % device))
        if address and address not in rdma:
            rdma[address] = device
    nics = []
    for name in fs.listdir("/sys/class/net") or []:
        base = "/sys/class/net/" + name
        if_type = parse_int(fs.read(base + "/type"))
        if if_type == ARPHRD_LOOPBACK or name == "lo":
            continue
        address = pci_address_from_path(fs.realpath(base + "/device"))
        numa_node = local_cpulist = driver = None
        if address:
            pci = "/sys/bus/pci/devices/" + address
            numa_node = parse_int(fs.read(pci + "/numa_node"))
            if numa_node is not None and numa_node < 0:
                numa_node = None
            local_cpulist = parse_str(fs.read(pci + "/local_cpulist"))
        driver_path = fs.realpath(base + "/device/driver")
        if driver_path:
            driver = posixpath.basename(driver_path)
        speed = parse_int(fs.read(base + "/speed"))
        nics.append(
            {
                "name": name,
                "kind": NIC_KINDS.get(if_type, "other") if if_type is not None else None,
                "pci_address": address,
                "numa_node": numa_node,
                "local_cpulist": local_cpulist,
                "driver": driver,
                "speed_mbps": speed if speed is not None and speed > 0 else None,
                "operstate": parse_str(fs.read(base + "/operstate")),
                "rdma_device": rdma.get(address) if address else None,
            }
        )
    return nics


def _reason(nvml, gpus, nvidia_pci):
    if gpus:
        return None
    if nvidia_pci:
        on_bus = "%d NVIDIA GPU(s) on the PCI bus (%s)" % (len(nvidia_pci), ", ".join(nvidia_pci))
    else:
        on_bus = "no NVIDIA GPU on the PCI bus"
    if not nvml.get("available"):
        return "NVML unavailable: %s; %s" % (nvml.get("error") or "unknown error", on_bus)
    return "NVML reports no GPU; %s" % on_bus


def build_facts(fs, raw):
    """Facts dict (``ansible_facts.stacktune``) from a reader and a raw dict.

    ``fs`` answers file questions (a live recording reader or a :class:`ReplayReader`);
    ``raw`` carries ``nvml``, ``commands``, ``options``, ``python`` and ``collected_at``.
    """
    options = raw.get("options") or {}
    nvml = raw.get("nvml") or {}
    devices = (nvml.get("devices") or []) if nvml.get("available") else []
    host = _host(fs)
    gpus = [_gpu(fs, dev, host["numa_nodes"]) for dev in devices]
    nvidia_pci = _nvidia_pci_gpus(fs) if not gpus else []
    driver = _driver(fs, nvml)
    nics = _nics(fs) if options.get("nics", True) else []
    paths = _pcie.build(fs, raw, host, driver, gpus, nics)
    facts = {
        "schema_version": SCHEMA_VERSION,
        "collected_at": raw.get("collected_at"),
        "reason": _reason(nvml, gpus, nvidia_pci),
        "gpu_count": len(gpus),
        "host": host,
        "driver": driver,
        "libraries": _libraries(fs, raw),
        "gpus": gpus,
        "topology": {"p2p_levels": _p2p_levels(nvml, devices, gpus), "pcie_levels": paths["pcie_levels"]},
        "nics": nics,
        "pcie_paths": paths["pcie_paths"],
        "gpudirect": paths["gpudirect"],
        "fabric": paths["fabric"],
        "cpu": cpu_power(fs),
        "block": block(fs),
    }
    facts["findings"] = derive_findings(facts, nvml_available=bool(nvml.get("available")), nvidia_pci=nvidia_pci)
    return facts


def assemble(raw):
    """Facts from a recorded raw dict alone (no access to the host)."""
    return build_facts(ReplayReader(raw.get("files")), raw)


# --------------------------------------------------------------------------- findings


def _gpu_label(gpu):
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("pci_bus_id") or "unknown bus id")


def _gpu_findings(gpu, multi_numa):
    out = []
    subject = "gpu%s" % gpu.get("index")
    label = _gpu_label(gpu)
    pcie = gpu.get("pcie") or {}
    gen_cur, gen_max = pcie.get("gen_current"), pcie.get("gen_max")
    width_cur, width_max = pcie.get("width_current"), pcie.get("width_max")
    gen_low = gen_cur is not None and gen_max is not None and gen_cur < gen_max
    width_low = width_cur is not None and width_max is not None and width_cur < width_max
    if gen_low or width_low:
        idle = "gpu_idle" in (gpu.get("throttle_reasons") or [])
        # An idle GPU lowers its link speed to save power; the lane count does not change.
        severity = "info" if (idle and not width_low) else "warning"
        message = "%s PCIe link runs at Gen%s x%s, below its maximum Gen%s x%s" % (
            label,
            gen_cur,
            width_cur,
            gen_max,
            width_max,
        )
        if severity == "info":
            message += " while idle (power saving lowers the speed; check again under load)"
        out.append(
            finding(
                "pcie_link_degraded",
                severity,
                subject,
                message,
                {"gen_current": gen_cur, "gen_max": gen_max, "width_current": width_cur, "width_max": width_max},
            )
        )
    if not gpu.get("local_cpus") or (gpu.get("numa_node") is None and multi_numa):
        out.append(
            finding(
                "gpu_numa_no_local_cpus",
                "warning",
                subject,
                "%s has no local CPUs listed; CPU and IRQ pinning cannot follow it" % label
                if not gpu.get("local_cpus")
                else "%s has no NUMA node on a multi-node host (local CPUs %s); CPU and memory pinning "
                "cannot follow it" % (label, gpu.get("local_cpulist")),
                {"numa_node": gpu.get("numa_node"), "local_cpulist": gpu.get("local_cpulist")},
            )
        )
    ecc = gpu.get("ecc") or {}
    if ecc.get("volatile_uncorrected") or ecc.get("aggregate_uncorrected"):
        severity = "critical" if ecc.get("volatile_uncorrected") else "warning"
        out.append(
            finding(
                "ecc_uncorrected_errors",
                severity,
                subject,
                "%s reports uncorrected ECC errors (volatile %s, aggregate %s)"
                % (label, ecc.get("volatile_uncorrected"), ecc.get("aggregate_uncorrected")),
                {
                    "volatile_uncorrected": ecc.get("volatile_uncorrected"),
                    "aggregate_uncorrected": ecc.get("aggregate_uncorrected"),
                },
            )
        )
    if ecc.get("remapped_rows_failure"):
        out.append(
            finding(
                "remapped_rows_failure",
                "critical",
                subject,
                "%s failed to remap a memory row; the GPU needs service" % label,
                {"remapped_rows_failure": True},
            )
        )
    if ecc.get("remapped_rows_pending"):
        out.append(
            finding(
                "remapped_rows_pending",
                "warning",
                subject,
                "%s has memory row remappings pending; reset the GPU (or reboot) to apply them" % label,
                {"remapped_rows_pending": True},
            )
        )
    if None not in (ecc.get("mode_current"), ecc.get("mode_pending")) and ecc["mode_current"] != ecc["mode_pending"]:
        out.append(
            finding(
                "ecc_mode_pending",
                "info",
                subject,
                "%s ECC mode changes from %s to %s at the next GPU reset"
                % (label, ecc["mode_current"], ecc["mode_pending"]),
                {"mode_current": ecc["mode_current"], "mode_pending": ecc["mode_pending"]},
            )
        )
    reasons = [r for r in gpu.get("throttle_reasons") or [] if r in SLOWDOWN_REASONS]
    if reasons:
        out.append(
            finding(
                "gpu_throttled",
                "warning",
                subject,
                "%s clocks are held down by %s (temperature %s C)"
                % (label, ", ".join(reasons), gpu.get("temperature_c")),
                {"throttle_reasons": reasons, "temperature_c": gpu.get("temperature_c")},
            )
        )
    if gpu.get("persistence_mode") is False:
        out.append(
            finding(
                "persistence_mode_off",
                "info",
                subject,
                "%s persistence mode is off; the driver re-initialises the GPU for each first client" % label,
                {"persistence_mode": False},
            )
        )
    return out


def derive_findings(facts, nvml_available=True, nvidia_pci=None):
    """Findings (id, severity, subject, message, evidence) derived from assembled facts."""
    findings = []
    host = facts.get("host") or {}
    driver = facts.get("driver") or {}
    gpus = facts.get("gpus") or []
    if not nvml_available:
        if nvidia_pci:
            findings.append(
                finding(
                    "nvml_unavailable",
                    "critical",
                    "host",
                    "NVML is unavailable although %d NVIDIA GPU(s) are on the PCI bus: %s"
                    % (len(nvidia_pci), facts.get("reason")),
                    {"nvidia_pci_devices": list(nvidia_pci)},
                )
            )
        else:
            findings.append(
                finding(
                    "nvml_unavailable",
                    "info",
                    "host",
                    "NVML is unavailable and no NVIDIA GPU is on the PCI bus",
                    {"reason": facts.get("reason")},
                )
            )
    if driver.get("agree") is False:
        findings.append(
            finding(
                "driver_version_mismatch",
                "critical",
                "host",
                "NVML reports driver %s but the loaded kernel module is %s; reload the module or reboot"
                % (driver.get("nvml_version"), driver.get("kernel_module_version")),
                {
                    "nvml_version": driver.get("nvml_version"),
                    "kernel_module_version": driver.get("kernel_module_version"),
                },
            )
        )
    policy = host.get("aspm_policy")
    if policy in ("powersave", "powersupersave"):
        findings.append(
            finding(
                "aspm_enabled",
                "warning",
                "host",
                "PCIe ASPM policy is %s; links enter low-power states and add wake-up latency" % policy,
                {"aspm_policy": policy},
            )
        )
    multi_numa = len(host.get("numa_nodes") or []) > 1
    for gpu in gpus:
        findings.extend(_gpu_findings(gpu, multi_numa))
    gpu_nodes = {g.get("numa_node") for g in gpus if g.get("numa_node") is not None}
    misplaced = set()
    for nic in facts.get("nics") or []:
        if nic.get("rdma_device") and gpu_nodes and nic.get("numa_node") not in gpu_nodes | {None}:
            misplaced.update((nic.get("name"), nic.get("rdma_device")))
            findings.append(
                finding(
                    "nic_numa_mismatch",
                    "warning",
                    "nic:%s" % nic.get("name"),
                    "RDMA NIC %s (%s) is on NUMA node %s, where no GPU is (GPU nodes: %s)"
                    % (nic.get("name"), nic.get("rdma_device"), nic["numa_node"], sorted(gpu_nodes)),
                    {"nic_numa_node": nic["numa_node"], "gpu_numa_nodes": sorted(gpu_nodes)},
                )
            )
    findings.extend(_pcie.derive_findings(facts, covered_nics=misplaced))
    rank = {name: i for i, name in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: -rank[f["severity"]])
    return findings


def filter_findings(facts, min_severity="info"):
    """Findings of at least ``min_severity`` (info < warning < critical)."""
    if min_severity not in SEVERITIES:
        raise ValueError("min_severity must be one of %s, got %r" % (", ".join(SEVERITIES), min_severity))
    floor = SEVERITIES.index(min_severity)
    return [f for f in facts.get("findings") or [] if SEVERITIES.index(f.get("severity", "info")) >= floor]
