# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""No shell strings built from variables, anywhere stacktune runs a program.

Roles and playbooks run programs only with argv lists (command: argv), never through a
shell; modules and module_utils only with argument lists (run_command([...]),
subprocess without shell=True). The safety scenario checks the files on real containers;
this checks the source.
"""

from __future__ import absolute_import, division, print_function

import ast
import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHELL_MODULES = {"shell", "raw", "script", "ansible.builtin.shell", "ansible.builtin.raw", "ansible.builtin.script"}
COMMAND_MODULES = {"command", "ansible.builtin.command"}


def _yaml_files():
    for top in ("roles", "playbooks"):
        for base, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in sorted(files):
                if name.endswith((".yml", ".yaml")):
                    yield os.path.join(base, name)
    yield os.path.join(REPO, "tune.yml")


def _tasks(node):
    """Every task dict in a playbook or task file, blocks and handlers included."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if any(key in node for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")):
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                yield from _tasks(node.get(key) or [])
        else:
            yield node


def _python_files():
    for base, _dirs, files in os.walk(os.path.join(REPO, "plugins")):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(base, name)


YAML_FILES = list(_yaml_files())
PYTHON_FILES = list(_python_files())


def test_the_sources_are_there():
    assert len(YAML_FILES) > 50 and len(PYTHON_FILES) > 20


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: os.path.relpath(p, REPO))
def test_tasks_run_programs_with_argv_lists_only(path):
    with open(path) as handle:
        data = yaml.safe_load(handle)
    for task in _tasks(data):
        used = SHELL_MODULES & set(task)
        assert not used, "%s: task %r uses %s" % (path, task.get("name"), used)
        for module in COMMAND_MODULES & set(task):
            args = task[module]
            assert isinstance(args, dict) and "argv" in args and "cmd" not in args, (
                "%s: task %r gives command a string, not argv" % (path, task.get("name"))
            )


@pytest.mark.parametrize("path", PYTHON_FILES, ids=lambda p: os.path.relpath(p, REPO))
def test_modules_never_ask_for_a_shell(path):
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        assert name not in ("system", "popen") or not (
            isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "os"
        ), "%s:%d calls os.%s" % (path, node.lineno, name)
        for keyword in node.keywords:
            if keyword.arg in ("shell", "use_unsafe_shell"):
                assert isinstance(keyword.value, ast.Constant) and keyword.value.value is False, (
                    "%s:%d passes %s=%s" % (path, node.lineno, keyword.arg, ast.dump(keyword.value))
                )
        if name == "run_command" and node.args:
            assert not _is_string(node.args[0]), "%s:%d run_command with a command string" % (path, node.lineno)


def _is_string(node):
    """A string literal, an f-string, or a string built with % or + from one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.Mod) or _is_string(node.left) or _is_string(node.right)
    return False


def test_every_module_documentation_is_yaml():
    """DOCUMENTATION, EXAMPLES and RETURN of every module parse (a ': ' in a plain line breaks
    ansible-doc; ansible-test's sanity run finds it too, but much later)."""
    modules = os.path.join(REPO, "plugins", "modules")
    for name in sorted(os.listdir(modules)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(modules, name)) as handle:
            tree = ast.parse(handle.read())
        found = {}
        for node in tree.body:
            named = isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            if named and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
                found[node.targets[0].id] = node.value.value
        assert sorted(found) == ["DOCUMENTATION", "EXAMPLES", "RETURN"], name
        for key, text in found.items():
            try:
                yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise AssertionError("%s %s: %s" % (name, key, exc)) from None


def _module_files():
    modules = os.path.join(REPO, "plugins", "modules")
    return sorted(os.path.join(modules, n) for n in os.listdir(modules) if n.endswith(".py"))


@pytest.mark.parametrize("path", _module_files(), ids=os.path.basename)
def test_no_module_returns_warnings_as_a_result_key(path):
    """ansible-core 2.19 deprecates a ``warnings`` key in exit_json/fail_json (removed in 2.23):
    modules call module.warn(). A result built with dict(..., warnings=...) or passed with
    warnings= is refused, and so is a literal "warnings" key handed to exit_json/fail_json."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in ("exit_json", "fail_json", "dict"):
            continue
        for keyword in node.keywords:
            assert keyword.arg != "warnings", "%s:%d passes warnings= to %s" % (path, node.lineno, name)
            if keyword.arg is None and isinstance(keyword.value, ast.Dict) and name != "dict":
                keys = [k.value for k in keyword.value.keys if isinstance(k, ast.Constant)]
                assert "warnings" not in keys, "%s:%d hands a 'warnings' key to %s" % (path, node.lineno, name)


def test_the_warnings_check_finds_what_it_refuses(tmp_path):
    """The check above, on a module that does what ansible-core deprecates."""
    bad = tmp_path / "bad.py"
    bad.write_text("module.exit_json(changed=False, warnings=['x'])\n")
    with pytest.raises(AssertionError, match="passes warnings= to exit_json"):
        test_no_module_returns_warnings_as_a_result_key(str(bad))
