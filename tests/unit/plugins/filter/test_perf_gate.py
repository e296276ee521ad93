# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""perf_gate filter: direct calls, Jinja rendering, the sidecar documentation and a real ansible run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import inspect
import os
import random
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from jinja2 import Environment, StrictUndefined

from ansible_collections.stacktune.gpu.plugins.filter import perf_gate as plugin
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import DEFAULTS
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import judge

from .test_filter_docs import documented_options, taken_options

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
PLUGIN_DIR = os.path.dirname(plugin.__file__)


def lognormal(seed, n, median=10.0, sigma=0.2):
    rng = random.Random(seed)
    return [median * rng.lognormvariate(0.0, sigma) for _unused in range(n)]


def render(template, **variables):
    env = Environment(undefined=StrictUndefined)
    env.filters.update(plugin.FilterModule().filters())
    return env.from_string(template).render(**variables)


def test_filter_is_registered():
    assert plugin.FilterModule().filters()["perf_gate"] is plugin.perf_gate


def test_filter_returns_the_gate_result():
    before, after = lognormal(1, 1000), [x / 1.2 for x in lognormal(2, 1000)]
    res = plugin.perf_gate(before, after)
    assert res == judge(before, after)
    assert res["decision"] == "keep"


def test_filter_passes_options_through():
    before, after = lognormal(3, 600), [x * 1.01 for x in lognormal(4, 600)]
    res = plugin.perf_gate(before, after, "no_regression", 0.99, 0.05, 0.02, 0.95, True)
    assert res["policy"] == "no_regression"
    assert res["final"] is True
    assert res["decision"] == "keep"
    loose = plugin.perf_gate(before, after, tail_tolerance=0.3)
    assert loose["tolerances"]["tail"] == pytest.approx(0.3)


def test_filter_judges_blocks_over_blocks():
    """Blocks in, block-level inference out: a 15% slower arm is rolled back on throughput."""
    without = [lognormal(10 + i, 200, median=10.0 * (1 + 0.01 * (i % 3)), sigma=0.05) for i in range(4)]
    with_ = [
        [x * 1.15 for x in lognormal(20 + i, 200, median=10.0 * (1 + 0.01 * (i % 3)), sigma=0.05)] for i in range(4)
    ]
    res = plugin.perf_gate(without, with_, "no_regression", final=True)
    assert res["method"] == "blocks"
    assert res["decision"] == "rollback"
    assert res["verdicts"]["throughput"] == "worse"
    assert res["blocks_before"] == res["blocks_after"] == 4


def test_gate_settings_check_names_the_variable():
    assert plugin.gate_settings_check({"tail_tolerance": 0.05}, {"max_blocks": 8}, {"nccl": ["allreduce"]}) == ""
    assert "stacktune_gate_tail_tolerance" in plugin.gate_settings_check({"tail_tolerance": 1.5})
    assert "stacktune_gate_budget.min_blocks" in plugin.gate_settings_check({}, {"min_blocks": 1})
    assert "stacktune_gate_workloads.nccl" in plugin.gate_settings_check({}, {}, {"nccl": "allreduce"})


