# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter ``perf_gate``: the stacktune gate as a Jinja filter (documentation in perf_gate.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import (
    DEFAULTS,
    GateSettingError,
    check_settings,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import judge
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def perf_gate(
    before,
    after,
    policy="improve",
    tail_quantile=DEFAULTS["tail_quantile"],
    tail_tolerance=DEFAULTS["tail_tolerance"],
    min_gain=DEFAULTS["min_gain"],
    confidence=DEFAULTS["confidence"],
    final=False,
    seed=None,
    resamples=2000,
    stall_factor=DEFAULTS["stall_factor"],
    stall_tolerance=DEFAULTS["stall_tolerance"],
    looks=1,
):
    """Judge ``after`` against ``before``; returns the gate's decision dict."""
    try:
        return judge(
            plain(before),
            plain(after),
            policy=policy,
            tail_quantile=tail_quantile,
            tail_tolerance=tail_tolerance,
            min_gain=min_gain,
            confidence=confidence,
            final=final,
            seed=seed,
            resamples=resamples,
            stall_factor=stall_factor,
            stall_tolerance=stall_tolerance,
            looks=looks,
        )
    except ValueError as exc:
        raise AnsibleFilterError("perf_gate: %s" % exc) from exc


def gate_settings_check(settings, budget=None, workloads=None):
    """'' when the gate's settings, budget and workload table are valid, else the message naming the variable."""
    try:
        check_settings(plain(settings), plain(budget) if budget is not None else {}, plain(workloads))
    except GateSettingError as exc:
        return str(exc)
    return ""


class FilterModule:
    """stacktune.gpu performance gate filters."""

    def filters(self):
        return {"perf_gate": perf_gate, "gate_settings_check": gate_settings_check}
