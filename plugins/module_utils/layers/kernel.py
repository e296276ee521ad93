# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kernel layer: sysctls (a profile and the user's), the PCIe ASPM policy and boot arguments."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.layers.shared import LayerError


NAME = "kernel"

# Value rules of the layer's variables (policy/varspec.py RULES): values written into a line of a file
RULES = {
    "kernel_sysctl": {"line": "the layer's sysctl.d drop-in"},
    "kernel_cmdline_args": {"line": "the GRUB drop-in, sourced by grub-mkconfig"},
    "kernel_aspm_policy": {"line": "the layer's tmpfiles.d drop-in"},
}

SEARCHABLE = {}

ASPM_POLICY = "/sys/module/pcie_aspm/parameters/policy"


def boot_arg_kind(os_family):
    """The engine kind that persists boot arguments: grubby edits the BLS boot entries of
    RHEL-family hosts (their GRUB never reads /etc/default/grub.d); a GRUB drop-in elsewhere."""
    return "grubby_arg" if os_family == "RedHat" else "kernel_arg"


def kernel_settings(profile, sysctl=None, floors=(), aspm_policy=None, cmdline_args=None, os_family="", enabled=True):
    """Settings from a sysctl profile (``{name: value}``), the user's sysctls, the ASPM policy and
    the boot arguments. A profile sysctl named in ``floors`` and not set by the user is a minimum
    (the engine's ``at_least``); the user's sysctls override the profile and are applied exactly."""
    if not enabled:
        return []
    sysctl = dict(sysctl or {})
    at_least = [name for name in floors or () if name not in sysctl]
    exact = {k: v for k, v in (profile or {}).items() if k not in at_least}
    exact.update(sysctl)
    out = [{"key": k, "value": v, "kind": "sysctl", "var": "kernel_sysctl"} for k, v in exact.items()]
    out += [
        {"key": k, "value": v, "kind": "sysctl", "var": "kernel_sysctl", "at_least": True}
        for k, v in (profile or {}).items()
        if k in at_least
    ]
    if aspm_policy is not None:
        out.append({"kind": "sysfs", "key": ASPM_POLICY, "value": aspm_policy, "var": "kernel_aspm_policy"})
    kind = boot_arg_kind(os_family)
    out += [{"key": k, "value": v, "kind": kind, "var": "kernel_cmdline_args"} for k, v in (cmdline_args or {}).items()]
    return out


def _mapping(value, what):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise LayerError("kernel_settings: %s must be a dict, got %r" % (what, value))
    return value


def settings(profile, sysctl=None, floors=None, aspm_policy=None, cmdline_args=None, os_family="", enabled=True):
    """The layer's settings (the filter kernel_settings, or layer_settings('kernel')): the
    profile's and kernel_sysctl's sysctls, the ASPM policy and the boot arguments."""
    floors = floors or []
    if isinstance(floors, str) or not isinstance(floors, list):
        raise LayerError("kernel_settings: floors must be a list of sysctl names, got %r" % (floors,))
    return kernel_settings(
        _mapping(profile, "the profile"),
        _mapping(sysctl, "sysctl"),
        floors,
        aspm_policy,
        _mapping(cmdline_args, "cmdline_args"),
        os_family or "",
        bool(enabled),
    )
