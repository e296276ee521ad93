# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The diagnosis inside a tune: the program chosen, what each layer is expected to do, how each
trial is ordered and sized (never skipped); the report's section and the filters the role calls."""

from __future__ import absolute_import, division, print_function

import json
import os

from ansible_collections.stacktune.gpu.plugins.filter.diagnose import (
    diagnose_check,
    diagnose_layers,
    diagnose_order,
    diagnose_target,
    diagnose_workloads,
)
from ansible_collections.stacktune.gpu.plugins.filter.run_report import report_markdown
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.plan import choose_target, layer_order, layer_plan
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.profile import uses_figures
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.snapshot import uses_of
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.report import markdown
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.run import assemble
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting import metrics

DEFAULT = ["train_step", "cpu_train_step"]
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "diagnose")


def recorded(name):
    """A diagnosis replayed from samples recorded on one H200 (no NVML here)."""
    with open(os.path.join(FIXTURES, name)) as handle:
        doc = json.load(handle)
    return assemble(doc["samples"], doc, doc["steps"], {"workload": "train_step"})


def test_the_program_chosen():
    assert choose_target([], "auto", "gemm", DEFAULT, 0)["workload"] == "gemm"
    assert choose_target(["p", "--forever"], "auto", None, DEFAULT, 8) == {
        "command": ["p", "--forever"],
        "variable": "stacktune_bench_live_command",
    }
    assert "stacktune_bench_live_command is not set" in choose_target([], "command", None, DEFAULT, 8)["none"]
    assert choose_target([], "dataloader", None, DEFAULT, 1)["workload"] == "dataloader"
    assert "does not run live" in choose_target([], "allreduce", None, DEFAULT, 8)["none"]
    assert choose_target([], "auto", None, DEFAULT, 1)["workload"] == "train_step"
    assert choose_target([], "auto", None, DEFAULT, 0)["workload"] == "cpu_train_step"
    assert choose_target([], "auto", None, [], 0)["workload"] == "cpu_train_step"


LAYERS = {
    "kernel": ["train_step", "dataloader", "cpu_dataloader"],
    "gpu_settings": ["gemm"],
    "memory": ["dataloader"],
    "cpu": ["train_step"],
    "nccl": ["allreduce"],
}


def test_a_gpu_bound_diagnosis_checks_the_cpu_side_layers_on_its_program_alone():
    d = recorded("h200_builtin_train_step.json")
    plan = layer_plan(LAYERS, d, {"workload": "train_step"}, "auto")
    # kernel is checked on the GPU-bound step, where a trial resolves fastest, in a short trial
    # under no_regression; the loaders, stand-ins for programs the diagnosis did not see, are left out
    assert plan["kernel"]["expected"] == "cannot"
    assert plan["kernel"]["workloads"] == ["train_step"]
    assert (plan["kernel"]["policy"], plan["kernel"]["size"]) == ("no_regression", "check")
    assert plan["kernel"]["reason"].startswith(
        "checked on train_step alone: the diagnosis (GPU-bound at its power cap) says this layer cannot move"
    )
    assert plan["kernel"]["reason"].endswith("kept only if a short trial shows no harm")
    # its only workload was the diagnosed program: checked there
    assert plan["cpu"]["workloads"] == ["train_step"] and plan["cpu"]["size"] == "check"
    assert plan["cpu"]["reason"].startswith("checked on train_step: ")
    # the diagnosed program is not memory's workload: measured as usual, under its own policy
    assert plan["memory"]["expected"] == "cannot" and plan["memory"]["workloads"] == ["dataloader"]
    assert (plan["memory"]["policy"], plan["memory"]["size"], plan["memory"]["reason"]) == (None, "full", "")
    assert plan["gpu_settings"]["expected"] == "can" and plan["gpu_settings"]["workloads"] == ["gemm"]
    assert (plan["gpu_settings"]["policy"], plan["gpu_settings"]["size"]) == (None, "full")
    assert plan["nccl"]["expected"] == "not judged"
    # a program that cannot run here sizes nothing: the layer keeps every candidate and its own budget
    plan = layer_plan(LAYERS, d, {"workload": "train_step"}, "auto", measurable=lambda left: False)
    assert plan["kernel"]["workloads"] == LAYERS["kernel"] and plan["kernel"]["size"] == "full"
    # stacktune_diagnose_size_trials false: every layer measured on every workload, the expectation still said
    plan = layer_plan(LAYERS, d, {"workload": "train_step"}, "auto", size=False)
    assert all(r["size"] == "full" and r["policy"] is None for r in plan.values())
    assert plan["kernel"]["workloads"] == LAYERS["kernel"] and plan["kernel"]["expected"] == "cannot"
    # stacktune_diagnose_keep_harmless false: the check must show a gain, else the layer goes back
    plan = layer_plan(LAYERS, d, {"workload": "train_step"}, "auto", keep_harmless=False)
    assert plan["kernel"]["policy"] == "improve"
    assert "stacktune_diagnose_keep_harmless=false" in plan["kernel"]["reason"]


