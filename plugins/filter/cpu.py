# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cpu layer's engine settings (documented in cpu_settings.yml): the layer module
module_utils/layers/cpu.py's ``settings``, as layer_settings('cpu') gives them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import layer_filter


cpu_settings = layer_filter("cpu", "settings")


class FilterModule:
    """stacktune.gpu cpu filters."""

    def filters(self):
        return {"cpu_settings": cpu_settings}
