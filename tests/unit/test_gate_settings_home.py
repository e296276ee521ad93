"""The gate's settings have one home (plugins/module_utils/gate/settings.py: SETTINGS, BUDGET and the
workload names): the stacktune role's defaults and argument spec must say the same."""

import os

import yaml

from ansible_collections.stacktune.gpu.plugins.module_utils.gate import settings as _blocks
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import base as _workloads

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "roles", "stacktune")


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


DEFAULTS = _yaml("defaults", "main.yml")
SPEC = _yaml("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]


def test_every_gate_setting_is_a_role_variable_with_the_python_default():
    for name, (default, *_rest) in _blocks.SETTINGS.items():
        var = "stacktune_gate_" + name
        assert DEFAULTS[var] == default, var
        assert SPEC[var]["default"] == default, var
        assert SPEC[var]["type"] == "float", var


def test_no_role_variable_names_a_gate_setting_python_does_not_know():
    settings = {k[len("stacktune_gate_") :] for k in DEFAULTS if k.startswith("stacktune_gate_")}
    others = {"budget", "policies", "default_policy", "workloads", "unmeasurable"}
    assert settings - others == set(_blocks.SETTINGS)


def test_the_budget_defaults_are_the_python_ones():
    assert DEFAULTS["stacktune_gate_budget"] == {k: v[0] for k, v in _blocks.BUDGET.items()}
    assert SPEC["stacktune_gate_budget"]["default"] == DEFAULTS["stacktune_gate_budget"]


def test_the_workload_table_and_steps_name_only_known_workloads():
    known = set(_workloads.GPU_WORKLOADS) | set(_workloads.CPU_WORKLOADS)
    for layer, names in DEFAULTS["stacktune_gate_workloads"].items():
        assert set(names) <= known, layer
    assert set(_workloads.DEFAULT_STEPS) <= known
    assert set(SPEC["stacktune_bench_steps_by_workload"]["options"]) == known | {"command"}
