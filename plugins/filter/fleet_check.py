# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the fleet_report role reads of each host's variables (fleet_host_inputs), the lines it
prints about a fleet report (fleet_outlier_lines) and the hosts it fails on (fleet_blocking).

Documentation lives next to this file in fleet_host_inputs.yml, fleet_outlier_lines.yml and
fleet_blocking.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain

PARTS = ("fields", "acceptance")
# The driver role's results that carry the installed package versions: main, verify, plan.
DRIVER_RESULTS = ("driver_result", "driver_verify", "driver_plan")


def _field_lines(result):
    lines = []
    for name, group in result["groups"].items():
        for host, fields in group["outlier_hosts"].items():
            diffs = [
                "%s %s (most common %s)"
                % (
                    field,
                    group["fields"][field]["outliers"].get(host) or "unknown",
                    group["fields"][field]["majority"] or "unknown",
                )
                for field in fields
            ]
            lines.append("%s: %s: %s" % (name, host, ", ".join(diffs)))
    return lines or ["no outliers among %s host(s)" % result["host_count"]]


def _acceptance_lines(acceptance):
    lines = []
    for model, group in acceptance["groups"].items():
        for name, metric in group["metrics"].items():
            if metric["status"] == "cannot_compare":
                lines.append("%s: %s: %s" % (model, name, metric["message"]))
            for host, found in metric["outliers"].items():
                lines.append(
                    "%s: %s: %s %s (%+.1f%% from the median %s)"
                    % (model, host, name, found["value"], found["deviation"] * 100, metric["median"])
                )
    if acceptance["missing"]:
        lines.append("no acceptance record: %s" % ", ".join(acceptance["missing"]))
    return lines or ["no acceptance outliers among %d host(s)" % len(acceptance["hosts"])]


def fleet_outlier_lines(result, part="fields"):
    """One line per outlier host and group, or per acceptance outlier with part='acceptance'."""
    if part not in PARTS:
        raise AnsibleFilterError("fleet_outlier_lines: part must be one of %s, got %r" % (", ".join(PARTS), part))
    result = plain(result)
    if not isinstance(result, dict) or "groups" not in result or (part == "acceptance" and "acceptance" not in result):
        raise AnsibleFilterError(
            "fleet_outlier_lines expects the result of stacktune.gpu.fleet_report%s"
            % (" with acceptance" if part == "acceptance" else "")
        )
    return _field_lines(result) if part == "fields" else _acceptance_lines(result["acceptance"])


def fleet_blocking(result, fail_on):
    """The hosts that differ from all hosts in a field of fail_on, as 'host (field, field)'."""
    result = plain(result)
    if not isinstance(result, dict) or "groups" not in result:
        raise AnsibleFilterError("fleet_blocking expects the result of stacktune.gpu.fleet_report")
    fail_on = list(plain(fail_on) or [])
    out = []
    for host, fields in ((result["groups"].get("all") or {}).get("outlier_hosts") or {}).items():
        bad = []
        for field in fields:
            if field in fail_on and field not in bad:
                bad.append(field)
        if bad:
            out.append("%s (%s)" % (host, ", ".join(bad)))
    return out


def fleet_host_inputs(hostvars):
    """What the fleet report reads of one host's variables (an item of hostvars).

    Only the named variables are read: the rest of the host's variables are not templated.
    """
    if not hasattr(hostvars, "get"):
        raise AnsibleFilterError("fleet_host_inputs expects one host's variables (an item of hostvars)")
    results = [hostvars.get(name) for name in DRIVER_RESULTS]
    versions = [r["package_versions"] for r in results if hasattr(r, "keys") and "package_versions" in r]
    journal = hostvars.get("__fleet_report_journal")
    record = journal.get("acceptance") if hasattr(journal, "keys") else None
    return {
        "driver_packages": plain(versions[0]) if versions else None,
        "acceptance": plain(record) if record else None,
    }


class FilterModule:
    """stacktune.gpu fleet check filters."""

    def filters(self):
        return {
            "fleet_host_inputs": fleet_host_inputs,
            "fleet_outlier_lines": fleet_outlier_lines,
            "fleet_blocking": fleet_blocking,
        }
