# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cpu layer: the governor, energy preferences and platform profile through sysfs, idle
states above a latency limit disabled, and the C-state cap as boot arguments."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.layers.shared import LayerError


NAME = "cpu"

# Value rules of the layer's variables (policy/varspec.py RULES): values written into a line of a file
RULES = {
    "cpu_governor": {"line": "the layer's tmpfiles.d drop-in"},
    "cpu_epp": {"line": "the layer's tmpfiles.d drop-in"},
    "cpu_energy_perf_bias": {"line": "the layer's tmpfiles.d drop-in"},
    "cpu_platform_profile": {"line": "the layer's tmpfiles.d drop-in"},
}

SEARCHABLE = {}

# The kernel arguments that cap the C-state, for intel_idle and for the ACPI processor driver.
MAX_CSTATE_ARGS = ("intel_idle.max_cstate", "processor.max_cstate")


def settings(
    sysfs,
    idle_states=None,
    idle_max_latency_us=None,
    max_cstate=None,
    idle_reason=None,
    cpu_root="/sys/devices/system/cpu",
):
    """Settings from the cpu layer's sysfs rows (``{var, key, value, ...}``; a null value is left
    out), its idle-latency limit (every idle state above it disabled; all of them where the facts
    list none) and its C-state cap (boot arguments).

    The layer's settings: the filter cpu_settings, or layer_settings('cpu')."""
    if not isinstance(sysfs, list) or not all(isinstance(row, dict) and "var" in row for row in sysfs):
        raise LayerError("cpu_settings expects a list of sysfs rows, each with var, key and value")
    out = [
        dict(row, kind="sysfs", missing="unsupported", value=str(row["value"]))
        for row in sysfs
        if row.get("value") is not None
    ]
    if idle_max_latency_us is not None:
        states = idle_states or []
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
