#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gate_layer
short_description: Measure one applied layer in balanced blocks, judge it, and keep or restore it
version_added: 0.2.0
author: stacktune maintainers (@stacktune)
description:
  - "An action plugin. It runs on the controller and drives two modules on the host:
    M(stacktune.gpu.bench) for every measured block (one process run of a workload) and
    M(stacktune.gpu.host_settings) for every switch of the layer off (C(state=restored),
    C(restore_to=snapshot)) and back on (C(state=reapplied))."
  - "With O(mode=gate) the layer has just been applied by its role. Blocks run in the
    order with, without, without, with, with, without, without, with ... (A B B A quads), so
    drift of the host falls on both arms. After O(budget.min_blocks) blocks per arm, and after
    every further quad, the gate judges throughput, median, tail (mean of the slowest 1%)
    and the share of stalled steps, each from one statistic per block, with intervals that
    include the block-to-block noise. It stops once its policy's question is answered or the
    budget (O(budget.max_blocks), O(budget.max_seconds)) is spent, then keeps the layer
    (C(state=kept)) or puts it back to its snapshot, journaling the decision either way."
  - "A layer whose every written change a running process sees (each row of O(changes) says
    C(seen_running)) is judged in a live trial instead: per workload ONE process runs (a
    built-in workload in live mode, or C(live_command) of O(bench), the user's program that
    prints a step line per step until SIGTERM), the layer is switched between windows of its
    steps (O(budget.window_s) seconds; A B B A or B A A B quads drawn at random; the settling and two
    steps dropped after each switch), and the windows are judged as blocks, at most
    O(budget.max_windows) per arm. C(live=false) in O(bench) measures in blocks always."
  - A dimension the blocks cannot resolve is reported C(unknown) with the smallest change
    it could have seen; it never hides a dimension that is resolved (a throughput collapse
    is a rollback whatever the tail shows).
  - A layer that none of its O(workloads) can measure on this host is kept or rolled back
    per O(unmeasurable) and reported as not measurable, never judged on an unrelated
    workload.
  - With O(mode=calibrate) nothing is changed. Identical blocks of each workload give the
    block-to-block noise per dimension and the smallest change the budget can resolve.
  - See docs/gate.md for the statistics and the measured error rates.
