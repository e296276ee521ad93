# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpu_settings layer's engine settings (documented in gpu_settings_settings.yml): the layer
module module_utils/layers/gpu_settings.py's ``settings``, as layer_settings('gpu_settings') gives them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import call_layer


def gpu_settings_settings(
    gpus,
    persistence_mode=None,
    power_limit_w=None,
    compute_mode=None,
    app_clocks=None,
    gpu_count=0,
    enabled=True,
    search=False,
    journaled=None,
    retry_rejected=False,
):
    """One NVML setting per value that is not null and per GPU, or with ``search`` what the gate searches."""
    return call_layer(
        "gpu_settings",
        "settings",
        gpus,
        persistence_mode,
        power_limit_w,
        compute_mode,
        app_clocks,
        gpu_count,
        enabled,
        search=search,
        journaled=journaled,
        retry_rejected=retry_rejected,
    )


class FilterModule:
    """stacktune.gpu gpu_settings filters."""

    def filters(self):
        return {"gpu_settings_settings": gpu_settings_settings}
