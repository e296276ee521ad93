# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The layer_role, layer_name and layer_settings filters, and failure_reason."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import failure_reason as failure
from ansible_collections.stacktune.gpu.plugins.filter import cpu as cpu_filters
from ansible_collections.stacktune.gpu.plugins.filter import gpu_settings as gpu_filters
from ansible_collections.stacktune.gpu.plugins.filter import io as io_filters
from ansible_collections.stacktune.gpu.plugins.filter import kernel as kernel_filters
from ansible_collections.stacktune.gpu.plugins.filter import layers
from ansible_collections.stacktune.gpu.plugins.filter import memory as memory_filters
from ansible_collections.stacktune.gpu.plugins.filter import nccl as nccl_filters
from ansible_collections.stacktune.gpu.plugins.filter import numa_irq as numa_filters
from ansible_collections.stacktune.gpu.plugins.module_utils.layers import registry


@pytest.mark.parametrize(
    "ref, role, name",
    [
        ("kernel", "stacktune.gpu.kernel", "kernel"),
        ("numa_irq", "stacktune.gpu.numa_irq", "numa_irq"),
        ("stacktune.gpu.nccl", "stacktune.gpu.nccl", "nccl"),
        ("my.collection.my_layer", "my.collection.my_layer", "my_layer"),
        ("/path/to/roles/my_layer", "/path/to/roles/my_layer", "my_layer"),
        ("roles/own.layer", "roles/own.layer", "layer"),
        ("Kernel", "Kernel", "Kernel"),
    ],
)
def test_role_and_name(ref, role, name):
    assert layers.layer_role(ref) == role
    assert layers.layer_name(ref) == name


def test_layers_registered_and_bad_input():
    assert layers.FilterModule().filters() == {
        "layer_role": layers.layer_role,
        "layer_name": layers.layer_name,
        "layer_workloads": layers.layer_workloads,
        "layer_settings": layers.layer_settings,
    }
    with pytest.raises(AnsibleFilterError, match="layer reference"):
        layers.layer_name(None)


# One call per layer: its own filter and layer_settings by its name, with the same arguments.
SAME_CALLS = [
    (memory_filters.memory_settings, "memory", ("64G",), {"memlock": "unlimited", "thp_enabled": "never"}),
    (
        memory_filters.memory_settings,
        "memory",
        (None,),
        {"thp_enabled": ["never", "always"], "search": True},
    ),
    (kernel_filters.kernel_settings, "kernel", ({"vm.swappiness": 1},), {"cmdline_args": {"iommu": "pt"}}),
    (
        kernel_filters.kernel_settings,
        "kernel",
        ({"vm.swappiness": 1},),
        {"floors": ["vm.swappiness"], "os_family": "RedHat"},
    ),
    (
        cpu_filters.cpu_settings,
        "cpu",
        ([{"var": "cpu_governor", "key": "/sys/x", "value": "performance"}],),
        {"max_cstate": 1},
    ),
    (io_filters.io_settings, "io", ([{"dev": "8:0", "disk": None, "reason": "gone"}],), {}),
    (gpu_filters.gpu_settings_settings, "gpu_settings", ("all",), {"power_limit_w": 300, "gpu_count": 2}),
    (
        gpu_filters.gpu_settings_settings,
        "gpu_settings",
        ([0, 1],),
        {"power_limit_w": {"from": 300, "to": 400, "step": 50}, "gpu_count": 2, "search": True},
    ),
    (nccl_filters.nccl_settings, "nccl", ({"NCCL_IB_HCA": "=mlx5_0"}, "/etc/nccl.conf"), {}),
    (
        numa_filters.numa_irq_settings,
        "numa_irq",
        ([{"device": "0000:17:00.0", "cpus": "0-3", "var": "numa_irq_gpus", "skip": None}],),
        {"irqbalance_file": "/etc/default/irqbalance", "irqs": [40, 41]},
    ),
]


@pytest.mark.parametrize("own, name, args, kwargs", SAME_CALLS, ids=lambda v: v if isinstance(v, str) else "")
def test_layer_settings_is_each_layers_own_filter(own, name, args, kwargs):
    got = layers.layer_settings(name, *args, **kwargs)
    assert got == own(*args, **kwargs)
    assert got  # every call above gives settings or a search


def test_layer_settings_knows_every_layer_module_and_refuses_others():
    assert sorted(registry.LAYERS) == ["cpu", "gpu_settings", "io", "kernel", "memory", "nccl", "numa_irq"]
    with pytest.raises(AnsibleFilterError, match="'bios' is no layer with settings; known: cpu, gpu_settings"):
        layers.layer_settings("bios", {})
    with pytest.raises(AnsibleFilterError, match="layer's name"):
        layers.layer_settings(None)
    # a layer's refusal of an argument, as its own filter words it
    with pytest.raises(AnsibleFilterError, match="^cpu_settings expects a list of sysfs rows"):
        layers.layer_settings("cpu", "performance")
    with pytest.raises(AnsibleFilterError, match="^memory_settings: one setting is searched at a time"):
        layers.layer_settings("memory", None, thp_enabled=["never", "always"], thp_defrag=["never", "always"])


def test_layer_workloads_by_name_with_default():
    # the defaults of roles/stacktune (stacktune_gate_workloads), in part
    mapping = {"memory": ["dataloader", "cpu_dataloader"], "driver": [], "default": ["train_step", "cpu_train_step"]}
    got = layers.layer_workloads(["memory", "stacktune.gpu.driver", "/srv/roles/my_layer"], mapping)
    assert got == {
        "memory": ["dataloader", "cpu_dataloader"],
        "driver": [],
        "my_layer": ["train_step", "cpu_train_step"],
    }
    assert layers.layer_workloads(["mine"], {}) == {"mine": []}
    with pytest.raises(AnsibleFilterError, match="list of layers"):
        layers.layer_workloads("memory", mapping)
    with pytest.raises(AnsibleFilterError, match="stacktune_gate_workloads"):
        layers.layer_workloads(["memory"], ["dataloader"])


@pytest.mark.parametrize(
    "result, reason",
    [
        ({}, "unknown error"),
        ({"msg": "top"}, "top"),
        ({"results": [{"failed": False, "msg": "a"}, {"failed": True, "msg": "b"}], "msg": "top"}, "b"),
        ({"results": [{"msg": "no failed key"}], "msg": "top"}, "top"),
        ({"results": [{"failed": True}], "msg": "t"}, "t"),
        ({"results": []}, "unknown error"),
        (None, "unknown error"),
    ],
)
def test_failure_reason(result, reason):
    assert failure.failure_reason(result) == reason
    assert failure.FilterModule().filters() == {"failure_reason": failure.failure_reason}
