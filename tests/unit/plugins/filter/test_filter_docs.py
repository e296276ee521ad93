# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every filter of the collection has its documentation next to it, naming its options."""

from __future__ import absolute_import, division, print_function

import importlib
import inspect
import os

import pytest
import yaml

from ansible_collections.stacktune.gpu.plugins.filter import verify_table

PLUGIN_DIR = os.path.dirname(verify_table.__file__)
PACKAGE = verify_table.__name__.rsplit(".", 1)[0]


def registered():
    for name in sorted(os.listdir(PLUGIN_DIR)):
        if name.endswith(".py") and not name.startswith("_"):
            module = importlib.import_module("%s.%s" % (PACKAGE, name[:-3]))
            yield from sorted(module.FilterModule().filters().items())


def fragment_options(name):
    """The options of the doc fragment ``name`` (stacktune.gpu.<module>[.<attribute>]), as ansible-doc reads them."""
    parts = name.split(".")
    assert parts[:2] == ["stacktune", "gpu"], name
    module = importlib.import_module("ansible_collections.stacktune.gpu.plugins.doc_fragments." + parts[2])
    attribute = parts[3].upper() if len(parts) > 3 else "DOCUMENTATION"
    return yaml.safe_load(getattr(module.ModuleDocFragment, attribute))["options"]


def documented_options(doc):
    """The options of a filter's DOCUMENTATION with its fragments' (its own win, as in ansible-doc)."""
    options = {}
    for fragment in doc.get("extends_documentation_fragment") or []:
        options.update(fragment_options(fragment))
    options.update(doc["options"])
    return options


def taken_options(function, doc):
    """The options a filter takes: its named parameters after the input, and for ``**settings``
    the options of its fragments (the gate's settings, taken by name from their table)."""
    params = inspect.signature(function).parameters
    names = {n for n, p in list(params.items())[1:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        for fragment in doc.get("extends_documentation_fragment") or []:
            names |= set(fragment_options(fragment))
    return names


@pytest.mark.parametrize("name, function", list(registered()), ids=lambda v: v if isinstance(v, str) else "")
def test_sidecar_names_every_option(name, function):
    with open(os.path.join(PLUGIN_DIR, name + ".yml")) as handle:
        doc = yaml.safe_load(handle)["DOCUMENTATION"]
    assert doc["name"] == name
    options = documented_options(doc)
    assert set(options) == {"_input"} | taken_options(function, doc), name
    for fragment in doc.get("extends_documentation_fragment") or []:
        # an option comes from its fragment, never restated by hand beside it
        restated = set(doc["options"]) & set(fragment_options(fragment))
        assert not restated, "%s restates %s of %s" % (name, sorted(restated), fragment)
    for option in (doc.get("positional") or "").replace(" ", "").split(","):
        assert not option or option in options, option
