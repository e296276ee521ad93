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


@pytest.mark.parametrize("name, function", list(registered()), ids=lambda v: v if isinstance(v, str) else "")
def test_sidecar_names_every_option(name, function):
    with open(os.path.join(PLUGIN_DIR, name + ".yml")) as handle:
        doc = yaml.safe_load(handle)["DOCUMENTATION"]
    assert doc["name"] == name
    params = list(inspect.signature(function).parameters)
    assert set(doc["options"]) == {"_input"} | set(params[1:]), name
    for option in (doc.get("positional") or "").replace(" ", "").split(","):
        assert not option or option in params[1:], option
