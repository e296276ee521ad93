# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nccl layer's variables and engine setting (documented in nccl_variables.yml and
nccl_settings.yml); they are module_utils/policy/layers.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.policy import layers
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def nccl_variables(facts, socket_ifname="auto", socket_ifname_auto="", ib_hca="auto", topo_file=None, env=None):
    """NCCL_SOCKET_IFNAME, NCCL_IB_HCA and NCCL_TOPO_FILE derived from the facts, then ``env``."""
    facts = plain(facts)
    if facts is None:
        facts = {}
    if not isinstance(facts, dict):
        raise AnsibleFilterError(
            "nccl_variables expects ansible_facts.stacktune (gpu_topology_facts), got %s" % type(facts).__name__
        )
    env = plain(env) or {}
    if not isinstance(env, dict):
        raise AnsibleFilterError("nccl_variables: env must be a dict of NCCL variables, got %r" % (env,))
    return layers.nccl_variables(facts, socket_ifname, socket_ifname_auto, ib_hca, topo_file, env)


def nccl_settings(variables, conf_path, enabled=True):
    """The file setting of the NCCL configuration file, or none."""
    variables = plain(variables) or {}
    if not isinstance(variables, dict):
        raise AnsibleFilterError("nccl_settings expects the NCCL variables (a dict), got %r" % (variables,))
    return layers.nccl_settings(variables, conf_path, bool(enabled))


class FilterModule:
    """stacktune.gpu nccl filters."""

    def filters(self):
        return {"nccl_variables": nccl_variables, "nccl_settings": nccl_settings}
