# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The disks the io layer tunes for a list of paths, and its engine settings (documented in
io_targets.yml and io_settings.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.cpu_io_facts import io_targets as _io_targets
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def io_targets(block_facts, paths):
    """One entry per disk (or per filesystem on no block device) holding the paths."""
    if not isinstance(block_facts, dict) or "mounts" not in block_facts:
        raise AnsibleFilterError("io_targets expects ansible_facts.stacktune.block, as gpu_topology_facts gathers it")
    if isinstance(paths, str) or not isinstance(paths, (list, tuple)):
        raise AnsibleFilterError("io_targets: the paths must be a list, got %r" % (paths,))
    return _io_targets(block_facts, paths)


def _unique(items):
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def io_settings(
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
    """Engine settings: readahead per target, scheduler and queue depth per member disk, writeback timers."""
    targets = plain(targets)
    if not isinstance(targets, list):
        raise AnsibleFilterError("io_settings expects the list io_targets returns, got %s" % type(targets).__name__)
    disks = plain(disks) or {}
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
    for d in _unique(m for t in targets if t.get("disk") for m in t.get("members") or [] if m is not None):
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


class FilterModule:
    """stacktune.gpu io filters."""

    def filters(self):
        return {"io_targets": io_targets, "io_settings": io_settings}
