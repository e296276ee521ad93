# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory layer's engine settings (documented in memory_settings.yml); they are
module_utils/policy/layers.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.policy import candidates, layers
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def memory_settings(
    shm_size="auto",
    memlock=None,
    thp_enabled=None,
    thp_defrag=None,
    hugepages=None,
    enabled=True,
    proc=None,
    search=False,
    journaled=None,
    retry_rejected=False,
):
    """Engine settings for /dev/shm, memlock, THP and hugepages; ``proc``: the slurp results of
    /proc/meminfo and /proc/mounts (read for ``shm_size: auto`` only). A THP mode given as
    candidates puts the first in place, or the value a search of the same candidates kept
    (``journaled``: ``journal_info``'s layers; policy/candidates.py ``settled``); with ``search``
    the filter returns instead what the gate searches (every candidate with the layer's
    settings), or None when there is none or the journal's search of them is settled."""
    given = {"memory_thp_enabled": plain(thp_enabled), "memory_thp_defrag": plain(thp_defrag)}
    try:
        found = {k: candidates.searchable_candidates(k, v) for k, v in given.items()}
        searched = [k for k, v in found.items() if v]
        if len(searched) > 1:
            raise ValueError("one setting is searched at a time: %s are both candidate lists" % " and ".join(searched))
        done = (
            candidates.settled("memory", searched[0], found[searched[0]], plain(journaled), bool(retry_rejected))
            if searched
            else None
        )
        first = {k: (done["value"] if found[k] else v) for k, v in given.items()}

        def settings(values):
            return layers.memory_settings(
                shm_size,
                memlock,
                values["memory_thp_enabled"],
                values["memory_thp_defrag"],
                hugepages,
                enabled,
                list(plain(proc) or []),
            )

        if not search:
            return settings(first)
        if not searched or not enabled or not done["search"]:
            return None
        name = searched[0]
        return candidates.layer_search(name, found[name], lambda v: settings(dict(first, **{name: v})))
    except ValueError as exc:
        raise AnsibleFilterError("memory_settings: %s" % exc) from exc


class FilterModule:
    """stacktune.gpu memory filters."""

    def filters(self):
        return {"memory_settings": memory_settings}