options:
  mode:
    description: V(gate) measures and decides one layer; V(calibrate) only measures the host's noise.
    type: str
    choices: [gate, calibrate]
    default: gate
  layer:
    description: The layer (as journaled by M(stacktune.gpu.host_settings)); required with O(mode=gate).
    type: str
  policy:
    description:
      - V(improve) keeps only a significant improvement with a tail that is shown not worse;
        V(no_regression) keeps anything not shown worse.
    type: str
    choices: [improve, no_regression]
    default: improve
  workloads:
    description:
      - Built-in workloads of M(stacktune.gpu.bench) that can see this layer, in order. GPU
        workloads run where the host has enough GPUs (V(allreduce) needs 2), the CPU ones only
        where no GPU one can; V(file_dataloader) only with C(data_dir) in O(bench). Every block
        measures each chosen workload once.
    type: list
    elements: str
    default: []
  workload:
    description:
      - A workload that replaces O(workloads) for this layer (the user's V(command), or one
        built-in workload for every layer). V(auto) or empty keeps O(workloads).
    type: str
  gpu_count:
    description: GPUs on the host (from the facts).
    type: int
    default: 0
  bench:
    description:
      - Options handed to M(stacktune.gpu.bench) for every block (C(command), C(python),
        C(size), C(steps), C(warmup), C(timeout), C(device), C(workers), C(env), C(data_dir)),
        and the gate's own C(runner) (false - a fresh interpreter per block), C(steps_by_workload),
        C(live) (false - never a live trial) and C(live_command) (the user's program for live trials).
    type: dict
    default: {}
  unmeasurable:
    description:
      - What happens to a layer no workload here can measure, and to one whose changes no
        block started now can see (O(changes)).
    type: str
    choices: [keep, rollback]
    default: keep
  size:
    description:
      - How much the trial may take. C(full) is the budget as given. C(check), for a layer the
        diagnosis says cannot move the program, takes one look at O(budget)'s C(min_blocks)
        blocks or live windows per arm, which bounds the tail and the stalls in the least time.
      - A search (O(search)) ignores it.
    type: str
    choices: [full, check]
    default: full
  not_used:
    description:
      - Words saying that the program measured does not use what this layer sets, for a layer
        it reads only when a program starts (the diagnosis's, for example 'the program does not
        use NCCL collectives (it holds one GPU (0) and names no ranks in its environment)').
        When every change written is one a running process does not see, the layer is not
        measured and kept (or rolled back, O(unmeasurable)), with these words as the reason.
    type: str
    default: ""
  changes:
    description:
      - The rows of the layer's apply (RV(stacktune.gpu.host_settings#module:settings)). When
        every row written takes effect later (its C(effect) is C(next_login) or C(next_boot);
        limits read at login, a boot argument, a value that could only be persisted), no block
        can see the layer, so it is not measured. It is kept or rolled back per O(unmeasurable)
        and the decision names each change and when it takes effect.
      - Empty, or a row written without C(effect), measures the layer.
    type: list
    elements: dict
    default: []
  runner_socket:
    description:
      - The block runner an earlier layer of this run left running (RV(runner_socket)). It is
        used while it answers; otherwise a new one is started.
    type: path
  runner_for:
    description:
      - The candidate workloads of every layer of the run, a list per layer name. A runner this
        task starts imports what each of them needs on this host, so that the later layers'
        blocks find their imports done.
    type: dict
    default: {}
  keep_runner:
    description:
      - Leave the block runner running at the end of the measurement and return it as
        RV(runner_socket) for the next layer. It ends by itself when the run gives back the host's
        lease, or after 15 idle minutes.
    type: bool
    default: false
  search:
    description:
      - Candidate values of one of the layer's settings to search instead of judging the one
        value applied (docs/gate.md, "Searching candidate values"). C(variable) names it,
        C(candidates) lists each C(value) with the layer's whole C(settings) for it, C(host_value)
        is the host's own value where known, C(objective) is C(throughput) or C(efficiency),
        C(max_slowdown) defaults to the gate's, and C(budget) may set C(min_rounds),
        C(max_rounds), C(max_seconds) and C(visit_windows).
      - Each candidate is an arm switched through M(stacktune.gpu.host_settings) inside ONE
        running program (a live trial); the host's own value is the layer switched off. The
        chosen value is then judged against the host's own value by the layer's policy.
    type: dict
  blocks:
    description: With O(mode=calibrate), identical blocks per workload (default twice O(budget.max_blocks)).
    type: int
  run_id:
    default: manual
extends_documentation_fragment:
  - stacktune.gpu.gate_settings.gate
  - stacktune.gpu.gate_settings.budget
  - stacktune.gpu.journal
  - stacktune.gpu.journal.run_id
attributes:
  action:
    support: full
    description: Runs on the controller and executes modules on the host.
  check_mode:
    support: full
    description: In check mode nothing is measured or changed (the task is skipped).
  diff_mode:
    support: none
    description: The settings engine reports the changes; this plugin only toggles them.
  idempotent:
    support: none
    description: Each run measures again; it keeps or restores the layer it was given.
  platform:
    support: full
    platforms: posix
    description: Linux hosts; the workloads and the settings engine read /proc and /sys.
"""

EXAMPLES = r"""
- name: Judge the nccl layer on the all-reduce, keep it or put it back
  stacktune.gpu.gate_layer:
    layer: nccl
    policy: no_regression
    workloads: [allreduce]
    gpu_count: "{{ ansible_facts.stacktune.gpu_count }}"
    bench: {python: /opt/torch/.venv/bin/python3, size: 64, steps: 400}
    gate: {tail_tolerance: 0.03}
    budget: {max_blocks: 12, max_seconds: 600}
  register: nccl_gate

- name: How much noise does this host have, and what can the gate resolve?
  stacktune.gpu.gate_layer:
    mode: calibrate
    workloads: [gemm, h2d_pinned]
    gpu_count: 1
    bench: {python: /opt/torch/.venv/bin/python3}
    blocks: 12
"""

RETURN = r"""
gate:
  description:
    - The decision record (mode gate), also written to the journal. C(decision) (keep or
      rollback), C(reason), C(resolved) (false when the budget ran out first), per dimension
      (C(throughput), C(p50), C(tail), C(stalls), and C(p99), which is reported only) the
      per-block values, the ratio with its interval, the verdict and C(resolution) (the
      smallest change it could have seen), C(unresolved) phrases, C(blocks) per arm,
      C(seconds), C(toggles), C(workloads) (one record per workload measured) and
      C(measurable).
  returned: mode gate
  type: dict
  sample:
    decision: rollback
    reason: "rollback: throughput fell beyond the 2% tolerance (throughput fell 86.8% ...) [4+4 blocks] (allreduce)"
    resolved: true
    blocks: {with: 4, without: 4}
    seconds: 81.4
runner_socket:
  description: With O(keep_runner), the block runner left running for the next layer (null when none ran).
  returned: mode gate, when the layer was measured with O(keep_runner)
  type: str
calibration:
  description:
    - Per workload (mode calibrate), the usable and void blocks, seconds per block, and per
      dimension the level, the spread between blocks, the A/A verdict and the change
      resolvable now and at the budget.
  returned: mode calibrate
  type: dict
"""
