# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters over the GPU topology facts: a readable table and findings by severity.

Documentation of each filter lives next to this file in topology_table.yml and
topology_findings.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import SEVERITIES, filter_findings
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology_table import render_table


def _stacktune_facts(data, filter_name):
    """Accept ansible_facts['stacktune'], the whole ansible_facts, or hostvars of a host."""
    if not isinstance(data, dict):
        raise AnsibleFilterError("%s expects the stacktune facts (a dict), got %s" % (filter_name, type(data).__name__))
    if "stacktune" in data and isinstance(data["stacktune"], dict):
        return data["stacktune"]
    facts = data.get("ansible_facts")
    if isinstance(facts, dict) and isinstance(facts.get("stacktune"), dict):
        return facts["stacktune"]
    if "schema_version" not in data:
        raise AnsibleFilterError(
            "%s expects ansible_facts['stacktune'] as gathered by stacktune.gpu.gpu_topology_facts" % filter_name
        )
    return data


def topology_table(data):
    """Plain-text table of the GPU topology facts."""
    return render_table(_stacktune_facts(data, "topology_table"))


def topology_findings(data, min_severity="info"):
    """Findings of at least min_severity (info, warning, critical)."""
    if min_severity not in SEVERITIES:
        raise AnsibleFilterError(
            "topology_findings: min_severity must be one of %s, got %r" % (", ".join(SEVERITIES), min_severity)
        )
    return filter_findings(_stacktune_facts(data, "topology_findings"), min_severity)


class FilterModule:
    """stacktune.gpu topology filters."""

    def filters(self):
        return {
            "topology_table": topology_table,
            "topology_findings": topology_findings,
        }
