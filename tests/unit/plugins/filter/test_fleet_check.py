# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet_host_inputs, fleet_outlier_lines and fleet_blocking filters, on fleet reports of the
recorded h200.json and no_gpu_debian.json."""

from __future__ import absolute_import, division, print_function

import copy
import json
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import fleet, fleet_check
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import assemble

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "topology")


def facts_of(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return assemble(json.load(handle))


def record(memory):
    return json.dumps({"gpu_name": "NVIDIA H200", "verdict": "pass", "metrics": {"memory_gbps": memory}})


@pytest.fixture(scope="module")
def facts():
    h200 = facts_of("h200.json")
    old = copy.deepcopy(h200)
    old["driver"]["nvml_version"] = old["driver"]["kernel_module_version"] = "570.86.15"
    return {"gpu-a": h200, "gpu-b": copy.deepcopy(h200), "gpu-c": old, "gpu-d": copy.deepcopy(h200)}


def test_registered():
    assert set(fleet_check.FilterModule().filters()) == {"fleet_host_inputs", "fleet_outlier_lines", "fleet_blocking"}


def test_outlier_lines_and_blocking(facts):
    report = fleet.fleet_report(facts, {"all": sorted(facts), "gpu": sorted(facts)})
    assert fleet_check.fleet_outlier_lines(report) == [
        "all: gpu-c: driver_module 570.86.15 (most common 580.159.04), driver_nvml 570.86.15 (most common 580.159.04)",
        "gpu: gpu-c: driver_module 570.86.15 (most common 580.159.04), driver_nvml 570.86.15 (most common 580.159.04)",
    ]
    assert fleet_check.fleet_blocking(report, ["bios", "driver_nvml", "driver_module"]) == [
        "gpu-c (driver_module, driver_nvml)"
    ]
    assert fleet_check.fleet_blocking(report, ["bios"]) == []


def test_no_outliers(facts):
    report = fleet.fleet_report({"a": facts["gpu-a"], "b": facts["gpu-b"]})
    assert fleet_check.fleet_outlier_lines(report) == ["no outliers among 2 host(s)"]


def test_acceptance_lines(facts):
    records = {"gpu-a": record(4100.0), "gpu-b": record(4100.0), "gpu-c": record(3280.0), "gpu-d": record(4090.0)}
    report = fleet.fleet_report(facts, acceptance=records, acceptance_min_hosts=3)
    assert fleet_check.fleet_outlier_lines(report, "acceptance") == [
        "NVIDIA H200: gpu-c: memory_gbps 3280.0 (-19.9% from the median 4095.0)"
    ]
    records["gpu-d"] = None
    report = fleet.fleet_report(facts, acceptance=records)
    assert fleet_check.fleet_outlier_lines(report, "acceptance") == [
        "NVIDIA H200: memory_gbps: cannot compare: 3 hosts",
        "no acceptance record: gpu-d",
    ]


def test_lines_bad_input(facts):
    with pytest.raises(AnsibleFilterError, match="with acceptance"):
        fleet_check.fleet_outlier_lines(fleet.fleet_report(facts), "acceptance")
    with pytest.raises(AnsibleFilterError, match="part must be"):
        fleet_check.fleet_outlier_lines({}, "hosts")
    with pytest.raises(AnsibleFilterError, match="fleet_report"):
        fleet_check.fleet_blocking(None, [])


def test_host_inputs():
    journaled = {"verdict": "pass", "metrics": {"memory_gbps": 4100.0}}
    hostvars = {
        "driver_verify": {"package_versions": ["580.1"]},
        "driver_plan": {"package_versions": ["570.1"]},
        "__fleet_report_journal": {"changed": False, "layers": [], "acceptance": journaled},
    }
    assert fleet_check.fleet_host_inputs(hostvars) == {"driver_packages": ["580.1"], "acceptance": journaled}
    skipped = {"__fleet_report_journal": {"skipped": True}, "driver_result": {"changed": False}}
    assert fleet_check.fleet_host_inputs(skipped) == {"driver_packages": None, "acceptance": None}
    # journal_info's acceptance is empty when the host has no record, or one it cannot use
    for journal in ({"layers": [], "acceptance": {}}, {"acceptance": {}, "acceptance_error": "not JSON"}):
        assert fleet_check.fleet_host_inputs({"__fleet_report_journal": journal})["acceptance"] is None
    with pytest.raises(AnsibleFilterError, match="one host's variables"):
        fleet_check.fleet_host_inputs(["not", "hostvars"])


def test_journaled_record_reports_as_its_text(facts):
    """The record journal_info returns gives the report its file's text gave, byte for byte."""
    texts = {"gpu-a": record(4100.0), "gpu-b": record(4100.0), "gpu-c": record(3280.0), "gpu-d": None}
    inputs = {
        host: fleet_check.fleet_host_inputs(
            {"__fleet_report_journal": {"acceptance": json.loads(text) if text else {}}}
        )
        for host, text in texts.items()
    }
    journaled = {host: i["acceptance"] for host, i in inputs.items()}
    for kwargs in ({}, {"acceptance_min_hosts": 3}):
        assert fleet.fleet_report(facts, acceptance=journaled, **kwargs) == fleet.fleet_report(
            facts, acceptance=texts, **kwargs
        )
        assert fleet.fleet_report(facts, acceptance=journaled, output="markdown", **kwargs) == fleet.fleet_report(
            facts, acceptance=texts, output="markdown", **kwargs
        )
