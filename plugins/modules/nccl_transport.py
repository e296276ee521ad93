#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nccl_transport
short_description: Check which transport NCCL really picks between the GPUs of the host
version_added: 0.2.0
author: stacktune maintainers (@stacktune)
description:
  - Starts one NCCL rank per GPU (up to O(max_ranks)) with C(NCCL_DEBUG=INFO), runs an
    all_reduce, checks its result, and reads from NCCL's own log which transport every
    GPU-to-GPU channel uses and whether GPUDirect RDMA is enabled for each HCA.
  - "Verdict: V(pass) when every GPU pair talks through C(P2P) (NVLink or PCIe peer access);
    V(warning) when a pair is staged through host memory (C(SHM)) or an HCA has GPUDirect
    RDMA disabled; V(critical) when GPUs of one host talk through the network stack, the
    all_reduce result is wrong, or the ranks fail or hang; V(skipped) with fewer than 2 GPUs."
  - Needs a Python with PyTorch built with NCCL (O(python)).
options:
  python:
    description: The Python interpreter with PyTorch (CUDA) to run the ranks with.
    type: path
    required: true
  max_ranks:
    description: At most this many ranks (one per GPU).
    type: int
    default: 8
  env:
    description:
      - Extra environment for the ranks, for example C(NCCL_P2P_DISABLE=1) to see the
        verdict on a host where peer access is off.
    type: dict
    default: {}
  timeout:
    description: Seconds before the ranks are killed (a hang is reported as critical).
    type: int
    default: 300
  fail_on:
    description: Fail the task at this verdict or worse; V(never) only reports.
    type: str
    choices: [critical, warning, never]
    default: critical
attributes:
  check_mode:
    support: full
    description: The check changes nothing on the host; it runs in check mode too.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Linux hosts with NVIDIA GPUs.
seealso:
  - module: stacktune.gpu.gpu_topology_facts
"""

EXAMPLES = r"""
- name: Check that the GPUs of this host talk peer-to-peer
  stacktune.gpu.nccl_transport:
    python: /opt/torch/.venv/bin/python3
"""

RETURN = r"""
verdict:
  description: pass, warning, critical or skipped.
  returned: always
  type: str
summary:
  description: One line, for example C(2 GPU pair(s) via P2P; no RDMA NIC (GPUDirect RDMA does not apply)).
  returned: always
  type: str
findings:
  description: Each problem with its severity.
  returned: always
  type: list
  elements: dict
pairs:
  description: Per GPU pair (device indices), the transports NCCL logged for its channels.
  returned: always
  type: list
  elements: dict
  sample: [{gpus: [0, 1], via: [P2P/CUMEM], transport: [P2P]}]
gdr:
  description: Per HCA, whether NCCL reports GPUDirect RDMA enabled.
  returned: always
  type: list
  elements: dict
nvls:
  description: Whether NCCL reports NVLink SHARP (NVLS) multicast available; null when not logged.
  returned: always
  type: bool
nccl_version:
  description: The NCCL version the ranks loaded.
  returned: always
  type: str
log:
  description: NCCL's INFO lines about channels, networks and GPUDirect RDMA (at most 200).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.nccl_transport import check

RANK = {"pass": 0, "skipped": 0, "warning": 1, "critical": 2}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            max_ranks=dict(type="int", default=8),
            env=dict(type="dict", default={}),
            timeout=dict(type="int", default=300),
            fail_on=dict(type="str", choices=["critical", "warning", "never"], default="critical"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not (os.path.isfile(p["python"]) and os.access(p["python"], os.X_OK)):
        module.fail_json(msg="python: %s is not an executable file" % p["python"])
    if p["max_ranks"] < 2:
        module.fail_json(msg="max_ranks must be at least 2, got %d" % p["max_ranks"])
    if p["timeout"] <= 0:
        module.fail_json(msg="timeout must be positive, got %d" % p["timeout"])
    env = {str(k): str(v) for k, v in p["env"].items()}
    result = check(p["python"], p["max_ranks"], env, p["timeout"])
    result["changed"] = False
    if p["fail_on"] != "never" and RANK[result["verdict"]] >= RANK[p["fail_on"]]:
        module.fail_json(msg="NCCL transport check: %s; %s" % (result["verdict"], result["summary"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
