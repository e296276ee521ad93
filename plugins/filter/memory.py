# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory layer's engine settings (documented in memory_settings.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import math
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain

LIMITS_FILE = "/etc/security/limits.d/60-stacktune-memlock.conf"
LIMITS = (
    "# Managed by stacktune (layer memory): locked-memory limit for pinned host memory and RDMA.\n"
    "*    soft    memlock    {0}\n"
    "*    hard    memlock    {0}\n"
    "root soft    memlock    {0}\n"
    "root hard    memlock    {0}\n"
)
MEM_TOTAL = re.compile(r"MemTotal:\s+(\d+)")
SHM_SIZE = re.compile(r" /dev/shm tmpfs \S*size=(\d+)k")
GIB_IN_KIB = 1048576


def _read(proc, path):
    """The text of ``path`` among the slurp results ``proc`` (each with item and content), or ''."""
    for result in proc:
        if isinstance(result, dict) and result.get("item") == path and result.get("content"):
            return base64.b64decode(result["content"]).decode("utf-8", "replace")
    return ""


def _auto_shm(proc):
    """("<half of RAM in whole GiB>G", whether /dev/shm is smaller than that now)."""
    total = MEM_TOTAL.search(_read(proc, "/proc/meminfo"))
    if not total:
        raise AnsibleFilterError("memory_settings: memory_shm_size is auto but /proc/meminfo has no MemTotal line")
    half_gib = int(math.ceil(int(total.group(1)) / 2.0 / GIB_IN_KIB))
    current = SHM_SIZE.search(_read(proc, "/proc/mounts"))
    current_kib = int(current.group(1)) if current else 0
    return "%dG" % half_gib, current_kib < half_gib * GIB_IN_KIB


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
    if not enabled:
        return []
    out = []
    if shm_size is not None:
        if shm_size == "auto":
            value, wanted = _auto_shm(list(plain(proc) or []))
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


class FilterModule:
    """stacktune.gpu memory filters."""

    def filters(self):
        return {"memory_settings": memory_settings}
