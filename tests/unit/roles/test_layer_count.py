# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A new layer is its module, its own role folder and one line (docs/architecture.md, "Where a
new piece goes"): in a copy of the collection, a dummy layer is added that way (its module
plugins/module_utils/layers/dummy.py with its settings and the rule of its variable, its role
folder whose settings call the generic filter layer_settings, its name in
__stacktune_builtin_layers), and then validation takes it by its short name and applies its
module's rule, the shared plan entry point predicts its one change in check mode (on a
constructed root: nothing is written), and the layer-role contract tests pass on the copy.
Before the one line, validation refuses it, naming stacktune_layers."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
VARS = "roles/stacktune/vars/main.yml"
MODULE = "plugins/module_utils/layers/dummy.py"
# The dummy layer's module: its settings (one file) and the rule of its variable, which the
# registry (module_utils/layers/registry.py) gathers by the file's name.
MODULE_TEXT = '''# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A dummy layer: one file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.layers.shared import LayerError

NAME = "dummy"

RULES = {"dummy_path": {"absolute": True}}

SEARCHABLE = {}


def settings(path, line="dummy=1"):
    """The file ``path`` holding ``line``."""
    if not isinstance(path, str):
        raise LayerError("dummy_settings expects the file's path, got %r" % (path,))
    return [{"kind": "file", "key": path, "value": line + "\\n", "mode": "0644", "var": "dummy_path"}]
'''
DUMMY = {
    "meta/main.yml": None,  # the memory layer's, renamed
    "meta/argument_specs.yml": {
        "argument_specs": {
            entry: {
                "short_description": "A dummy layer that writes one file (%s)" % entry,
                "options": {"dummy_path": {"type": "str", "required": True, "description": "The file it writes."}},
            }
            for entry in ("main", "validate", "plan", "verify")
        }
    },
    "tasks/validate.yml": [
        {"name": "Check the dummy variables against the role's argument spec", "stacktune.gpu.check_vars": None}
    ],
    "tasks/settings.yml": [
        {
            "name": "The dummy layer's one file",
            "ansible.builtin.set_fact": {
                "__dummy_settings": "{{ 'dummy' | stacktune.gpu.layer_settings(dummy_path) }}"
            },
        }
    ],
}


