# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bios_notes filter, on the recorded and constructed topology fixtures."""

from __future__ import absolute_import, division, print_function

import copy
import json
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import bios as filters
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import assemble

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "topology")


def facts_of(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return assemble(json.load(handle))


def host(**host):
    return {"host": host, "gpus": [], "nics": [], "findings": [], "gpu_count": 0}


def ids(notes):
    return [n["id"] for n in notes]


def test_registered():
    assert filters.FilterModule().filters() == {"bios_notes": filters.bios_notes}


def test_note_shape_and_printed_text():
    notes = filters.bios_notes(host(aspm_policy="default", cmdline="quiet", iommu={"mode": "pt"}), "performance")
    assert [list(n) for n in notes] == [["id", "severity", "subject", "note", "remediation"]] * 2
    assert notes[0] == {
        "id": "aspm_policy",
        "severity": "warning",
        "subject": "host",
        "note": "PCIe ASPM policy is default, expected performance (bios_expected_aspm); kernel command line: no "
        "pcie_aspm= argument. Links in low-power states down-clock and add wake-up stalls to the tail latency",
        "remediation": "BIOS setup: 'PCIe ASPM' Disabled. Kernel layer: kernel_aspm_policy: performance (live) and "
        "kernel_cmdline_args: {pcie_aspm.policy: performance} (from the next boot)",
    }
    assert notes[1]["note"] == "BIOS unknown (unknown vendor, no date), board unknown, CPU unknown, microcode unknown"
    assert notes[1]["remediation"].startswith("Nothing to change: compare across the fleet")


@pytest.mark.parametrize(
    "board, words",
    [
        ({"vendor": "Supermicro", "name": "X13DEG-OAD"}, "board Supermicro X13DEG-OAD,"),
        ({"vendor": "Supermicro", "name": ""}, "board Supermicro,"),
        ({"vendor": None, "name": "X13DEG-OAD"}, "board X13DEG-OAD,"),
        ({}, "board unknown,"),
    ],
)
def test_the_board_reads_as_the_words_that_are_known(board, words):
    facts = host(aspm_policy="performance", board=board, bios={"version": "1.0", "vendor": "AMI", "date": "2023"})
    notes = {n["id"]: n for n in filters.bios_notes(facts, "performance", min_version="2.0")}
    assert words in notes["firmware_inventory"]["note"]
    assert "(%s)" % words[len("board ") : -1] in notes["bios_version_old"]["remediation"]


@pytest.mark.parametrize(
    "facts, expected_aspm, first",
    [
        (host(aspm_policy="default", cmdline="pcie_aspm=off"), "performance", "aspm_left_to_firmware"),
        (host(aspm_policy=None), "performance", "aspm_policy_unknown"),
        (host(aspm_policy="performance"), "performance", "iommu_unknown"),
        (host(aspm_policy="default"), "ignore", "iommu_unknown"),
    ],
)
def test_aspm(facts, expected_aspm, first):
    assert ids(filters.bios_notes(facts, expected_aspm))[0] == first


def test_aspm_names_the_kernel_arguments():
    notes = filters.bios_notes(host(aspm_policy="default", cmdline="pcie_aspm.policy=powersave ro"), "performance")
    assert "kernel command line: pcie_aspm.policy=powersave." in notes[0]["note"]


def test_iommu_on_warns_on_an_rdma_gpu_host():
    facts = dict(host(aspm_policy="performance", iommu={"mode": "on"}), gpu_count=8)
    facts["nics"] = [{"name": "ib0", "rdma_device": "mlx5_0"}, {"name": "eth0", "rdma_device": None}]
    note = filters.bios_notes(facts, "performance")[0]
    assert (note["id"], note["severity"]) == ("iommu_translated", "warning")
    assert "(ib0): GPUDirect RDMA traffic pays for the translation or is refused" in note["note"]
    facts["gpu_count"] = 0
    assert filters.bios_notes(facts, "performance")[0]["severity"] == "info"


@pytest.mark.parametrize(
    "version, minimum, found",
    [
        ("1.2.3", "2.0", "bios_version_old"),
        ("2.0", "2.0", None),
        ("10.1", "9.9", None),
        (None, "2.0", "bios_version_unknown"),
    ],
)
def test_bios_version(version, minimum, found):
    facts = host(aspm_policy="performance", iommu={"mode": "pt"}, bios={"version": version, "vendor": "AMI"})
    got = [i for i in ids(filters.bios_notes(facts, "performance", min_version=minimum)) if i.startswith("bios_")]
    assert got == ([found] if found else [])


@pytest.mark.parametrize(
    "microcode, minimum, found",
    [("0x1", "0x2b000603", "microcode_old"), ("0x2b000700", "0x2b000603", None), (None, "0x10", "microcode_unknown")],
)
def test_microcode(microcode, minimum, found):
    facts = host(aspm_policy="performance", iommu={"mode": "pt"}, cpu_microcode=microcode, cpu_model="Xeon")
    notes = filters.bios_notes(facts, "performance", min_microcode=minimum)
    got = [n for n in notes if n["id"].startswith("microcode_")]
    assert [n["id"] for n in got] == ([found] if found else [])
    if found == "microcode_old":
        assert got[0]["severity"] == "critical"
        assert got[0]["note"].startswith("CPU microcode 0x1 (Xeon) is below the fleet minimum 0x2b000603")


def test_degraded_links_and_vbios_inventory():
    facts = facts_of("degraded_8gpu_constructed.json")
    notes = filters.bios_notes(facts, "performance")
    links = [n for n in notes if n["id"] == "pcie_link_below_max"]
    degraded = [f for f in facts["findings"] if f["id"] == "pcie_link_degraded"]
    assert [(n["subject"], n["note"]) for n in links] == [(f["subject"], f["message"]) for f in degraded]
    assert links and all("Reseat the card and its riser" in n["remediation"] for n in links)
    assert len([n for n in notes if n["id"] == "vbios_inventory"]) == len(facts["gpus"])


def test_idle_link_says_check_under_load():
    facts = host(aspm_policy="performance")
    facts["findings"] = [
        {"id": "pcie_link_degraded", "severity": "info", "subject": "gpu0", "message": "m", "evidence": {"gen_max": 5}}
    ]
    note = filters.bios_notes(facts, "performance")[0]
    assert note["remediation"].startswith("Check again under load first (an idle GPU lowers its link speed). Reseat")
    assert note["remediation"].endswith(
        "wired x16 and not bifurcated or shared, and set the BIOS PCIe link speed of that slot to Auto or Gen5"
    )


def test_no_gpu_host():
    notes = filters.bios_notes(copy.deepcopy(facts_of("no_gpu_debian.json")), "performance")
    assert "firmware_inventory" in ids(notes) and "vbios_inventory" not in ids(notes)


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="ansible_facts.stacktune"):
        filters.bios_notes(["not", "facts"], "performance")
