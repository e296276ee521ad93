# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The diagnosis inside a tune: the program chosen, what each layer is expected to do, which
measurements are skipped; the report's section and the filters the role calls."""

from __future__ import absolute_import, division, print_function

import json
import os

from ansible_collections.stacktune.gpu.plugins.filter.diagnose import (
    diagnose_check,
    diagnose_layers,
    diagnose_target,
    diagnose_workloads,
)
from ansible_collections.stacktune.gpu.plugins.filter.run_report import report_markdown
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.plan import choose_target, layer_plan
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


def test_a_gpu_bound_diagnosis_measures_the_cpu_side_layers_on_its_program_alone():
    d = recorded("h200_builtin_train_step.json")
    plan = layer_plan(LAYERS, d, {"workload": "train_step"}, "auto")
    # kernel is checked on the GPU-bound step, where a trial resolves fastest; the loaders,
    # stand-ins for programs the diagnosis did not see, are left out
    assert plan["kernel"]["expected"] == "cannot" and not plan["kernel"]["skip"]
    assert plan["kernel"]["workloads"] == ["train_step"]
    assert plan["kernel"]["reason"].startswith(
        "measured on train_step alone, to check the expectation: the diagnosis (GPU-bound at its power cap)"
    )
    assert plan["kernel"]["reason"].endswith(
        "stacktune_diagnose_skip=false measures it on dataloader, cpu_dataloader too"
    )
    # its only workload was the diagnosed program: measured there, nothing else to leave out
    assert plan["cpu"]["workloads"] == ["train_step"] and not plan["cpu"]["skip"]
    assert plan["cpu"]["reason"].endswith("stacktune_diagnose_skip=false changes nothing here")
    # the diagnosed program is not memory's workload: measured as usual
    assert plan["memory"]["expected"] == "cannot" and plan["memory"]["workloads"] == ["dataloader"]
    assert not plan["memory"]["skip"] and plan["memory"]["reason"] == ""
    assert plan["gpu_settings"]["expected"] == "can" and plan["gpu_settings"]["workloads"] == ["gemm"]
    assert not plan["gpu_settings"]["skip"]
    assert plan["nccl"]["expected"] == "not judged"
    # the program must run here: on a host where it would not, the layer is not measured
    plan = layer_plan(LAYERS, d, {"workload": "train_step"}, "auto", measurable=lambda left: False)
    assert plan["kernel"]["skip"] and plan["kernel"]["workloads"] == []
    assert "stacktune_diagnose_skip=false measures it" in plan["kernel"]["reason"]
    # stacktune_diagnose_skip false: every layer measured on every workload, the expectation still said
    plan = layer_plan(LAYERS, d, {"workload": "train_step"}, "auto", skip=False)
    assert not any(r["skip"] for r in plan.values()) and plan["kernel"]["workloads"] == LAYERS["kernel"]
    assert plan["kernel"]["expected"] == "cannot"


def test_an_input_bound_program_of_the_user_skips_the_power_limit():
    d = recorded("h200_resnet18_loader.json")
    plan = layer_plan({"gpu_settings": ["gemm"], "kernel": ["train_step"]}, d, {"command": ["p"]}, "command")
    assert plan["gpu_settings"]["skip"] and plan["gpu_settings"]["workloads"] == ["gemm"]
    assert "input-bound, its loader workers saturated" in plan["gpu_settings"]["reason"]
    assert plan["kernel"]["expected"] == "can" and not plan["kernel"]["skip"]
    # a built-in workload for every layer that is not the diagnosed one: nothing skipped
    plan = layer_plan({"gpu_settings": ["gemm"]}, d, {"workload": "dataloader"}, "gemm")
    assert not plan["gpu_settings"]["skip"]


def test_no_diagnosis_expects_nothing():
    plan = layer_plan(LAYERS, {}, {}, "auto")
    assert all(r["expected"] == "not diagnosed" and not r["skip"] for r in plan.values())
    assert diagnose_workloads(plan) == LAYERS


def test_the_filters():
    assert diagnose_target([], "auto", None, {"default": DEFAULT}, 0)["workload"] == "cpu_train_step"
    d = recorded("h200_builtin_train_step.json")
    plan = diagnose_layers(LAYERS, d, {"workload": "train_step"}, "auto", True, 1, None)
    assert plan["kernel"]["workloads"] == ["train_step"] and not plan["kernel"]["skip"]
    # the gate's own rule says what runs: on a host without GPUs train_step would not
    plan = diagnose_layers({"kernel": ["train_step", "cpu_dataloader"]}, d, {"workload": "train_step"}, "auto", True, 0)
    assert plan["kernel"]["skip"]


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


def test_the_report_leads_with_the_diagnosis():
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
    assert "| gpu_settings | cannot | skipped: not measured: the diagnosis" in text
    facts = {"gpu_count": 1, "gpus": [], "host": {}, "driver": {}, "findings": []}
    report = report_markdown(results, "h1", "run1", facts, diagnosis=d)
    assert report.index("## Diagnosis") < report.index("| layer | policy |")
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
