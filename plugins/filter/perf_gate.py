# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter ``perf_gate``: the stacktune gate as a Jinja filter (documentation in perf_gate.yml);
``runner_workloads``: what a tune run's block runner is started for (runner_workloads.yml).

The gate's settings are not spelled out here: the filter takes them by name, as keyword
arguments checked against the one table of them (``module_utils/gate/settings.py``
``SETTINGS``), and its documentation takes their options from the doc fragment
``stacktune.gpu.gate_settings``, made from the same table.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import (
    BUDGET,
    SETTINGS,
    GateSettingError,
    check_settings,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import judge
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial_loop import TrialError, runner_names
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.program import runner_preload
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain

# The documented positional order after ``policy`` (perf_gate.yml's ``positional``), kept as
# it was released; settings added later are taken by name only.
POSITIONAL = ("tail_quantile", "tail_tolerance", "min_gain", "confidence", "final")


def perf_gate(
    before, after, policy="improve", *positional, final=False, seed=None, resamples=2000, looks=1, **settings
):
    """Judge ``after`` against ``before``; returns the gate's decision dict.

    ``settings``: the gate's settings by name (``SETTINGS``), the defaults for those not given.
    ``positional``: the arguments after ``policy`` in :data:`POSITIONAL`'s order."""
    if len(positional) > len(POSITIONAL):
        raise AnsibleFilterError(
            "perf_gate: at most %d arguments after policy (%s), got %d"
            % (len(POSITIONAL), ", ".join(POSITIONAL), len(positional))
        )
    by_position = dict(zip(POSITIONAL, positional))
    if "final" in by_position:
        final = by_position.pop("final")
    for name, value in by_position.items():
        if name in settings:
            raise AnsibleFilterError("perf_gate: %s given twice (by position and by name)" % name)
        settings[name] = value
    # a key of the budget goes on to the gate, whose error names it stacktune_gate_budget.<key>
    unknown = sorted(set(settings) - set(SETTINGS) - set(BUDGET))
    if unknown:
        raise AnsibleFilterError(
            "perf_gate: unknown argument(s) %s (the gate's settings: %s)" % (", ".join(unknown), ", ".join(SETTINGS))
        )
    try:
        return judge(
            plain(before),
            plain(after),
            policy=policy,
            final=final,
            seed=seed,
            resamples=resamples,
            looks=looks,
            **settings,
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


def runner_workloads(layer_workloads, gpu_count=0, bench_workload="auto", data_dir=None, importing=False):
    """The workloads the run's block runner is started for (what it imports): every layer's of
    ``layer_workloads`` resolved for this host as the gate resolves them. ``importing``: none
    where the runner would import nothing for them (its start then costs nothing to hide)."""
    try:
        names = runner_names(plain(layer_workloads), int(gpu_count or 0), bench_workload, data_dir)
    except TrialError as exc:
        raise AnsibleFilterError("runner_workloads: %s" % exc) from None
    return names if not importing or runner_preload(names) else []


class FilterModule:
    """stacktune.gpu performance gate filters."""

    def filters(self):
        return {
            "perf_gate": perf_gate,
            "gate_settings_check": gate_settings_check,
            "runner_workloads": runner_workloads,
        }
