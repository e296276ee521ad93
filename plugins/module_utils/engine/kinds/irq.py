# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kind ``irq_affinity``: /proc/irq/N/smp_affinity_list, persisted as a tmpfiles ``w`` line.

A setting names one interrupt (``key: 42``) or a PCI device (``device: 0000:3b:00.0``),
which expands to every interrupt of the device (its MSI/MSI-X vectors, else its legacy
line). IRQ numbers can change across reboots; drift runs re-resolve devices.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.cpulist import canonical_cpulist
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import read_text
from ansible_collections.stacktune.gpu.plugins.module_utils.engine import writers
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Kind, SpecError, exists, setting
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.sysfs import TmpfilesUnit
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import PCI_ADDRESS


def device_irqs(ctx, address):
    """Interrupt numbers of a PCI device from sysfs (MSI vectors, else the legacy line)."""
    base = ctx.path("/sys/bus/pci/devices/%s" % address)
    msi = os.path.join(base, "msi_irqs")
    if os.path.isdir(msi):
        irqs = sorted(int(n) for n in os.listdir(msi) if n.isdigit())
        if irqs:
            return irqs
    legacy = (read_text(os.path.join(base, "irq")) or "").strip()
    return [int(legacy)] if legacy.isdigit() and int(legacy) > 0 else []


class IrqAffinityKind(TmpfilesUnit, Kind):
    name = "irq_affinity"
    # the next interrupt of the vector lands on the new CPUs
    running = True

    def expand(self, spec, ctx):
        value = spec.get("value")
        if value in (None, ""):
            raise SpecError("irq_affinity needs 'value', a CPU list such as 0-15")
        try:
            cpus = canonical_cpulist(str(value))
        except ValueError as exc:
            raise SpecError("irq_affinity value: %s" % exc) from None
        if not cpus:
            raise SpecError("irq_affinity value must name at least one CPU")
        device = spec.get("device")
        if device:
            device = str(device).lower()
            if not PCI_ADDRESS.match(device) or device != device.strip():
                raise SpecError("irq_affinity device %r is not a PCI address like 0000:3b:00.0" % device)
            if not exists(ctx, "/sys/bus/pci/devices/%s" % device):
                raise SpecError("irq_affinity device %s is not present on this host" % device)
            irqs = device_irqs(ctx, device)
        else:
            key = str(spec.get("key", ""))
            if not (key.isdigit() and key.isascii()):
                raise SpecError("irq_affinity needs 'device' (PCI address) or 'key' (an IRQ number), got %r" % key)
            irqs = [int(key)]
        out = []
        for irq in irqs:
            path = "/proc/irq/%d/smp_affinity_list" % irq
            if not exists(ctx, path):
                raise SpecError("irq_affinity: IRQ %d does not exist on this host" % irq)
            out.append(setting(self.name, str(irq), cpus, path=path, device=device))
        return out

    def live_path(self, s, ctx):
        return ctx.path(s["path"])

    def parse_live(self, text):
        return canonical_cpulist(text)

    def same(self, a, b):
        if a is None or b is None:
            return a is b
        return canonical_cpulist(a) == canonical_cpulist(b)

    def other_writers(self, settings, ctx):
        note = writers.irqbalance(ctx, [s["key"] for s in settings])
        if not note:
            return []
        # the IRQs it is banned from are not its to move
        free = set(writers.unbanned_irqs(ctx, [s["key"] for s in settings]))
        return [{"tool": "irqbalance", "message": note, "ids": [s["id"] for s in settings if s["key"] in free]}]
