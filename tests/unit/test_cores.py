# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ansible-core versions the collection declares are the ones it is tested on.

meta/runtime.yml's requires_ansible, every role's min_ansible_version, the execution
environment's ansible-core range and the venvs of `make cores` (requirements-cores.txt) with
the main one (requirements.txt) say the same: 2.16 to 2.20, each tested.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import glob
import os
import re

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the ansible bundle's major version -> the ansible-core it carries
CORE_OF_BUNDLE = {9: (2, 16), 10: (2, 17), 11: (2, 18), 12: (2, 19), 13: (2, 20)}


def _bundles(name):
    """The major versions of the ansible bundles a requirements file names, in order."""
    with open(os.path.join(REPO, name)) as handle:
        lines = [line.split("#")[0].strip() for line in handle]
    found = [re.match(r"^ansible>=([0-9]+)\.[0-9.]+,<([0-9]+)", line) for line in lines]
    for match in found:
        if match:
            assert int(match.group(2)) == int(match.group(1)) + 1, "%s: one bundle major per line" % name
    return [int(m.group(1)) for m in found if m]


def _cores():
    main = _bundles("requirements.txt")
    assert len(main) == 1
    others = _bundles("requirements-cores.txt")
    assert main[0] not in others, "the main version is not tested twice"
    return sorted(CORE_OF_BUNDLE[m] for m in main + others)


def test_every_supported_core_is_tested_once():
    assert _cores() == [(2, 16), (2, 17), (2, 18), (2, 19), (2, 20)]


def test_requires_ansible_is_the_oldest_tested_core():
    with open(os.path.join(REPO, "meta", "runtime.yml")) as handle:
        required = yaml.safe_load(handle)["requires_ansible"]
    assert required == ">=%d.%d.0" % _cores()[0], required


def test_every_role_declares_the_oldest_tested_core():
    metas = sorted(glob.glob(os.path.join(REPO, "roles", "*", "meta", "main.yml")))
    metas += sorted(glob.glob(os.path.join(REPO, "extensions", "molecule", "*", "roles", "*", "meta", "main.yml")))
    assert len(metas) > 10
    for path in metas:
        with open(path) as handle:
            declared = str(yaml.safe_load(handle)["galaxy_info"]["min_ansible_version"])
        assert declared == "%d.%d" % _cores()[0], "%s: min_ansible_version %s" % (os.path.relpath(path, REPO), declared)


def test_the_execution_environment_allows_every_tested_core_and_no_newer():
    with open(os.path.join(REPO, "execution-environment.yml")) as handle:
        spec = yaml.safe_load(handle)["dependencies"]["ansible_core"]["package_pip"]
    newest = _cores()[-1]
    assert spec == "ansible-core>=%d.%d,<%d.%d" % (_cores()[0] + (newest[0], newest[1] + 1)), spec


def test_the_newest_core_names_the_python_it_needs():
    with open(os.path.join(REPO, "requirements-cores.txt")) as handle:
        line = [x for x in handle if x.startswith("ansible>=13")][0]
    assert 'python_version >= "3.12"' in line, line


def test_module_utils_import_no_ansible_core():
    """module_utils is plain Python: what it does cannot depend on the ansible-core version.

    `make cores` leans on this: on the other cores it runs only the test files that reach
    ansible-core (tests/unit/conftest.py's core_facing); those of module_utils alone give the
    same verdict on every core."""
    import ast

    found = []
    for path in sorted(glob.glob(os.path.join(REPO, "plugins", "module_utils", "**", "*.py"), recursive=True)):
        with open(path) as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found += [
                "%s:%d %s" % (os.path.relpath(path, REPO), node.lineno, name)
                for name in names
                if name == "ansible" or name.startswith("ansible.")
            ]
    assert not found, found


def _unit_conftest():
    """tests/unit/conftest.py as a module: the selection `make cores` uses."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "stacktune_unit_conftest", os.path.join(REPO, "tests", "unit", "conftest.py")
    )
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    return conftest


def test_the_core_facing_tests_are_chosen_by_what_they_import():
    """The selection `make cores` uses: a plugin test is in, a module_utils-only test is out."""
    unit = os.path.join(REPO, "tests", "unit")
    conftest = _unit_conftest()
    assert conftest.core_facing(os.path.join(unit, "plugins", "callback", "test_stacktune_callback.py"))
    assert conftest.core_facing(os.path.join(unit, "plugins", "action", "test_gate_layer.py"))
    assert conftest.core_facing(os.path.join(unit, "test_release.py"))
    assert not conftest.core_facing(os.path.join(unit, "plugins", "module_utils", "gate", "test_gate.py"))
    assert not conftest.core_facing(os.path.join(unit, "test_portable_templates.py"))


def test_the_cores_driver_compares_report_shapes_but_not_what_was_measured():
    """tests/integration/cores.py: a report key the gate writes only for some measurements
    (worse_by) is no core difference; '' where another core writes null, or "400" where another
    writes 400, is, in the gate's details too; outside them every key and type must agree."""
    import importlib.util
    import sys

    here = os.path.join(REPO, "tests", "integration")
    sys.path.insert(0, here)
    try:
        spec = importlib.util.spec_from_file_location("stacktune_cores_driver", os.path.join(here, "cores.py"))
        driver = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(driver)
    finally:
        sys.path.remove(here)
    one = driver.shape({"layers": [{"name": "k", "gate": {"throughput": {"worse_by": "2%"}, "ci": 0.1, "n": 4}}]})
    other = driver.shape({"layers": [{"name": "k", "gate": {"throughput": {}, "ci": None, "n": 4}}]})
    assert driver.shape_differences(one, other) == []
    bad = driver.shape({"layers": [{"name": "k", "gate": {"throughput": {}, "ci": "", "n": "4"}}], "extra": None})
    assert driver.shape_differences(one, bad) == [
        ".extra: absent vs null",
        ".layers[].gate.ci: number vs empty string",
        ".layers[].gate.n: number vs string",
    ]


def _one_core_marked(node):
    return any(isinstance(deco, ast.Attribute) and deco.attr == "one_core" for deco in node.decorator_list)


def test_a_file_with_one_core_tests_keeps_a_test_on_every_core():
    """A test marked one_core (pytest.ini) runs on the main version only; the Ansible-facing part
    of its file (the plugin's import and construction, the module's argument handling) must still
    run on every core through another test of the file, and only core-facing files need the mark."""
    conftest = _unit_conftest()
    marked_files = 0
    for path in glob.glob(os.path.join(REPO, "tests", "unit", "**", "test_*.py"), recursive=True):
        with open(path) as handle:
            tree = ast.parse(handle.read(), path)
        tests = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        marked = [n.name for n in tests if _one_core_marked(n)]
        if not marked:
            continue
        marked_files += 1
        rel = os.path.relpath(path, REPO)
        assert len(marked) < len(tests), "%s: every test is one_core; none runs on the other cores" % rel
        assert conftest.core_facing(path), "%s: one_core marks a file that the other cores skip anyway" % rel
    assert marked_files >= 1
