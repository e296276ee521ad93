# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The io_settings filter."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import io as filters

DISKS = {"nvme0n1": {"nvme": True}, "sda": {"nvme": False}, "sdb": {"nvme": False}}
TARGETS = [
    {"disk": None, "dev": "0:45", "reason": "overlay: no block device"},
    {"disk": "md0", "members": ["sda", "sdb"]},
    {"disk": "sda", "members": ["sda"]},
    {"disk": "nvme0n1", "members": ["nvme0n1"]},
]
AUTO = {"nvme": "none", "other": "mq-deadline"}


def keys(settings):
    return [(s["key"], s["value"]) for s in settings]


def test_registered():
    assert set(filters.FilterModule().filters()) == {"io_targets", "io_settings"}


def test_readahead_scheduler_queue_depth_and_writeback():
    got = filters.io_settings(
        TARGETS,
        disks=DISKS,
        read_ahead_kb=4096,
        scheduler="auto",
        scheduler_auto=AUTO,
        nr_requests=256,
        writeback=True,
        dirty_expire_centisecs=500,
        dirty_writeback_centisecs=100,
        reason_gone="gone",
    )
    assert keys(got) == [
        ("/sys/dev/block/0:45/queue/read_ahead_kb", "0"),
        ("/sys/block/md0/queue/read_ahead_kb", "4096"),
        ("/sys/block/sda/queue/read_ahead_kb", "4096"),
        ("/sys/block/nvme0n1/queue/read_ahead_kb", "4096"),
        ("/sys/block/sda/queue/scheduler", "mq-deadline"),
        ("/sys/block/sda/queue/nr_requests", "256"),
        ("/sys/block/sdb/queue/scheduler", "mq-deadline"),
        ("/sys/block/sdb/queue/nr_requests", "256"),
        ("/sys/block/nvme0n1/queue/scheduler", "none"),
        ("/sys/block/nvme0n1/queue/nr_requests", "256"),
        ("vm.dirty_expire_centisecs", "500"),
        ("vm.dirty_writeback_centisecs", "100"),
    ]
    assert got[0] == {
        "kind": "sysfs",
        "key": "/sys/dev/block/0:45/queue/read_ahead_kb",
        "value": "0",
        "missing": "unsupported",
        "reason": "overlay: no block device",
        "var": "io_paths",
    }
    assert got[1]["at_least"] is False and got[1]["reason"] == "gone"
    assert got[4]["choices_from"] == "scheduler"
    assert got[-1] == {
        "kind": "sysctl",
        "key": "vm.dirty_writeback_centisecs",
        "value": "100",
        "var": "io_dirty_writeback_centisecs",
    }


def test_named_scheduler_and_nothing_else():
    got = filters.io_settings(TARGETS[1:2], disks=DISKS, scheduler="kyber")
    assert keys(got) == [("/sys/block/sda/queue/scheduler", "kyber"), ("/sys/block/sdb/queue/scheduler", "kyber")]
    assert filters.io_settings([], writeback=False) == []


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="io_targets"):
        filters.io_settings({"disk": "sda"})
