# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The diagnosis on recorded real samples: no NVML exists here, so the GPU readings are the raw
snapshots recorded on one H200 (16 CPUs) by benchmarks/gpu_timeline.py
(tests/unit/fixtures/diagnose/README.md), replayed through the same derivations and rules the
module runs live. The CPU-only recordings were made on a 2-CPU host whose CPUs other work kept
busy (run queue about 20-30), so they also show the contention caveat."""

from __future__ import absolute_import, division, print_function

import json
import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.advice import skip_layers
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.run import assemble

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "diagnose")


def recorded(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        doc = json.load(handle)
    return assemble(doc["samples"], doc, doc["steps"], {"command": [doc["program"]]})


# (fixture, verdict) recorded on the H200: what binds each program by construction
H200 = [
    ("h200_transformer.json", "gpu_power_cap"),
    ("h200_sampler_aa.json", "gpu_power_cap"),
    ("h200_builtin_gemm.json", "gpu_power_cap"),
    ("h200_builtin_train_step.json", "gpu_power_cap"),
    ("h200_resnet18_loader.json", "input_loader"),
    ("h200_builtin_dataloader.json", "input_loader"),
]


@pytest.mark.parametrize("name, verdict", H200)
def test_h200_recordings_get_their_verdict(name, verdict):
    d = recorded(name)
    assert d["verdict"] == verdict, d["line"]
    assert d["line"].startswith("diagnosis: " + d["title"])
    assert d["evidence"] and d["moves"]["outside"]


def sliced(name, seconds, shift):
    """The recording cut to ``seconds`` of its profile, starting ``shift`` s into it, as a
    diagnosis of that length would have seen it (its snapshots, steps and window)."""
    with open(os.path.join(FIXTURES, name)) as handle:
        doc = json.load(handle)
    w = doc["windows"][0]
    t0 = w["t0"] + shift
    t1 = t0 + seconds
    if t1 > w["t1"] + 0.01:
        return None
    steps = [s for s in doc["steps"] if t0 <= s[0] <= t1]
    doc["samples"] = [s for s in doc["samples"] if t0 - 1.0 <= s["t"] <= t1]
    doc["windows"] = [dict(w, t0=t0, t1=t1, steps_ms=[s[1] for s in steps])]
    return assemble(doc["samples"], doc, steps, {"command": [doc["program"]]})


@pytest.mark.parametrize("name, verdict", [h for h in H200 if h[0] != "h200_sampler_aa.json"])
def test_the_default_8_s_profile_gets_the_recorded_verdict_anywhere_in_the_recording(name, verdict):
    """stacktune_diagnose_seconds defaults to 8: each H200 recording (18-25 s of profile) gives
    its verdict from any 6-, 8- or 10-s slice of it, at its start and 5 or 10 s in."""
    seen = 0
    for seconds in (6, 8, 10):
        for shift in (0, 5, 10):
            d = sliced(name, seconds, shift)
            if d is None:
                continue
            seen += 1
            assert d["verdict"] == verdict, (seconds, shift, d["line"])
    assert seen >= 6


def test_transformer_at_its_power_cap_figures():
    """The GPU-bound bf16 transformer: GPU 95% busy, 677 of 700 W, SW power cap in 98% of snapshots."""
    d = recorded("h200_transformer.json")
    p = d["profile"]
    gpu = p["gpus"][0]
    assert p["samples"] == 46
    assert 94 <= gpu["util_gpu_pct"] <= 96
    assert gpu["power_limit_w"] == 700.0
    assert 670 <= gpu["power_w"] <= 685
    assert gpu["clock_events_pct"]["sw_power_cap"] >= 95
    assert gpu["sm_clock_max_mhz"] == 1980
    # the energy counter over the profile gives a mean power of its own
    assert 400 < gpu["energy_w"] <= 700
    # one process, about one core; the host nearly idle
    assert p["program"]["processes"] == 1
    assert 0.9 <= p["program"]["main"]["cores"] <= 1.1
    assert p["cpu"]["busy_pct"] < 10
    assert set(p["cpu"]["nodes"]) == {"0"} and p["cpu"]["nodes"]["0"]["cpus"] == 16
    assert 38 <= p["steps"]["p50_ms"] <= 40
    assert "power cap or brake in 98% of snapshots (>= 30%)" in d["evidence"]
    assert d["moves"]["can"] == {"gpu_settings": d["moves"]["can"]["gpu_settings"]}
    assert {"cpu", "memory", "kernel", "io", "numa_irq"} <= set(d["moves"]["cannot"])
    assert d["caveats"] == []


def test_resnet_loader_bound_figures():
    """The DataLoader-bound ResNet-18: 4 workers each about one core, GPU 26% busy, 12 cores idle."""
    d = recorded("h200_resnet18_loader.json")
    p = d["profile"]
    prog = p["program"]
    assert prog["processes"] == 5
    assert prog["workers"] == 4 and prog["workers_saturated"] == 4
    assert 3.8 <= prog["worker_cores"] <= 4.1
    assert 20 <= p["gpus"][0]["util_gpu_pct"] <= 35
    assert p["gpus"][0]["clock_events_pct"] == {} or "sw_power_cap" not in p["gpus"][0]["clock_events_pct"]
    assert 1.0 <= p["gpus"][0]["pcie_rx_gbs"] <= 2.5
    assert p["steps"]["p99_ms"] > 3 * p["steps"]["p50_ms"]
    outside = " ".join(d["moves"]["outside"])
    assert (
        "the 4 loader workers use 3.9 of 16 cores" in outside or "the 4 loader workers use 4.0 of 16 cores" in outside
    )
    assert "more workers would help" in outside
    assert "the stack can move this little" in outside
    assert d["moves"]["cannot"] == {"gpu_settings": d["moves"]["cannot"]["gpu_settings"]}
    assert "gpu_settings" in skip_layers(d, ["gpu_settings", "cpu", "kernel"])
    assert "cpu" not in skip_layers(d, ["gpu_settings", "cpu", "kernel"])


def test_the_sampler_cost_is_recorded():
    p = recorded("h200_sampler_aa.json")["profile"]
    assert 30 <= p["sampler"]["cost_ms_mean"] <= 100
    assert p["sampler"]["duty_pct"] < 10


CPU = [("cpu_dataloader.json", "input_loader"), ("cpu_train_step.json", "cpu_main")]


@pytest.mark.parametrize("name, verdict", CPU)
def test_cpu_recordings_get_their_verdict_with_the_contention_caveat(name, verdict):
    d = recorded(name)
    assert d["verdict"] == verdict, d["line"]
    assert d["profile"]["gpus"] == []
    assert "no GPU readings (NVML)" in d["evidence"]
    # the 2-CPU host was full: the program's processes were runnable but got less than a core
    assert d["caveats"] and "the host's CPUs are all busy" in d["caveats"][0]
    assert any("the host has no idle core" in w or "takes cores from the program" in w for w in d["moves"]["outside"])


def test_the_report_leads_with_the_layer_table_under_its_own_heading_then_the_diagnosis():
    """The answer first: the layer table under ``## Layers`` right after the title, then the
    diagnosis in its own section (a reader, or a test, looking for either by its section finds it)."""
    from ansible_collections.stacktune.gpu.plugins.filter.run_report import report_markdown

    d = recorded("h200_transformer.json")
    result = {"layer": "gpu_settings", "policy": "no_regression", "changed": False, "settings": []}
    text = report_markdown([result], host="h200", run_id="r1", facts={}, diagnosis=d)
    sections = text.split("\n## ")
    names = [s.splitlines()[0] for s in sections[1:]]
    assert names[:2] == ["Layers", "Diagnosis"], names
    assert "| layer |" not in sections[2]
    assert sections[1].splitlines()[2].startswith("| layer | outcome | settings changed")
    assert "| gpu_settings | **nothing to change** | 0 | 0 | - |" in sections[1]