def tree_hashes(root):
    out = {}
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[rel] = "link:" + os.readlink(path)
            else:
                with open(path, "rb") as handle:
                    out[rel] = hashlib.sha256(handle.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    if not os.path.exists(PLAYBOOK):
        pytest.skip("ansible-playbook is not beside %s" % sys.executable)
    if not os.path.exists(os.path.join(REPO, ".git")) or shutil.which("git") is None:
        pytest.skip("not a git checkout: the copy is made of the tracked files")
    top = tmp_path_factory.mktemp("layer_count")
    dest = top / "ansible_collections" / "stacktune" / "gpu"
    dest.mkdir(parents=True)
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout.split(b"\0")
    for raw in filter(None, files):
        rel = raw.decode()
        src, dst = os.path.join(REPO, rel), os.path.join(str(dest), rel)
        if not os.path.lexists(src):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    return top, dest


def add_dummy_role(dest):
    role = os.path.join(str(dest), "roles", "dummy")
    os.makedirs(os.path.join(role, "tasks"))
    os.makedirs(os.path.join(role, "meta"))
    for entry in ("main", "plan", "verify"):
        os.symlink(
            os.path.join("..", "..", "layer", "builtin", entry + ".yml"), os.path.join(role, "tasks", entry + ".yml")
        )
    with open(os.path.join(str(dest), "roles", "memory", "meta", "main.yml")) as handle:
        meta = yaml.safe_load(handle)
    meta["galaxy_info"]["role_name"] = "dummy"
    for rel, content in DUMMY.items():
        with open(os.path.join(role, rel), "w") as handle:
            handle.write("---\n" + yaml.safe_dump(meta if content is None else content, sort_keys=False))


def add_dummy_module(dest):
    with open(os.path.join(str(dest), MODULE), "w") as handle:
        handle.write(MODULE_TEXT)


def add_the_one_line(dest):
    path = os.path.join(str(dest), VARS)
    with open(path) as handle:
        lines = handle.read().splitlines(True)
    found = [i for i, line in enumerate(lines) if line.startswith("__stacktune_builtin_layers: [")]
    assert len(found) == 1, "%s: one __stacktune_builtin_layers line" % VARS
    lines[found[0]] = lines[found[0]].rstrip().rstrip("]") + ", dummy]\n"
    with open(path, "w") as handle:
        handle.write("".join(lines))


def plan_dummy(top, work, dummy_path="/etc/stacktune-dummy.conf"):
    """Validate as tune.yml does, then plan the dummy layer on a constructed root."""
    root = os.path.join(str(work), "root")
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    out = os.path.join(str(work), "plan.json")
    play = [
        {
            "name": "A new layer by its short name",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "stacktune_layers": ["dummy"],
                "dummy_path": dummy_path,
                "layer_root": root,
                "stacktune_journal_dir": "/var/lib/stacktune",
            },
            "tasks": [
                {
                    "name": "Validate as tune.yml does",
                    "ansible.builtin.include_role": {"name": "stacktune.gpu.stacktune", "tasks_from": "validate"},
                },
                {
                    "name": "Plan the layer",
                    "ansible.builtin.include_role": {"name": "stacktune.gpu.dummy", "tasks_from": "plan"},
                },
                {
                    "name": "Keep the plan",
                    "ansible.builtin.copy": {"content": "{{ dummy_plan | to_json }}", "dest": out, "mode": "0600"},
                    "check_mode": False,
                },
            ],
        }
    ]
    path = os.path.join(str(work), "play.yml")
    with open(path, "w") as handle:
        yaml.safe_dump(play, handle, sort_keys=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(top),
        ANSIBLE_HOME=os.path.join(str(work), "ansible-home"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="0",
    )
    run = subprocess.run(
        [PLAYBOOK, "-i", "localhost,", path],
        check=False,
        cwd=str(work),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    plan = None
    if run.returncode == 0:
        with open(out) as handle:
            plan = json.load(handle)
    return run, plan, root


def test_a_new_layer_is_its_role_folder_and_one_line(copy, tmp_path):
    top, dest = copy
    before = tree_hashes(str(dest))
    add_dummy_module(dest)
    add_dummy_role(dest)

    refused, _plan, _root = plan_dummy(top, tmp_path / "refused")
    assert refused.returncode != 0
    assert "stacktune_layers" in refused.stdout and "dummy" in refused.stdout, refused.stdout[-3000:]

    add_the_one_line(dest)
    after = tree_hashes(str(dest))
    touched = sorted(rel for rel in set(before) | set(after) if before.get(rel) != after.get(rel))
    outside = [rel for rel in touched if not rel.startswith("roles/dummy/")]
    assert outside == [MODULE, VARS], touched

    run, plan, root = plan_dummy(top, tmp_path / "accepted")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert plan["layer"] == "dummy" and plan["changed"] is True, plan
    assert [(s["id"], s["status"]) for s in plan["settings"]] == [("file:/etc/stacktune-dummy.conf", "changed")]
    # check mode: nothing written under the constructed root
    assert os.listdir(os.path.join(root, "etc")) == []

    # the rule of the layer's variable is its module's (gathered by the registry)
    relative, _plan, _root = plan_dummy(top, tmp_path / "relative", dummy_path="etc/stacktune-dummy.conf")
    assert relative.returncode != 0
    assert "dummy_path must be an absolute path without '..', got 'etc/stacktune-dummy.conf'" in relative.stdout, (
        relative.stdout[-3000:]
    )

    # the layer-role contract (tests/unit/roles/test_layer_roles.py) holds for the copy too
    contract = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/unit/roles/test_layer_roles.py"],
        check=False,
        cwd=str(dest),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert contract.returncode == 0, contract.stdout[-3000:]
    assert (
        "dummy"
        in subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "--collect-only",
                "tests/unit/roles/test_layer_roles.py",
            ],
            check=False,
            cwd=str(dest),
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
    )
