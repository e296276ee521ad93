# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cpu layer's engine settings (documented in cpu_settings.yml): the layer module
module_utils/layers/cpu.py's ``settings``, as layer_settings('cpu') gives them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import call_layer


def cpu_settings(
    sysfs,
    idle_states=None,
    idle_max_latency_us=None,
    max_cstate=None,
    idle_reason=None,
    cpu_root="/sys/devices/system/cpu",
):
    """Engine settings from the cpu layer's sysfs rows, its idle-latency limit and its C-state cap."""
    return call_layer("cpu", "settings", sysfs, idle_states, idle_max_latency_us, max_cstate, idle_reason, cpu_root)


class FilterModule:
    """stacktune.gpu cpu filters."""

    def filters(self):
        return {"cpu_settings": cpu_settings}
