"""Strict variable checks against argument specs (module_utils/policy/varspec.py)."""

import os

import pytest
import yaml

from ansible_collections.stacktune.gpu.plugins.module_utils.policy.varspec import MISSING, RULES, RUN_NAMES, check

ROLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "roles")

SPEC = {
    "nics": {"type": "list", "elements": "str", "default": []},
    "override": {"type": "dict", "default": {}},
    "enabled": {"type": "bool", "default": True},
    "steps": {"type": "int", "default": 200},
    "quantile": {"type": "float", "default": 0.99},
    "mode": {"type": "str", "choices": ["ban", "ignore"], "default": "ban"},
    "size": {"type": "str"},
    "gpus": {"type": "list", "elements": "int"},
    "rules": {
        "type": "list",
        "elements": "dict",
        "options": {"version": {"type": "str", "required": True}, "reason": {"type": "str"}},
    },
}


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"nics": ["ib0"], "override": {"0000:3b:00.0": "0-3"}, "enabled": "yes", "steps": "300", "quantile": 1},
        {"mode": "ignore", "size": 64, "gpus": [0, 1], "rules": [{"version": "550.54.14"}]},
        {"size": None, "gpus": None, "enabled": False},
    ],
)
def test_values_the_spec_describes_pass(values):
    assert check(SPEC, values) == []


@pytest.mark.parametrize(
    "values,message",
    [
        ({"nics": 7}, "nics must be a list of strings, got 7 (int)"),
        ({"nics": "[ib0]"}, "On the command line give lists as JSON: -e '{\"nics\": [...]}'"),
        ({"nics": ["ib0", {"x": 1}]}, "nics[1] must be a string, got {'x': 1} (mapping)"),
        ({"nics": None}, "nics must be a list of strings, got null"),
        ({"override": ["a"]}, "override must be a mapping, got ['a'] (list)"),
        ({"override": "a=b"}, "On the command line give mappings as JSON"),
        ({"enabled": "maybe"}, "enabled must be true or false, got 'maybe' (str)"),
        ({"steps": "many"}, "steps must be a whole number, got 'many' (str)"),
        ({"steps": True}, "steps must be a whole number, got True (bool)"),
        ({"quantile": [0.5]}, "quantile must be a number, got [0.5] (list)"),
        ({"mode": "stop"}, "mode must be one of ban, ignore, got 'stop' (str)"),
        ({"size": {"g": 64}}, "size must be a string, got {'g': 64} (mapping)"),
        ({"gpus": [0, "first"]}, "gpus[1] must be a whole number, got 'first' (str)"),
        ({"rules": [{"reason": "x"}]}, "rules[0] needs the key version (a string)"),
        ({"rules": [{"version": "1", "typo": 2}]}, "rules[0] has unknown key(s) typo; known: reason, version"),
    ],
)
def test_each_bad_value_is_named_with_the_expected_form(values, message):
    errors = check(SPEC, values)
    assert len(errors) == 1, errors
    assert message in errors[0]


def test_every_bad_variable_is_reported_at_once():
    errors = check(SPEC, {"nics": 7, "steps": "x", "mode": "stop"})
    assert [e.split(" ", 1)[0] for e in errors] == ["mode", "nics", "steps"]


def test_a_required_variable_that_is_missing():
    assert check({"x": {"type": "str", "required": True}}, {"x": MISSING}) == ["x is required (a string)"]


