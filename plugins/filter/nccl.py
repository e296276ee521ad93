# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nccl layer's variables and engine setting (documented in nccl_variables.yml and
nccl_settings.yml): the layer module module_utils/layers/nccl.py's ``variables`` and ``settings``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import layer_filter


nccl_variables = layer_filter("nccl", "variables")
nccl_settings = layer_filter("nccl", "settings")


class FilterModule:
    """stacktune.gpu nccl filters."""

    def filters(self):
        return {"nccl_variables": nccl_variables, "nccl_settings": nccl_settings}
