# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report filter: most common value per field and outlier hosts per group, and the
hosts whose acceptance measurements fall behind others of the same GPU model.

Documentation lives next to this file in fleet_report.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.fleet import fleet_report as build_report
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.fleet import render_markdown
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain

OUTPUTS = ("data", "markdown")


def fleet_report(
    data,
    groups=None,
    driver_packages=None,
    fields=None,
    output="data",
    title="Fleet report",
    acceptance=None,
    acceptance_min_hosts=None,
    acceptance_z=None,
    acceptance_min_deviation=None,
):
    """Fleet report of host -> stacktune facts: a dict, or Markdown with output='markdown'."""
    if output not in OUTPUTS:
        raise AnsibleFilterError("fleet_report: output must be one of %s, got %r" % (", ".join(OUTPUTS), output))
    if not isinstance(data, dict) and not hasattr(data, "items"):
        raise AnsibleFilterError(
            "fleet_report expects a dict of inventory hostname -> ansible_facts['stacktune'], got %s"
            % type(data).__name__
        )
    if groups is not None and not hasattr(groups, "items"):
        raise AnsibleFilterError("fleet_report: groups must be a dict of group -> hosts (Ansible's groups)")
    if driver_packages is not None and not hasattr(driver_packages, "items"):
        raise AnsibleFilterError("fleet_report: driver_packages must be a dict of host -> package versions")
    if acceptance is not None and not hasattr(acceptance, "items"):
        raise AnsibleFilterError("fleet_report: acceptance must be a dict of host -> acceptance record")
    rule = {"min_hosts": acceptance_min_hosts, "z": acceptance_z, "min_deviation": acceptance_min_deviation}
    try:
        report = build_report(
            plain(data),
            groups=plain(groups) if groups is not None else None,
            driver_packages=plain(driver_packages) if driver_packages is not None else None,
            fields=list(fields) if fields else None,
            acceptance=plain(acceptance) if acceptance is not None else None,
            acceptance_rule=rule,
        )
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("fleet_report: %s" % exc) from None
    if output == "markdown":
        return render_markdown(report, title=title)
    return report


def _batch_size(value, hosts):
    """ansible-playbook's size of a serial batch: a count, or a percentage of the play's hosts (at least one)."""
    text = str(value).strip()
    try:
        size = int(float(text[:-1]) / 100.0 * hosts) or 1 if text.endswith("%") else int(text)
    except ValueError:
        raise AnsibleFilterError(
            "canary_hosts: serial must be a count, a percentage or a list of them, got %r" % (value,)
        ) from None
    return hosts if size <= 0 else min(size, hosts)


def canary_hosts(hosts_all, serial):
    """The hosts of a rollout's first batch when later batches follow it (the canaries), else [].

    From the play's hosts in order and its ``serial``, as ansible-playbook cuts the batches:
    ``ansible_play_batch`` cannot say it, since a host that fails leaves it."""
    hosts = list(hosts_all or [])
    first = serial[0] if isinstance(serial, (list, tuple)) and serial else serial
    if first in (None, "") or not hosts:
        return []
    size = _batch_size(first, len(hosts))
    return hosts[:size] if size < len(hosts) else []


class FilterModule:
    """stacktune.gpu fleet filters."""

    def filters(self):
        return {"fleet_report": fleet_report, "canary_hosts": canary_hosts}
