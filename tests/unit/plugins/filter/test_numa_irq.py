# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The numa_irq_devices, numa_irq_notes and numa_irq_settings filters."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import numa_irq as filters

FACTS = {
    "gpus": [
        {"index": 0, "pci_bus_id": "0000:17:00.0", "numa_node": 0, "local_cpulist": "0-15"},
        {"index": 1, "pci_bus_id": "0000:3A:00.0", "numa_node": None, "local_cpulist": "16-31"},
        {"index": 2, "pci_bus_id": "0000:5a:00.0", "numa_node": 1, "local_cpulist": ""},
        {"index": 3, "pci_bus_id": None, "numa_node": 1, "local_cpulist": "1"},
    ],
    "nics": [
        {"name": "eth0", "pci_address": "0000:17:00.0", "numa_node": 0, "local_cpulist": "0-15", "rdma_device": None},
        {
            "name": "ib0",
            "pci_address": "0000:AA:00.0",
            "numa_node": 1,
            "local_cpulist": "16-31",
            "rdma_device": "mlx5_0",
        },
        {"name": "lo", "pci_address": None},
    ],
}


def test_registered():
    assert set(filters.FilterModule().filters()) == {
        "numa_irq_devices",
        "numa_irq_notes",
        "numa_irq_settings",
        "numa_irq_msi_dirs",
        "numa_irq_legacy_devices",
        "numa_irq_irqs",
        "numa_irq_irqbalance_file",
    }


def test_gpus_and_rdma_nics():
    devices = filters.numa_irq_devices(FACTS)
    assert devices == [
        {
            "device": "0000:17:00.0",
            "name": "gpu0",
            "numa_node": 0,
            "cpus": "0-15",
            "var": "numa_irq_gpus",
            "skip": None,
        },
        {
            "device": "0000:3a:00.0",
            "name": "gpu1",
            "numa_node": None,
            "cpus": "16-31",
            "var": "numa_irq_gpus",
            "skip": "no NUMA node reported for the device (local CPUs 16-31)",
        },
        {
            "device": "0000:5a:00.0",
            "name": "gpu2",
            "numa_node": 1,
            "cpus": "",
            "var": "numa_irq_gpus",
            "skip": "no local CPUs reported for the device",
        },
        {
            "device": "0000:aa:00.0",
            "name": "nic:ib0",
            "numa_node": 1,
            "cpus": "16-31",
            "var": "numa_irq_nic_filter",
            "skip": None,
        },
    ]
    assert filters.numa_irq_notes(devices) == [
        "gpu1 (0000:3a:00.0) not pinned: no NUMA node reported for the device (local CPUs 16-31)",
        "gpu2 (0000:5a:00.0) not pinned: no local CPUs reported for the device",
    ]


@pytest.mark.parametrize(
    "kwargs, names",
    [
        ({"gpus": False, "nic_filter": "physical"}, ["nic:eth0", "nic:ib0"]),
        ({"gpus": False, "nic_filter": "none"}, []),
        ({"gpus": False, "nics": ["eth0"], "nic_filter": "none"}, ["nic:eth0"]),
        # a NIC on the same PCI function as a GPU counts once
        ({"nic_filter": "physical"}, ["gpu0", "gpu1", "gpu2", "nic:ib0"]),
    ],
)
def test_choice(kwargs, names):
    assert [d["name"] for d in filters.numa_irq_devices(FACTS, **kwargs)] == names


def test_override_pins_a_skipped_device():
    devices = filters.numa_irq_devices(FACTS, cpus_override={"0000:3A:00.0": 2})
    assert devices[1] == {
        "device": "0000:3a:00.0",
        "name": "gpu1",
        "numa_node": None,
        "cpus": "2",
        "var": "numa_irq_cpus_override",
        "skip": None,
    }


def test_settings_with_the_ban_list():
    devices = filters.numa_irq_devices(FACTS)
    settings = filters.numa_irq_settings(
        devices, irqbalance_file="/etc/default/irqbalance", irqs=[33, 34], irqbalance_args="--foreground"
    )
    assert settings == [
        {
            "kind": "irq_affinity",
            "key": "0000:17:00.0",
            "device": "0000:17:00.0",
            "value": "0-15",
            "var": "numa_irq_gpus",
        },
        {
            "kind": "irq_affinity",
            "key": "0000:aa:00.0",
            "device": "0000:aa:00.0",
            "value": "16-31",
            "var": "numa_irq_nic_filter",
        },
        {
            "kind": "env_var",
            "path": "/etc/default/irqbalance",
            "key": "IRQBALANCE_ARGS",
            "value": "--foreground --banirq=33 --banirq=34",
            "var": "numa_irq_irqbalance_args",
        },
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"irqbalance": "ignore", "irqbalance_file": "/etc/default/irqbalance", "irqs": [33]},
        {"irqbalance_file": None, "irqs": [33]},
        {"irqbalance_file": "/etc/default/irqbalance", "irqs": []},
    ],
)
def test_no_ban_list(kwargs):
    assert [s["kind"] for s in filters.numa_irq_settings(filters.numa_irq_devices(FACTS), **kwargs)] == [
        "irq_affinity"
    ] * 2


def test_blank_args_are_left_out():
    (ban,) = filters.numa_irq_settings([], irqbalance_file="/f", irqs=[9], irqbalance_args="  ")
    assert ban["value"] == "--banirq=9"


def test_bad_input():
    with pytest.raises(AnsibleFilterError, match="ansible_facts.stacktune"):
        filters.numa_irq_devices("facts")
    with pytest.raises(AnsibleFilterError, match="nic_filter"):
        filters.numa_irq_devices(FACTS, nic_filter="all")