def test_no_layer_is_left_unmeasured_by_the_diagnosis():
    """The user's program: a layer the diagnosis says cannot move it is checked on it, never skipped."""
    d = recorded("h200_resnet18_loader.json")
    plan = layer_plan({"gpu_settings": ["gemm"], "kernel": ["train_step"]}, d, {"command": ["p"]}, "command")
    assert "skip" not in plan["gpu_settings"]
    assert plan["gpu_settings"]["workloads"] == ["gemm"] and plan["gpu_settings"]["size"] == "check"
    assert plan["gpu_settings"]["policy"] == "no_regression"
    assert "input-bound, its loader workers saturated" in plan["gpu_settings"]["reason"]
    assert plan["gpu_settings"]["reason"].startswith("checked on your program: ")
    assert plan["kernel"]["expected"] == "can" and plan["kernel"]["size"] == "full"
    # a built-in workload for every layer that is not the diagnosed one: measured as usual
    plan = layer_plan({"gpu_settings": ["gemm"]}, d, {"workload": "dataloader"}, "gemm")
    assert plan["gpu_settings"]["size"] == "full" and plan["gpu_settings"]["policy"] is None


def test_the_layers_the_diagnosis_says_can_move_the_program_are_tried_first():
    d = recorded("h200_resnet18_loader.json")  # input_loader: cpu, numa_irq, memory, kernel can
    layers = ["bios", "driver", "memory", "gpu_settings", "kernel", "nccl", "numa_irq"]
    plan = layer_plan({n: ["train_step"] for n in layers}, d, {"command": ["p"]}, "command")
    assert layer_order(layers, plan) == ["bios", "driver", "memory", "kernel", "numa_irq", "gpu_settings", "nccl"]
    # without a diagnosis the order is the one given
    assert layer_order(layers, layer_plan({n: [] for n in layers}, {}, {}, "auto")) == layers
    assert diagnose_order(layers, plan) == layer_order(layers, plan)


def _uses(libraries, env=None, gpu_pids=None):
    return {"t": 0.0, "uses": {"libraries": libraries, "env": env or {}, "gpu_pids": gpu_pids}}


