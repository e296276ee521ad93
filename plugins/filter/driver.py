# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver role's installed packages, holds and findings (documented in driver_packages.yml,
driver_held.yml, driver_holds.yml and driver_findings.yml); they are module_utils/hardware/driver.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import driver as hardware_driver
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def driver_findings(
    facts,
    preflight=None,
    package_versions=None,
    packages=None,
    declared=None,
    expected_cuda=None,
    holds=None,
    hold=False,
):
    """The driver findings of one host, in the order they are printed."""
    facts = plain(facts)
    if not isinstance(facts, dict):
        raise AnsibleFilterError(
            "driver_findings expects ansible_facts.stacktune (gpu_topology_facts), got %s" % type(facts).__name__
        )
    return hardware_driver.driver_findings(
        facts,
        plain(preflight),
        plain(package_versions),
        plain(packages),
        declared,
        expected_cuda,
        plain(holds),
        hold,
    )


def driver_packages(lines, patterns):
    """``{packages, versions}``: the installed packages matching ``patterns`` and the driver versions they carry."""
    lines = plain(lines) or []
    patterns = plain(patterns) or []
    if isinstance(lines, str) or not isinstance(lines, list):
        raise AnsibleFilterError("driver_packages expects the package query's stdout_lines, got %r" % (lines,))
    if isinstance(patterns, str) or not isinstance(patterns, list):
        raise AnsibleFilterError("driver_packages: the patterns must be a list, got %r" % (patterns,))
    return hardware_driver.driver_packages(lines, [str(p) for p in patterns])


def driver_held(lines):
    """The packages dpkg-query lists as held."""
    lines = plain(lines) or []
    if isinstance(lines, str) or not isinstance(lines, list):
        raise AnsibleFilterError("driver_held expects dpkg-query's stdout_lines, got %r" % (lines,))
    return hardware_driver.held_packages(lines)


def driver_holds(packages, hold=True, pkg_mgr=None, apt_hold=None, apt_release=None, dnf_lock=None):
    """``{changed, held, released, unsupported}`` of the holds from the registered task results."""
    packages = plain(packages) or []
    if isinstance(packages, str) or not isinstance(packages, list):
        raise AnsibleFilterError("driver_holds expects the list of driver packages, got %r" % (packages,))
    return hardware_driver.holds_summary(
        packages, bool(hold), pkg_mgr, plain(apt_hold), plain(apt_release), plain(dnf_lock)
    )


class FilterModule:
    """stacktune.gpu driver filters."""

    def filters(self):
        return {
            "driver_findings": driver_findings,
            "driver_packages": driver_packages,
            "driver_held": driver_held,
            "driver_holds": driver_holds,
        }
