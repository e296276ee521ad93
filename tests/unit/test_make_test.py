# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`make test` runs every molecule scenario: each one of extensions/molecule/ is in exactly one
of the Makefile's groups (timed, alone; lanes A, B and C), the cores scenario through
tools/test-cores.sh; a scenario beside other tests has no gate judging step times it measures
itself (its step programs print them: --printed), and no privileged container whose layers change
the machine (its live sysctl and sysfs values are the machine's: a scenario beside it hashing its
own container's live values saw them move)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUPS = ("SCENARIOS_TIMED", "SCENARIOS_LANE_A", "SCENARIOS_LANE_B", "SCENARIOS_LANE_C")
BESIDE = ("SCENARIOS_LANE_A", "SCENARIOS_LANE_B", "SCENARIOS_LANE_C")


def makefile_groups():
    with open(os.path.join(REPO, "Makefile")) as handle:
        text = handle.read()
    groups = {}
    for name in GROUPS:
        found = re.search(r"^%s \?= (.*)$" % name, text, re.M)
        assert found, "the Makefile has no %s" % name
        groups[name] = found.group(1).split()
    return text, groups


def test_every_scenario_is_in_one_group_of_make_test():
    text, groups = makefile_groups()
    scenarios = sorted(
        name
        for name in os.listdir(os.path.join(REPO, "extensions", "molecule"))
        if os.path.isfile(os.path.join(REPO, "extensions", "molecule", name, "molecule.yml"))
    )
    named = [s for names in groups.values() for s in names]
    assert sorted(set(named)) == sorted(named), "a scenario is in two groups: %s" % groups
    assert sorted(named + ["cores"]) == scenarios, "make test does not run exactly the scenarios there are"
    assert "$(SCENARIOS_TIMED) $(SCENARIOS_LANE_A) $(SCENARIOS_LANE_B) $(SCENARIOS_LANE_C)" in text
    for name in GROUPS:
        assert "$(filter $(SCENARIOS),$(%s))" % name in text, "make test does not run %s" % name
    with open(os.path.join(REPO, "tools", "test-cores.sh")) as handle:
        assert "molecule test -s cores" in handle.read()


def test_the_cores_scenario_runs_beside_other_tests_on_printed_step_times():
    """The cores scenario runs in lane B: its gate must judge step times the program prints,
    never ones it times while the other lane loads the machine."""
    with open(os.path.join(REPO, "tests", "integration", "cores.py")) as handle:
        step = re.search(r"^STEP = (.*)$", handle.read(), re.M).group(1)
    assert '"--printed"' in step
    with open(os.path.join(REPO, "extensions", "molecule", "gate", "files", "stacktune-test-step")) as handle:
        assert '"--printed" in sys.argv' in handle.read()


# layers whose live values on a privileged container are the container's own (a /dev/shm mount, a
# file), with the memory layer's machine-wide settings left alone but for THP's defrag, which no
# other scenario sets or reads (the safety driver's hash reads THP's enabled switch)
CONTAINER_LOCAL_LAYERS = ("memory", "nccl")
MACHINE_WIDE_MEMORY = ("memory_thp_enabled", "memory_thp_defrag", "memory_hugepages")
UNREAD_MEMORY = ("memory_thp_defrag",)


def _scenario_vars():
    """Every scenario's group_vars for all, by name, with the cores driver's variables."""
    found = {}
    for name in sorted(os.listdir(os.path.join(REPO, "extensions", "molecule"))):
        path = os.path.join(REPO, "extensions", "molecule", name, "molecule.yml")
        if os.path.isfile(path):
            with open(path) as handle:
                config = yaml.safe_load(handle)
            inventory = config.get("provisioner", {}).get("inventory", {})
            found[name] = (config, inventory.get("group_vars", {}).get("all", {}))
    return found


def _sysctls_others_touch(scenarios, name):
    """The sysctls that a kernel profile sets, the safety driver hashes, or another scenario
    (or the cores and safety drivers) names."""
    with open(os.path.join(REPO, "roles", "kernel", "vars", "main.yml")) as handle:
        profiles = yaml.safe_load(handle)["__kernel_profiles"]
    names = {key for profile in profiles.values() for key in profile}
    with open(os.path.join(REPO, "tests", "integration", "safety.py")) as handle:
        safety = handle.read()
    hashed = re.search(r"for k in (.*?); do", safety[safety.index("HASH_SCRIPT") :], re.S).group(1)
    names |= {key.replace("/", ".") for key in hashed.replace("\\", " ").split()}
    names |= set(re.findall(r"\b(?:vm|kernel|net|fs)\.[a-z_.]+", safety))
    with open(os.path.join(REPO, "tests", "integration", "cores.py")) as handle:
        names |= set(re.findall(r"\b(?:vm|kernel|net|fs)\.[a-z_.]+", handle.read()))
    for other, (_config, group_vars) in scenarios.items():
        if other != name:
            names |= set(group_vars.get("kernel_sysctl") or {})
    return names


def test_a_scenario_that_changes_the_machine_s_live_values_runs_alone():
    """A privileged container's sysctls, THP and IRQ affinities are the machine's: a scenario
    beside others may use one only where its layers change nothing of the machine that another
    scenario sets or reads: the kernel layer without a profile, on sysctls nobody else names."""
    _text, groups = makefile_groups()
    with open(os.path.join(REPO, "roles", "memory", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    for var in MACHINE_WIDE_MEMORY:
        assert defaults[var] is None, "memory's default %s changes the machine" % var
    scenarios = _scenario_vars()
    beside = [s for name in BESIDE for s in groups[name]] + ["cores"]
    for name in beside:
        config, group_vars = scenarios[name]
        privileged = [p["name"] for p in config["platforms"] if p.get("privileged")]
        if not privileged:
            continue
        layers = group_vars.get("stacktune_layers")
        assert layers and set(layers) <= set(CONTAINER_LOCAL_LAYERS + ("kernel",)), (
            "%s runs beside other tests on privileged containers %s with layers %s" % (name, privileged, layers)
        )
        for var in MACHINE_WIDE_MEMORY:
            if var not in UNREAD_MEMORY:
                assert group_vars.get(var) is None, "%s sets %s on a privileged container beside other tests" % (
                    name,
                    var,
                )
        for var in UNREAD_MEMORY:
            if group_vars.get(var) is not None:
                setters = [other for other, (_c, v) in scenarios.items() if other != name and v.get(var) is not None]
                assert not setters, "%s and %s both set %s, a machine-wide value" % (name, setters, var)
        if "kernel" in layers:
            assert group_vars.get("kernel_profile") == "none", "%s: a kernel profile on a privileged container" % name
            assert group_vars.get("kernel_cmdline_args") in (None, {}), name
            mine = set(group_vars.get("kernel_sysctl") or {})
            assert mine, "%s: the kernel layer with no sysctl of its own" % name
            shared = mine & _sysctls_others_touch(scenarios, name)
            assert not shared, "%s changes the machine's %s, which other tests set or read" % (name, sorted(shared))


def test_the_rule_sees_the_sysctls_other_tests_touch():
    """The rule above is only as good as what it reads: the profiles', the safety hash's and the
    drivers' sysctls are all in it."""
    touched = _sysctls_others_touch(_scenario_vars(), "privileged")
    assert {"vm.max_map_count", "kernel.numa_balancing", "vm.overcommit_memory", "vm.swappiness"} <= touched
    assert "vm.stat_interval" not in touched


def test_a_gated_scenario_beside_other_tests_runs_programs_that_print_their_step_times():
    """A scenario in a lane whose gate measures a command of its own runs it with --printed, and
    the program there honours it; a command the scenario never reaches (faults: the apply fails
    first) times nothing."""
    _text, groups = makefile_groups()
    seen = []
    for scenario in (s for name in BESIDE for s in groups[name]):
        base = os.path.join(REPO, "extensions", "molecule", scenario)
        with open(os.path.join(base, "molecule.yml")) as handle:
            inventory = yaml.safe_load(handle)["provisioner"].get("inventory", {})
        group_vars = inventory.get("group_vars", {}).get("all", {})
        if group_vars.get("stacktune_gate") is False:
            continue
        for key in ("stacktune_bench_command", "stacktune_bench_live_command"):
            command = group_vars.get(key)
            if not command:
                continue
            seen.append(scenario)
            if command[:2] == ["python3", "-c"]:
                assert "time" not in command[2], "%s: %s times its steps beside other tests" % (scenario, key)
                continue
            assert "--printed" in command, "%s: %s times its steps beside other tests: %s" % (scenario, key, command)
            program = os.path.join(base, "files", os.path.basename(command[1]))
            with open(program) as handle:
                assert '"--printed" in sys.argv' in handle.read(), "%s does not print its step times" % program
    assert {"live", "search", "failures"} <= set(seen), seen


def test_a_failed_part_is_named_last_with_its_error_lines(tmp_path):
    """A CI page shows a log's last lines only: make test ends a red run with the failed part,
    the make target, the last scenario begun and its error lines (tools/test-failure.sh), read
    here from a lane's log as molecule writes it, colours included."""
    log = tmp_path / "lane"
    log.write_text(
        "== molecule scenario default (05:00:00)\n"
        "\x1b[32mdefault : actions=8 successful=8 failed=0\x1b[0m\n"
        "== molecule scenario safety (05:01:00)\n"
        "TASK [Give every host a GRUB configuration]\n"
        "ok: [safety-ref]\n"
        '\x1b[31mfatal: [safety-h1]: UNREACHABLE! => {"changed": false, "msg": "Task failed"}\x1b[0m\n'
        "\x1b[31msafety-h1 : ok=0 changed=0 unreachable=1 failed=1\x1b[0m\n"
        "make[1]: *** [Makefile:128: molecule] Error 4\n"
    )
    out = subprocess.run(
        [os.path.join(REPO, "tools", "test-failure.sh"), "lane A (lint, sanity, unit, then its scenarios)", str(log)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert out[0] == (
        "stacktune: make test: lane A (lint, sanity, unit, then its scenarios) failed: "
        "make[1]: *** [Makefile:128: molecule] Error 4"
    )
    assert out[1] == "  the last scenario it began: molecule scenario safety (05:01:00)"
    assert out[2:] == [
        '  | fatal: [safety-h1]: UNREACHABLE! => {"changed": false, "msg": "Task failed"}',
        "  | safety-h1 : ok=0 changed=0 unreachable=1 failed=1",
        "  | make[1]: *** [Makefile:128: molecule] Error 4",
    ]
    assert sum(len(line) + 1 for line in out) < 1200
    text, _groups = makefile_groups()
    for part in ("lane A", "lane B", "lane C", "the timed scenarios"):
        assert 'tools/test-failure.sh "%s' % part in text


def test_unit_tests_that_judge_how_busy_the_machine_is_run_after_the_lanes():
    """Lane A's unit run leaves out the tests marked alone (pytest.ini); make test runs them
    after every lane has ended and before the timed scenarios; they are real tests, collected."""
    text = makefile_groups()[0]
    recipe = text[text.index("\ntest: ") : text.index("\ndeps-run:")]
    assert """unit PYTEST_ARGS='-m "not gpu and not alone"'""" in recipe
    after_lanes = recipe.index("wait $$third")
    assert after_lanes < recipe.index("pytest -m alone") < recipe.index("$(SCENARIOS_TIMED)")
    assert re.search(r"^unit: .*\n\tpytest \$\(PYTEST_ARGS\)$", text, re.M)

    def collected(marks):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", "-m", marks],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        return [line for line in done.stdout.splitlines() if "::" in line]

    alone = collected("alone")
    assert "tests/unit/plugins/module_utils/diagnose/test_run.py::test_diagnose_a_builtin_workload" in alone
    beside = collected("not gpu and not alone")
    assert len(beside) > 1000 and not set(alone) & set(beside)
