# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nccl layer's variables and engine setting (documented in nccl_variables.yml and
nccl_settings.yml): the layer module module_utils/layers/nccl.py's ``variables`` and ``settings``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.plugin_utils._layers import call_layer


def nccl_variables(facts, socket_ifname="auto", socket_ifname_auto="", ib_hca="auto", topo_file=None, env=None):
    """NCCL_SOCKET_IFNAME, NCCL_IB_HCA and NCCL_TOPO_FILE derived from the facts, then ``env``."""
    return call_layer("nccl", "variables", facts, socket_ifname, socket_ifname_auto, ib_hca, topo_file, env)


def nccl_settings(variables, conf_path, enabled=True):
    """The file setting of the NCCL configuration file, or none."""
    return call_layer("nccl", "settings", variables, conf_path, enabled)


class FilterModule:
    """stacktune.gpu nccl filters."""

    def filters(self):
        return {"nccl_variables": nccl_variables, "nccl_settings": nccl_settings}
