# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The disks the io layer tunes for a list of paths, and its engine settings (documented in
io_targets.yml and io_settings.yml); the settings are the layer module
module_utils/layers/io.py's ``settings``, as layer_settings('io') gives them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.cpu_io_facts import io_targets as _io_targets
from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import layer_filter


def io_targets(block_facts, paths):
    """One entry per disk (or per filesystem on no block device) holding the paths."""
    if not isinstance(block_facts, dict) or "mounts" not in block_facts:
        raise AnsibleFilterError("io_targets expects ansible_facts.stacktune.block, as gpu_topology_facts gathers it")
    if isinstance(paths, str) or not isinstance(paths, (list, tuple)):
        raise AnsibleFilterError("io_targets: the paths must be a list, got %r" % (paths,))
    return _io_targets(block_facts, paths)


io_settings = layer_filter("io", "settings")


class FilterModule:
    """stacktune.gpu io filters."""

    def filters(self):
        return {"io_targets": io_targets, "io_settings": io_settings}
