#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_acceptance
short_description: Accept or reject a GPU node by checking that its results are exact and repeatable
version_added: 0.1.0
author: stacktune maintainers (@stacktune)
description:
  - Runs a PyTorch program in a separate interpreter. Per GPU and round it checks that
    torch.zeros(1).cuda().cpu().item() returns 0, runs a tiny seeded model forward and
    backward with deterministic algorithms, and hashes the output and gradient bytes. Per
    round it runs three NCCL C(all_reduce) calls over all selected GPUs (one process per
    GPU) and checks every element and the sum of the result against n(n+1)/2 exactly. With one
    GPU the all_reduce runs as a one-rank NCCL group.
  - The node is rejected when any result differs between rounds (bit for bit), between
    GPUs of the same model, when a collective result is wrong or a rank returns nothing,
    when a round is missing, or when anything fails.
  - A host without a GPU, without PyTorch or without CUDA fails with C(no GPU to accept),
    never a pass.
options:
  python:
    description:
      - Interpreter that has PyTorch with CUDA. Defaults to the interpreter running this module.
    type: path
  level:
    description:
      - C(quick) 3 rounds of the smallest check (tiny model, one-element all_reduce).
      - C(standard) 3 rounds with a larger model and a 16 MiB all_reduce.
      - C(burn_in) 10 rounds, then a sustained bf16 GEMM on every GPU at once for
        O(burn_in_seconds) whose result must stay bit-identical, then one more round.
    type: str
    choices: [quick, standard, burn_in]
    default: standard
  rounds:
    description:
      - Override the level's round count; at least 3.
    type: int
  gpus:
    description:
      - GPU indices (as CUDA numbers them) to test. Default all.
    type: list
    elements: int
  perturb_round:
    description:
      - Fault injection for proving that the check works; never for production use. In
        this round (1-based) one input element of the first GPU's model and rank 0's
        third all_reduce input are changed, so the node must be rejected.
    type: int
  burn_in_seconds:
    description:
      - Length of the sustained GEMM at level C(burn_in).
    type: int
    default: 300
  timeout:
    description:
      - Seconds the whole program may run before it is killed and the node rejected.
        Default 900, plus O(burn_in_seconds) at level C(burn_in).
    type: int
  environment:
    description:
      - Extra environment for the program. C(CUBLAS_WORKSPACE_CONFIG=:4096:8),
        C(NCCL_NVLS_ENABLE=0), C(TORCH_SYMM_MEM_DISABLE_MULTICAST=1) and
        C(NVSHMEM_DISABLE_NVLS=1) are set unless given here.
    type: dict
    default: {}
  fail_on_reject:
    description:
      - Fail the task when the node is rejected. Set false to register the result and
        decide in the play (the acceptance role does).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: The program changes nothing on the host; check mode runs it the same way.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
  idempotent:
    support: full
    description: Never reports changed.
  platform:
    support: full
    platforms: [posix]
    description: Linux hosts with NVIDIA GPUs and PyTorch.
notes:
  - The program source is written to a mode 0600 file in a private temporary folder and
    run with an argument list; the folder is removed afterwards.
seealso:
  - module: stacktune.gpu.preflight
"""

EXAMPLES = r"""
- name: Accept a new node
  stacktune.gpu.gpu_acceptance:
    python: /opt/torch/.venv/bin/python3
    level: standard

- name: Prove the check rejects a node whose round 2 differs
  stacktune.gpu.gpu_acceptance:
    python: /opt/torch/.venv/bin/python3
    level: quick
    perturb_round: 2
    fail_on_reject: false
  register: proof

- name: Burn in GPUs 0-3 for ten minutes
  stacktune.gpu.gpu_acceptance:
    level: burn_in
    gpus: [0, 1, 2, 3]
    burn_in_seconds: 600
"""

RETURN = r"""
accepted:
  description: True when every check passed.
  returned: success or rejection
  type: bool
