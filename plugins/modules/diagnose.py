#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: diagnose
short_description: Say where a running training program is bound, with the evidence
version_added: 0.2.0
author: stacktune maintainers (@stacktune)
description:
  - Runs a program for a bounded time (the user's live command, or a built-in workload of
    M(stacktune.gpu.bench) in live mode), reads its step lines, and snapshots it and the host
    every 1/I(sample_hz) seconds for I(seconds) after a warm-up - per GPU the NVML readings
    (utilisation, power against the enforced limit, clocks, clock-event reasons, PCIe, memory,
    temperature, energy), the host's CPU busy and iowait per NUMA node, run queue, faults,
    context switches, disks and network, and the program's process tree (CPU in cores per
    process, which are saturated).
  - Returns the profile, a verdict from a small documented set of rules (GPU-bound at its power
    cap, at its clocks or temperature, compute-bound; input-bound with saturated loader workers or
    waiting on storage; host memory; CPU-bound main process; unclear) with the figures that
    decided it, and what can move the program (layers of this collection that can and cannot,
    advice outside the stack). Advice only. docs/diagnose.md has the rules and thresholds.
  - The program is ended whatever happens (SIGTERM, then SIGKILL of its process group).
    Nothing on the host is changed; the result is never C(changed).
  - The program follows the live contract of docs/bench.md (A program for live trials) - one
    step line per step, flushed, running until it is ended.
options:
  command:
    description:
      - The program to diagnose, as an argv (no shell); it prints one step time per line (ms,
        or JSON with C(step_ms)) and runs until it is ended.
      - Exactly one of I(command) and I(workload).
    type: list
    elements: str
  workload:
    description:
      - A built-in workload that runs live (C(gemm), C(h2d_pinned), C(h2d_pageable), C(dataloader),
        C(train_step), C(cpu_dataloader), C(mem_touch), C(cpu_train_step)), run through the workload
        program of M(stacktune.gpu.bench).
    type: str
  python:
    description: The interpreter that runs a built-in I(workload) (the one with PyTorch for GPU workloads).
    type: str
    default: python3
  seconds:
    description: Seconds of the profile after the warm-up (2 to 300).
    type: float
    default: 20
  warmup_s:
    description:
      - The longest warm-up, in seconds after the first step line, before the profile starts (0 to 600).
      - The warm-up ends earlier once the step times have settled, the medians of two consecutive
        seconds of steps (at least 5 steps each) within 3% of each other; never before 2 s after
        the first step line. The result's C(diagnosis.program.warmup_s) says how long it was.
    type: float
    default: 5
  first_step_timeout:
    description: Seconds to wait for the first step line (1 to 3600).
    type: float
    default: 120
  sample_hz:
    description: Snapshots per second (0.2 to 20).
    type: float
    default: 2
  nvml:
    description: Read the GPUs through NVML (C(pynvml)) where it can be imported.
    type: bool
    default: true
  on_error:
    description:
      - C(fail) fails the task when the program cannot be diagnosed (it ends, prints no step line,
        stops printing them); C(report) returns RV(diagnosis.error) instead, for a caller to whom
        the diagnosis is advice (the tune). Options that cannot be right fail either way.
    type: str
    choices: [fail, report]
    default: fail
  names:
    description:
      - The names of the variables the options came from (keys C(command), C(workload),
        C(seconds), C(warmup_s), C(first_step_timeout)), used in error messages so that they
        name what to fix.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: Reads only; runs the program the same way in check mode.
  idempotent:
    support: full
    description: Never changes anything.
extends_documentation_fragment:
  - stacktune.gpu.attributes
  - stacktune.gpu.attributes.no_diff
  - stacktune.gpu.journal.run_id
notes:
  - With O(run_id) (a tune, which diagnoses after it has taken the host) the run's lease is
    renewed while the program runs, and the diagnosis fails, whatever O(on_error) says, as soon
    as that run no longer holds the host. C(make diagnose) takes no lease and gives none.
seealso:
  - module: stacktune.gpu.bench
