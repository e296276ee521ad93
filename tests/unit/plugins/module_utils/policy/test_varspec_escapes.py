"""Generated from every role's argument spec: each variable whose text lands in a line of a file
gets every value that would escape that line, each variable that names a file every value that
would leave its directory, and check_vars' rules refuse them all, naming the variable. Every
other text variable is accounted for below with where its value goes."""

import os

import pytest
import yaml

from ansible_collections.stacktune.gpu.plugins.lookup import report_dir as report_dir_lookup
from ansible_collections.stacktune.gpu.plugins.module_utils.policy.values import LINE_BREAKS
from ansible_collections.stacktune.gpu.plugins.module_utils.policy.varspec import (
    RUN_NAMES,
    check,
    check_run_names,
    rule_for,
)

ROLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "roles")

LINE_ESCAPES = ["a%sb" % c for c in LINE_BREAKS] + [
    "a\x00b",
    "$(touch /tmp/x) --banirq=33",
    "`touch /tmp/x`",
    "${IFS}",
    'a"b',
    "a'b",
    "a\\",
]
COMPONENT_ESCAPES = ["../../../escaped-runid", "a/b", "..", ".", "", "run\u2028id", "run\nid", "a\\b"]

# Text variables whose values land in no line of a file and name no file, and where they go.
NOT_IN_A_LINE = {
    "gpu_settings_power_limit_watts": "NVML, as whole watts (it or each of its candidates: layers/candidates.py)",
    "acceptance_python": "the program the acceptance check runs (an argv)",
    "preflight_nccl_python": "the program the NCCL check runs (an argv)",
    "stacktune_bench_python": "the program measured blocks run (an argv)",
    "stacktune_bench_command": "the measured blocks' own program (an argv)",
    "stacktune_bench_live_command": "the live trial's own program (an argv)",
    "stacktune_diagnose_workload": "a built-in workload name, checked against the live workloads",
    "acceptance_environment": "the environment of the acceptance program",
    "acceptance_gpus": "GPU indices (numbers)",
    "acceptance_quarantine_group": "an inventory group name (add_host)",
    "acceptance_memory_bandwidth_gbps": "numbers per GPU model, compared",
    "acceptance_report_dir": "the controller directory the reports go to (chosen by its user)",
    "facts_report_dir": "the controller directory the reports go to (chosen by its user)",
    "fleet_report_dir": "the controller directory the reports go to (chosen by its user)",
    "stacktune_report_dir": "the controller directory the reports go to (chosen by its user)",
    "fleet_report_hosts": "inventory names, looked up",
    "fleet_report_groups": "inventory group names, looked up",
    "bios_min_version": "compared with the BIOS version",
    "bios_min_microcode": "compared with the microcode version",
    "driver_denylist": "compared with the driver version",
    "preflight_driver_denylist": "compared with the driver version",
    "preflight_cuda_minor_compat_majors": "numbers, compared",
    "gpu_settings_compute_mode": "an NVML call (choices)",
    "gpu_settings_app_clocks": "an NVML call (two numbers)",
    "gpu_settings_gpus": "GPU indices",
    "io_paths": "host paths the io layer looks up to find disks (never written)",
    "numa_irq_nics": "interface names compared with the facts",
    "layer_settings": "the engine's settings, which the engine's kinds check themselves",
    "layer_notify": "handler names",
    "metrics_records": "the run's own records",
    "stacktune_gate_policies": "layer names to policies, checked by the gate's settings",
    "stacktune_gate_budget": "numbers, checked by the gate's settings",
    "stacktune_gate_workloads": "workload names, checked by the gate's settings",
    "stacktune_bench_steps_by_workload": "numbers per workload",
    "stacktune_calibrate_workloads": "workload names, checked",
}


def spec_options():
    """(role, name, spec) of every option of every role's main entry point."""
    out = {}
    for role in sorted(os.listdir(ROLES)):
        path = os.path.join(ROLES, role, "meta", "argument_specs.yml")
        if os.path.isfile(path):
            with open(path) as handle:
                options = yaml.safe_load(handle)["argument_specs"]["main"].get("options") or {}
            for name, spec in options.items():
                out.setdefault(name, (role, spec or {}))
    return [(role, name, spec) for name, (role, spec) in sorted(out.items())]


OPTIONS = spec_options()
LINE_VARS = [(role, name, spec) for role, name, spec in OPTIONS if rule_for(name).get("line")]
COMPONENT_VARS = [(role, name, spec) for role, name, spec in OPTIONS if rule_for(name).get("component")]


