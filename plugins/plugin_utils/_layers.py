# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The filters' way into a layer module (module_utils/layers/<layer>.py): plain arguments in,
a layer's refusal of an argument out as a filter error."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.layers import registry
from ansible_collections.stacktune.gpu.plugins.module_utils.layers.shared import LayerError
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def call_layer(layer, function, *args, **kwargs):
    """``function`` of layer ``layer``'s module (its ``settings`` or another of its filters)
    with the arguments as plain values; an argument the layer cannot use is a filter error."""
    try:
        module = registry.layer(layer)
    except LookupError as exc:
        raise AnsibleFilterError("layer_settings: %s" % exc) from None
    try:
        return getattr(module, function)(*plain(list(args)), **plain(kwargs))
    except LayerError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def layer_filter(layer, function="settings"):
    """A filter that is ``function`` of layer ``layer``'s module, through ``call_layer``: its
    name, arguments and docstring are the layer function's own, written once, in the layer."""
    target = getattr(registry.layer(layer), function)

    @functools.wraps(target)
    def through_the_layer(*args, **kwargs):
        return call_layer(layer, function, *args, **kwargs)

    return through_the_layer
