# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The diagnosis inside a tune run: which program to diagnose (the one the gate measures), and
per layer what the diagnosis expects of it and whether its measurement on that program is
skipped. The roles call these through the ``diagnose_target`` and ``diagnose_layers`` filters.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.advice import MOVES
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.registry import (
    GPU_WORKLOADS,
    LIVE_WORKLOADS,
    MIN_GPUS,
)

# the built-in workload diagnosed where nothing else names one: the default layers' first
DEFAULT_CPU = "cpu_train_step"


def choose_target(live_command, bench_workload, diagnose_workload, default_candidates, gpu_count):
    """``{"command": argv}``, ``{"workload": name}`` or ``{"none": why}``: the program to diagnose.

    ``diagnose_workload`` (stacktune_diagnose_workload) wins; then the user's live command
    (stacktune_bench_live_command); a ``command`` workload without one cannot be diagnosed
    (it runs per block); a built-in ``bench_workload`` is itself; ``auto`` takes the first GPU
    workload of ``default_candidates`` (stacktune_gate_workloads.default) that runs live on
    this host, else cpu_train_step."""
    if diagnose_workload:
        return {"workload": diagnose_workload, "variable": "stacktune_diagnose_workload"}
    if live_command:
        return {"command": list(live_command), "variable": "stacktune_bench_live_command"}
    if bench_workload == "command":
        return {
            "none": "stacktune_bench_workload is command and stacktune_bench_live_command is not set: the program "
            "runs per block, and a diagnosis needs it running (set stacktune_bench_live_command, docs/bench.md)"
        }
    if bench_workload not in (None, "", "auto"):
        if bench_workload in LIVE_WORKLOADS:
            return {"workload": bench_workload, "variable": "stacktune_bench_workload"}
        return {
            "none": "stacktune_bench_workload %s does not run live; set stacktune_diagnose_workload" % bench_workload
        }
    gpu_count = int(gpu_count or 0)
    for name in default_candidates or []:
        if name in GPU_WORKLOADS and name in LIVE_WORKLOADS and gpu_count >= MIN_GPUS.get(name, 1):
            return {"workload": name, "variable": "stacktune_diagnose_workload (unset: %s)" % name}
    for name in default_candidates or []:
        if name in LIVE_WORKLOADS and name not in GPU_WORKLOADS:
            return {"workload": name, "variable": "stacktune_diagnose_workload (unset: %s)" % name}
    return {"workload": DEFAULT_CPU, "variable": "stacktune_diagnose_workload (unset: %s)" % DEFAULT_CPU}


def _expected(diagnosis, layer):
    if not diagnosis or not diagnosis.get("verdict"):
        return "not diagnosed", ""
    moves = diagnosis.get("moves") or MOVES.get(diagnosis["verdict"], MOVES["unclear"])
    if layer in (moves.get("can") or {}):
        return "can", moves["can"][layer]
    if layer in (moves.get("cannot") or {}):
        return "cannot", moves["cannot"][layer]
    return "not judged", "the diagnosis (%s) says nothing of this layer" % diagnosis["verdict"]


def layer_plan(layer_workloads, diagnosis, target, bench_workload, skip=True, measurable=None):
    """Per layer ``{"expected", "why", "workloads", "skip", "reason"}``.

    ``layer_workloads``: ``{layer: candidate workloads}`` (the layer_workloads filter).
    ``expected``: can, cannot, not judged (the verdict says nothing of the layer) or not
    diagnosed. A layer the diagnosis says cannot move its program is measured on that program
    alone when it is one of the layer's built-in candidates (``bench_workload`` auto): a trial
    there checks the expectation in the least time (a GPU-bound step resolves a change to about
    half a percent in half a minute), and the other candidates, stand-ins for programs the
    diagnosis did not see, are left out. Where the program is the only one the gate would
    measure (the user's command, or one built-in workload for every layer) such a layer is not
    measured at all (``skip``), as also where the program cannot run here
    (``measurable([program])`` false). ``skip`` false keeps every measurement and only says
    what was expected."""
    out = {}
    program = (target or {}).get("workload") or ("command" if (target or {}).get("command") else None)
    for layer, candidates in (layer_workloads or {}).items():
        expected, why = _expected(diagnosis, layer)
        row = {"expected": expected, "why": why, "workloads": list(candidates), "skip": False, "reason": ""}
        out[layer] = row
        if expected != "cannot" or not skip or program is None:
            continue
        words = "the diagnosis (%s) says this layer cannot move the program: %s; stacktune_diagnose_skip=false " % (
            diagnosis.get("title") or diagnosis["verdict"],
            why,
        )
        if bench_workload not in (None, "", "auto"):
            diagnosed = program == bench_workload or (program == "command" and bench_workload == "command")
            if diagnosed:
                row.update(skip=True, reason="not measured: " + words + "measures it")
            continue
        if program not in candidates:
            continue
        if measurable is not None and not measurable([program]):
            row.update(workloads=[], skip=True, reason="not measured: " + words + "measures it")
            continue
        others = [w for w in candidates if w != program]
        row["workloads"] = [program]
        row["reason"] = "measured on %s alone, to check the expectation: %s%s" % (
            program,
            words,
            "measures it on %s too" % ", ".join(others) if others else "changes nothing here",
        )
    return out
