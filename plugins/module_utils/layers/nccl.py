# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nccl layer: NCCL's variables derived from the host's GPU and NIC facts, written to its
configuration file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.layers.shared import LayerError, unique


NAME = "nccl"

# Value rules of the layer's variables (policy/varspec.py RULES)
RULES = {
    "nccl_conf_path": {"absolute": True},
    "nccl_socket_ifname": {"line": "nccl.conf"},
    "nccl_ib_hca": {"line": "nccl.conf"},
    "nccl_topo_file": {"line": "nccl.conf"},
    "nccl_env": {"line": "nccl.conf"},
}

SEARCHABLE = {}

NCCL_HEADER = (
    "# Managed by stacktune (layer nccl): derived from this host's GPU and NIC facts.\n"
    "# Changes here are reported as drift and restored; set values through the\n"
    "# stacktune.gpu.nccl role variables (nccl_socket_ifname, nccl_ib_hca, nccl_topo_file, nccl_env).\n"
)


def nccl_hcas(facts):
    """Every RDMA device, those nearest to a GPU first (in GPU order: facts gpudirect.nearest_nic,
    PCIe path classes as NCCL reads them), then the others by name."""
    every = sorted(unique(n["rdma_device"] for n in (facts.get("nics") or []) if n.get("rdma_device")))
    near = []
    for entry in (facts.get("gpudirect") or {}).get("nearest_nic") or []:
        if entry.get("rdma"):
            near += [nic for nic in _flatten(entry.get("nics")) if nic in every]
    near = unique(near)
    return near + [h for h in every if h not in near]


def _flatten(value):
    if isinstance(value, (list, tuple)):
        return [item for part in value for item in _flatten(part)]
    return [value]


def nccl_variables(facts, socket_ifname="auto", socket_ifname_auto="", ib_hca="auto", topo_file=None, env=None):
    """The NCCL variables of the host: NCCL_SOCKET_IFNAME, NCCL_IB_HCA (``=`` and the RDMA devices
    of nccl_hcas with ``auto``) and NCCL_TOPO_FILE where not empty, then ``env`` over them."""
    hcas = nccl_hcas(facts or {})
    system = (
        ("NCCL_SOCKET_IFNAME", socket_ifname_auto if socket_ifname == "auto" else socket_ifname),
        ("NCCL_IB_HCA", (("=" + ",".join(hcas)) if hcas else "") if ib_hca == "auto" else ib_hca),
        ("NCCL_TOPO_FILE", topo_file or ""),
    )
    out = {name: value for name, value in system if value != ""}
    out.update(env or {})
    return out


def nccl_line_value(value):
    """A value as the file writes it: a boolean as 1 or 0."""
    return str(int(value) if isinstance(value, bool) else value)


def nccl_settings(variables, conf_path, enabled=True):
    """The ``file`` setting of the NCCL configuration file (``NAME=value`` lines under a header),
    none when the layer is off or there is no variable."""
    if not enabled or not variables:
        return []
    content = NCCL_HEADER + "".join("%s=%s\n" % (name, nccl_line_value(value)) for name, value in variables.items())
    return [{"kind": "file", "key": conf_path, "value": content, "mode": "0644", "var": "nccl_conf_path"}]


def variables(facts, socket_ifname="auto", socket_ifname_auto="", ib_hca="auto", topo_file=None, env=None):
    """The filter nccl_variables: NCCL_SOCKET_IFNAME, NCCL_IB_HCA and NCCL_TOPO_FILE derived from
    the facts, then ``env``."""
    if facts is None:
        facts = {}
    if not isinstance(facts, dict):
        raise LayerError(
            "nccl_variables expects ansible_facts.stacktune (gpu_topology_facts), got %s" % type(facts).__name__
        )
    env = env or {}
    if not isinstance(env, dict):
        raise LayerError("nccl_variables: env must be a dict of NCCL variables, got %r" % (env,))
    return nccl_variables(facts, socket_ifname, socket_ifname_auto, ib_hca, topo_file, env)


def settings(variables, conf_path, enabled=True):
    """The layer's settings (the filter nccl_settings, or layer_settings('nccl')): the file
    setting of the NCCL configuration file, or none."""
    variables = variables or {}
    if not isinstance(variables, dict):
        raise LayerError("nccl_settings expects the NCCL variables (a dict), got %r" % (variables,))
    return nccl_settings(variables, conf_path, bool(enabled))
