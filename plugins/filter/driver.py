# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver role's installed packages and findings (documented in driver_packages.yml and
driver_findings.yml); they are module_utils/hardware/driver.py's."""

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


class FilterModule:
    """stacktune.gpu driver filters."""

    def filters(self):
        return {"driver_findings": driver_findings, "driver_packages": driver_packages}