def test_the_diagnosis_reads_whether_the_program_uses_nccl_collectives():
    """NCCL's settings are read when a program starts: a trial on a program that does not use its
    collectives cannot see them (PyTorch maps libnccl in every CUDA program: loaded is not used)."""
    one_gpu = uses_figures([_uses({"10": ["nccl"], "11": []}, gpu_pids={"0": [10], "1": [99]})])["nccl"]
    assert one_gpu["used"] is False and one_gpu["why"] == "it holds one GPU (0) and names no ranks in its environment"
    two = uses_figures([_uses({"10": ["nccl"], "11": ["nccl"]}, gpu_pids={"0": [10], "1": [11]})])["nccl"]
    assert two["used"] is True and two["why"] == "libnccl loaded, 2 GPUs held"
    ranks = uses_figures([_uses({"10": []}, env={"10": {"WORLD_SIZE": "8"}})])["nccl"]
    assert ranks["used"] is True and ranks["ranks"] == 8
    cpu = uses_figures([_uses({"10": [], "11": []})])["nccl"]
    assert cpu["used"] is False and cpu["why"] == "none of its 2 processes loads libnccl"
    assert uses_figures([_uses({"10": ["nccl"]})])["nccl"]["used"] is None  # no NVML: cannot tell
    assert uses_figures([{"t": 0.0}]) == {}  # recorded before the reading existed
    # the plan: nccl on a one-GPU program is not measured, with the words; on two GPUs it is
    d = {"verdict": "gpu_compute", "title": "GPU compute-bound", "profile": {"uses": {"nccl": one_gpu}}}
    plan = layer_plan({"nccl": ["allreduce"]}, d, {"command": ["p"]}, "command")
    assert plan["nccl"]["not_used"] == (
        "the program does not use NCCL collectives (it holds one GPU (0) and names no ranks in its environment)"
    )
    d["profile"]["uses"]["nccl"] = two
    assert layer_plan({"nccl": ["allreduce"]}, d, {"command": ["p"]}, "command")["nccl"]["not_used"] == ""
    # a layer measured on another program than the diagnosed one is not judged by it
    d["profile"]["uses"]["nccl"] = one_gpu
    assert layer_plan({"nccl": ["allreduce"]}, d, {"workload": "train_step"}, "auto")["nccl"]["not_used"] == ""


def test_a_program_read_through_proc(tmp_path):
    """What uses_of reads of a process: the libraries of LIBRARIES in its map, the rank variables of
    its environment, nothing else."""
    pid = tmp_path / "42"
    pid.mkdir()
    (pid / "maps").write_text(
        "7f00-7f01 r-xp 0 08:01 1 /venv/nvidia/nccl/lib/libnccl.so.2\n7f02-7f03 r-xp 0 08:01 2 /usr/lib/libc.so.6\n"
    )
    (pid / "environ").write_bytes(b"HOME=/root\0WORLD_SIZE=1\0SECRET=x\0")
    doc = uses_of({"42": {}}, None, str(tmp_path))
    assert doc == {"libraries": {"42": ["nccl"]}, "env": {"42": {"WORLD_SIZE": "1"}}, "gpu_pids": None}


def test_no_diagnosis_expects_nothing():
    plan = layer_plan(LAYERS, {}, {}, "auto")
    assert all(r["expected"] == "not diagnosed" and r["size"] == "full" for r in plan.values())
    assert diagnose_workloads(plan) == LAYERS


def test_the_filters():
    assert diagnose_target([], "auto", None, {"default": DEFAULT}, 0)["workload"] == "cpu_train_step"
    d = recorded("h200_builtin_train_step.json")
    plan = diagnose_layers(LAYERS, d, {"workload": "train_step"}, "auto", True, 1, None)
    assert plan["kernel"]["workloads"] == ["train_step"] and plan["kernel"]["size"] == "check"
    # the gate's own rule says what runs: on a host without GPUs train_step would not, so the
    # layer is measured as usual on what does run
    plan = diagnose_layers({"kernel": ["train_step", "cpu_dataloader"]}, d, {"workload": "train_step"}, "auto", True, 0)
    assert plan["kernel"]["size"] == "full" and plan["kernel"]["workloads"] == ["train_step", "cpu_dataloader"]
    plan = diagnose_layers(LAYERS, d, {"workload": "train_step"}, "auto", True, 1, None, False)
    assert plan["kernel"]["policy"] == "improve"