def shaped(spec, text):
    """``text`` in the shapes a variable of this spec takes it: as itself, an item, a key or a value."""
    kind = spec.get("type", "str")
    if kind == "dict":
        return [{"NCCL_X": text}, {text: "1"}]
    if kind == "list":
        return [[text]]
    return [text]


def test_the_rules_cover_the_variables_that_were_seen():
    names = {name for _role, name, _spec in LINE_VARS}
    assert {"numa_irq_irqbalance_args", "kernel_sysctl", "kernel_cmdline_args", "nccl_env", "memory_shm_size"} <= names
    assert {"layer_name", "layer_run_id"} <= {name for _role, name, _spec in COMPONENT_VARS}


@pytest.mark.parametrize("role,name,spec", OPTIONS, ids=[name for _r, name, _s in OPTIONS])
def test_every_text_variable_is_ruled_or_said_to_land_in_no_line(role, name, spec):
    kind = spec.get("type", "str")
    if kind in ("bool", "int", "float") or spec.get("choices"):
        return
    rule = rule_for(name)
    assert rule.get("line") or rule.get("component") or rule.get("absolute") or name in NOT_IN_A_LINE, (
        "%s (role %s) takes text: give it a rule in policy/varspec.py RULES, or say here where its value goes"
        % (name, role)
    )


@pytest.mark.parametrize("bad", LINE_ESCAPES)
@pytest.mark.parametrize("role,name,spec", LINE_VARS, ids=[name for _r, name, _s in LINE_VARS])
def test_every_line_variable_refuses_every_escape_naming_itself(role, name, spec, bad):
    for value in shaped(spec, bad):
        errors = check({name: spec}, {name: value})
        assert len(errors) == 1, (value, errors)
        assert errors[0].startswith(name) and "must be plain text on one line" in errors[0], errors


@pytest.mark.parametrize("bad", COMPONENT_ESCAPES)
@pytest.mark.parametrize("role,name,spec", COMPONENT_VARS, ids=[name for _r, name, _s in COMPONENT_VARS])
def test_every_name_variable_refuses_what_leaves_its_directory(role, name, spec, bad):
    errors = check({name: spec}, {name: bad})
    assert errors and errors[0].startswith(name + " must be a name"), errors


@pytest.mark.parametrize("bad", COMPONENT_ESCAPES)
@pytest.mark.parametrize("name", RUN_NAMES)
def test_the_run_id_and_the_host_name_are_names(name, bad):
    errors = check_run_names({name: bad})
    assert len(errors) == 1 and errors[0].startswith(name + " must be a name"), errors


def test_the_escaped_run_id_of_the_fault_corpus(tmp_path):
    reports = tmp_path / "reports"
    errors = check_run_names({"stacktune_run_id": "../../../escaped-runid", "stacktune_report_dir": str(reports)})
    assert errors == [
        "stacktune_run_id must be a name without path separators, '..' or control characters (it names a file or "
        "directory in the reports); '../../../escaped-runid' holds a path separator (/)"
    ]


def test_a_run_id_whose_directory_links_outside_the_reports_is_refused(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    os.symlink(str(tmp_path), str(reports / "run1"))
    errors = check_run_names({"stacktune_run_id": "run1", "stacktune_report_dir": str(reports)})
    assert len(errors) == 1 and "must name a directory inside stacktune_report_dir" in errors[0], errors
    assert check_run_names({"stacktune_run_id": "run2", "stacktune_report_dir": str(reports)}) == []


def test_run_ids_and_host_names_stacktune_makes_pass():
    for value in ("20261202T185248Z", "calibrate-20261202T185248Z", "gpu01.example.com", "safety-ref", "10.0.0.1"):
        assert check_run_names({"stacktune_run_id": value, "inventory_hostname": value}) == []


@pytest.mark.parametrize("role,name,spec", OPTIONS, ids=[name for _r, name, _s in OPTIONS])
def test_the_shipped_defaults_pass_the_rules(role, name, spec):
    default = spec.get("default")
    if default is None or "{{" in str(default):
        return
    assert check({name: spec}, {name: default}) == []


def test_the_report_dir_lookup_joins_names_only(tmp_path):
    lookup = report_dir_lookup.LookupModule()
    base = str(tmp_path / "reports")
    assert lookup.run(["run1"], base=base) == [os.path.join(base, "run1")]
    for bad in COMPONENT_ESCAPES:
        with pytest.raises(report_dir_lookup.AnsibleLookupError, match="no sub-directory of"):
            lookup.run([bad], base=base)
