# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The diagnosis inside a tune run (documented in diagnose_target.yml, diagnose_check.yml and
diagnose_layers.yml): which program to diagnose, whether it can be, and per layer what the
diagnosis expects, how each trial is sized, and the order the layers are tried in."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.plan import choose_target, layer_order, layer_plan
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.report import console_lines
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.run import DiagnoseError, check_options
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.registry import LIVE_WORKLOADS
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import resolve_workloads
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def diagnose_target(live_command, bench_workload="auto", diagnose_workload=None, gate_workloads=None, gpu_count=0):
    """The program to diagnose: ``{"command": argv}``, ``{"workload": name}`` or ``{"none": why}``."""
    live_command = plain(live_command) or []
    if not isinstance(live_command, list):
        raise AnsibleFilterError(
            "diagnose_target expects stacktune_bench_live_command (a list), got %r" % (live_command,)
        )
    gate_workloads = plain(gate_workloads) or {}
    if not isinstance(gate_workloads, dict):
        raise AnsibleFilterError("diagnose_target: gate_workloads must be stacktune_gate_workloads (a dict)")
    return choose_target(
        live_command, bench_workload, diagnose_workload, gate_workloads.get("default") or [], gpu_count
    )


def diagnose_check(target, seconds, warmup_s, first_step_timeout):
    """'' when the diagnosis of ``target`` (the diagnose_target filter's dict) can be made with
    these numbers, else the message naming the variable to fix (the diagnose module's own check,
    made before the tune takes the host)."""
    target = plain(target)
    if not isinstance(target, dict):
        raise AnsibleFilterError("diagnose_check expects the diagnose_target filter's dict, got %r" % (target,))
    if "none" in target:
        return ""  # nothing to diagnose: the report says why
    names = {
        "command": target.get("variable") or "stacktune_bench_live_command",
        "workload": "stacktune_diagnose_workload",
        "seconds": "stacktune_diagnose_seconds",
        "warmup_s": "stacktune_diagnose_warmup",
        "first_step_timeout": "stacktune_diagnose_timeout",
    }
    try:
        check_options(
            target.get("command"),
            target.get("workload"),
            LIVE_WORKLOADS,
            names,
            seconds=seconds,
            warmup_s=warmup_s,
            first_step_timeout=first_step_timeout,
        )
    except DiagnoseError as exc:
        return str(exc)
    return ""


def diagnose_layers(
    layer_workloads,
    diagnosis,
    target=None,
    bench_workload="auto",
    size=True,
    gpu_count=0,
    data_dir=None,
    keep_harmless=True,
):
    """Per layer what the diagnosis expects (can, cannot, not judged, not diagnosed), and how its
    trial is sized: the policy and size of a layer it says cannot move the program, its candidate
    workloads, and what the program does not use. Nothing is skipped."""
    layer_workloads = plain(layer_workloads)
    if not isinstance(layer_workloads, dict):
        raise AnsibleFilterError(
            "diagnose_layers expects the layer_workloads filter's dict, got %r" % (layer_workloads,)
        )
    diagnosis = plain(diagnosis) if hasattr(diagnosis, "keys") else {}

    def measurable(candidates):
        return bool(resolve_workloads(candidates, int(gpu_count or 0), None, data_dir))

    return layer_plan(
        layer_workloads,
        diagnosis,
        plain(target) or {},
        bench_workload,
        bool(size),
        measurable,
        keep_harmless=bool(keep_harmless),
    )


def diagnose_lines(diagnosis):
    """The diagnosis in a few lines for the console: verdict, program, what can move it, advice."""
    diagnosis = plain(diagnosis)
    if not isinstance(diagnosis, dict):
        raise AnsibleFilterError("diagnose_lines expects the diagnosis (stacktune_diagnosis), got %r" % (diagnosis,))
    return console_lines(diagnosis)


def diagnose_order(layers, plan):
    """``stacktune_layers`` in the order their trials run: the audits, then the layers the diagnosis
    says can move the program, then the others."""
    layers = plain(layers)
    if not isinstance(layers, list):
        raise AnsibleFilterError("diagnose_order expects stacktune_layers (a list), got %r" % (layers,))
    plan = plain(plan)
    if not isinstance(plan, dict):
        raise AnsibleFilterError("diagnose_order expects the diagnose_layers filter's dict, got %r" % (plan,))
    return layer_order(layers, plan)


def diagnose_workloads(plan):
    """``{layer: candidate workloads}`` of a diagnose_layers plan (what the gate is given)."""
    plan = plain(plan)
    if not isinstance(plan, dict) or not all(isinstance(v, dict) and "workloads" in v for v in plan.values()):
        raise AnsibleFilterError("diagnose_workloads expects the diagnose_layers filter's dict")
    return {layer: list(row["workloads"]) for layer, row in plan.items()}


class FilterModule:
    """stacktune.gpu diagnosis filters."""

    def filters(self):
        return {
            "diagnose_target": diagnose_target,
            "diagnose_check": diagnose_check,
            "diagnose_layers": diagnose_layers,
            "diagnose_workloads": diagnose_workloads,
            "diagnose_order": diagnose_order,
            "diagnose_lines": diagnose_lines,
        }
