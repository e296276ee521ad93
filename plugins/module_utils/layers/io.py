# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The io layer: read-ahead, the IO scheduler and queue depth of the disks holding the data
paths (which disks: hardware/cpu_io_facts.py's io_targets), and the writeback timers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.layers.shared import LayerError, unique


NAME = "io"

# Value rules of the layer's variables (policy/varspec.py RULES): values written into a line of a file
RULES = {"io_scheduler": {"line": "the layer's tmpfiles.d drop-in"}}

SEARCHABLE = {}


def settings(
    targets,
    disks=None,
    read_ahead_kb=None,
    read_ahead_at_least=False,
    scheduler=None,
    scheduler_auto=None,
    nr_requests=None,
    writeback=False,
    dirty_expire_centisecs=None,
    dirty_writeback_centisecs=None,
    reason_gone=None,
):
    """Settings: readahead per target (io_targets), scheduler and queue depth per member disk (the
    scheduler first: a scheduler change resets nr_requests), writeback timers.

    The layer's settings: the filter io_settings, or layer_settings('io')."""
    if not isinstance(targets, list):
        raise LayerError("io_settings expects the list io_targets returns, got %s" % type(targets).__name__)
    disks = disks or {}
    out = []
    for t in targets:
        if t.get("disk") is None:
            out.append(
                {
                    "kind": "sysfs",
                    "key": "/sys/dev/block/%s/queue/read_ahead_kb" % t.get("dev"),
                    "value": "0",
                    "missing": "unsupported",
                    "reason": t.get("reason"),
                    "var": "io_paths",
                }
            )
        elif read_ahead_kb is not None:
            out.append(
                {
                    "kind": "sysfs",
                    "key": "/sys/block/%s/queue/read_ahead_kb" % t["disk"],
                    "value": str(read_ahead_kb),
                    "at_least": bool(read_ahead_at_least),
                    "missing": "unsupported",
                    "reason": reason_gone,
                    "var": "io_read_ahead_kb",
                }
            )
    # the scheduler comes before nr_requests, which a scheduler change resets
    for d in unique(m for t in targets if t.get("disk") for m in t.get("members") or [] if m is not None):
        if scheduler is not None:
            auto = scheduler_auto or {}
            chosen = (
                (auto.get("nvme") if disks[d].get("nvme") else auto.get("other")) if scheduler == "auto" else scheduler
            )
            out.append(
                {
                    "kind": "sysfs",
                    "key": "/sys/block/%s/queue/scheduler" % d,
                    "value": chosen,
                    "choices_from": "scheduler",
                    "missing": "unsupported",
                    "reason": reason_gone,
                    "var": "io_scheduler",
                }
            )
        if nr_requests is not None:
            out.append(
                {
                    "kind": "sysfs",
                    "key": "/sys/block/%s/queue/nr_requests" % d,
                    "value": str(nr_requests),
                    "missing": "unsupported",
                    "reason": reason_gone,
                    "var": "io_nr_requests",
                }
            )
    if writeback:
        out.append(
            {
                "kind": "sysctl",
                "key": "vm.dirty_expire_centisecs",
                "value": str(dirty_expire_centisecs),
                "var": "io_dirty_expire_centisecs",
            }
        )
        out.append(
            {
                "kind": "sysctl",
                "key": "vm.dirty_writeback_centisecs",
                "value": str(dirty_writeback_centisecs),
                "var": "io_dirty_writeback_centisecs",
            }
        )
    return out
