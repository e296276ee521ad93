# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpu_settings layer's engine settings (documented in gpu_settings_settings.yml); they are
module_utils/policy/layers.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.policy import candidates, layers
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


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
    """One NVML setting per value that is not null and per GPU. A power limit given as
    candidates puts the first in place, or the value a search of the same candidates kept
    (``journaled``: ``journal_info``'s layers; policy/candidates.py ``settled``); with
    ``search`` the filter returns instead what the gate searches (every candidate with its
    settings), or None when there is one value or the journal's search of them is settled."""
    gpus = plain(gpus)
    if gpus != "all" and not isinstance(gpus, list):
        raise AnsibleFilterError("gpu_settings_settings expects 'all' or a list of GPU indexes, got %r" % (gpus,))
    name = "gpu_settings_power_limit_watts"
    try:
        found = candidates.searchable_candidates(name, plain(power_limit_w))
    except candidates.CandidateError as exc:
        raise AnsibleFilterError("gpu_settings_settings: %s" % exc) from None
    done = candidates.settled("gpu_settings", name, found, plain(journaled), bool(retry_rejected)) if found else None
    values = {
        "persistence_mode": plain(persistence_mode),
        "power_limit_w": done["value"] if found else plain(power_limit_w),
        "compute_mode": plain(compute_mode),
        "app_clocks": plain(app_clocks),
    }
    if not search:
        return layers.gpu_settings(gpus, values, gpu_count, bool(enabled))
    if not found or not enabled or not gpu_count or not done["search"]:
        return None
    return candidates.layer_search(
        name, found, lambda v: layers.gpu_settings(gpus, dict(values, power_limit_w=v), gpu_count, True)
    )


class FilterModule:
    """stacktune.gpu gpu_settings filters."""

    def filters(self):
        return {"gpu_settings_settings": gpu_settings_settings}
