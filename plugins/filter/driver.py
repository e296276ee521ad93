# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver role's findings (documented in driver_findings.yml); they are
module_utils/hardware/driver.py's."""

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


class FilterModule:
    """stacktune.gpu driver filters."""

    def filters(self):
        return {"driver_findings": driver_findings}