@pytest.mark.parametrize("role", sorted(os.listdir(ROLES)))
def test_every_role_default_matches_its_own_spec(role):
    """The roles' defaults are valid input: the checks refuse nothing a role ships with."""
    with open(os.path.join(ROLES, role, "meta", "argument_specs.yml")) as handle:
        options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    defaults_file = os.path.join(ROLES, role, "defaults", "main.yml")
    defaults = {}
    if os.path.exists(defaults_file):
        with open(defaults_file) as handle:
            defaults = yaml.safe_load(handle) or {}
    values = {k: v for k, v in defaults.items() if k in options and not (isinstance(v, str) and "{{" in v)}
    options = {k: v for k, v in options.items() if not (v or {}).get("required")}
    assert check(options, values) == []


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("stacktune_journal_dir", "var/lib/stacktune", "stacktune_journal_dir must be an absolute path without '..'"),
        ("layer_journal_dir", "/var/lib/../tmp", "layer_journal_dir must be an absolute path without '..'"),
        ("metrics_dir", "textfile", "metrics_dir must be an absolute path without '..' or auto, got 'textfile'"),
        (
            "acceptance_metrics_dir",
            "/var/../tmp",
            "acceptance_metrics_dir must be an absolute path without '..' or auto",
        ),
        ("metrics_dir", "AUTO", "metrics_dir must be an absolute path without '..' or auto"),
        ("stacktune_bench_steps", 5, "stacktune_bench_steps must be at least 10, got 5"),
        (
            "stacktune_bench_steps_by_workload",
            {"gemm": 1800, "dataloader": 3},
            "stacktune_bench_steps_by_workload.dataloader must be at least 10, got 3",
        ),
        ("stacktune_bench_timeout", "0", "stacktune_bench_timeout must be at least 1"),
    ],
)
def test_rules_the_spec_format_cannot_carry_are_checked_by_name(name, value, message):
    spec = {name: {"type": "dict" if isinstance(value, dict) else ("int" if "bench" in name else "str")}}
    errors = check(spec, {name: value})
    assert len(errors) == 1 and errors[0].startswith(message), errors


def test_the_metrics_directories_name_the_variable_they_follow():
    errors = check({"metrics_dir": {"type": "str"}}, {"metrics_dir": "relative/dir"})
    assert errors == [
        "metrics_dir must be an absolute path without '..' or auto, got 'relative/dir'"
        " (by default it is stacktune_metrics_dir)"
    ]


def test_a_derived_variable_names_the_variable_it_follows():
    errors = check({"metrics_journal_dir": {"type": "str"}}, {"metrics_journal_dir": "var/lib/x"})
    assert errors == [
        "metrics_journal_dir must be an absolute path without '..', got 'var/lib/x'"
        " (by default it is stacktune_journal_dir)"
    ]


@pytest.mark.parametrize(
    "name,value",
    [
        ("stacktune_journal_dir", "/var/lib/stacktune"),
        ("acceptance_journal_dir", ""),
        ("metrics_dir", "auto"),
        ("acceptance_metrics_dir", "/run/prometheus"),
        ("stacktune_bench_steps", 10),
        ("stacktune_bench_warmup", 0),
    ],
)
def test_values_inside_the_rules_pass(name, value):
    spec = {name: {"type": "int" if "bench" in name else "str"}}
    assert check(spec, {name: value}) == []


def test_every_rule_names_a_variable_some_role_declares():
    declared = set()
    for role in os.listdir(ROLES):
        path = os.path.join(ROLES, role, "meta", "argument_specs.yml")
        if os.path.isfile(path):
            with open(path) as handle:
                for entry in (yaml.safe_load(handle)["argument_specs"] or {}).values():
                    declared.update((entry or {}).get("options") or {})
    for pattern in RULES:
        if pattern.startswith("*"):
            assert any(name.endswith(pattern[1:]) for name in declared), pattern
        elif pattern not in RUN_NAMES:  # every check_vars call checks those, declared or not
            assert pattern in declared, pattern


# ---------------------------------------------------------------- misspelled variables


def test_misspelled_variables_name_the_one_meant():
    from ansible_collections.stacktune.gpu.plugins.module_utils.policy.varspec import misspelled

    known = {"stacktune_layers", "kernel_sysctl", "memory_shm_size", "nccl_conf_path", "stacktune_gate"}
    given = {
        "stacktune_layer",  # a letter short
        "kernel_sysctls",  # a letter more
        "stactune_gate",  # in the prefix
        "memory_shm_szie",  # swapped letters
        "kernel_settings_sysctl",  # linux-system-roles' kernel_settings role: nothing like ours
        "kernel_settings_transparent_hugepages",
        "ansible_python_interpreter",
        "__stacktune_layer",
        "inventory_hostname",
        "gpu_model",
        "nccl_conf_path",  # known
    }
    assert misspelled(given, known) == [
        ("kernel_sysctls", "kernel_sysctl"),
        ("memory_shm_szie", "memory_shm_size"),
        ("stacktune_layer", "stacktune_layers"),
        ("stactune_gate", "stacktune_gate"),
    ]


