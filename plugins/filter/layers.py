# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A layer reference -> its role, its journal name and its workloads (documented in layer_role.yml,
layer_name.yml and layer_workloads.yml), and a layer's engine settings by its name (documented in
layer_settings.yml): its module's ``settings`` (module_utils/layers/<name>.py, gathered by
module_utils/layers/registry.py).

A layer is a role of this collection (``kernel``), or any role by FQCN or path
(``my.collection.my_layer``, ``/path/to/roles/my_layer``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import call_layer

# A bare role name: one of this collection's roles.
BARE = re.compile(r"^[a-z][a-z0-9_]*\Z")
COLLECTION = "stacktune.gpu"


def _ref(ref, name):
    if not isinstance(ref, str):
        raise AnsibleFilterError("%s expects a layer reference (a role name, FQCN or path), got %r" % (name, ref))
    return ref


def layer_role(ref):
    """The role to include: a bare name is a role of this collection, anything else is used as it is."""
    ref = _ref(ref, "layer_role")
    return "%s.%s" % (COLLECTION, ref) if BARE.match(ref) else ref


def layer_name(ref):
    """The layer's name in the journal and in its variables: the last part of the reference."""
    return re.split(r"[./]", _ref(ref, "layer_name"))[-1]


def layer_workloads(refs, mapping):
    """``{layer name: candidate workloads}`` for the layers ``refs``: each layer's entry of
    ``mapping`` (``stacktune_gate_workloads``), else its ``default`` entry, else none."""
    if not isinstance(refs, (list, tuple)):
        raise AnsibleFilterError("layer_workloads expects the list of layers, got %r" % (refs,))
    if not isinstance(mapping, dict):
        raise AnsibleFilterError("layer_workloads expects stacktune_gate_workloads (a dict), got %r" % (mapping,))
    out = {}
    for ref in refs:
        name = layer_name(ref)
        out[name] = list(mapping[name] if name in mapping else mapping.get("default") or [])
    return out


def layer_settings(layer, *arguments, **options):
    """The engine settings of layer ``layer`` from its module's ``settings`` (its arguments as given)."""
    if not isinstance(layer, str):
        raise AnsibleFilterError("layer_settings expects a layer's name, got %r" % (layer,))
    return call_layer(layer, "settings", *arguments, **options)


class FilterModule:
    """stacktune.gpu layer reference filters."""

    def filters(self):
        return {
            "layer_role": layer_role,
            "layer_name": layer_name,
            "layer_workloads": layer_workloads,
            "layer_settings": layer_settings,
        }