"""

EXAMPLES = r"""
- name: Diagnose the training program
  stacktune.gpu.diagnose:
    command: [/opt/torch/.venv/bin/python3, /srv/train/bench_step.py, --forever]
    seconds: 20
  register: diagnosis

- name: Diagnose the built-in train_step workload
  stacktune.gpu.diagnose:
    workload: train_step
    python: /opt/torch/.venv/bin/python3

- name: Print the verdict in one line
  ansible.builtin.debug:
    msg: "{{ diagnosis.diagnosis.line }}"
"""

RETURN = r"""
diagnosis:
  description: The diagnosis.
  returned: success
  type: dict
  contains:
    verdict:
      description: >-
        gpu_power_cap, gpu_clocks_thermal, gpu_compute, host_memory, input_storage,
        input_loader, cpu_main or unclear (communication is never decided on one host's
        readings).
      type: str
    title:
      description: The verdict in words.
      type: str
    evidence:
      description: The figures that decided it, each with its threshold.
      type: list
      elements: str
    caveats:
      description: What weakens it (the host's CPUs taken by other work).
      type: list
      elements: str
    moves:
      description: C(can) and C(cannot) (layer -> why), C(outside) (advice outside the stack).
      type: dict
    line:
      description: The verdict in one line with its evidence.
      type: str
    profile:
      description: The figures (cpu, memory, disk, net, pressure, program, gpus, steps, sampler).
      type: dict
    program:
      description: >-
        What ran (C(command) or C(workload)), when its first step came (C(first_step_s)), how
        long its warm-up was (C(warmup_s)) and whether its step times settled before the
        longest warm-up (C(warmup_settled)).
      type: dict
    error:
      description: >-
        Why the program could not be diagnosed (with I(on_error=report)); only RV(diagnosis.line) comes with
        it then.
      type: str
      returned: when the diagnosis failed and on_error is report
    nvml:
      description: Why the GPUs were not read.
      type: str
      returned: when NVML could not be used
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.run import DiagnoseError, check_options, diagnose
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import journal_options
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import (
    HostLocked,
    LeaseRenewalFailed,
    lease_ticker,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.registry import LIVE_WORKLOADS


def main():
    module = AnsibleModule(
        argument_spec=dict(
            command=dict(type="list", elements="str"),
            workload=dict(type="str"),
            python=dict(type="str", default="python3"),
            seconds=dict(type="float", default=20.0),
            warmup_s=dict(type="float", default=5.0),
            first_step_timeout=dict(type="float", default=120.0),
            sample_hz=dict(type="float", default=2.0),
            nvml=dict(type="bool", default=True),
            on_error=dict(type="str", choices=["fail", "report"], default="fail"),
            names=dict(type="dict", default={}),
            **journal_options("run_id"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    numbers = {k: p[k] for k in ("seconds", "warmup_s", "first_step_timeout", "sample_hz")}
    try:
        check_options(p["command"], p["workload"], LIVE_WORKLOADS, p["names"], **numbers)
    except DiagnoseError as exc:
        module.fail_json(msg="Failed to diagnose the program: %s" % exc)
    try:
        result = diagnose(
            command=p["command"],
            workload=p["workload"],
            python=p["python"],
            names=p["names"],
            use_nvml=p["nvml"],
            tick=lease_ticker(p["run_id"]) if p["run_id"] else None,
            **numbers,
        )
    except HostLocked as exc:
        module.fail_json(msg="Failed to diagnose the program: the run no longer holds the host: %s" % exc)
    except LeaseRenewalFailed as exc:
        module.fail_json(msg="Failed to diagnose the program: %s" % exc)
    except DiagnoseError as exc:
        if p["on_error"] == "report":
            module.exit_json(changed=False, diagnosis={"error": str(exc), "line": "diagnosis: not made: %s" % exc})
        module.fail_json(msg="Failed to diagnose the program: %s" % exc)
    module.exit_json(changed=False, diagnosis=result)


if __name__ == "__main__":
    main()
