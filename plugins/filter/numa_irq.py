# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The numa_irq layer's device choice, the sysfs reads of their interrupts and the settings
(documented in numa_irq_<filter>.yml beside this file); the interrupt and irqbalance file
readings are module_utils/policy/layers.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.policy import layers
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def numa_irq_devices(facts, gpus=True, nics=None, nic_filter="rdma", cpus_override=None):
    """The devices whose interrupts follow their NUMA node, each with ``skip`` (why not, or None)."""
    facts = plain(facts)
    if not isinstance(facts, dict):
        raise AnsibleFilterError(
            "numa_irq_devices expects ansible_facts.stacktune (gpu_topology_facts), got %s" % type(facts).__name__
        )
    if nic_filter not in layers.NIC_FILTERS:
        raise AnsibleFilterError(
            "numa_irq_devices: nic_filter must be one of %s, got %r" % (", ".join(layers.NIC_FILTERS), nic_filter)
        )
    return layers.numa_irq_devices(facts, bool(gpus), plain(nics), nic_filter, plain(cpus_override))


def numa_irq_notes(devices):
    """One line per device left alone: ``gpu0 (0000:17:00.0) not pinned: why``."""
    return layers.numa_irq_notes(plain(devices))


def numa_irq_settings(devices, irqbalance="ban", irqbalance_file=None, irqs=None, irqbalance_args=""):
    """Engine settings: the affinity of every pinned device, and irqbalance's ban list when asked."""
    return layers.numa_irq_settings(plain(devices), irqbalance, irqbalance_file, plain(irqs), irqbalance_args)


def _list(value, name):
    value = plain(value)
    if value is None:
        return []
    if not isinstance(value, list):
        raise AnsibleFilterError("%s expects a list, got %s" % (name, type(value).__name__))
    return value


def numa_irq_msi_dirs(devices):
    """The sysfs msi_irqs folder of every pinned device."""
    return layers.numa_irq_msi_dirs(_list(devices, "numa_irq_msi_dirs"))


def numa_irq_legacy_devices(devices, msi=None):
    """The pinned devices without MSI interrupts (``msi``: the find result of numa_irq_msi_dirs)."""
    msi = plain(msi) or {}
    return layers.numa_irq_legacy_devices(_list(devices, "numa_irq_legacy_devices"), msi.get("files") or [])


def numa_irq_irqs(msi, legacy=None):
    """The interrupt numbers of the pinned devices, sorted, each once."""
    msi = plain(msi) or {}
    legacy = plain(legacy) or {}
    if not isinstance(msi, dict) or not isinstance(legacy, dict):
        raise AnsibleFilterError("numa_irq_irqs expects the registered find and slurp results")
    return layers.numa_irq_irqs(msi.get("files") or [], legacy.get("results") or [])


def numa_irq_irqbalance_file(stat):
    """The first irqbalance defaults file that exists, or None."""
    stat = plain(stat) or {}
    if not isinstance(stat, dict):
        raise AnsibleFilterError("numa_irq_irqbalance_file expects the registered stat loop result")
    return layers.first_existing(stat.get("results") or [])


class FilterModule:
    """stacktune.gpu numa_irq filters."""

    def filters(self):
        return {
            "numa_irq_devices": numa_irq_devices,
            "numa_irq_notes": numa_irq_notes,
            "numa_irq_settings": numa_irq_settings,
            "numa_irq_msi_dirs": numa_irq_msi_dirs,
            "numa_irq_legacy_devices": numa_irq_legacy_devices,
            "numa_irq_irqs": numa_irq_irqs,
            "numa_irq_irqbalance_file": numa_irq_irqbalance_file,
        }
