# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's settings and its budget: two tables, the one home of each.

:data:`SETTINGS` is the table of the gate's settings (how it judges: name, type, default,
bounds, meaning); :data:`BUDGET` is the table of the budget's keys (how long it measures: the
playbooks' ``stacktune_gate_budget``). Everything else is derived from them: the checks here
(validate.yml through the gate_settings_check filter, the gate_layer action, the perf_gate
filter and the gate's entry points ``judge``/``judge_blocks``), the doc fragment
``stacktune.gpu.gate_settings`` (plugins/doc_fragments/gate_settings.py) and the settings the
role hands on (the ``stacktune.gpu.gate_settings`` lookup). The role's defaults and argument
spec are static YAML; a unit test holds them to these tables.

The two are never merged: a checked gate is a :class:`Gate` pair, ``settings`` and ``budget``,
and an error about a budget key names ``stacktune_gate_budget.<key>`` wherever it was given.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.verdicts import (
    check_unit_interval,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.registry import CPU_WORKLOADS, GPU_WORKLOADS


DIMENSIONS = ("throughput", "p50", "tail", "stalls")
TAIL_DIMENSIONS = ("tail", "stalls")
MIN_BLOCKS_PER_ARM = 2

# One row of SETTINGS. ``type``: float or int (what the docs and the role's argument spec say);
# ``low``/``high`` the range, open at an end where ``low_open``/``high_open``; ``meaning``: the
# option's description (the docs add the range).
Setting = namedtuple("Setting", "type default low high low_open high_open meaning")
# One row of BUDGET: an integer in low..high.
BudgetKey = namedtuple("BudgetKey", "type default low high meaning")

# THE table of the gate's settings. A new setting is a row here, used by name where the gate
# judges (blocks.py, steps.py: their ``**settings``), and the role variable
# stacktune_gate_<name> in roles/stacktune/defaults/main.yml and meta/argument_specs.yml.
SETTINGS = {
    "tail_quantile": Setting(
        "float",
        0.99,
        0.5,
        1.0,
        True,
        True,
        "The tail quantile judged; the deciding tail statistic of a block is the mean of its slowest"
        " 1 - tail_quantile share of steps.",
    ),
    "tail_tolerance": Setting(
        "float",
        0.05,
        0.0,
        1.0,
        False,
        True,
        "How much slower (as a fraction) the tail may get before it is a regression (0.05 = 5%).",
    ),
    "min_gain": Setting(
        "float",
        0.02,
        0.0,
        1.0,
        False,
        True,
        "Smallest throughput or median change (as a fraction) that counts; also the tolerance for"
        " throughput and median regressions.",
    ),
    "confidence": Setting(
        "float",
        0.95,
        0.5,
        1.0,
        True,
        True,
        "Confidence over the whole sequence of looks at one layer (each interval's with a single look).",
    ),
    "stall_factor": Setting(
        "float",
        3.0,
        1.0,
        100.0,
        True,
        False,
        "Blocks only. A step slower than this many times the median step before is a stall.",
    ),
    "stall_tolerance": Setting(
        "float",
        0.005,
        0.0,
        1.0,
        False,
        True,
        "Blocks only. Rise of the share of stalled steps tolerated (0.005 = half a percentage point).",
    ),
    "max_slowdown": Setting(
        "float",
        0.05,
        0.0,
        1.0,
        False,
        True,
        "Searches with objective efficiency only. How much lower (as a fraction) the throughput may be than"
        " with the host's own value for a candidate that spends less energy per step (0.05 = 5%).",
    ),
}
# The default of every setting, as the signatures of the gate's entry points take it.
DEFAULTS = {name: row.default for name, row in SETTINGS.items()}

# THE table of the budget (stacktune_gate_budget): how long the gate measures, not how it judges.
BUDGET = {
    "min_blocks": BudgetKey("int", 4, 2, 50, "Blocks per arm before the first look."),
    "max_blocks": BudgetKey("int", 8, 2, 200, "Blocks per arm at most."),
    "max_seconds": BudgetKey("int", 1800, 1, 86400, "Seconds of measuring per layer at most."),
    # a live trial (one running workload, the layer switched between windows of its steps)
    "window_s": BudgetKey("int", 3, 1, 600, "Seconds per window of a live trial."),
    "max_windows": BudgetKey("int", 20, 2, 1000, "Windows per arm at most in a live trial."),
}
BUDGET_DEFAULTS = {name: row.default for name, row in BUDGET.items()}
# Budgets by name: ``stacktune_gate_budget: {preset: NAME}`` (keys given beside it come first).
# small_changes: a 5% gain of a DataLoader-bound program kept in 99 of 100 replayed live trials
# (2.1 minutes of windows on the median trial, 4.9 at most; 79 with the default budget):
# python3 benchmarks/gate_replay.py --live (docs/benchmarks.md).
BUDGET_PRESETS = {
    "default": dict(BUDGET_DEFAULTS),
    "small_changes": dict(BUDGET_DEFAULTS, max_blocks=16, max_windows=40),
}
PRESET_KEY = "preset"
SETTING_PREFIX = "stacktune_gate_"
BUDGET_NAME = "stacktune_gate_budget"
WORKLOADS_NAME = "stacktune_gate_workloads"

# A checked gate: its settings and its budget, each a dict of its own table's keys.
Gate = namedtuple("Gate", "settings budget")


class GateSettingError(ValueError):
    """A gate setting or budget is out of range; the message names the variable."""


def bounds_text(row):
    """The range of a row as the docs say it: ``(0.5, 1)``, ``[0, 1)``, ``2..50``."""
    if row.type == "int" and not getattr(row, "low_open", False) and not getattr(row, "high_open", False):
        return "%d..%d" % (row.low, row.high)
    return "%s%g, %g%s" % ("(" if row.low_open else "[", row.low, row.high, ")" if row.high_open else "]")


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


def _setting_value(name, row, value):
    if row.type == "int":
        value = _budget_value(name, value, row.low, row.high)
        # an int setting keeps its range's open ends too
        _number_value(name, value, row.low, row.high, row.low_open, row.high_open)
        return value
    return _number_value(name, value, row.low, row.high, row.low_open, row.high_open)


WORSE_RULES = ("significance", "whole_interval")


def _budget_key_given_as_setting(keys, budget_name):
    """Budget keys given among the settings: an error naming each as the budget's key."""
    misplaced = sorted(k for k in keys if k in BUDGET)
    if misplaced:
        raise GateSettingError(
            "%s: part of the budget, not a gate setting: give %s"
            % (", ".join(misplaced), ", ".join("%s.%s" % (budget_name, k) for k in misplaced))
        )


def gate_settings(given, caller):
    """The gate's settings as an entry point takes them (keyword arguments named as in
    :data:`SETTINGS`): :data:`DEFAULTS` for those not given, each checked against its range
    (ValueError naming it). An unknown name is a TypeError, as for any keyword argument."""
    _budget_key_given_as_setting(given, BUDGET_NAME)
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise TypeError("%s() got an unexpected keyword argument %r" % (caller, unknown[0]))
    return _checked_settings(given, prefix="")


def _checked_settings(settings, prefix, budget_name=BUDGET_NAME):
    if not hasattr(settings, "items"):
        raise GateSettingError("the gate's settings must be a dict of %s" % ", ".join(SETTINGS))
    _budget_key_given_as_setting(settings, budget_name)
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise GateSettingError("unknown gate setting(s): %s" % ", ".join(prefix + k for k in unknown))
    out = {}
    for key, row in SETTINGS.items():
        value = settings.get(key)
        out[key] = _setting_value(prefix + key, row, row.default if value is None else value)
    return out


def check_budget(budget, budget_name=BUDGET_NAME):
    """The budget (keys of :data:`BUDGET`), checked, with the defaults of those not given;
    errors name ``<budget_name>.<key>``."""
    budget = {} if budget is None else budget
    if not hasattr(budget, "items"):
        raise GateSettingError("%s must be a dict of %s" % (budget_name, ", ".join(BUDGET)))
    if PRESET_KEY in budget:
        name = budget[PRESET_KEY]
        if not isinstance(name, str) or name not in BUDGET_PRESETS:
            raise GateSettingError(
                "%s.%s must be one of %s, got %r" % (budget_name, PRESET_KEY, ", ".join(sorted(BUDGET_PRESETS)), name)
            )
        given = {k: v for k, v in budget.items() if k != PRESET_KEY}
        budget = dict(BUDGET_PRESETS[name], **given)
    unknown = sorted(set(budget) - set(BUDGET))
    if unknown:
        raise GateSettingError(
            "%s: unknown key(s) %s (known: %s, or %s: one of %s)"
            % (budget_name, ", ".join(unknown), ", ".join(BUDGET), PRESET_KEY, ", ".join(sorted(BUDGET_PRESETS)))
        )
    out = {}
    for key, row in BUDGET.items():
        value = budget.get(key)
        out[key] = _budget_value(
            "%s.%s" % (budget_name, key), row.default if value is None else value, row.low, row.high
        )
    for most in ("max_blocks", "max_windows"):
        if out[most] < out["min_blocks"]:
            raise GateSettingError(
                "%s.%s (%d) must be at least %s.min_blocks (%d)"
                % (budget_name, most, out[most], budget_name, out["min_blocks"])
            )
    return out


def check_workloads(workloads, workloads_name=WORKLOADS_NAME):
    """The layer -> workload list table: every name a built-in workload (or auto)."""
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
    return workloads


def check_settings(
    settings=None,
    budget=None,
    workloads=None,
    prefix=SETTING_PREFIX,
    budget_name=BUDGET_NAME,
    workloads_name=WORKLOADS_NAME,
):
    """Validate the gate's settings, its budget and its workload table; fill in defaults.

    ``settings``: keys of :data:`SETTINGS` only (a key of the budget there is an error naming
    ``<budget_name>.<key>``). ``budget``: keys of :data:`BUDGET` (None: the defaults).
    ``workloads``: the layer -> workload list table (None: not checked). Returns a
    :class:`Gate` (``settings``, ``budget``); raises GateSettingError naming the variable
    (``<prefix><key>``, ``<budget_name>.<key>``, ``<workloads_name>.<layer>``).
    """
    gate = Gate(_checked_settings(settings or {}, prefix, budget_name), check_budget(budget, budget_name))
    if workloads is not None:
        check_workloads(workloads, workloads_name)
    return gate


def live_gate(gate):
    """The gate of a live trial: its windows are its blocks, ``max_windows`` per arm at most."""
    return Gate(gate.settings, dict(gate.budget, max_blocks=gate.budget["max_windows"]))


def planned_looks(min_blocks, max_blocks):
    """Looks of the sequential design: at min_blocks per arm, then every 2 more (one A B B A quad)."""
    return 1 + max(0, (max_blocks - min_blocks + 1) // 2)


def look_confidence(confidence, looks):
    """Per-look confidence that keeps the whole sequence at ``confidence`` (Bonferroni)."""
    return 1.0 - (1.0 - confidence) / looks
