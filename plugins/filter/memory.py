# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory layer's engine settings (documented in memory_settings.yml): the layer module
module_utils/layers/memory.py's ``settings``, as layer_settings('memory') gives them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import layer_filter


memory_settings = layer_filter("memory", "settings")


class FilterModule:
    """stacktune.gpu memory filters."""

    def filters(self):
        return {"memory_settings": memory_settings}
