# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cpu layer's engine settings (documented in cpu_settings.yml); they are
module_utils/policy/layers.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.policy import layers
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def cpu_settings(
    sysfs,
    idle_states=None,
    idle_max_latency_us=None,
    max_cstate=None,
    idle_reason=None,
    cpu_root="/sys/devices/system/cpu",
):
    """Engine settings from the cpu layer's sysfs rows, its idle-latency limit and its C-state cap."""
    sysfs = plain(sysfs)
    if not isinstance(sysfs, list) or not all(isinstance(row, dict) and "var" in row for row in sysfs):
        raise AnsibleFilterError("cpu_settings expects a list of sysfs rows, each with var, key and value")
    return layers.cpu_settings(sysfs, plain(idle_states), idle_max_latency_us, max_cstate, idle_reason, cpu_root)


class FilterModule:
    """stacktune.gpu cpu filters."""

    def filters(self):
        return {"cpu_settings": cpu_settings}
