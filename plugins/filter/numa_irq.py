# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The numa_irq layer's device choice, the sysfs reads of their interrupts and the settings
(documented in numa_irq_<filter>.yml beside this file): the layer module
module_utils/layers/numa_irq.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import call_layer


def numa_irq_devices(facts, gpus=True, nics=None, nic_filter="rdma", cpus_override=None):
    """The devices whose interrupts follow their NUMA node, each with ``skip`` (why not, or None)."""
    return call_layer("numa_irq", "devices", facts, gpus, nics, nic_filter, cpus_override)


def numa_irq_notes(devices):
    """One line per device left alone: ``gpu0 (0000:17:00.0) not pinned: why``."""
    return call_layer("numa_irq", "numa_irq_notes", devices)


def numa_irq_settings(devices, irqbalance="ban", irqbalance_file=None, irqs=None, irqbalance_args=""):
    """Engine settings: the affinity of every pinned device, and irqbalance's ban list when asked."""
    return call_layer("numa_irq", "settings", devices, irqbalance, irqbalance_file, irqs, irqbalance_args)


def numa_irq_msi_dirs(devices):
    """The sysfs msi_irqs folder of every pinned device."""
    return call_layer("numa_irq", "msi_dirs", devices)


def numa_irq_legacy_devices(devices, msi=None):
    """The pinned devices without MSI interrupts (``msi``: the find result of numa_irq_msi_dirs)."""
    return call_layer("numa_irq", "legacy_devices", devices, msi)


def numa_irq_irqs(msi, legacy=None):
    """The interrupt numbers of the pinned devices, sorted, each once."""
    return call_layer("numa_irq", "irqs", msi, legacy)


def numa_irq_irqbalance_file(stat):
    """The first irqbalance defaults file that exists, or None."""
    return call_layer("numa_irq", "irqbalance_file", stat)


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
