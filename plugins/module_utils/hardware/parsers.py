# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers of what the kernel, the driver and the system write: sysfs attributes, /proc files,
os-release, ldconfig, bus ids and NVML's clocks event reasons. Pure functions of text.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import (
    CLOCKS_EVENT_REASONS,
    PCI_ADDRESS,
    PCIE_GT_S,
)


# --------------------------------------------------------------------------- parsers


def parse_int(text):
    """Integer value of a one-line sysfs attribute ("16\\n", "0x10de"), or None."""
    if text is None:
        return None
    value = text.strip()
    if not value:
        return None
    try:
        return int(value, 0) if value.lower().startswith("0x") else int(value)
    except ValueError:
        return None


def parse_str(text):
    """Stripped one-line attribute, None when missing or empty."""
    if text is None:
        return None
    value = text.strip()
    return value or None


def parse_pcie_gen(text):
    """PCIe generation from a sysfs link speed ("32.0 GT/s PCIe" -> 5), None when unknown."""
    if text is None:
        return None
    match = re.search(r"(\d+(?:\.\d+)?)\s*GT/s", text)
    if not match:
        return None
    rate = float(match.group(1))
    for gen, gt_s in sorted(PCIE_GT_S.items()):
        if abs(rate - gt_s) < 0.01:
            return gen
    return None


def parse_bracketed(text):
    """Selected value of a sysfs choice list ("[default] performance" -> "default")."""
    if text is None:
        return None
    match = re.search(r"\[([^\]]+)\]", text)
    if match:
        return match.group(1).strip()
    words = text.split()
    return words[0] if len(words) == 1 else None


def _cmdline_params(cmdline):
    params = {}
    for token in (cmdline or "").split():
        if token == "--":
            break  # the rest belongs to init
        key, _sep, value = token.partition("=")
        params[key] = value
    return params


def parse_iommu_cmdline(cmdline):
    """IOMMU mode requested on the kernel command line: "pt", "on", "off" or None."""
    params = _cmdline_params(cmdline)
    vendor = [params.get("intel_iommu", ""), params.get("amd_iommu", "")]
    generic = params.get("iommu", "")
    passthrough = params.get("iommu.passthrough", "").lower()
    if "off" in generic.split(",") or any("off" in v.split(",") for v in vendor):
        return "off"
    if "pt" in generic.split(",") or passthrough in ("1", "y", "yes", "on", "true"):
        return "pt"
    if any("on" in v.split(",") for v in vendor) or "force" in generic.split(",") or passthrough in ("0", "n", "no"):
        return "on"
    return None


def parse_driver_version(text):
    """NVIDIA kernel module version from /sys/module/nvidia/version or /proc/driver/nvidia/version."""
    if text is None:
        return None
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if not match:
        match = re.search(r"^\s*(\d+\.\d+(?:\.\d+)?)\s*$", text, re.MULTILINE)
    return match.group(1) if match else None


def parse_cpuinfo(text):
    """Model name and microcode revision of the first CPU in /proc/cpuinfo."""
    out = {"model": None, "microcode": None}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "model name" and out["model"] is None:
            out["model"] = value.strip() or None
        elif key == "microcode" and out["microcode"] is None:
            out["microcode"] = value.strip() or None
        if out["model"] is not None and out["microcode"] is not None:
            break
    return out


def parse_os_release(text):
    """id, version_id and pretty_name from os-release content."""
    values = {}
    for raw_line in (text or "").splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key.strip()] = value
    return {
        "id": values.get("ID"),
        "version_id": values.get("VERSION_ID"),
        "pretty_name": values.get("PRETTY_NAME"),
    }


def parse_meminfo_kib(text):
    """The numbers of /proc/meminfo ("MemTotal:  2113628116 kB" -> {"MemTotal": 2113628116}), also
    of a NUMA node's meminfo ("Node 0 MemTotal:  6121684 kB"): the field's name is the last word
    before the colon; the first value of a field counts."""
    out = {}
    for line in (text or "").splitlines():
        name, sep, rest = line.partition(":")
        words, values = name.split(), rest.split()
        if sep and words and values and values[0].isdigit():
            out.setdefault(words[-1], int(values[0]))
    return out


def parse_node_meminfo_total_kib(text):
    """MemTotal of a NUMA node's meminfo ("Node 0 MemTotal:  6121684 kB") in KiB."""
    return parse_meminfo_kib(text).get("MemTotal")


def parse_mount_size_kib(text, mountpoint):
    """The size= option (in KiB) of the tmpfs mounted at ``mountpoint`` in /proc/mounts, or None."""
    match = re.search(r" %s tmpfs \S*size=(\d+)k" % re.escape(mountpoint), text or "")
    return int(match.group(1)) if match else None


def normalize_bus_id(bus_id):
    """PCI bus id in sysfs form: lower case, 4-digit domain ("00000000:05:00.0" -> "0000:05:00.0")."""
    if not bus_id:
        return None
    value = bus_id.strip().lower()
    parts = value.split(":")
    if len(parts) == 3:
        domain = parts[0][-4:].rjust(4, "0")
        value = "%s:%s:%s" % (domain, parts[1], parts[2])
    elif len(parts) == 2:
        value = "0000:%s:%s" % (parts[0], parts[1])
    return value


def pci_address_from_path(path):
    """Last PCI address in a sysfs device path, None when the device is not on PCI."""
    if not path:
        return None
    found = None
    for part in path.split("/"):
        if PCI_ADDRESS.match(part):
            found = part
    return normalize_bus_id(found) if found else None


def format_cuda_version(value):
    """NVML CUDA driver version integer (13000) -> "13.0"."""
    if value is None:
        return None
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def decode_clocks_event_reasons(mask):
    """Names of the set bits of a clocks event (throttle) reason mask."""
    if mask is None:
        return None
    names = []
    known = 0
    for bit, name in CLOCKS_EVENT_REASONS:
        known |= bit
        if mask & bit:
            names.append(name)
    unknown = mask & ~known
    if unknown:
        names.append("unknown_0x%x" % unknown)
    return names


def parse_ldconfig(text):
    """``ldconfig -p`` lines -> [(soname, flags, path)]."""
    entries = []
    for line in (text or "").splitlines():
        match = re.match(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$", line)
        if match:
            entries.append((match.group(1), match.group(2), match.group(3)))
    return entries


def library_version_from_filename(filename, lib):
    """Version in a library file name ("libcudnn.so.9.19.0" -> "9.19.0"), None without one."""
    match = re.match(r"^lib%s\.so\.(\d+(?:\.\d+)*)$" % re.escape(lib), filename or "")
    return match.group(1) if match else None
