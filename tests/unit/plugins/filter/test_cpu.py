# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cpu_settings filter."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import cpu as filters

SYS = "/sys/devices/system/cpu"
ROWS = [
    {"var": "cpu_governor", "key": SYS + "/cpufreq/policy*/scaling_governor", "value": "performance",
     "choices_from": "scaling_available_governors", "reason": "no cpufreq"},
    {"var": "cpu_epp", "key": SYS + "/cpufreq/policy*/energy_performance_preference", "value": None,
     "reason": "no epp"},
    {"var": "cpu_min_perf_pct", "key": SYS + "/intel_pstate/min_perf_pct", "value": 100, "reason": "no pstate"},
]  # fmt: skip


def test_registered():
    assert filters.FilterModule().filters() == {"cpu_settings": filters.cpu_settings}


def test_rows_with_a_value():
    assert filters.cpu_settings(ROWS) == [
        {"var": "cpu_governor", "key": SYS + "/cpufreq/policy*/scaling_governor", "value": "performance",
         "choices_from": "scaling_available_governors", "reason": "no cpufreq", "kind": "sysfs",
         "missing": "unsupported"},
        {"var": "cpu_min_perf_pct", "key": SYS + "/intel_pstate/min_perf_pct", "value": "100", "reason": "no pstate",
         "kind": "sysfs", "missing": "unsupported"},
    ]  # fmt: skip


def test_idle_states_above_the_limit():
    states = [
        {"state": "state0", "latency_us": 0},
        {"state": "state2", "latency_us": 20},
        {"state": "state3", "latency_us": None},
    ]
    got = filters.cpu_settings([], idle_states=states, idle_max_latency_us="10", idle_reason="no idle states")
    assert got == [
        {"kind": "sysfs", "key": SYS + "/cpu*/cpuidle/state2/disable", "value": "1", "missing": "unsupported",
         "reason": "no idle states", "var": "cpu_idle_max_latency_us"},
    ]  # fmt: skip


def test_no_idle_states_is_one_unsupported_setting():
    (got,) = filters.cpu_settings([], idle_states=[], idle_max_latency_us=0, idle_reason="none here")
    assert got["key"] == SYS + "/cpu*/cpuidle/state*/disable" and got["reason"] == "none here"
    assert filters.cpu_settings([], idle_states=[]) == []


def test_max_cstate():
    assert filters.cpu_settings([], max_cstate=1) == [
        {"kind": "kernel_arg", "key": "intel_idle.max_cstate", "value": "1", "var": "cpu_max_cstate"},
        {"kind": "kernel_arg", "key": "processor.max_cstate", "value": "1", "var": "cpu_max_cstate"},
    ]


@pytest.mark.parametrize("rows", [None, {"var": "x"}, [{"key": "k"}]])
def test_bad_input(rows):
    with pytest.raises(AnsibleFilterError, match="sysfs rows"):
        filters.cpu_settings(rows)