rejections:
  description: Each problem with check, subject (gpuN, rankN, host), round, message, evidence.
  returned: success or rejection
  type: list
  elements: dict
summary:
  description: One line, accepted or rejected and why.
  returned: success or rejection
  type: str
gpus:
  description:
    - Per GPU (index, name, uuid) the rounds with zeros_item, forward_sha256, grad_sha256,
      loss, loss_hex and timings_ms.
  returned: success or rejection
  type: list
  elements: dict
collective:
  description:
    - world_size, mode (multi_gpu or single_rank), note, and per rank per round the three
      calls with sum, min, max and ms.
  returned: success or rejection
  type: dict
burn_in:
  description: At level burn_in, per GPU iterations, checks, mismatches and a summary of per-iteration GEMM ms.
  returned: level burn_in
  type: dict
versions:
  description: torch, CUDA, cuDNN and NCCL versions the program saw.
  returned: success or rejection
  type: dict
level:
  description: The level run.
  returned: always
  type: str
rounds:
  description: The round count run.
  returned: always
  type: int
python:
  description: The interpreter used.
  returned: always
  type: str
"""

import os
import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils import _acceptance


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path"),
            level=dict(type="str", choices=sorted(_acceptance.LEVELS), default="standard"),
            rounds=dict(type="int"),
            gpus=dict(type="list", elements="int"),
            perturb_round=dict(type="int"),
            burn_in_seconds=dict(type="int", default=_acceptance.DEFAULT_BURN_IN_SECONDS),
            timeout=dict(type="int"),
            environment=dict(type="dict", default={}),
            fail_on_reject=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    python = p["python"] or sys.executable
    base = dict(changed=False, level=p["level"], python=python)
    try:
        config = _acceptance.build_config(
            level=p["level"],
            rounds=p["rounds"],
            gpus=p["gpus"],
            perturb_round=p["perturb_round"],
            burn_in_seconds=p["burn_in_seconds"],
        )
    except ValueError as e:
        module.fail_json(msg="Failed to validate acceptance options: %s" % e, rounds=p["rounds"], **base)
    base["rounds"] = config["rounds"]
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        module.fail_json(msg="no GPU to accept: interpreter %s is not an executable file" % python, **base)

    timeout = p["timeout"]
    if timeout is None:
        timeout = 900 + (config["burn_in_seconds"] if config["burn_in"] else 0)
    if timeout <= 0:
        module.fail_json(msg="Failed to validate acceptance options: timeout must be positive", **base)

    env = _acceptance.program_env(p["environment"])
    try:
        run = _acceptance.run_program(python, config, env, timeout)
    except (OSError, ValueError) as e:
        module.fail_json(msg="Failed to run the acceptance program with %s: %s" % (python, e), **base)
    tail = (run["stderr"] or run["stdout"])[-2000:]
    fatal, decision = _acceptance.decide(run, timeout)
    if fatal:
        if run["report"] is None:
            fatal = "Failed to run the acceptance program with %s: %s" % (python, fatal)
        module.fail_json(msg=fatal, rc=run["rc"], stderr_tail=tail, **base)
    report = run["report"]
    result = dict(
        base,
        accepted=decision["accepted"],
        rejections=decision["rejections"],
        summary=decision["summary"],
        gpus=report.get("gpus") or [],
        collective=report.get("collective"),
        burn_in=_acceptance.summarize_burn_in(report.get("burn_in")),
        perturb_round=config["perturb_round"],
        versions={
            "torch": report.get("torch_version"),
            "cuda": report.get("cuda_version"),
            "cudnn": report.get("cudnn_version"),
            "nccl": report.get("nccl_version"),
        },
    )
    if not decision["accepted"] and p["fail_on_reject"]:
        lines = ["%s %s: %s" % (r["check"], r["subject"], r["message"]) for r in decision["rejections"][:10]]
        module.fail_json(msg="Failed to accept GPU node: %s | %s" % (decision["summary"], " | ".join(lines)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