def test_filter_accepts_bench_dicts():
    before = {"samples_ms": lognormal(5, 500), "throughput": 2000.0, "host": "gpu01"}
    after = {"samples_ms": lognormal(6, 500), "throughput": 2000.0}
    res = plugin.perf_gate(before, after)
    assert res["throughput"]["source"] == "given"
    assert res["throughput"]["ratio"] == 1.0


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (([], [1.0]), {}, "perf_gate: before is empty"),
        (([1.0], ["slow"]), {}, r"perf_gate: after\[0\] is not a number"),
        (([1.0], [-1.0]), {}, r"perf_gate: after\[0\] is negative"),
        (([1.0], [float("nan")]), {}, r"perf_gate: after\[0\] is NaN"),
        ((400, [1.0]), {}, "perf_gate: before must be a list"),
        (([1.0], [1.0]), {"policy": "faster"}, "perf_gate: policy must be one of"),
        (([1.0], [1.0]), {"tail_tolerance": 2}, "perf_gate: tail_tolerance must be in"),
        (
            ([1.0], [1.0]),
            {"min_gian": 0.02},
            r"perf_gate: unknown argument\(s\) min_gian \(the gate's settings: tail_q",
        ),
        (
            ([1.0], [1.0]),
            {"max_blocks": 4},
            r"perf_gate: max_blocks: part of the budget.*stacktune_gate_budget\.max_blocks",
        ),
        (([1.0], [1.0], "improve", 0.99, 0.05, 0.02, 0.95, True, 1), {}, "perf_gate: at most 5 arguments after policy"),
        (([1.0], [1.0], "improve", 0.99), {"tail_quantile": 0.9}, "perf_gate: tail_quantile given twice"),
    ],
)
def test_filter_errors_name_the_argument(args, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        plugin.perf_gate(*args, **kwargs)


def test_filter_in_a_jinja_template():
    out = render(
        "{% set r = before | perf_gate(after, policy='no_regression', final=true) %}{{ r.decision }}|{{ r.n_after }}",
        before=[10, 11, 12] * 400,
        after=[10, 11, 12] * 400,
    )
    assert out == "keep|1200"


def test_filter_precedence_in_jinja():
    # Filters bind tighter than '*': the unparenthesised list product hands 400 to the filter.
    with pytest.raises(AnsibleFilterError, match="before must be a list"):
        render("{{ [10, 11, 12] * 400 | perf_gate([10, 11, 12] * 400) }}")
    assert "inconclusive" in render("{{ (([10, 11, 12] * 400) | perf_gate([10, 11, 12] * 400)).decision }}")


def test_sidecar_documentation_matches_the_signature():
    with open(os.path.join(PLUGIN_DIR, "perf_gate.yml")) as handle:
        doc = yaml.safe_load(handle)
    options = documented_options(doc["DOCUMENTATION"])
    assert doc["DOCUMENTATION"]["name"] == "perf_gate"
    assert set(options) == {"_input"} | taken_options(plugin.perf_gate, doc["DOCUMENTATION"])
    params = inspect.signature(plugin.perf_gate).parameters
    defaults = {n: p.default for n, p in params.items() if p.default is not p.empty}
    defaults.update(DEFAULTS)  # the settings, taken by name: their defaults are the table's
    for name, default in defaults.items():
        assert options[name].get("default") == default, name
    # the documented positional order is the one the filter takes
    positional = doc["DOCUMENTATION"]["positional"].replace(" ", "").split(",")
    assert positional == ["after", "policy"] + list(plugin.POSITIONAL)
    assert "perf_gate" in doc["EXAMPLES"]
    assert "decision" in doc["RETURN"]["_value"]["contains"]


ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


@pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible CLI not installed next to this Python")
def test_real_ansible_template_use():
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    proc = subprocess.run(
        [
            ANSIBLE,
            "localhost",
            "-c",
            "local",
            "-m",
            "debug",
            "-a",
            "msg={{ (([10,11,12]*400) | stacktune.gpu.perf_gate([10,11,12]*400)).decision }}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"msg": "inconclusive"' in proc.stdout


def test_the_runner_is_started_for_what_the_layers_resolve_to_here():
    layers = {"kernel": ["train_step", "dataloader"], "nccl": ["allreduce"], "memory": ["dataloader", "cpu_dataloader"]}
    # one GPU: all-reduce needs two; every GPU workload once, in layer order
    assert plugin.runner_workloads(layers, 1) == ["train_step", "dataloader"]
    # no GPU: the CPU workloads
    assert plugin.runner_workloads(layers, 0) == ["cpu_dataloader"]
    # one built-in workload for every layer, or the user's program (not imported)
    assert plugin.runner_workloads(layers, 1, "gemm") == ["gemm"]
    assert plugin.runner_workloads(layers, 1, "command") == []
    # started in the background only where it imports something (PyTorch for GPU workloads)
    assert plugin.runner_workloads(layers, 1, importing=True) == ["train_step", "dataloader"]
    assert plugin.runner_workloads(layers, 0, importing=True) == []
    with pytest.raises(AnsibleFilterError, match="runner_for.kernel: unknown workload 'nope'"):
        plugin.runner_workloads({"kernel": ["nope"]}, 1)
