# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a release states about itself is true: no plugin or option was added in a version
after the one galaxy.yml builds, and every collection galaxy.yml depends on is used."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import os
import re

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(REPO, "galaxy.yml")) as _handle:
    GALAXY = yaml.safe_load(_handle)


def version(text):
    return tuple(int(p) for p in str(text).split("."))


def _documented():
    """(file, DOCUMENTATION as data) of every plugin: modules, action, callback, filter, test."""
    plugins = os.path.join(REPO, "plugins")
    for kind in sorted(os.listdir(plugins)):
        folder = os.path.join(plugins, kind)
        if kind in ("module_utils", "plugin_utils", "doc_fragments") or not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.endswith(".py"):
                with open(path) as handle:
                    tree = ast.parse(handle.read())
                for node in tree.body:
                    if (
                        isinstance(node, ast.Assign)
                        and isinstance(node.targets[0], ast.Name)
                        and node.targets[0].id == "DOCUMENTATION"
                    ):
                        yield os.path.relpath(path, REPO), yaml.safe_load(node.value.value)
            elif name.endswith(".yml"):
                with open(path) as handle:
                    yield os.path.relpath(path, REPO), yaml.safe_load(handle)["DOCUMENTATION"]


def _versions_added(doc, where=""):
    """Every version_added in a plugin's documentation, with where it is."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "version_added":
                yield where or "the plugin", value
            else:
                yield from _versions_added(value, "%s.%s" % (where, key) if where else key)
    elif isinstance(doc, list):
        for item in doc:
            yield from _versions_added(item, where)


DOCUMENTED = list(_documented())


def test_every_kind_of_plugin_is_read():
    kinds = {path.split(os.sep)[1] for path, _doc in DOCUMENTED}
    assert {"modules", "callback", "filter", "test"} <= kinds, kinds


@pytest.mark.parametrize("path, doc", DOCUMENTED, ids=[p for p, _d in DOCUMENTED])
def test_no_version_added_is_ahead_of_galaxy_yml(path, doc):
    assert doc.get("version_added"), "%s has no version_added" % path
    for where, added in _versions_added(doc):
        assert version(added) <= version(GALAXY["version"]), "%s: %s has version_added %s, galaxy.yml builds %s" % (
            path,
            where,
            added,
            GALAXY["version"],
        )


def _sources():
    for top in ("roles", "playbooks", "plugins", "meta"):
        for base, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith((".yml", ".yaml", ".py", ".j2")):
                    with open(os.path.join(base, name)) as handle:
                        yield handle.read()
    with open(os.path.join(REPO, "tune.yml")) as handle:
        yield handle.read()


@pytest.mark.parametrize("dependency", sorted(GALAXY.get("dependencies") or {}))
def test_every_dependency_is_used_by_the_collection(dependency):
    used = re.compile(r"\b%s\.[a-z_]+" % re.escape(dependency))
    assert any(used.search(text) for text in _sources()), (
        "galaxy.yml depends on %s, but no role, playbook or plugin uses it" % dependency
    )


def test_the_galaxy_requirements_name_the_dependencies():
    with open(os.path.join(REPO, "collections", "requirements.yml")) as handle:
        listed = {c["name"] for c in yaml.safe_load(handle)["collections"]}
    assert listed == set(GALAXY.get("dependencies") or {})
