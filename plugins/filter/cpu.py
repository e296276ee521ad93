# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cpu layer's engine settings (documented in cpu_settings.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain

# The kernel arguments that cap the C-state, for intel_idle and for the ACPI processor driver.
MAX_CSTATE_ARGS = ("intel_idle.max_cstate", "processor.max_cstate")


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
    out = [
        dict(row, kind="sysfs", missing="unsupported", value=str(row["value"]))
        for row in sysfs
        if row.get("value") is not None
    ]
    if idle_max_latency_us is not None:
        states = plain(idle_states) or []
        keys = [] if states else [cpu_root + "/cpu*/cpuidle/state*/disable"]
        limit = int(idle_max_latency_us)
        keys += [
            "%s/cpu*/cpuidle/%s/disable" % (cpu_root, st.get("state"))
            for st in states
            if st.get("latency_us") is not None and st["latency_us"] > limit
        ]
        out += [
            {
                "kind": "sysfs",
                "key": key,
                "value": "1",
                "missing": "unsupported",
                "reason": idle_reason,
                "var": "cpu_idle_max_latency_us",
            }
            for key in keys
        ]
    if max_cstate is not None:
        out += [
            {"kind": "kernel_arg", "key": arg, "value": str(max_cstate), "var": "cpu_max_cstate"}
            for arg in MAX_CSTATE_ARGS
        ]
    return out


class FilterModule:
    """stacktune.gpu cpu filters."""

    def filters(self):
        return {"cpu_settings": cpu_settings}
