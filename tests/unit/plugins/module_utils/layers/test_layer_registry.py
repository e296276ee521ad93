# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/layers/registry.py: one module per layer, found by its file name, its rules and
candidates gathered for policy/varspec.py; every layer role calls layer_settings with its name."""

from __future__ import absolute_import, division, print_function

import os
import re
import types

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.layers import registry
from ansible_collections.stacktune.gpu.plugins.module_utils.policy import varspec

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
CALL = re.compile(r"'([a-z_]+)' \| stacktune\.gpu\.layer_settings\(")


def fake(name, **attributes):
    module = types.ModuleType("ansible_collections.stacktune.gpu.plugins.module_utils.layers." + name)
    module.__dict__.update(attributes)
    return module


def test_every_layer_module_is_found_and_every_role_calls_its_own():
    folder = os.path.join(REPO, "plugins", "module_utils", "layers")
    assert registry.names() == registry.names(folder) == tuple(sorted(registry.LAYERS))
    calls = {}
    for role in sorted(os.listdir(os.path.join(REPO, "roles"))):
        path = os.path.join(REPO, "roles", role, "tasks", "settings.yml")
        if os.path.exists(path):
            with open(path) as handle:
                calls[role] = set(CALL.findall(handle.read()))
    # every role with settings calls layer_settings with its own name only, and has a module
    assert {role: names for role, names in calls.items() if names} == {name: {name} for name in registry.LAYERS}
    for name, module in registry.LAYERS.items():
        assert name == module.NAME and callable(module.settings)


def test_names_are_the_folders_modules_that_are_no_shared_part(tmp_path):
    for name in ("__init__.py", "registry.py", "shared.py", "candidates.py", "mine.py", "Bad.py", "notes.txt"):
        (tmp_path / name).write_text("")
    assert registry.names(str(tmp_path)) == ("mine",)


def settings(*_args, **_kwargs):
    return []


def test_gather_checks_each_module():
    one = fake("one", NAME="one", settings=settings, RULES={"one_path": {"absolute": True}}, SEARCHABLE={})
    assert registry.gather([one]) == {"one": one}
    with pytest.raises(ValueError, match="layer module two: NAME must be 'two', got 'one'"):
        registry.gather([fake("two", NAME="one", settings=settings)])
    with pytest.raises(ValueError, match="layer module two has no settings function"):
        registry.gather([fake("two", NAME="two")])
    other = fake("two", NAME="two", settings=settings, RULES={"one_path": {"line": "x"}})
    with pytest.raises(ValueError, match="variable one_path is declared by the layers one and two"):
        registry.gather([one, other])


def test_unknown_layer_is_refused_naming_the_known_ones():
    with pytest.raises(LookupError, match="'bios' is no layer with settings; known: cpu, gpu_settings, io"):
        registry.layer("bios")
    assert registry.layer("memory") is registry.LAYERS["memory"]


def test_varspec_applies_every_layers_rules_and_candidates():
    for name, rule in registry.RULES.items():
        assert varspec.rule_for(name) is rule
    assert varspec.SEARCHABLE is registry.SEARCHABLE
    assert sorted(registry.SEARCHABLE) == [
        "gpu_settings_power_limit_watts",
        "memory_thp_defrag",
        "memory_thp_enabled",
    ]
    assert registry.RULES["nccl_conf_path"] == {"absolute": True}
    assert varspec.check({"nccl_conf_path": {"type": "path"}}, {"nccl_conf_path": "nccl.conf"}) == [
        "nccl_conf_path must be an absolute path without '..', got 'nccl.conf'"
    ]
    with pytest.raises(ValueError, match="rules declared both here and in a layer's module: layer_root"):
        varspec.joined(varspec.RULES, {"layer_root": {"absolute": True}})
