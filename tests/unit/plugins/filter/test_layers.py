# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The layer_role and layer_name filters, and failure_reason."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import failure_reason as failure
from ansible_collections.stacktune.gpu.plugins.filter import layers


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
    }
    with pytest.raises(AnsibleFilterError, match="layer reference"):
        layers.layer_name(None)


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
