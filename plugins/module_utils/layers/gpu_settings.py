# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpu_settings layer: persistence mode, power limit, compute mode and application clocks
through NVML, per GPU. Its power limit takes candidates (``SEARCHABLE``), which the gate searches."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.layers import candidates
from ansible_collections.stacktune.gpu.plugins.module_utils.layers.shared import LayerError


NAME = "gpu_settings"

RULES = {}

# variable -> (what one value is, in words; the check of one value): the variables that take candidates
SEARCHABLE = {"gpu_settings_power_limit_watts": ("a positive whole number of watts", candidates.positive_watts)}

# (setting key, role variable) in the order they are applied
GPU_FIELDS = (
    ("persistence_mode", "gpu_settings_persistence_mode"),
    ("power_limit_w", "gpu_settings_power_limit_watts"),
    ("compute_mode", "gpu_settings_compute_mode"),
    ("app_clocks", "gpu_settings_app_clocks"),
)


def gpu_settings(gpus, values, gpu_count=0, enabled=True):
    """One ``nvml`` setting per value that is not null and per GPU of ``gpus`` (``all`` or a list
    of indexes); ``values``: ``{setting key: value}``; none on a host without GPUs."""
    if not enabled or int(gpu_count or 0) <= 0:
        return []
    targets = ["all"] if gpus == "all" else list(gpus or [])
    return [
        {"kind": "nvml", "key": key, "gpu": gpu, "var": var, "value": values.get(key)}
        for key, var in GPU_FIELDS
        if values.get(key) is not None
        for gpu in targets
    ]


def settings(
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
    """The layer's settings (the filter gpu_settings_settings, or layer_settings('gpu_settings')):
    one NVML setting per value that is not null and per GPU. A power limit given as candidates
    puts the first in place, or the value a search of the same candidates kept (``journaled``:
    ``journal_info``'s layers; candidates.py ``settled``); with ``search`` it returns instead
    what the gate searches, or None when there is one value or the journal's search of them is
    settled."""
    if gpus != "all" and not isinstance(gpus, list):
        raise LayerError("gpu_settings_settings expects 'all' or a list of GPU indexes, got %r" % (gpus,))
    name = "gpu_settings_power_limit_watts"
    try:
        found = candidates.searchable_candidates(name, power_limit_w, SEARCHABLE)
    except candidates.CandidateError as exc:
        raise LayerError("gpu_settings_settings: %s" % exc) from None
    done = candidates.settled("gpu_settings", name, found, journaled, bool(retry_rejected)) if found else None
    values = {
        "persistence_mode": persistence_mode,
        "power_limit_w": done["value"] if found else power_limit_w,
        "compute_mode": compute_mode,
        "app_clocks": app_clocks,
    }
    if not search:
        return gpu_settings(gpus, values, gpu_count, bool(enabled))
    if not found or not enabled or not gpu_count or not done["search"]:
        return None
    return candidates.layer_search(
        name, found, lambda v: gpu_settings(gpus, dict(values, power_limit_w=v), gpu_count, True)
    )
