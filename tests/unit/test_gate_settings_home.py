"""The gate's settings have one home (plugins/module_utils/gate/settings.py: SETTINGS, BUDGET and the
workload names): the stacktune role's defaults and argument spec must say the same."""

import os

import yaml

from ansible_collections.stacktune.gpu.plugins.module_utils.gate import settings as _blocks
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import registry as _workloads

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
    others = {"budget", "policies", "default_policy", "workloads", "unmeasurable", "live"}
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


def test_the_gate_entry_points_take_the_settings_by_name_from_the_one_home():
    """judge_blocks and the one-block judge do not spell the settings out: they take them as
    keyword arguments checked against SETTINGS (the perf_gate filter keeps its documented
    signature, its defaults taken from DEFAULTS)."""
    import inspect

    import pytest

    from ansible_collections.stacktune.gpu.plugins.filter.perf_gate import perf_gate
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate.blocks import judge_blocks
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import judge

    for entry in (judge_blocks, judge):
        params = inspect.signature(entry).parameters
        assert not set(params) & set(_blocks.SETTINGS), entry.__name__
        assert params["settings"].kind is inspect.Parameter.VAR_KEYWORD
    filter_params = inspect.signature(perf_gate).parameters
    for name, default in _blocks.DEFAULTS.items():
        assert filter_params[name].default == default, name

    blocks = [[10.0 + 0.01 * (i % 7) for i in range(50)] for _b in range(4)]
    flat = [10.0 + 0.01 * (i % 7) for i in range(400)]
    for before in (blocks, flat):
        with pytest.raises(TypeError, match="min_gian"):
            judge(before, before, min_gian=0.02)
        with pytest.raises(ValueError, match="tail_tolerance"):
            judge(before, before, tail_tolerance=2.0)
        # a setting given is used: a gain of 1% counts with min_gain 0.005, not with the default 2%
        faster = [[x / 1.01 for x in b] for b in before] if before is blocks else [x / 1.01 for x in before]
        assert judge(before, faster, min_gain=0.005)["tolerances"] != judge(before, faster)["tolerances"]
