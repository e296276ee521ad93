# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpu_settings layer's engine settings (documented in gpu_settings_settings.yml): the layer
module module_utils/layers/gpu_settings.py's ``settings``, as layer_settings('gpu_settings') gives them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import layer_filter


gpu_settings_settings = layer_filter("gpu_settings", "settings")


class FilterModule:
    """stacktune.gpu gpu_settings filters."""

    def filters(self):
        return {"gpu_settings_settings": gpu_settings_settings}
