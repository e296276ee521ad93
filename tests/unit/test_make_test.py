# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""`make test` runs every molecule scenario: each one of extensions/molecule/ is in exactly one
of the Makefile's groups (timed, alone; lane A; lane B), the cores scenario through
tools/test-cores.sh; a scenario beside other tests has no gate judging step times it measures
itself, and no privileged container (its live sysctl and sysfs values are the machine's: a
scenario beside it hashing its own container's live values saw them move)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GROUPS = ("SCENARIOS_TIMED", "SCENARIOS_LANE_A", "SCENARIOS_LANE_B")


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
    assert "$(SCENARIOS_TIMED) $(SCENARIOS_LANE_A) $(SCENARIOS_LANE_B)" in text
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


def test_a_scenario_on_privileged_containers_runs_alone():
    _text, groups = makefile_groups()
    beside = groups["SCENARIOS_LANE_A"] + groups["SCENARIOS_LANE_B"] + ["cores"]
    for name in beside:
        with open(os.path.join(REPO, "extensions", "molecule", name, "molecule.yml")) as handle:
            platforms = yaml.safe_load(handle)["platforms"]
        privileged = [p["name"] for p in platforms if p.get("privileged")]
        assert not privileged, "%s runs beside other tests on privileged containers %s" % (name, privileged)
