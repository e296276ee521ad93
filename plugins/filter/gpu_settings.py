# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpu_settings layer's engine settings (documented in gpu_settings_settings.yml); they are
module_utils/policy/layers.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.policy import layers
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def gpu_settings_settings(
    gpus, persistence_mode=None, power_limit_w=None, compute_mode=None, app_clocks=None, gpu_count=0, enabled=True
):
    """One NVML setting per value that is not null and per GPU."""
    gpus = plain(gpus)
    if gpus != "all" and not isinstance(gpus, list):
        raise AnsibleFilterError("gpu_settings_settings expects 'all' or a list of GPU indexes, got %r" % (gpus,))
    values = {
        "persistence_mode": plain(persistence_mode),
        "power_limit_w": plain(power_limit_w),
        "compute_mode": plain(compute_mode),
        "app_clocks": plain(app_clocks),
    }
    return layers.gpu_settings(gpus, values, gpu_count, bool(enabled))


class FilterModule:
    """stacktune.gpu gpu_settings filters."""

    def filters(self):
        return {"gpu_settings_settings": gpu_settings_settings}
