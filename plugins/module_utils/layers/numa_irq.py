# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The numa_irq layer: the interrupts of the GPUs and NICs pinned to the CPUs of their NUMA node,
and irqbalance told to leave them alone."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import posixpath
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.layers.shared import LayerError


NAME = "numa_irq"

# Value rules of the layer's variables (policy/varspec.py RULES)
RULES = {
    "numa_irq_irqbalance_config": {"absolute": True, "empty_ok": True},
    "numa_irq_irqbalance_args": {"line": "/etc/default/irqbalance, which sh sources"},
    "numa_irq_cpus_override": {"line": "the layer's tmpfiles.d drop-in"},
}

SEARCHABLE = {}

NIC_FILTERS = ("rdma", "physical", "none")
PCI_DEVICES = "/sys/bus/pci/devices"


def _candidates(facts, gpus, nics, nic_filter):
    out = []
    if gpus:
        for g in facts.get("gpus") or []:
            if g.get("pci_bus_id"):
                out.append(
                    {
                        "device": str(g["pci_bus_id"]).lower(),
                        "name": "gpu%s" % g.get("index"),
                        "numa_node": g.get("numa_node"),
                        "cpus": g.get("local_cpulist"),
                        "var": "numa_irq_gpus",
                    }
                )
    for n in facts.get("nics") or []:
        if not n.get("pci_address"):
            continue
        chosen = (
            n.get("name") in nics
            if nics
            else (nic_filter == "physical" or (nic_filter == "rdma" and n.get("rdma_device")))
        )
        if chosen:
            out.append(
                {
                    "device": str(n["pci_address"]).lower(),
                    "name": "nic:%s" % n.get("name"),
                    "numa_node": n.get("numa_node"),
                    "cpus": n.get("local_cpulist"),
                    "var": "numa_irq_nics" if nics else "numa_irq_nic_filter",
                }
            )
    return out


def numa_irq_devices(facts, gpus=True, nics=None, nic_filter="rdma", cpus_override=None):
    """The devices whose interrupts follow their NUMA node (the GPUs with ``gpus``; the NICs named
    in ``nics``, else those ``nic_filter`` picks), each once, with ``skip`` (why not, or None);
    ``cpus_override`` (PCI address: CPU list) pins a device to the CPUs it names."""
    override = {str(k).lower(): str(v) for k, v in (cpus_override or {}).items()}
    out, seen = [], set()
    for c in _candidates(facts, bool(gpus), list(nics or []), nic_filter):
        if c["device"] in seen:
            continue
        seen.add(c["device"])
        if c["device"] in override:
            c.update(cpus=override[c["device"]], var="numa_irq_cpus_override", skip=None)
        elif not c["cpus"]:
            c["skip"] = "no local CPUs reported for the device"
        elif c["numa_node"] is None:
            c["skip"] = "no NUMA node reported for the device (local CPUs %s)" % c["cpus"]
        else:
            c["skip"] = None
        out.append(c)
    return out


def numa_irq_notes(devices):
    """One line per device left alone: ``gpu0 (0000:17:00.0) not pinned: why``."""
    return ["%s (%s) not pinned: %s" % (d["name"], d["device"], d["skip"]) for d in devices or [] if d.get("skip")]


def numa_irq_settings(devices, irqbalance="ban", irqbalance_file=None, irqs=None, irqbalance_args=""):
    """Engine settings: the affinity of every pinned device, and irqbalance's ban list when asked."""
    pinned = [d for d in devices or [] if not d.get("skip")]
    out = [
        {"kind": "irq_affinity", "key": d["device"], "device": d["device"], "value": d["cpus"], "var": d["var"]}
        for d in pinned
    ]
    irqs = list(irqs or [])
    if irqbalance == "ban" and irqbalance_file and irqs:
        args = ([irqbalance_args] if str(irqbalance_args or "").strip() else []) + ["--banirq=%s" % i for i in irqs]
        out.append(
            {
                "kind": "env_var",
                "path": irqbalance_file,
                "key": "IRQBALANCE_ARGS",
                "value": " ".join(args),
                # the engine's refusal of a value names the variable it came from
                "var": "numa_irq_irqbalance_args" if str(irqbalance_args or "").strip() else "numa_irq_irqbalance",
            }
        )
    return out


