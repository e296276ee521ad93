"""The gate's settings have one home (plugins/module_utils/gate/settings.py: the table SETTINGS,
and the budget's table BUDGET): the stacktune role's defaults and argument spec (static YAML)
must say the same, the role hands the settings on through the lookup that reads the table, and
the budget is never merged into the settings (an error about a budget key names
stacktune_gate_budget.<key> on every path)."""

import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.stacktune.gpu.plugins.module_utils.gate import settings as _gate
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import registry as _workloads

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ROLE = os.path.join(REPO, "roles", "stacktune")
DEFAULTS_FILE = "roles/stacktune/defaults/main.yml"
SPEC_FILE = "roles/stacktune/meta/argument_specs.yml"
SETTINGS_FILE = "plugins/module_utils/gate/settings.py"


def _yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


DEFAULTS = _yaml("defaults", "main.yml")
SPECS = _yaml("meta", "argument_specs.yml")["argument_specs"]
SPEC = SPECS["main"]["options"]
# role variables stacktune_gate_* that are not settings of the table
NOT_SETTINGS = {"budget", "policies", "default_policy", "workloads", "unmeasurable", "live"}


def role_setting_mismatches(defaults, spec):
    """What the role's defaults and argument spec say differently from SETTINGS, one line each."""
    wrong = []
    for name, row in _gate.SETTINGS.items():
        var = _gate.SETTING_PREFIX + name
        if var not in defaults:
            wrong.append("%s: no %s (default %r, from %s)" % (DEFAULTS_FILE, var, row.default, SETTINGS_FILE))
        elif defaults[var] != row.default:
            wrong.append("%s: %s is %r, the table's default is %r" % (DEFAULTS_FILE, var, defaults[var], row.default))
        option = spec.get(var)
        if option is None:
            wrong.append("%s: no option %s (type %s, default %r)" % (SPEC_FILE, var, row.type, row.default))
            continue
        if option.get("type") != row.type:
            wrong.append("%s: %s has type %s, the table's is %s" % (SPEC_FILE, var, option.get("type"), row.type))
        if option.get("default") != row.default:
            wrong.append(
                "%s: %s has default %r, the table's is %r" % (SPEC_FILE, var, option.get("default"), row.default)
            )
    prefix = _gate.SETTING_PREFIX
    for where, names in ((DEFAULTS_FILE, defaults), (SPEC_FILE, spec)):
        extra = {k[len(prefix) :] for k in names if k.startswith(prefix)} - NOT_SETTINGS - set(_gate.SETTINGS)
        for name in sorted(extra):
            wrong.append("%s: %s%s is no setting of %s" % (where, prefix, name, SETTINGS_FILE))
    return wrong


def test_every_gate_setting_is_a_role_variable_with_the_table_type_and_default():
    assert role_setting_mismatches(DEFAULTS, SPEC) == []


@pytest.mark.parametrize("entry", sorted(e for e, s in SPECS.items() if "stacktune_gate_min_gain" in s["options"]))
def test_every_entry_point_that_takes_the_settings_documents_them_as_the_table(entry):
    assert role_setting_mismatches(DEFAULTS, SPECS[entry]["options"]) == []


def test_a_mismatch_names_the_file_and_the_variable():
    spec = dict(SPEC, stacktune_gate_min_gain=dict(SPEC["stacktune_gate_min_gain"], type="int", default=0.5))
    del spec["stacktune_gate_confidence"]
    wrong = role_setting_mismatches(dict(DEFAULTS, stacktune_gate_bogus=1), spec)
    assert wrong == [
        SPEC_FILE + ": stacktune_gate_min_gain has type int, the table's is float",
        SPEC_FILE + ": stacktune_gate_min_gain has default 0.5, the table's is 0.02",
        SPEC_FILE + ": no option stacktune_gate_confidence (type float, default 0.95)",
        DEFAULTS_FILE + ": stacktune_gate_bogus is no setting of " + SETTINGS_FILE,
    ]


def test_the_budget_defaults_are_the_table_ones():
    assert DEFAULTS["stacktune_gate_budget"] == _gate.BUDGET_DEFAULTS, DEFAULTS_FILE
    assert SPEC["stacktune_gate_budget"]["default"] == _gate.BUDGET_DEFAULTS, SPEC_FILE
    assert SPEC["stacktune_gate_budget"]["type"] == "dict", SPEC_FILE


def test_the_two_tables_share_no_key():
    assert not set(_gate.SETTINGS) & set(_gate.BUDGET)
    for name, row in _gate.SETTINGS.items():
        assert row.type in ("float", "int"), name
        assert row.meaning.endswith("."), name
        # the default is valid by the row's own rule
        assert _gate.check_settings({name: row.default}).settings[name] == row.default, name
    for name, row in _gate.BUDGET.items():
        assert row.type == "int" and row.low <= row.default <= row.high, name


