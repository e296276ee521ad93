# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet_report filter, on facts replayed from the recorded h200.json and no_gpu_debian.json."""

from __future__ import absolute_import, division, print_function

import copy
import json
import os
from collections.abc import Mapping

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import fleet as filters
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.fleet import FIELD_NAMES
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import assemble

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "topology")
PLUGIN_DIR = os.path.dirname(filters.__file__)


def facts_of(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return assemble(json.load(handle))


@pytest.fixture(scope="module")
def fleet_facts():
    h200 = facts_of("h200.json")
    old = copy.deepcopy(h200)
    old["driver"]["nvml_version"] = old["driver"]["kernel_module_version"] = "570.86.15"
    return {"gpu-a": h200, "gpu-b": copy.deepcopy(h200), "gpu-c": old, "cpu-a": facts_of("no_gpu_debian.json")}


def test_registered():
    assert filters.FilterModule().filters() == {
        "fleet_report": filters.fleet_report,
        "canary_hosts": filters.canary_hosts,
    }


def test_data_output(fleet_facts):
    groups = {"all": sorted(fleet_facts), "gpu": ["gpu-a", "gpu-b", "gpu-c"], "cpu": ["cpu-a"]}
    report = filters.fleet_report(fleet_facts, groups, {"gpu-a": ["580.159.04"], "gpu-b": "580.159.04"})
    gpu = report["groups"]["gpu"]["fields"]
    assert gpu["driver_nvml"]["majority"] == "580.159.04"
    assert gpu["driver_nvml"]["outliers"] == {"gpu-c": "570.86.15"}
    assert gpu["driver_package"]["outliers"] == {"gpu-c": None}
    assert report["groups"]["cpu"]["outlier_hosts"] == {}
    assert report["hosts"]["cpu-a"]["gpu_count"] == 0


def test_markdown_output(fleet_facts):
    text = filters.fleet_report(fleet_facts, output="markdown", title="GPU fleet")
    assert text.startswith("# GPU fleet\n")
    assert "| Driver (NVML) | 580.159.04 | 2/4 | cpu-a: unknown, gpu-c: 570.86.15 |" in text


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"output": "html"}, "output must be one of"),
        ({"groups": ["gpu-a"]}, "groups must be a dict"),
        ({"driver_packages": "580"}, "driver_packages must be a dict"),
        ({"fields": ["bios", "colour"]}, "unknown field"),
    ],
)
def test_bad_arguments(fleet_facts, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        filters.fleet_report(fleet_facts, **kwargs)


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="expects a dict"):
        filters.fleet_report(["gpu-a"])


class LazyMapping(Mapping):
    """A read-only mapping that is not a dict, like the containers Ansible hands to filters."""

    def __init__(self, data):
        self._data = data

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


def test_non_dict_mappings_are_accepted(fleet_facts):
    data = LazyMapping({h: LazyMapping(f) for h, f in fleet_facts.items()})
    report = filters.fleet_report(data, groups=LazyMapping({"gpu": ("gpu-a", "gpu-b", "gpu-c")}))
    assert report["groups"]["gpu"]["fields"]["driver_nvml"]["outliers"] == {"gpu-c": "570.86.15"}


def test_sidecar_documents_every_field_and_option():
    with open(os.path.join(PLUGIN_DIR, "fleet_report.yml")) as handle:
        doc = yaml.safe_load(handle)
    options = doc["DOCUMENTATION"]["options"]
    assert doc["DOCUMENTATION"]["name"] == "fleet_report"
    assert options["fields"]["choices"] == list(FIELD_NAMES)
    assert set(options) == {
        "_input",
        "groups",
        "driver_packages",
        "fields",
        "output",
        "title",
        "acceptance",
        "acceptance_min_hosts",
        "acceptance_z",
        "acceptance_min_deviation",
    }
    assert options["acceptance_min_hosts"]["default"] == 5
    assert options["acceptance_z"]["default"] == 3.5
    assert options["acceptance_min_deviation"]["default"] == 0.1


def acceptance_record(memory):
    # constructed, in the shape the acceptance role writes into a host's journal
    return json.dumps({"gpu_name": "NVIDIA H200", "verdict": "pass", "metrics": {"memory_gbps": memory}})


def test_acceptance_outliers(fleet_facts):
    records = {
        "gpu-a": acceptance_record(4100.0),
        "gpu-b": acceptance_record(4100.0),
        "gpu-c": acceptance_record(3280.0),
    }
    report = filters.fleet_report(fleet_facts, acceptance=LazyMapping(records), acceptance_min_hosts=3)
    assert report["acceptance"]["outlier_hosts"] == {"gpu-c": ["NVIDIA H200: memory_gbps"]}
    report = filters.fleet_report(fleet_facts, acceptance=records)
    assert (
        report["acceptance"]["groups"]["NVIDIA H200"]["metrics"]["memory_gbps"]["message"] == "cannot compare: 3 hosts"
    )
    text = filters.fleet_report(fleet_facts, acceptance=records, output="markdown")
    assert "cannot compare: 3 hosts" in text


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"acceptance": ["gpu-a"]}, "acceptance must be a dict"),
        ({"acceptance": {}, "acceptance_min_hosts": 1}, "fleet_report_acceptance_min_hosts"),
        ({"acceptance": {}, "acceptance_z": -1}, "fleet_report_acceptance_z"),
    ],
)
def test_bad_acceptance_arguments(fleet_facts, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        filters.fleet_report(fleet_facts, **kwargs)


@pytest.mark.parametrize(
    ("serial", "n", "want"),
    [
        (["20%", "100%"], 10, 2),  # tune.yml's default: two canaries of ten
        (["20%", "100%"], 3, 1),  # 20% of 3 rounds down to 0: at least one
        (["100%"], 10, 0),  # one batch: no canary
        ("30%", 10, 3),
        (4, 10, 4),
        (["1", "100%"], 1, 0),  # one host: its batch is the whole rollout
        ([0], 10, 0),  # 0: the whole play in one batch, as ansible-playbook reads it
        (["20%", "100%"], 108, 21),
    ],
)
def test_canary_hosts_are_the_first_batch_when_more_follow(serial, n, want):
    hosts = ["h%d" % i for i in range(n)]
    assert filters.canary_hosts(hosts, serial) == hosts[:want]


def test_a_failed_host_does_not_make_the_others_canaries():
    """The rule before read ansible_play_batch, which a failed host leaves: in a single batch of
    108 hosts where many failed, the others read "This host is a canary" (seen in the safety
    scenario's bad-input run). The batches come from the hosts and serial alone."""
    hosts = ["bad-%d" % i for i in range(108)]
    assert filters.canary_hosts(hosts, ["100%"]) == []


def test_canary_hosts_refuses_a_serial_it_cannot_read():
    with pytest.raises(AnsibleFilterError, match="canary_hosts: serial"):
        filters.canary_hosts(["a", "b"], ["many"])
