# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The numa_irq layer's device choice, the sysfs reads of their interrupts and the settings
(documented in numa_irq_<filter>.yml beside this file): the layer module
module_utils/layers/numa_irq.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import layer_filter


numa_irq_devices = layer_filter("numa_irq", "devices")
numa_irq_notes = layer_filter("numa_irq", "numa_irq_notes")
numa_irq_settings = layer_filter("numa_irq", "settings")
numa_irq_msi_dirs = layer_filter("numa_irq", "msi_dirs")
numa_irq_legacy_devices = layer_filter("numa_irq", "legacy_devices")
numa_irq_irqs = layer_filter("numa_irq", "irqs")
numa_irq_irqbalance_file = layer_filter("numa_irq", "irqbalance_file")


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
