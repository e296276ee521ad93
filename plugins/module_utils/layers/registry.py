# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The layers that turn variables into engine settings: one module per layer in this folder
(``layers/<name>.py``), gathered here by their file names. Every name the collection uses
about them is derived here: the modules by layer name, the value rules of their variables
(policy/varspec.py applies them) and the variables that take candidates.

A layer module holds:

- ``NAME``: the layer's name, its file's name (and its role's, ``roles/<name>/``);
- ``settings(...)``: the layer's settings from its variables and what its role read from the
  host, as the filter ``stacktune.gpu.layer_settings(name, ...)`` hands them (plain values);
  an argument it cannot use raises ``shared.LayerError``, which the filter reports;
- ``RULES``: ``{variable: rule}``, the forms and ranges of its variables that an argument spec
  cannot carry (policy/varspec.py describes a rule);
- ``SEARCHABLE``: ``{variable: (what one value is, in words; the check of one value)}``, the
  variables that take candidates (candidates.py).

A new layer: its module here, its role folder (``roles/<name>/``) and its name in
``__stacktune_builtin_layers`` (roles/stacktune/vars/main.yml).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import os
import re

# The modules of this folder that are no layer: what the layers share.
NOT_LAYERS = ("__init__", "candidates", "registry", "shared")

# A layer's name: its module's and its role's.
NAME = re.compile(r"^[a-z][a-z0-9_]*\Z")

PACKAGE = __name__.rsplit(".", 1)[0]


def names(folder=None):
    """The layer names: the modules of ``folder`` (this one by default) that are no
    :data:`NOT_LAYERS`, sorted."""
    folder = folder or os.path.dirname(os.path.abspath(__file__))
    found = (name[: -len(".py")] for name in os.listdir(folder) if name.endswith(".py"))
    return tuple(sorted(name for name in found if name not in NOT_LAYERS and NAME.match(name)))


def gather(modules):
    """name -> module of every module of ``modules``, checked: its NAME is its file's name, it
    has a ``settings`` function, and no variable has a rule or candidates in two layers."""
    out, owner = {}, {}
    for module in modules:
        name = module.__name__.rsplit(".", 1)[-1]
        if getattr(module, "NAME", None) != name:
            raise ValueError("layer module %s: NAME must be %r, got %r" % (name, name, getattr(module, "NAME", None)))
        if not callable(getattr(module, "settings", None)):
            raise ValueError("layer module %s has no settings function" % name)
        for variable in list(getattr(module, "RULES", {})) + list(getattr(module, "SEARCHABLE", {})):
            if owner.setdefault(variable, name) != name:
                raise ValueError("variable %s is declared by the layers %s and %s" % (variable, owner[variable], name))
        out[name] = module
    return out


LAYERS = gather(importlib.import_module("%s.%s" % (PACKAGE, name)) for name in names())


# The value rules of every layer's variables, and the variables that take candidates.
RULES = {variable: rule for module in LAYERS.values() for variable, rule in getattr(module, "RULES", {}).items()}

SEARCHABLE = {
    variable: entry for module in LAYERS.values() for variable, entry in getattr(module, "SEARCHABLE", {}).items()
}


def layer(name):
    """The module of layer ``name``; a name that is no layer of :data:`LAYERS` raises LookupError."""
    if name not in LAYERS:
        raise LookupError("%r is no layer with settings; known: %s" % (name, ", ".join(sorted(LAYERS))))
    return LAYERS[name]
