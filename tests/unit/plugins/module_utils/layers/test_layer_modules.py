# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/layers/ (the layers' settings) and the /proc readers it uses
(hardware/parsers.py: parse_meminfo_kib, parse_mount_size_kib), on real /proc text."""

from __future__ import absolute_import, division, print_function

import base64

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import parsers
from ansible_collections.stacktune.gpu.plugins.module_utils.layers import kernel, memory, shared

# /proc/meminfo of a 2-socket H200 host (head of the file)
MEMINFO = """MemTotal:       2113628116 kB
MemFree:        1934417396 kB
MemAvailable:   2086390300 kB
Buffers:          124336 kB
Cached:         148112760 kB
SwapCached:            0 kB
Active:         31086412 kB
Inactive:       124060368 kB
HugePages_Total:       0
HugePages_Free:        0
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:               0 kB
DirectMap4k:     1299904 kB
DirectMap2M:    41607168 kB
DirectMap1G:    2107637760 kB
"""
# /proc/mounts of the same host (Ubuntu 24.04: /dev/shm at the kernel's default, half of RAM)
MOUNTS = """sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
udev /dev devtmpfs rw,nosuid,relatime,size=1056774756k,nr_inodes=264193689,mode=755,inode64 0 0
tmpfs /run tmpfs rw,nosuid,nodev,noexec,relatime,size=211362812k,mode=755,inode64 0 0
/dev/nvme0n1p2 / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=1056814056k,inode64 0 0
tmpfs /run/lock tmpfs rw,nosuid,nodev,noexec,relatime,size=5120k,inode64 0 0
"""
NODE_MEMINFO = """Node 0 MemTotal:       1056547932 kB
Node 0 MemFree:        966872016 kB
Node 0 HugePages_Total:     0
"""


def slurped(meminfo=MEMINFO, mounts=MOUNTS):
    return [
        {"item": "/proc/meminfo", "content": base64.b64encode(meminfo.encode()).decode(), "encoding": "base64"},
        {"item": "/proc/mounts", "content": base64.b64encode(mounts.encode()).decode(), "encoding": "base64"},
    ]


def test_meminfo_is_read_field_by_field():
    fields = parsers.parse_meminfo_kib(MEMINFO)
    assert fields["MemTotal"] == 2113628116
    assert fields["Hugepagesize"] == 2048
    assert fields["HugePages_Total"] == 0
    assert parsers.parse_meminfo_kib(NODE_MEMINFO) == {
        "MemTotal": 1056547932,
        "MemFree": 966872016,
        "HugePages_Total": 0,
    }
    assert parsers.parse_node_meminfo_total_kib(NODE_MEMINFO) == 1056547932
    assert parsers.parse_meminfo_kib(None) == parsers.parse_meminfo_kib("MemTotal: unknown kB\n") == {}


def test_the_size_of_a_tmpfs_mount():
    assert parsers.parse_mount_size_kib(MOUNTS, "/dev/shm") == 1056814056
    assert parsers.parse_mount_size_kib(MOUNTS, "/run/lock") == 5120
    assert parsers.parse_mount_size_kib(MOUNTS, "/") is None
    assert parsers.parse_mount_size_kib("shm /dev/shm tmpfs rw,nosuid,nodev 0 0\n", "/dev/shm") is None


def test_auto_shm_is_half_of_ram_and_left_alone_when_shm_is_that_big():
    # 2113628116 kB / 2 = 1007.9 GiB: 1008G; /dev/shm holds 1007.9 GiB, below 1008 GiB
    assert memory.auto_shm_size(MEMINFO, MOUNTS) == ("1008G", True)
    assert memory.auto_shm_size(MEMINFO, MOUNTS.replace("size=1056814056k", "size=1056964608k")) == ("1008G", False)
    assert memory.auto_shm_size(MEMINFO, "") == ("1008G", True)
    with pytest.raises(ValueError, match="MemTotal"):
        memory.auto_shm_size("MemFree: 1 kB\n", MOUNTS)


def test_memory_settings_from_the_slurped_files():
    assert memory.memory_settings("auto", proc=slurped()) == [
        {"kind": "mount", "key": "/dev/shm", "option": "size", "value": "1008G", "var": "memory_shm_size"}
    ]
    assert shared.slurped_text(slurped(), "/proc/mounts") == MOUNTS
    assert shared.slurped_text(slurped(), "/proc/cpuinfo") == ""
    assert memory.memory_settings("auto", enabled=False) == []


def test_boot_arguments_go_to_grubby_on_redhat_only():
    assert kernel.boot_arg_kind("RedHat") == "grubby_arg"
    assert kernel.boot_arg_kind("Debian") == kernel.boot_arg_kind("") == "kernel_arg"