def test_a_diagnosis_that_cannot_be_made_is_refused_before_the_host_is_taken():
    # validate.yml asks this before the tune takes the host (the diagnosis runs after it)
    assert diagnose_check(diagnose_target([], "auto", None, {"default": DEFAULT}, 0), 8, 5, 120) == ""
    message = diagnose_check(diagnose_target([], "auto", "allreduce", {}, 0), 8, 5, 120)
    assert message.startswith("stacktune_diagnose_workload: 'allreduce' is not a built-in workload that runs live")
    message = diagnose_check(diagnose_target(["p", ""], "auto", None, {}, 0), 8, 5, 120)
    assert message.startswith("stacktune_bench_live_command must be a list of non-empty strings")
    assert "stacktune_diagnose_timeout must be a number from" in diagnose_check({"workload": "train_step"}, 8, 5, 0)
    # nothing to diagnose (a command workload without a live command): the report says why
    assert diagnose_check(diagnose_target([], "command", None, {}, 0), 8, 5, 120) == ""


def test_the_report_has_the_diagnosis_after_the_layers():
    d = recorded("h200_resnet18_loader.json")
    plan = layer_plan({"gpu_settings": ["gemm"]}, d, {"command": ["p"]}, "command")
    results = [
        {
            "layer": "gpu_settings",
            "policy": "improve",
            "decision": "keep",
            "gate": None,
            "settings": [],
            "changed": True,
            "diagnosis": dict(plan["gpu_settings"], verdict=d["verdict"]),
        }
    ]
    lines = markdown(d, results)
    assert lines[0] == "## Diagnosis" and lines[2] == "**input-bound, its loader workers saturated**"
    text = "\n".join(lines)
    assert "- cannot: gpu_settings" in text and "outside the stack: the 4 loader workers use" in text
    assert "| GPU 0 | util 26.1% (min 0.0%)" in text
    assert "| gpu_settings | cannot | no |" in text
    facts = {"gpu_count": 1, "gpus": [], "host": {}, "driver": {}, "findings": []}
    report = report_markdown(results, "h1", "run1", facts, diagnosis=d)
    assert report.index("| layer | outcome |") < report.index("## Diagnosis")
    assert "## Diagnosis" not in report_markdown(results, "h1", "run1", facts)
    assert markdown({"none": "not set"}, []) == ["## Diagnosis", "", "Not diagnosed: not set", ""]
    unchanged = [dict(results[0], changed=False)]
    assert "| gpu_settings | cannot | no change to measure |" in "\n".join(markdown(d, unchanged))


def test_the_metrics_series_by_verdict():
    records = [{"layer": "kernel", "decision": "keep", "gate": None, "diagnosis": {"verdict": "input_loader"}}]
    text = metrics.render(metrics.layer_view([], records), "tune", True, 1764500000.0)
    assert 'stacktune_diagnosis_verdict{verdict="input_loader"} 1' in text
    assert 'stacktune_diagnosis_verdict{verdict="gpu_power_cap"} 0' in text
    # a drift run, which diagnoses nothing, carries the tune's verdict over
    again = metrics.render(metrics.layer_view([], []), "drift", True, 1764500100.0, previous_text=text)
    assert 'stacktune_diagnosis_verdict{verdict="input_loader"} 1' in again
    assert "stacktune_diagnosis_verdict" not in metrics.render({}, "tune", True, 1764500000.0)


def test_make_diagnose_prints_the_verdict_the_program_what_moves_it_and_the_advice():
    from ansible_collections.stacktune.gpu.plugins.filter.diagnose import diagnose_lines

    d = recorded("h200_resnet18_loader.json")
    d["program"] = {"command": ["python3", "/srv/train.py"]}
    lines = diagnose_lines(d)
    assert lines[0].startswith("diagnosis: input-bound, its loader workers saturated")
    assert lines[1] == "program: python3 /srv/train.py"
    assert lines[2].startswith("can move it: cpu (governor and C-states")
    assert lines[3] == "cannot move it: gpu_settings (a tune checks these in a short trial)"
    assert lines[4].startswith("advice: the 4 loader workers use")
    assert len(lines) <= 8
    assert diagnose_lines({"none": "not set", "line": "diagnosis: not made: not set"}) == [
        "diagnosis: not made: not set"
    ]
