# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kernel layer's engine settings (documented in kernel_settings.yml); they are
module_utils/policy/layers.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.policy import layers
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def _mapping(value, what):
    value = plain(value)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AnsibleFilterError("kernel_settings: %s must be a dict, got %r" % (what, value))
    return value


def kernel_settings(profile, sysctl=None, floors=None, aspm_policy=None, cmdline_args=None, os_family="", enabled=True):
    """Sysctl settings of the profile and of kernel_sysctl, the ASPM policy and the boot arguments."""
    floors = plain(floors) or []
    if isinstance(floors, str) or not isinstance(floors, list):
        raise AnsibleFilterError("kernel_settings: floors must be a list of sysctl names, got %r" % (floors,))
    return layers.kernel_settings(
        _mapping(profile, "the profile"),
        _mapping(sysctl, "sysctl"),
        floors,
        aspm_policy,
        _mapping(cmdline_args, "cmdline_args"),
        os_family or "",
        bool(enabled),
    )


class FilterModule:
    """stacktune.gpu kernel filters."""

    def filters(self):
        return {"kernel_settings": kernel_settings}
