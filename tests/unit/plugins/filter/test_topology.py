# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""topology_table and topology_findings filters, on the recorded and constructed fixtures.

degraded_8gpu_constructed.json is CONSTRUCTED by hand (see its "_constructed" note);
no_gpu_debian.json is recorded on a GPU-less Debian VM.
"""

from __future__ import absolute_import, division, print_function

import json
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import topology as filters
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import assemble
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology_table import render_table

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "topology")
PLUGIN_DIR = os.path.dirname(filters.__file__)


def facts_of(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return assemble(json.load(handle))


@pytest.fixture
def degraded():
    return facts_of("degraded_8gpu_constructed.json")


def test_filters_are_registered():
    assert set(filters.FilterModule().filters()) == {"topology_table", "topology_findings"}


@pytest.mark.parametrize("wrap", ["facts", "ansible_facts", "hostvars"])
def test_table_accepts_facts_ansible_facts_or_hostvars(degraded, wrap):
    data = {
        "facts": degraded,
        "ansible_facts": {"stacktune": degraded, "distribution": "Ubuntu"},
        "hostvars": {"ansible_facts": {"stacktune": degraded}, "inventory_hostname": "gpu01"},
    }[wrap]
    table = filters.topology_table(data)
    assert table == render_table(degraded)
    assert "Gen3 x8 / Gen5 x16" in table


def test_table_of_a_host_without_gpus():
    facts = facts_of("no_gpu_debian.json")
    assert filters.topology_table(facts).startswith("GPUs: none (NVML unavailable: ")


@pytest.mark.parametrize(
    ("severity", "expected"),
    [
        ("info", {"driver_version_mismatch", "aspm_enabled", "pcie_link_degraded", "gpu_numa_no_local_cpus"}),
        ("warning", {"driver_version_mismatch", "aspm_enabled", "pcie_link_degraded", "gpu_numa_no_local_cpus"}),
        ("critical", {"driver_version_mismatch"}),
    ],
)
def test_findings_by_severity(degraded, severity, expected):
    found = filters.topology_findings(degraded, severity)
    assert {f["id"] for f in found} == expected


def test_findings_default_is_everything():
    facts = facts_of("no_gpu_debian.json")
    assert [f["id"] for f in filters.topology_findings(facts)] == ["nvml_unavailable"]
    assert filters.topology_findings(facts, "warning") == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: filters.topology_findings(f, "fatal"), "min_severity must be one of info, warning, critical"),
        (lambda f: filters.topology_table("not facts"), "expects the stacktune facts"),
        (lambda f: filters.topology_table({"unrelated": 1}), "as gathered by stacktune.gpu.gpu_topology_facts"),
    ],
)
def test_bad_input_raises_filter_errors(degraded, call, message):
    with pytest.raises(AnsibleFilterError, match=message):
        call(degraded)


@pytest.mark.parametrize("name", ["topology_table", "topology_findings"])
def test_each_filter_has_its_documentation(name):
    import yaml

    with open(os.path.join(PLUGIN_DIR, name + ".yml")) as handle:
        doc = yaml.safe_load(handle)
    assert set(doc) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    assert doc["DOCUMENTATION"]["name"] == name
    assert doc["DOCUMENTATION"]["options"]["_input"]["required"] is True
    assert "stacktune.gpu.%s" % name in doc["EXAMPLES"]
    assert "_value" in doc["RETURN"]
