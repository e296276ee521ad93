# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A layer is its policy: a layer role of this collection that goes through the settings
engine holds its checks (tasks/validate.yml) and its settings (tasks/settings.yml); its
entry points main, plan and verify are the shared ones of the layer role
(roles/layer/builtin), linked. And tune.yml reads nothing private of the stacktune role."""

import os

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLES = os.path.join(REPO, "roles")
BUILTIN = os.path.join(ROLES, "layer", "builtin")
ENTRY_POINTS = ("main", "plan", "verify")
POLICY = ("settings.yml", "validate.yml")
# The layers that audit and pin with their own tasks; every other layer of the collection's one
# list (roles/stacktune/vars/main.yml) goes through the settings engine.
OWN_TASK_LAYERS = ("bios", "driver")
with open(os.path.join(ROLES, "stacktune", "vars", "main.yml")) as _handle:
    BUILTIN_LAYERS = yaml.safe_load(_handle)["__stacktune_builtin_layers"]
ENGINE_LAYERS = tuple(layer for layer in BUILTIN_LAYERS if layer not in OWN_TASK_LAYERS)


def _linked_layers():
    return sorted(role for role in os.listdir(ROLES) if os.path.islink(os.path.join(ROLES, role, "tasks", "main.yml")))


def test_every_engine_layer_is_linked_and_only_they_are():
    assert set(OWN_TASK_LAYERS) <= set(BUILTIN_LAYERS)
    assert _linked_layers() == sorted(ENGINE_LAYERS)


@pytest.mark.parametrize("role", ENGINE_LAYERS)
def test_a_layer_role_holds_its_policy_and_links_the_shared_entry_points(role):
    tasks = os.path.join(ROLES, role, "tasks")
    files = sorted(os.listdir(tasks))
    assert files == sorted(POLICY + tuple(e + ".yml" for e in ENTRY_POINTS)), files
    for entry in ENTRY_POINTS:
        path = os.path.join(tasks, entry + ".yml")
        assert os.path.islink(path), "%s/tasks/%s.yml must link to roles/layer/builtin" % (role, entry)
        # relative, inside the collection, so that a built and installed collection keeps it
        assert os.readlink(path) == os.path.join("..", "..", "layer", "builtin", entry + ".yml")
        assert os.path.realpath(path) == os.path.join(os.path.realpath(BUILTIN), entry + ".yml")
    for name in POLICY:
        assert not os.path.islink(os.path.join(tasks, name))


@pytest.mark.parametrize("role", ENGINE_LAYERS)
def test_every_linked_entry_point_is_declared_in_the_layer_spec(role):
    with open(os.path.join(ROLES, role, "meta", "argument_specs.yml")) as handle:
        specs = yaml.safe_load(handle)["argument_specs"]
    assert set(ENTRY_POINTS) | {"validate"} <= set(specs), sorted(specs)


@pytest.mark.parametrize("role", ENGINE_LAYERS)
def test_the_settings_task_sets_what_the_shared_entry_points_read(role):
    with open(os.path.join(ROLES, role, "tasks", "settings.yml")) as handle:
        text = handle.read()
    assert "__%s_settings:" % role in text


def test_the_shared_entry_points_read_only_the_policy_files():
    for entry in ENTRY_POINTS:
        with open(os.path.join(BUILTIN, entry + ".yml")) as handle:
            tasks = yaml.safe_load(handle)
        imported = [t["ansible.builtin.import_tasks"] for t in tasks if "ansible.builtin.import_tasks" in t]
        assert set(imported) <= set(POLICY), (entry, imported)


def test_tune_yml_reads_only_the_public_output_of_the_stacktune_role():
    with open(os.path.join(REPO, "playbooks", "tune.yml")) as handle:
        text = handle.read()
    assert "__stacktune_" not in text
    assert "rescue:" not in text
