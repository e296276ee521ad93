# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver_findings filter."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import driver as filters


def facts(module=None, nvml=None, cuda=None, runtime=None, reason=None):
    return {
        "driver": {"kernel_module_version": module, "nvml_version": nvml, "cuda_driver_version": cuda},
        "libraries": {"cuda_runtime": runtime},
        "reason": reason,
    }


def found(findings):
    return [(f["id"], f["severity"]) for f in findings]


def test_registered():
    assert filters.FilterModule().filters() == {
        "driver_findings": filters.driver_findings,
        "driver_packages": filters.driver_packages,
        "driver_held": filters.driver_held,
        "driver_holds": filters.driver_holds,
    }


def test_keeps_the_driver_findings_of_preflight_in_the_one_shape():
    preflight = [
        {"id": "driver_denylisted", "severity": "critical", "subject": "host", "message": "550.1 is deny-listed"},
        {"id": "pcie_link_degraded", "severity": "warning", "subject": "gpu0", "message": "slow", "evidence": {}},
    ]
    assert filters.driver_findings(facts(), preflight=preflight) == [
        {
            "id": "driver_denylisted",
            "severity": "critical",
            "subject": "host",
            "message": "550.1 is deny-listed",
            "evidence": {},
        }
    ]


def test_packages_disagree_and_reboot_pending():
    got = filters.driver_findings(
        facts(module="535.1", nvml="535.1"),
        package_versions=["550.54.15", "535.2"],
        packages=["nvidia-driver-550", "x"],
    )
    assert found(got) == [("driver_packages_disagree", "warning"), ("driver_reboot_pending", "critical")]
    assert (
        got[0]["message"]
        == "installed driver packages carry different versions: 550.54.15, 535.2 (nvidia-driver-550, x)"
    )
    assert got[1]["message"] == (
        "the loaded kernel module is 535.1 but the installed driver packages are 550.54.15, 535.2: reboot (or reload"
        " the nvidia modules) to run what is installed"
    )


@pytest.mark.parametrize(
    "host, versions, declared, expected",
    [
        (facts(module="550.1"), ["550.1"], "550.1", []),
        (facts(module="550.1"), ["550.1"], "535.1", [("driver_version_unexpected", "critical")]),
        (facts(nvml="550.1"), [], "535.1", [("driver_version_unexpected", "critical")]),
        (facts(), ["550.1"], "535.1", [("driver_version_unexpected", "critical")]),
        (facts(), ["535.1"], "535.1", []),
        (facts(reason="no NVIDIA GPU"), [], "535.1", [("driver_not_found", "info")]),
        (facts(), [], None, []),
    ],
)
def test_declared_version(host, versions, declared, expected):
    assert found(filters.driver_findings(host, package_versions=versions, declared=declared)) == expected


def test_not_found_names_the_reason():
    got = filters.driver_findings(facts(), declared=550.54)
    assert (
        got[0]["message"]
        == "driver_nvidia_version declares 550.54 but no NVIDIA driver is loaded or installed (no GPU)"
    )


@pytest.mark.parametrize(
    "cuda, runtime, expected_cuda, expected",
    [
        ("12.4", "12.4.1", "12.4", []),
        ("12.2", None, "12.4", [("driver_cuda_too_old", "critical")]),
        ("12.10", None, "12.4", []),
        ("12.4", "12.1.0", "12.4", [("cuda_runtime_differs", "warning")]),
        ("11.0", "11.0", "", []),
    ],
)
def test_cuda(cuda, runtime, expected_cuda, expected):
    host = facts(module="550.1", cuda=cuda, runtime=runtime)
    assert found(filters.driver_findings(host, expected_cuda=expected_cuda)) == expected


@pytest.mark.parametrize(
    "holds, hold, expected",
    [
        ({"held": ["a", "b"], "released": []}, True, [("driver_packages_not_held", "warning")]),
        ({"held": [], "released": ["c"]}, False, [("driver_packages_held", "info")]),
        ({"held": [], "released": ["c"]}, True, []),
        (None, True, []),
    ],
)
def test_holds(holds, hold, expected):
    assert found(filters.driver_findings(facts(), holds=holds, hold=hold)) == expected


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="ansible_facts.stacktune"):
        filters.driver_findings(None)
