# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory_settings filter: /dev/shm (auto from /proc/meminfo and /proc/mounts), memlock, THP, hugepages."""

from __future__ import absolute_import, division, print_function

import base64

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import memory as filters

MEMINFO = "MemTotal:       263921868 kB\nMemFree:        1000 kB\n"  # 251.7 GiB: half is 125.9, so 126G
MOUNTS = "proc /proc proc rw 0 0\nshm /dev/shm tmpfs rw,nosuid,nodev,size=65536k 0 0\n"


def proc(meminfo=MEMINFO, mounts=MOUNTS):
    return [
        {"item": "/proc/meminfo", "content": base64.b64encode(meminfo.encode()).decode()},
        {"item": "/proc/mounts", "content": base64.b64encode(mounts.encode()).decode()},
    ]


def test_registered():
    assert set(filters.FilterModule().filters()) == {"memory_settings"}


def test_auto_is_half_of_ram_in_whole_gib_when_shm_is_smaller():
    assert filters.memory_settings("auto", proc=proc()) == [
        {"kind": "mount", "key": "/dev/shm", "option": "size", "value": "126G", "var": "memory_shm_size"}
    ]


def test_auto_leaves_a_larger_shm_alone():
    mounts = MOUNTS.replace("size=65536k", "size=%dk" % (200 * 1048576))
    assert filters.memory_settings("auto", proc=proc(mounts=mounts)) == []
    # no size on the mount line reads as 0: smaller than half of RAM
    assert filters.memory_settings("auto", proc=proc(mounts="none\n"))[0]["value"] == "126G"


def test_auto_without_memtotal_names_the_variable():
    with pytest.raises(AnsibleFilterError, match="memory_shm_size is auto but /proc/meminfo has no MemTotal"):
        filters.memory_settings("auto", proc=proc(meminfo="MemFree: 1 kB\n"))


def test_every_setting_in_order():
    out = filters.memory_settings("64G", memlock="unlimited", thp_enabled="madvise", thp_defrag="defer", hugepages=0)
    assert [(s["kind"], s["key"], s["var"]) for s in out] == [
        ("mount", "/dev/shm", "memory_shm_size"),
        ("file", "/etc/security/limits.d/60-stacktune-memlock.conf", "memory_memlock"),
        ("sysfs", "/sys/kernel/mm/transparent_hugepage/enabled", "memory_thp_enabled"),
        ("sysfs", "/sys/kernel/mm/transparent_hugepage/defrag", "memory_thp_defrag"),
        ("sysctl", "vm.nr_hugepages", "memory_hugepages"),
    ]
    assert out[0]["value"] == "64G" and out[4]["value"] == "0"
    assert out[1]["mode"] == "0644"
    assert out[1]["value"] == (
        "# Managed by stacktune (layer memory): locked-memory limit for pinned host memory and RDMA.\n"
        "*    soft    memlock    unlimited\n*    hard    memlock    unlimited\n"
        "root soft    memlock    unlimited\nroot hard    memlock    unlimited\n"
    )


def test_null_values_and_a_disabled_layer_give_nothing():
    assert filters.memory_settings(None) == []
    assert filters.memory_settings("64G", memlock="unlimited", enabled=False) == []
