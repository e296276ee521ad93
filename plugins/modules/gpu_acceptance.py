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
  - At levels C(standard) and C(burn_in) it also measures, per GPU, pinned host-to-device and
    device-to-host copies from the GPU's local NUMA node and from a remote one (the allocating
    thread bound to the node's CPUs), peer-to-peer bandwidth and small-copy latency for every GPU
    pair, and on-device memory bandwidth. Each bandwidth is reported as a fraction of what carries
    it (PCIe generation x width, NVLink version x links, the GPU model's memory bandwidth) and
    judged against O(thresholds).
  - Every level reads the NVML memory and link health counters before and after the load,
    remapped rows, retired pages, NVLink error counters and the PCIe replay counter. A failed row
    remapping or too many uncorrectable remapped rows reject; pending remaps or retirements warn
    (reset the GPU before use); growing replay or error counters warn. Counters a GPU does not
    support are recorded as not supported.
  - At level C(burn_in) the SM clock, power and throttle reasons are sampled through NVML during the
    GEMM; a GPU whose clock stays below C(clock_min_fraction) of its maximum without a power or
    thermal cap, or under a hardware slowdown, is rejected with the reason that was active.
  - The verdict is C(pass), C(warn) or C(reject) (exit code 0, 1, 2). With O(journal_dir) the
    result is written to C(<journal_dir>/acceptance.json) (mode 0600) and with O(metrics_dir) as
    C(stacktune_acceptance_*) Prometheus metrics in C(<metrics_dir>/stacktune_acceptance.prom).
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
  thresholds:
    description:
      - Fractions of the limit below which a measurement warns or rejects, and the health
        limits. Keys (defaults) C(pcie_warn_below) (0.75), C(pcie_reject_below) (0.5),
        C(pcie_remote_warn_below) (0.5), C(pcie_remote_reject_below) (0, off),
        C(p2p_warn_below) (0.6), C(p2p_reject_below) (0.35), C(memory_warn_below) (0.7),
        C(memory_reject_below) (0.5), C(clock_min_fraction) (0.85), C(clock_max_low_share) (0.2),
        C(max_uncorrectable_remapped_rows) (8). Keys not given keep their defaults.
      - Each key is the acceptance role's variable C(acceptance_<key>); errors name that variable.
    type: dict
    default: {}
  memory_bandwidth_gbps:
    description:
      - Peak memory bandwidth (GB/s) of GPU models the built-in table lacks, keyed by a part of
        the GPU name (case-insensitive), checked before the built-in table.
    type: dict
    default: {}
  journal_dir:
    description:
      - Directory of the on-host journal. When set, the result is written to
        C(acceptance.json) there (mode 0600, under the journal lock) with a short history, and
        counters are compared with the previous record. Unset, nothing is written.
    type: path
  metrics_dir:
    description:
      - node_exporter's textfile directory; the C(stacktune_acceptance_*) series go to
        C(stacktune_acceptance.prom) in it (mode 0644). Unset, no metrics are written.
      - C(auto) finds the directory the host's node_exporter reads, as M(stacktune.gpu.textfile_metrics)
        does for its I(directory) (a running node_exporter's C(--collector.textfile.directory), the
        Debian/Ubuntu package's default, else C(/var/lib/node_exporter/textfile_collector)). The acceptance
        role passes C(stacktune_metrics_dir), and errors name that variable.
      - A relative path, a path with C(..) or a symbolic link is refused before the program runs.
    type: str
  validate_only:
    description:
      - Check the options (levels, rounds, thresholds, memory table) and return without touching
        the GPUs. The acceptance role runs this on the controller before it contacts a host.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description:
      - The program changes nothing on the host; check mode runs it the same way but writes
        neither the journal record nor the metrics file.
  diff_mode:
    support: full
    description: The verdict before (from the journal record) and after.
  idempotent:
    support: partial
    description:
      - Reports changed when the node's verdict differs from the one in its journal record (or
        there was none). Every run rewrites the record with its own measurements.
  platform:
    support: full
    platforms: [posix]
    description: Linux hosts with NVIDIA GPUs and PyTorch.
extends_documentation_fragment:
  - stacktune.gpu.journal.run_id
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

- name: Burn in GPUs 0-3 for ten minutes, record the verdict and export it to Prometheus
  stacktune.gpu.gpu_acceptance:
    level: burn_in
    gpus: [0, 1, 2, 3]
    burn_in_seconds: 600
    journal_dir: /var/lib/stacktune
    metrics_dir: auto
    thresholds:
      pcie_warn_below: 0.8
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
  description:
    - At level burn_in, per GPU iterations, checks, mismatches, a summary of per-iteration GEMM ms,
      max_sm_mhz, power_limit_w and the number of clock samples.
  returned: level burn_in
  type: dict
verdict:
  description: pass, warn or reject.
  returned: success or rejection
  type: str
exit_code:
  description: 0 for pass, 1 for warn, 2 for reject.
  returned: success or rejection
  type: int
acceptance_warnings:
  description:
    - Problems that do not reject the node, in the shape of RV(rejections).
    - Each one's message is also an Ansible warning of the task.
  returned: success or rejection
  type: list
  elements: dict
notes:
  description: What was not measured or not supported, and why.
  returned: success or rejection
  type: list
  elements: str
measurements:
  description:
    - C(gpus) (per GPU h2d_local, d2h_local, h2d_remote, d2h_remote and memory, each with gbps,
      limit_gbps, limit, fraction and status), C(pairs) (per GPU pair gbps, latency_us, limit,
      fraction, status, peer_access), C(remote_numa), C(health) (NVML counters per GPU uuid) and
      C(clocks) (per GPU the clock summary under burn-in).
  returned: success or rejection
  type: dict
devices:
  description: Per GPU the PCI bus id, NUMA node, PCIe generation and width, NVLink links, max SM clock, power limit.
  returned: success or rejection
  type: list
  elements: dict
record:
  description:
    - The journal record written (or, in check mode, that would be written) when O(journal_dir)
      or O(metrics_dir) is set.
  returned: when journal_dir or metrics_dir is set
  type: dict
journal_path:
  description: The record file written, null when none was.
  returned: success or rejection
  type: str
metrics_path:
  description: The metrics file written, null when none was.
  returned: success or rejection
  type: str
metrics_dir:
  description:
    - The textfile directory with its C(source) (C(configured), C(process), C(package_default), C(defaults_file),
      C(distribution) or C(fallback)) and C(detail); null without O(metrics_dir).
  returned: success or rejection
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
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import levels as acceptance_levels
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import limits as acceptance_limits
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import record as acceptance_record
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import runner as acceptance_runner
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import journal_options
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import HostLocked, LockTimeout, lease_ticker
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.node_exporter import resolve


def _not_run(message, tail=None, rc=None):
    """The decision for a node where nothing could be tested: a rejection, never a pass."""
    return {
        "accepted": False,
        "verdict": "reject",
        "exit_code": acceptance_levels.VERDICT_EXIT_CODES["reject"],
        "rejections": [
            {
                "check": "not_run",
                "subject": "host",
                "round": None,
                "message": message,
                "evidence": {"stderr_tail": tail or "", "rc": rc},
            }
        ],
        "warnings": [],
        "notes": [],
        "measurements": {},
        "summary": message,
    }


def _record(module, decision, report, level, previous, metrics_dir=None):
    """Write the journal record and the metrics textfile; return what was (or would be) done."""
    p = module.params
    out = {"record": None, "journal_path": None, "metrics_path": None, "changed": False, "diff": None}
    if not p["journal_dir"] and not metrics_dir:
        return out
    record = acceptance_record.build_record(decision, report, level, time.time(), previous)
    out["record"] = record
    before = (previous or {}).get("verdict")
    out["changed"] = before != record["verdict"]
    out["diff"] = {
        "before": "verdict: %s\n" % before if before else "",
        "after": "verdict: %s\n" % record["verdict"],
    }
    if module.check_mode:
        return out
    if p["journal_dir"]:
        path = os.path.join(p["journal_dir"], acceptance_record.RECORD_FILE)
        try:
            acceptance_record.write_record(p["journal_dir"], record)
        except (IOError, OSError, LockTimeout) as exc:
            module.fail_json(msg="Failed to write the acceptance record %s: %s" % (path, exc), **decision)
        out["journal_path"] = path
    if metrics_dir:
        path = os.path.join(metrics_dir["path"], acceptance_record.METRICS_FILE)
        try:
            acceptance_record.write_metrics(path, acceptance_record.render_metrics(record))
        except (IOError, OSError) as exc:
            module.fail_json(msg="Failed to write the metrics file %s: %s" % (path, exc), **decision)
        out["metrics_path"] = path
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path"),
            level=dict(type="str", choices=sorted(acceptance_levels.LEVELS), default="standard"),
            rounds=dict(type="int"),
            gpus=dict(type="list", elements="int"),
            perturb_round=dict(type="int"),
            burn_in_seconds=dict(type="int", default=acceptance_levels.DEFAULT_BURN_IN_SECONDS),
            timeout=dict(type="int"),
            environment=dict(type="dict", default={}),
            fail_on_reject=dict(type="bool", default=True),
            thresholds=dict(type="dict", default={}),
            memory_bandwidth_gbps=dict(type="dict", default={}),
            journal_dir=dict(type="path"),
            metrics_dir=dict(type="str"),
            validate_only=dict(type="bool", default=False),
            **journal_options("run_id"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    python = p["python"] or sys.executable
    base = dict(level=p["level"], python=python)
    try:
        config = acceptance_levels.build_config(
            level=p["level"],
            rounds=p["rounds"],
            gpus=p["gpus"],
            perturb_round=p["perturb_round"],
            burn_in_seconds=p["burn_in_seconds"],
        )
        thresholds = acceptance_limits.validate_thresholds(p["thresholds"])
        memory_table = acceptance_limits.validate_memory_table(p["memory_bandwidth_gbps"])
    except ValueError as e:
        module.fail_json(msg="Failed to validate acceptance options: %s" % e, rounds=p["rounds"], **base)
    base["rounds"] = config["rounds"]
    timeout = p["timeout"]
    if timeout is None:
        timeout = 900 + (config["burn_in_seconds"] if config["burn_in"] else 0)
    if timeout <= 0:
        module.fail_json(msg="Failed to validate acceptance options: timeout must be positive", **base)
    metrics_dir = None
    if p["metrics_dir"] is not None:
        try:
            metrics_dir = resolve(p["metrics_dir"], files=(acceptance_record.METRICS_FILE,))
        except ValueError as e:
            module.fail_json(msg="Failed to use the metrics directory: %s" % e, **base)
        for warning in metrics_dir["warnings"]:
            module.warn(warning)
        base["metrics_dir"] = {k: metrics_dir[k] for k in ("path", "source", "detail")}
    if p["validate_only"]:
        module.exit_json(changed=False, thresholds=thresholds, **base)

    previous = acceptance_record.read_record(p["journal_dir"]) if p["journal_dir"] else None
    previous_health = (previous or {}).get("health")

    def fail_not_run(message, tail=None, rc=None):
        decision = _not_run(message, tail, rc)
        written = _record(module, decision, None, p["level"], previous, metrics_dir)
        module.fail_json(
            msg=message,
            rc=rc,
            stderr_tail=tail or "",
            verdict="reject",
            exit_code=decision["exit_code"],
            record=written["record"],
            journal_path=written["journal_path"],
            metrics_path=written["metrics_path"],
            **base,
        )

    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        fail_not_run("no GPU to accept: interpreter %s is not an executable file" % python)

    env = acceptance_runner.program_env(p["environment"])
    tick = lease_ticker(p["run_id"]) if p["run_id"] else None
    try:
        if tick is not None:
            tick()
        run = acceptance_runner.run_program(python, config, env, timeout, tick=tick)
    except HostLocked as e:
        module.fail_json(msg="Failed to run the acceptance program: %s" % e, lease_lost=True, **base)
    except (OSError, ValueError) as e:
        fail_not_run("Failed to run the acceptance program with %s: %s" % (python, e))
    tail = (run["stderr"] or run["stdout"])[-2000:]
    fatal, decision = acceptance_runner.decide(
        run, timeout, thresholds=thresholds, previous_health=previous_health, memory_table=memory_table
    )
    if fatal:
        if run["report"] is None:
            fatal = "Failed to run the acceptance program with %s: %s" % (python, fatal)
        fail_not_run(fatal, tail, run["rc"])
    report = run["report"]
    written = _record(module, decision, report, p["level"], previous, metrics_dir)
    result = dict(
        base,
        accepted=decision["accepted"],
        verdict=decision["verdict"],
        exit_code=decision["exit_code"],
        rejections=decision["rejections"],
        acceptance_warnings=decision["warnings"],
        notes=decision["notes"],
        summary=decision["summary"],
        measurements=decision["measurements"],
        gpus=report.get("gpus") or [],
        devices=report.get("devices") or [],
        collective=report.get("collective"),
        burn_in=acceptance_runner.summarize_burn_in(report.get("burn_in")),
        perturb_round=config["perturb_round"],
        versions={
            "torch": report.get("torch_version"),
            "cuda": report.get("cuda_version"),
            "cudnn": report.get("cudnn_version"),
            "nccl": report.get("nccl_version"),
        },
        record=written["record"],
        journal_path=written["journal_path"],
        metrics_path=written["metrics_path"],
    )
    result["changed"] = written["changed"]
    for warning in decision["warnings"]:
        module.warn("%s %s: %s" % (warning["check"], warning["subject"], warning["message"]))
    if module._diff and written["diff"]:
        result["diff"] = written["diff"]
    if not decision["accepted"] and p["fail_on_reject"]:
        lines = ["%s %s: %s" % (r["check"], r["subject"], r["message"]) for r in decision["rejections"][:10]]
        module.fail_json(msg="Failed to accept GPU node: %s | %s" % (decision["summary"], " | ".join(lines)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
