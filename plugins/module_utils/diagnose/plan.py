# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The diagnosis inside a tune run: which program to diagnose (the one the gate measures), and
per layer what the diagnosis expects of it and how its trial is ordered and sized (never
skipped). The roles call these through the ``diagnose_target`` and ``diagnose_layers`` filters.
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


# Layers whose settings a program reads when it starts, and what the diagnosis must see of the
# program for them to matter: {layer: (key of the diagnosis's ``uses``, what it is)}.
READ_AT_START = {"nccl": ("nccl", "NCCL collectives")}


def not_used_words(diagnosis, layer):
    """Why the diagnosed program cannot see a layer it reads only when it starts ('' when it
    may: the diagnosis saw it use what the layer sets, or could not tell)."""
    if layer not in READ_AT_START or not isinstance(diagnosis, dict):
        return ""
    key, what = READ_AT_START[layer]
    uses = ((diagnosis.get("profile") or {}).get("uses") or {}).get(key) or {}
    if uses.get("used") is not False:
        return ""
    return "the program does not use %s (%s)" % (what, uses.get("why") or "not seen in its processes")


def layer_plan(layer_workloads, diagnosis, target, bench_workload, size=True, measurable=None, keep_harmless=True):
    """Per layer ``{"expected", "why", "workloads", "policy", "size", "not_used", "reason"}``.

    The diagnosis orders and sizes the trials; it never replaces one (a change a running program
    sees stays only after a trial says keep: engine/keeping.py).

    ``layer_workloads``: ``{layer: candidate workloads}`` (the layer_workloads filter).
    ``expected``: can, cannot, not judged (the verdict says nothing of the layer) or not
    diagnosed. A layer the diagnosis says cannot move its program gets a check, not a search for
    a gain: ``policy`` ``no_regression`` (``improve`` when ``keep_harmless`` is false: a layer
    that does not measurably help is put back) and ``size`` ``check`` (one look at the first
    blocks or windows, which bounds the tail and the stalls), measured on the diagnosed program
    (alone, where it is one of the layer's built-in candidates: the others are stand-ins for
    programs the diagnosis did not see). ``policy`` None and ``size`` ``full`` leave the layer's
    own policy and budget; ``size`` false (stacktune_diagnose_size_trials) does so for every
    layer. ``not_used``: the words for a layer the program reads only when it starts and does
    not use (nccl on a one-GPU program), which no trial on it can measure."""
    out = {}
    target = target or {}
    program = target.get("workload") or ("command" if target.get("command") else None)
    # the gate measures the diagnosed program itself: the user's command, or one built-in
    # workload for every layer (stacktune_bench_workload), or the layer's own candidate
    override = bench_workload not in (None, "", "auto")
    for layer, candidates in (layer_workloads or {}).items():
        expected, why = _expected(diagnosis, layer)
        row = {
            "expected": expected,
            "why": why,
            "workloads": list(candidates),
            "policy": None,
            "size": "full",
            "not_used": "",
            "reason": "",
        }
        out[layer] = row
        if program is None:
            continue
        on_program = (
            (program == bench_workload or (program == "command" and bench_workload == "command"))
            if override
            else (program in candidates and (measurable is None or measurable([program])))
        )
        if not on_program:
            continue
        row["not_used"] = not_used_words(diagnosis, layer)
        if expected != "cannot" or not size:
            continue
        others = [w for w in candidates if w != program] if not override else []
        row.update(
            policy="no_regression" if keep_harmless else "improve",
            size="check",
            workloads=[program] if not override else row["workloads"],
        )
        row["reason"] = (
            "checked on %s%s: the diagnosis (%s) says this layer cannot move the program (%s), so it is %s"
            % (
                "your program" if program == "command" else program,
                " alone" if others else "",
                diagnosis.get("title") or diagnosis["verdict"],
                why,
                "kept only if a short trial shows no harm"
                if keep_harmless
                else "kept only if a short trial shows a gain (stacktune_diagnose_keep_harmless=false)",
            )
        )
    return out


def layer_order(layers, plan):
    """``layers`` (stacktune_layers) in the order the trials take them: the ones the diagnosis says
    can move the program first, the others after them, each group in the order given; the audit
    layers that change nothing a trial measures (bios, driver) stay where they are, at the head."""
    plan = plan or {}
    audits = [name for name in layers if name in ("bios", "driver")]

    def key(name):
        short = str(name).rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[-1]
        return 0 if (plan.get(short) or {}).get("expected") == "can" else 1

    return audits + sorted((name for name in layers if name not in audits), key=key)
