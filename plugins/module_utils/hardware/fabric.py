# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The NVSwitch fabric: NVIDIA switches on the PCI bus, NVLink links to them, NVML's fabric
state per GPU and the fabric manager's unit, version and package.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import (
    NVIDIA_VENDOR,
    NVLINK_DEVICE_TYPE_SWITCH,
    version_text,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.parsers import parse_str


# NVSwitches are NVIDIA PCI functions of class 0x0680 ("Bridge: other"); NCCL and the
# NVIDIA tools recognise them by exactly this class.
NVSWITCH_CLASS = "0x0680"
# nvmlGpuFabricState_t
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
FABRIC_STATE_COMPLETED = 3
# nvmlReturn_t values a fabric status may carry
NVML_RETURNS = {
    0: "success",
    1: "uninitialized",
    2: "invalid_argument",
    3: "not_supported",
    4: "no_permission",
    6: "not_found",
    9: "driver_not_loaded",
    10: "timeout",
    15: "gpu_is_lost",
    16: "reset_required",
    18: "lib_rm_version_mismatch",
    27: "not_ready",
    29: "invalid_state",
    999: "unknown",
}
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"


# --------------------------------------------------------------------------- host inputs


def nvidia_switches(fs):
    """PCI addresses of NVSwitches on this host's PCI bus (None when the bus cannot be listed)."""
    names = fs.listdir("/sys/bus/pci/devices")
    if names is None:
        return None
    found = []
    for address in names:
        base = "/sys/bus/pci/devices/" + address
        if parse_str(fs.read(base + "/vendor")) != NVIDIA_VENDOR:
            continue
        if (parse_str(fs.read(base + "/class")) or "").startswith(NVSWITCH_CLASS):
            found.append(address.lower())
    return sorted(found)


def nvlink_switch_gpus(nvml):
    """Indexes of GPUs with an active NVLink to an NVSwitch, from raw NVML values."""
    indexes = []
    for dev in (nvml or {}).get("devices") or []:
        for link in dev.get("nvlink") or []:
            if link.get("active") and link.get("remote_device_type") == NVLINK_DEVICE_TYPE_SWITCH:
                indexes.append(dev.get("index"))
                break
    return indexes


def fabric_expected(fs, nvml):
    """Whether the host has an NVSwitch fabric: NVSwitches on PCI or GPUs linked to one."""
    return bool(nvidia_switches(fs)) or bool(nvlink_switch_gpus(nvml))


# --------------------------------------------------------------------------- fabric


def _fabric_gpus(nvml, recorded):
    out = []
    for dev in (nvml or {}).get("devices") or []:
        info = dev.get("fabric") if recorded else None
        entry = {
            "index": dev.get("index"),
            "recorded": info is not None,
            "supported": None,
            "state": None,
            "status": None,
            "clique_id": None,
            "cluster_uuid": None,
            "health_mask": None,
            "error": None,
        }
        if info is not None:
            entry["supported"] = bool(info.get("supported"))
            entry["error"] = info.get("error")
            if info.get("supported"):
                state, status = info.get("state"), info.get("status")
                if state != FABRIC_STATE_COMPLETED:
                    status = None  # NVML sets the status only once the state is completed
                entry.update(
                    {
                        "state": FABRIC_STATES.get(state, "state_%s" % state) if state is not None else None,
                        "status": NVML_RETURNS.get(status, "nvml_return_%s" % status) if status is not None else None,
                        "clique_id": info.get("clique_id"),
                        "cluster_uuid": info.get("cluster_uuid"),
                        "health_mask": info.get("health_mask"),
                    }
                )
        out.append(entry)
    return out


def parse_systemctl_show(text):
    values = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def parse_fabric_manager_version(text):
    """Version from ``nv-fabricmanager --version`` ("Fabric Manager version is : 550.54.15")."""
    match = re.search(r"version is\s*:?\s*(\d+\.\d+(?:\.\d+)?)", text or "")
    return match.group(1) if match else None


def parse_package_version(text):
    """Version of an installed package from ``installed <version>`` lines (the package query's format)."""
    for line in (text or "").splitlines():
        status, _sep, version = line.strip().partition(" ")
        if status == "installed":
            found = version_text(version.strip(), parts=3, least=2) if version.strip()[:1].isdigit() else None
            if found:
                return found
    return None


def fabric_manager(commands, driver_version):
    commands = commands or {}
    unit_cmd = commands.get("fabricmanager_unit")
    version_cmd = commands.get("fabricmanager_version")
    package_cmd = commands.get("fabricmanager_package")
    recorded = any(c is not None for c in (unit_cmd, version_cmd, package_cmd))
    out = {
        "recorded": recorded,
        "unit": FABRIC_MANAGER_UNIT,
        "load_state": None,
        "active_state": None,
        "sub_state": None,
        "version": None,
        "version_source": None,
        "driver_version": driver_version,
        "agree": None,
    }
    if unit_cmd and unit_cmd.get("rc") == 0:
        values = parse_systemctl_show(unit_cmd.get("stdout"))
        out["load_state"] = values.get("LoadState") or None
        out["active_state"] = values.get("ActiveState") or None
        out["sub_state"] = values.get("SubState") or None
    if version_cmd and version_cmd.get("rc") == 0:
        out["version"] = parse_fabric_manager_version(
            (version_cmd.get("stdout") or "") + "\n" + (version_cmd.get("stderr") or "")
        )
        if out["version"]:
            out["version_source"] = "nv-fabricmanager --version"
    if out["version"] is None and package_cmd and package_cmd.get("rc") == 0:
        out["version"] = parse_package_version(package_cmd.get("stdout"))
        if out["version"]:
            out["version_source"] = " ".join(package_cmd.get("argv") or [])
    if out["version"] and driver_version:
        out["agree"] = out["version"] == driver_version.strip()
    return out


def build_fabric(fs, raw, driver, recorded):
    nvml = raw.get("nvml") or {}
    switches = nvidia_switches(fs) if recorded else None
    linked = nvlink_switch_gpus(nvml)
    driver_version = driver.get("kernel_module_version") or driver.get("nvml_version")
    present = None
    if switches or linked:
        present = True
    elif switches is not None:
        present = False
    return {
        "nvswitch": present,
        "nvswitch_pci": switches,
        "gpus_on_nvswitch": linked,
        "fabric_manager": fabric_manager(raw.get("commands") if recorded else None, driver_version),
        "gpus": _fabric_gpus(nvml, recorded),
    }
