# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory layer's engine settings (documented in memory_settings.yml); they are
module_utils/policy/layers.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.policy import layers
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def memory_settings(
    shm_size="auto",
    memlock=None,
    thp_enabled=None,
    thp_defrag=None,
    hugepages=None,
    enabled=True,
    proc=None,
):
    """Engine settings for /dev/shm, memlock, THP and hugepages; ``proc``: the slurp results of
    /proc/meminfo and /proc/mounts (read for ``shm_size: auto`` only)."""
    try:
        return layers.memory_settings(
            shm_size, memlock, thp_enabled, thp_defrag, hugepages, enabled, list(plain(proc) or [])
        )
    except ValueError as exc:
        raise AnsibleFilterError("memory_settings: %s" % exc) from exc


class FilterModule:
    """stacktune.gpu memory filters."""

    def filters(self):
        return {"memory_settings": memory_settings}
