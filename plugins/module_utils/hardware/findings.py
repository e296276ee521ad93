# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one shape of a finding, and its constructor.

A finding is what a check says about a host or one of its devices::

    {"id": "pcie_link_degraded",      # what was found, a stable name to match on
     "severity": "warning",           # info | warning | critical (acceptance: info | warn | reject)
     "subject": "gpu3",               # what it is about: host, gpuN, nic:NAME, a tool; None when the caller knows
     "message": "GPU 3 ... runs at Gen4 x16, below its maximum Gen5 x16",
     "evidence": {...},               # the numbers behind it (a dict, maybe empty)
     "remediation": "Reseat ..."}     # only on findings that name a fix (the bios audit)

Facts (gpu_topology_facts), preflight, the driver role, the bios audit and the GPU health
checks of acceptance all build findings here, so every consumer reads the same keys.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def finding(finding_id, severity, subject, message, evidence=None, remediation=None):
    """One finding; ``evidence`` defaults to an empty dict, ``remediation`` is kept only when given."""
    out = {
        "id": finding_id,
        "severity": severity,
        "subject": subject,
        "message": message,
        "evidence": evidence if evidence is not None else {},
    }
    if remediation is not None:
        out["remediation"] = remediation
    return out
