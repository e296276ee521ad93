# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's settings, budget and dimensions: one home, with their defaults and ranges.

The playbooks' variables are ``stacktune_gate_<name>``; validate.yml, the filter and the
action plugin check them here, before anything on the host changes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.stacktune.gpu.plugins.module_utils.gate.verdicts import (
    check_unit_interval,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.registry import CPU_WORKLOADS, GPU_WORKLOADS


DIMENSIONS = ("throughput", "p50", "tail", "stalls")
TAIL_DIMENSIONS = ("tail", "stalls")
MIN_BLOCKS_PER_ARM = 2
# One home for the gate's settings: name -> (default, low, high, low_open, high_open, meaning).
# The playbooks' variables are stacktune_gate_<name>; validate.yml and the action plugin check
# them here, before anything on the host changes.
SETTINGS = {
    "tail_quantile": (0.99, 0.5, 1.0, True, True, "tail quantile judged"),
    "tail_tolerance": (0.05, 0.0, 1.0, False, True, "how much slower the tail may get"),
    "min_gain": (0.02, 0.0, 1.0, False, True, "smallest change that counts"),
    "confidence": (0.95, 0.5, 1.0, True, True, "confidence over the whole sequence of looks"),
    "stall_factor": (3.0, 1.0, 100.0, True, False, "a step this many times the median is a stall"),
    "stall_tolerance": (0.005, 0.0, 1.0, False, True, "rise of the share of stalled steps tolerated"),
}
# The default of every setting, as the signatures of the gate's entry points take it.
DEFAULTS = {name: spec[0] for name, spec in SETTINGS.items()}
BUDGET = {
    "min_blocks": (4, 2, 50, "blocks per arm before the first look"),
    "max_blocks": (8, 2, 200, "blocks per arm at most"),
    "max_seconds": (1800, 1, 86400, "seconds of measuring per layer at most"),
    # a live trial (one running workload, the layer switched between windows of its steps)
    "window_s": (3, 1, 600, "seconds per window of a live trial"),
    "max_windows": (20, 2, 1000, "windows per arm at most in a live trial"),
}


class GateSettingError(ValueError):
    """A gate setting or budget is out of range; the message names the variable."""


def _budget_value(name, value, low, high):
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise GateSettingError("%s must be an integer in %d..%d, got %r" % (name, low, high, value))
    return value


def _number_value(name, value, low, high, low_open, high_open):
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise GateSettingError("%s must be a number, got %r" % (name, value)) from None
    try:
        return check_unit_interval(name, value, low, high, low_open, high_open)
    except ValueError as exc:
        raise GateSettingError(str(exc)) from None


WORSE_RULES = ("significance", "whole_interval")


def judged_by(settings):
    """The gate's settings out of a checked settings dict (which may hold the budget too), as
    keyword arguments of ``judge_blocks``."""
    return {name: settings[name] for name in SETTINGS}


def gate_settings(given, caller):
    """The gate's settings as an entry point takes them (keyword arguments named as in
    :data:`SETTINGS`): :data:`DEFAULTS` for those not given, each checked against its range
    (ValueError naming it). An unknown name is a TypeError, as for any keyword argument."""
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise TypeError("%s() got an unexpected keyword argument %r" % (caller, unknown[0]))
    merged = dict(DEFAULTS)
    merged.update(given)
    return check_settings(merged, prefix="")


def check_settings(
    settings,
    budget=None,
    workloads=None,
    prefix="stacktune_gate_",
    budget_name="stacktune_gate_budget",
    workloads_name="stacktune_gate_workloads",
):
    """Validate the gate's settings, its budget and its workload table; fill in defaults.

    ``settings``: keys of ``SETTINGS`` (and, when ``budget`` is None, of ``BUDGET`` too, as
    the gate_layer action takes them). ``budget``: keys of ``BUDGET``. ``workloads``: the
    layer -> workload list table. Returns one flat dict; raises GateSettingError naming the
    variable (``<prefix><key>``, ``<budget_name>.<key>``, ``<workloads_name>.<layer>``).
    """
    settings = dict(settings or {})
    if budget is None:
        budget = {k: settings.pop(k) for k in list(settings) if k in BUDGET}
        budget_label = prefix
    else:
        budget_label = budget_name + "."
        if not hasattr(budget, "items"):
            raise GateSettingError("%s must be a dict of %s" % (budget_name, ", ".join(BUDGET)))
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise GateSettingError("unknown gate setting(s): %s" % ", ".join(prefix + k for k in unknown))
    unknown = sorted(set(budget) - set(BUDGET))
    if unknown:
        raise GateSettingError(
            "%s: unknown key(s) %s (known: %s)" % (budget_name, ", ".join(unknown), ", ".join(BUDGET))
        )
    out = {}
    for key, (default, low, high, low_open, high_open, _meaning) in SETTINGS.items():
        value = settings.get(key)
        out[key] = _number_value(prefix + key, default if value is None else value, low, high, low_open, high_open)
    for key, (default, low, high, _meaning) in BUDGET.items():
        value = budget.get(key)
        out[key] = _budget_value(budget_label + key, default if value is None else value, low, high)
    for most in ("max_blocks", "max_windows"):
        if out[most] < out["min_blocks"]:
            raise GateSettingError(
                "%s%s (%d) must be at least %smin_blocks (%d)"
                % (budget_label, most, out[most], budget_label, out["min_blocks"])
            )
    if workloads is not None:
        if not hasattr(workloads, "items"):
            raise GateSettingError("%s must be a dict: layer -> list of workloads" % workloads_name)
        known = set(GPU_WORKLOADS) | set(CPU_WORKLOADS) | {"auto"}
        for layer, names in workloads.items():
            if isinstance(names, str) or not isinstance(names, (list, tuple)):
                raise GateSettingError("%s.%s must be a list of workloads, got %r" % (workloads_name, layer, names))
            bad = [n for n in names if n not in known]
            if bad:
                raise GateSettingError(
                    "%s.%s: unknown workload(s) %s (known: %s)"
                    % (workloads_name, layer, ", ".join(map(str, bad)), ", ".join(sorted(known)))
                )
    return out


def live_settings(settings):
    """The settings of a live trial: its windows are its blocks, ``max_windows`` per arm at most."""
    return dict(settings, max_blocks=settings["max_windows"])


def planned_looks(min_blocks, max_blocks):
    """Looks of the sequential design: at min_blocks per arm, then every 2 more (one A B B A quad)."""
    return 1 + max(0, (max_blocks - min_blocks + 1) // 2)


def look_confidence(confidence, looks):
    """Per-look confidence that keeps the whole sequence at ``confidence`` (Bonferroni)."""
    return 1.0 - (1.0 - confidence) / looks
