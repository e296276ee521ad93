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
