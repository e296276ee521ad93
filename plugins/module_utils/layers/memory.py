# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory layer: /dev/shm, the locked-memory limit, transparent huge pages and huge pages.
Its THP modes take candidates (``SEARCHABLE``), which the gate searches."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.parsers import (
    parse_meminfo_kib,
    parse_mount_size_kib,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.layers import candidates
from ansible_collections.stacktune.gpu.plugins.module_utils.layers.shared import LayerError, slurped_text


NAME = "memory"

# Value rules of the layer's variables (policy/varspec.py RULES): values written into a line of a file
RULES = {
    "memory_shm_size": {"line": "/etc/fstab"},
    "memory_memlock": {"line": "the layer's limits.d file"},
    "memory_thp_enabled": {"line": "the layer's tmpfiles.d drop-in"},
    "memory_thp_defrag": {"line": "the layer's tmpfiles.d drop-in"},
}

# variable -> (what one value is, in words; the check of one value): the variables that take candidates
SEARCHABLE = {
    "memory_thp_enabled": ("always, madvise or never", candidates.choice("always", "madvise", "never")),
    "memory_thp_defrag": (
        "always, defer, defer+madvise, madvise or never",
        candidates.choice("always", "defer", "defer+madvise", "madvise", "never"),
    ),
}

LIMITS_FILE = "/etc/security/limits.d/60-stacktune-memlock.conf"
LIMITS = (
    "# Managed by stacktune (layer memory): locked-memory limit for pinned host memory and RDMA.\n"
    "*    soft    memlock    {0}\n"
    "*    hard    memlock    {0}\n"
    "root soft    memlock    {0}\n"
    "root hard    memlock    {0}\n"
)
GIB_IN_KIB = 1048576


def auto_shm_size(meminfo, mounts):
    """("<half of RAM in whole GiB>G", whether /dev/shm is smaller than that now) from the text of
    /proc/meminfo and /proc/mounts."""
    total = parse_meminfo_kib(meminfo).get("MemTotal")
    if total is None:
        raise ValueError("memory_shm_size is auto but /proc/meminfo has no MemTotal line")
    half_gib = int(math.ceil(total / 2.0 / GIB_IN_KIB))
    current_kib = parse_mount_size_kib(mounts, "/dev/shm") or 0
    return "%dG" % half_gib, current_kib < half_gib * GIB_IN_KIB


def memory_settings(
    shm_size="auto", memlock=None, thp_enabled=None, thp_defrag=None, hugepages=None, enabled=True, proc=None
):
    """Settings for /dev/shm, memlock, THP and hugepages; ``proc``: the slurp results of
    /proc/meminfo and /proc/mounts (read for ``shm_size: auto`` only)."""
    if not enabled:
        return []
    out = []
    if shm_size is not None:
        if shm_size == "auto":
            value, wanted = auto_shm_size(slurped_text(proc, "/proc/meminfo"), slurped_text(proc, "/proc/mounts"))
        else:
            value, wanted = shm_size, True
        if wanted:
            out.append({"kind": "mount", "key": "/dev/shm", "option": "size", "value": value, "var": "memory_shm_size"})
    if memlock is not None:
        out.append(
            {
                "kind": "file",
                "key": LIMITS_FILE,
                "value": LIMITS.format(memlock),
                "mode": "0644",
                "var": "memory_memlock",
            }
        )
    for name, key, value in (
        ("memory_thp_enabled", "/sys/kernel/mm/transparent_hugepage/enabled", thp_enabled),
        ("memory_thp_defrag", "/sys/kernel/mm/transparent_hugepage/defrag", thp_defrag),
    ):
        if value is not None:
            out.append({"kind": "sysfs", "key": key, "value": value, "var": name})
    if hugepages is not None:
        out.append({"kind": "sysctl", "key": "vm.nr_hugepages", "value": str(hugepages), "var": "memory_hugepages"})
    return out


def settings(
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
    """The layer's settings (the filter memory_settings, or layer_settings('memory')). A THP mode
    given as candidates puts the first in place, or the value a search of the same candidates
    kept (``journaled``: ``journal_info``'s layers; candidates.py ``settled``); with ``search``
    it returns instead what the gate searches, or None when there is none or the journal's
    search of them is settled."""
    given = {"memory_thp_enabled": thp_enabled, "memory_thp_defrag": thp_defrag}
    try:
        found = {k: candidates.searchable_candidates(k, v, SEARCHABLE) for k, v in given.items()}
        searched = [k for k, v in found.items() if v]
        if len(searched) > 1:
            raise ValueError("one setting is searched at a time: %s are both candidate lists" % " and ".join(searched))
        done = (
            candidates.settled("memory", searched[0], found[searched[0]], journaled, bool(retry_rejected))
            if searched
            else None
        )
        first = {k: (done["value"] if found[k] else v) for k, v in given.items()}

        def for_values(values):
            return memory_settings(
                shm_size,
                memlock,
                values["memory_thp_enabled"],
                values["memory_thp_defrag"],
                hugepages,
                enabled,
                list(proc or []),
            )

        if not search:
            return for_values(first)
        if not searched or not enabled or not done["search"]:
            return None
        name = searched[0]
        return candidates.layer_search(name, found[name], lambda v: for_values(dict(first, **{name: v})))
    except ValueError as exc:
        raise LayerError("memory_settings: %s" % exc) from exc