NUMBER = re.compile(r"^[0-9]+$")


def numa_irq_msi_dirs(devices):
    """The msi_irqs folder of every pinned device (``skip`` empty)."""
    return ["%s/%s/msi_irqs" % (PCI_DEVICES, d["device"]) for d in devices or [] if not d.get("skip")]


def _msi_device(path):
    """The device of a file /sys/bus/pci/devices/<device>/msi_irqs/<irq>."""
    parts = str(path).split("/")
    return parts[5] if len(parts) > 5 else None


def numa_irq_legacy_devices(devices, msi_files=None):
    """The pinned devices that have no MSI interrupt among ``msi_files`` (M(ansible.builtin.find)'s files)."""
    with_msi = [_msi_device(f.get("path")) for f in msi_files or []]
    return [d["device"] for d in devices or [] if not d.get("skip") and d["device"] not in with_msi]


def numa_irq_irqs(msi_files=None, legacy=None):
    """The interrupts of the pinned devices, in order, each once: the names of their MSI files and
    the legacy interrupt read from sysfs (slurp results); 0 and anything not a number are left out."""
    names = [posixpath.basename(str(f.get("path"))) for f in msi_files or []]
    names += [
        base64.b64decode(r["content"]).decode("utf-8", "replace").strip()
        for r in legacy or []
        if isinstance(r, dict) and r.get("content") is not None
    ]
    return sorted({int(n) for n in names if NUMBER.match(n) and int(n) != 0})


def first_existing(stat_results):
    """The item of the first M(ansible.builtin.stat) loop result whose file exists, or None."""
    for r in stat_results or []:
        if isinstance(r, dict) and isinstance(r.get("stat"), dict) and r["stat"].get("exists"):
            return r.get("item")
    return None


def devices(facts, gpus=True, nics=None, nic_filter="rdma", cpus_override=None):
    """The filter numa_irq_devices: the devices whose interrupts follow their NUMA node."""
    if not isinstance(facts, dict):
        raise LayerError(
            "numa_irq_devices expects ansible_facts.stacktune (gpu_topology_facts), got %s" % type(facts).__name__
        )
    if nic_filter not in NIC_FILTERS:
        raise LayerError(
            "numa_irq_devices: nic_filter must be one of %s, got %r" % (", ".join(NIC_FILTERS), nic_filter)
        )
    return numa_irq_devices(facts, bool(gpus), nics, nic_filter, cpus_override)


def settings(devices, irqbalance="ban", irqbalance_file=None, irqs=None, irqbalance_args=""):
    """The layer's settings (the filter numa_irq_settings, or layer_settings('numa_irq'))."""
    return numa_irq_settings(devices, irqbalance, irqbalance_file, irqs, irqbalance_args)


def _list(value, name):
    if value is None:
        return []
    if not isinstance(value, list):
        raise LayerError("%s expects a list, got %s" % (name, type(value).__name__))
    return value


def msi_dirs(devices):
    """The filter numa_irq_msi_dirs."""
    return numa_irq_msi_dirs(_list(devices, "numa_irq_msi_dirs"))


def legacy_devices(devices, msi=None):
    """The filter numa_irq_legacy_devices (``msi``: the find result of numa_irq_msi_dirs)."""
    msi = msi or {}
    return numa_irq_legacy_devices(_list(devices, "numa_irq_legacy_devices"), msi.get("files") or [])


def irqs(msi, legacy=None):
    """The filter numa_irq_irqs (the registered find and slurp results)."""
    msi = msi or {}
    legacy = legacy or {}
    if not isinstance(msi, dict) or not isinstance(legacy, dict):
        raise LayerError("numa_irq_irqs expects the registered find and slurp results")
    return numa_irq_irqs(msi.get("files") or [], legacy.get("results") or [])


def irqbalance_file(stat):
    """The filter numa_irq_irqbalance_file: the first irqbalance defaults file that exists, or None."""
    stat = stat or {}
    if not isinstance(stat, dict):
        raise LayerError("numa_irq_irqbalance_file expects the registered stat loop result")
    return first_existing(stat.get("results") or [])