def test_removed_variables_are_refused_naming_their_replacement():
    from ansible_collections.stacktune.gpu.plugins.module_utils.policy.varspec import misspelled, renamed

    given = {"metrics_textfile_path": "/x/stacktune.prom", "acceptance_metrics_path": "", "metrics_enabled": True}
    messages = renamed(given)
    assert messages == [
        "acceptance_metrics_path is no longer a variable of stacktune.gpu; use stacktune_metrics_dir (the directory;"
        " the file in it is stacktune_acceptance.prom), or acceptance_metrics_enabled: false to write none",
        "metrics_textfile_path is no longer a variable of stacktune.gpu; use stacktune_metrics_dir (the directory;"
        " the file in it is stacktune.prom)",
    ]
    # not reported a second time as a typo of a declared variable
    assert misspelled(given, {"metrics_enabled", "acceptance_metrics_enabled", "stacktune_metrics_dir"}) == []


def test_the_data_dir_of_the_file_workload_is_an_absolute_path_or_null():
    spec = {"stacktune_bench_data_dir": {"type": "str"}}
    assert check(spec, {"stacktune_bench_data_dir": None}) == []
    assert check(spec, {"stacktune_bench_data_dir": "/data/stacktune"}) == []
    for bad in ("data", "./data", "/data/../tmp"):
        assert check(spec, {"stacktune_bench_data_dir": bad}) == [
            "stacktune_bench_data_dir must be an absolute path without '..', got %r" % bad
        ]


def _role_options(role):
    with open(
        os.path.join(
            os.path.dirname(__file__), "..", "..", "..", "..", "..", "roles", role, "meta", "argument_specs.yml"
        )
    ) as f:
        return yaml.safe_load(f)["argument_specs"]["main"]["options"]


@pytest.mark.parametrize(
    ("role", "name", "value"),
    [
        ("gpu_settings", "gpu_settings_power_limit_watts", 650),
        ("gpu_settings", "gpu_settings_power_limit_watts", [700, 650, 600]),
        ("gpu_settings", "gpu_settings_power_limit_watts", {"from": 700, "to": 500, "step": -50}),
        ("memory", "memory_thp_enabled", "madvise"),
        ("memory", "memory_thp_enabled", ["always", "never"]),
    ],
)
def test_a_searchable_variable_takes_one_value_or_candidates(role, name, value):
    assert check(_role_options(role), {name: value}) == []


@pytest.mark.parametrize(
    ("role", "name", "value", "message"),
    [
        (
            "gpu_settings",
            "gpu_settings_power_limit_watts",
            [700, "fast"],
            "gpu_settings_power_limit_watts: candidate 'fast': must be a positive whole number of watts",
        ),
        ("gpu_settings", "gpu_settings_power_limit_watts", [700, -5], "candidate -5"),
        ("gpu_settings", "gpu_settings_power_limit_watts", {"from": 700, "to": 500, "step": 50}, "does not lead"),
        ("gpu_settings", "gpu_settings_power_limit_watts", "fast", "must be a positive whole number of watts"),
        ("memory", "memory_thp_enabled", ["always", "sometimes"], "memory_thp_enabled: candidate 'sometimes'"),
        ("memory", "memory_thp_enabled", ["always", "a\nb"], "memory_thp_enabled"),
    ],
)
def test_every_candidate_is_checked_as_one_value_naming_it(role, name, value, message):
    errors = check(_role_options(role), {name: value})
    assert len(errors) == 1 and errors[0].startswith(name) and message in errors[0], errors
