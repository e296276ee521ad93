# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kernel layer's engine settings (documented in kernel_settings.yml): the layer module
module_utils/layers/kernel.py's ``settings``, as layer_settings('kernel') gives them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import layer_filter


kernel_settings = layer_filter("kernel", "settings")


class FilterModule:
    """stacktune.gpu kernel filters."""

    def filters(self):
        return {"kernel_settings": kernel_settings}