def test_the_role_hands_the_settings_on_through_the_table():
    """vars/main.yml does not list the settings: the lookup reads the table."""
    with open(os.path.join(ROLE, "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    assert role_vars["__stacktune_gate_settings"] == "{{ lookup('stacktune.gpu.gate_settings') }}"
    from ansible_collections.stacktune.gpu.plugins.lookup.gate_settings import variable_names

    assert variable_names() == {name: "stacktune_gate_" + name for name in _gate.SETTINGS}


def test_the_workload_table_and_steps_name_only_known_workloads():
    known = set(_workloads.GPU_WORKLOADS) | set(_workloads.CPU_WORKLOADS)
    for layer, names in DEFAULTS["stacktune_gate_workloads"].items():
        assert set(names) <= known, layer
    assert set(_workloads.DEFAULT_STEPS) <= known
    assert set(SPEC["stacktune_bench_steps_by_workload"]["options"]) == known | {"command"}


def test_the_gate_entry_points_take_the_settings_by_name_from_the_one_home():
    """judge_blocks, the one-block judge and the perf_gate filter do not spell the settings out:
    they take them as keyword arguments checked against SETTINGS."""
    import inspect

    from ansible_collections.stacktune.gpu.plugins.filter.perf_gate import perf_gate
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate.blocks import judge_blocks
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import judge

    for entry in (judge_blocks, judge, perf_gate):
        params = inspect.signature(entry).parameters
        assert not set(params) & set(_gate.SETTINGS), entry.__name__
        assert params["settings"].kind is inspect.Parameter.VAR_KEYWORD

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
        assert (
            perf_gate(before, faster, min_gain=0.005)["tolerances"]
            == judge(before, faster, min_gain=0.005)["tolerances"]
        )


@pytest.mark.parametrize("key", sorted(_gate.BUDGET))
def test_an_error_about_a_budget_key_names_the_budget_variable_on_every_path(key):
    """Given among the settings (where the budget never goes) or out of range in the budget,
    every entry point names stacktune_gate_budget.<key>, never stacktune_gate_<key>."""
    from ansible.errors import AnsibleFilterError

    from ansible_collections.stacktune.gpu.plugins.filter.perf_gate import gate_settings_check, perf_gate
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import judge

    wanted = "stacktune_gate_budget.%s" % key
    blocks = [[10.0 + 0.01 * (i % 7) for i in range(50)] for _b in range(4)]
    messages = []
    for value in (1, _gate.BUDGET[key].default):
        given = {key: value}
        for call, args in (
            (_gate.check_settings, (given,)),
            (_gate.check_settings, (given, {})),
            (judge, (blocks, blocks)),
        ):
            with pytest.raises(_gate.GateSettingError) as caught:
                call(*args, **({} if call is _gate.check_settings else given))
            messages.append(str(caught.value))
        messages.append(gate_settings_check({key: value}))
        with pytest.raises(AnsibleFilterError) as caught:
            perf_gate(blocks, blocks, **{key: value})
        messages.append(str(caught.value))
    with pytest.raises(_gate.GateSettingError) as caught:
        _gate.check_settings({}, {key: -1})
    messages.append(str(caught.value))
    messages.append(gate_settings_check({}, {key: "many"}))
    for message in messages:
        assert wanted in message, message
        assert "stacktune_gate_%s" % key not in message, message


ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


@pytest.mark.skipif(not os.path.exists(ANSIBLE), reason="ansible CLI not installed next to this Python")
def test_the_role_validates_the_settings_the_lookup_reads():
    """validate_gate.yml as the role runs it: a setting given as a variable reaches the check
    through the lookup (vars/main.yml), and a wrong one stops the play naming its variable."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="default")
    base = [ANSIBLE, "localhost", "-c", "local", "-m", "ansible.builtin.include_role"]
    base += ["-a", "name=stacktune tasks_from=validate_gate"]
    good = subprocess.run(
        base + ["-e", '{"stacktune_gate_tail_tolerance": 0.5}'],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert good.returncode == 0, good.stdout + good.stderr
    bad = subprocess.run(
        base + ["-e", '{"stacktune_gate_tail_tolerance": 1.5}'],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode != 0
    assert "stacktune_gate_tail_tolerance must be in [0, 1), got 1.5" in bad.stdout + bad.stderr


def test_an_integer_setting_is_checked_as_one():
    """The table's rows may be integers too: checked as the budget's are, open ends kept."""
    row = _gate.Setting("int", 3, 1, 10, True, False, "An integer setting.")
    assert _gate._setting_value("stacktune_gate_n", row, "4") == 4
    assert _gate._setting_value("stacktune_gate_n", row, 10.0) == 10
    for bad in (1, 11, 2.5, True, "many"):
        with pytest.raises(_gate.GateSettingError, match="stacktune_gate_n must be"):
            _gate._setting_value("stacktune_gate_n", row, bad)
    assert _gate.bounds_text(row) == "(1, 10]"
    assert _gate.bounds_text(_gate.BUDGET["max_blocks"]) == "2..200"
