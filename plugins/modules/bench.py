#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: bench
short_description: Measure one block of a GPU or CPU workload and return raw per-step times
version_added: 0.1.0
author: stacktune maintainers (@stacktune)
description:
  - Runs a workload on the host for O(warmup) unmeasured steps and then O(steps) measured
    steps, and returns every measured step time in milliseconds, the throughput, summary
    quantiles and the conditions the block ran under (GPU clocks, temperature, power,
    throttle reasons; host load and C(/dev/shm) size).
  - One call is one block. To compare two states fairly, call it several times in
    interleaved blocks (A B B A) and give the raw samples to the gate.
  - Built-in workloads run in a separate interpreter (option O(python)) as a small
    self-contained program written to a private temporary file and removed afterwards.
    GPU workloads need PyTorch with CUDA in that interpreter; CPU workloads need only the
    Python standard library.
  - O(workload=command) measures the user's own program, which prints one step time per
    line (see O(command)).
  - A block is marked void when a hardware, thermal or power-brake throttle reason was
    seen on a measured GPU before, during (polled every 0.1 s) or after it.
  - The module never changes the host's settings; V(file_dataloader) writes files of its own
    under O(data_dir) for the length of the block and removes them.
options:
  workload:
    description:
      - What to run.
      - V(auto) runs V(gemm) when the O(python) interpreter has a CUDA-enabled PyTorch that
        sees a GPU, else V(cpu_dataloader).
      - "GPU (PyTorch): V(gemm) bf16 matrix multiply, TFLOP/s; V(h2d_pinned) and V(h2d_pageable)
        host-to-device copies, GB/s; V(dataloader) a torch DataLoader with O(workers) worker
        processes decoding and normalising 3x224x224 images, passing them through /dev/shm,
        pin_memory=True, into the GPU, samples/s; V(allreduce) NCCL all-reduce over all local
        GPUs (2 or more), bus bandwidth GB/s; V(train_step) forward, backward and AdamW step of
        a small transformer under bf16 autocast, samples/s."
      - "CPU (standard library only): V(cpu_dataloader) worker processes decode batches into
        shared-memory blocks in /dev/shm, samples/s; V(shm_pingpong) round trip of a message
        through shared memory with a semaphore handshake, steps/s; V(mem_touch) map anonymous
        memory and touch every 4 KiB page (sensitive to transparent huge pages), GB/s;
        V(cpu_train_step) a pure-Python linear-model training step, samples/s;
        V(file_dataloader) worker processes read batches of small files (64-256 KiB) in a shuffled
        order from the disk under O(data_dir), every read from the device, GB/s."
      - V(command) runs O(command).
    type: str
    default: auto
    choices: [auto, gemm, h2d_pinned, h2d_pageable, dataloader, allreduce, train_step,
              cpu_dataloader, shm_pingpong, mem_touch, cpu_train_step, file_dataloader, command]
  steps:
    description:
      - Number of measured steps. For O(workload=command), the most step lines kept after the
        warm-up; further lines are ignored.
      - Unset, each built-in workload takes its own number, chosen from the noise recorded on
        H200 hosts (more and shorter blocks where blocks differ from each other more than the
        steps inside one do; see docs/gate.md); a command keeps up to 400 lines.
    type: int
  warmup:
    description:
      - Steps run first and discarded (compilation, caches, worker start-up, clock ramp).
        Their count is returned as RV(warmup_discarded).
    type: int
    default: 20
  python:
    description:
      - Interpreter that runs a built-in workload, for example C(/opt/torch/.venv/bin/python3)
        for GPU workloads. Defaults to the interpreter running this module.
      - Not used with O(workload=command).
    type: path
  device:
    description:
      - Index of the GPU to measure (as PyTorch numbers them). V(allreduce) always uses every
        visible GPU. With O(workload=command), the GPU whose conditions are recorded.
    type: int
    default: 0
  size:
    description:
      - Workload-specific size. Defaults
        V(gemm) 8192 (matrix dimension N),
        V(h2d_pinned)/V(h2d_pageable) 256 (MiB per copy),
        V(dataloader) 64 (batch size),
        V(allreduce) 256 (MiB of float32),
        V(train_step) 32 (batch of 256-token sequences),
        V(cpu_dataloader) 64 (batch size of 3x64x64 images),
        V(shm_pingpong) 64 (message bytes),
        V(mem_touch) 32 (MiB per step),
        V(cpu_train_step) 16 (batch size),
        V(file_dataloader) 32 (files per batch).
      - Ignored by O(workload=command).
    type: int
  workers:
    description:
      - Worker processes of V(dataloader) (0 loads in the main process),
        V(cpu_dataloader) and V(file_dataloader) (at least 1).
    type: int
    default: 4
  data_dir:
    description:
      - For V(file_dataloader), required there and ignored by the other workloads; an absolute
        path to a directory on the disk that holds the training data, which must not be a symlink
        and must be writable.
      - The workload makes a private sub-directory there (mode 0700, named
        C(stacktune-file-dataloader-*)), writes 512 files of 64-256 KiB (81.2 MiB) into it, and
        removes it at the end; it refuses to start unless 1 GiB stays free on that filesystem
        beyond them. A sub-directory a killed block left behind is removed by the next block.
        Nothing else in the directory is read, written or removed, and no symlink is followed.
    type: path
    version_added: 0.2.0
  cpus:
    description:
      - CPU list such as C(0-7,16) to pin the workload to, set with C(sched_setaffinity) inside
        the workload process (worker processes inherit it). Default is no pinning.
    type: str
  command:
    description:
      - The argv of the user's own workload, for O(workload=command); run without a shell.
      - >-
        The command prints one step time in milliseconds per line, either a bare number
        (C(12.5)) or a JSON object with a C(step_ms) field (C({"step_ms": 12.5})). Other lines
        are ignored. A JSON line C({"throughput": 950.0, "unit": "img/s"}) sets the throughput;
        without one the throughput is measured steps per second.
      - A non-zero exit status, or no step line at all, fails the task.
    type: list
    elements: str
  timeout:
    description:
      - Seconds the workload may run before it and all its child processes are killed and
        the task fails.
    type: int
    default: 600
  env:
    description:
      - Environment variables added to the workload's environment.
    type: dict
    default: {}
  run_in_check_mode:
    description:
      - In check mode the module returns RV(skipped=true) without measuring, because a
        measurement changes nothing but costs time. Set V(true) to measure in check mode too.
    type: bool
    default: false
  runner_state:
    description:
      - V(started) starts a block runner on the host for O(python) and returns RV(runner_socket),
        a warm parent that has started the interpreter and imported PyTorch (without initialising
        CUDA) and forks one fresh process per block it is asked for. Each block keeps its own
        process, CUDA context and NCCL initialisation and reads the host's settings anew, so it
        is still a block; only the interpreter's start and the imports are paid once.
      - With O(runner_socket) as well, the runner there is used when it answers and has imported
        what O(runner_workloads) need (RV(runner_reused)); otherwise it is stopped and a new one
        started. So one runner serves every layer of a tune run.
      - V(stopped) stops the runner at O(runner_socket).
      - The runner also ends when it has been idle for 15 minutes and, with O(run_id), as soon as
        that run no longer holds the host.
    type: str
    choices: [started, stopped]
  runner_workloads:
    description:
      - With O(runner_state=started), the workloads the runner will run blocks of. Before the
        first block it imports what they need (PyTorch for the GPU workloads, and for example
        the optimiser's compiler front end for V(train_step)), so that no block pays those
        imports again. Defaults to O(workload).
    type: list
    elements: str
    version_added: 0.2.0
  runner_socket:
    description:
      - Run this built-in block in the runner at this socket (from O(runner_state=started))
        instead of a fresh interpreter. Not used with O(workload=command), which always runs
        the user's program as it is. With O(runner_state=started), the runner to use while it
        answers; with O(runner_state=stopped), the runner to stop.
    type: path
  live:
    description:
      - "A live session in the runner at O(runner_socket): ONE process of the workload that runs
        until it is ended, printing each step's time as it is measured. The gate's live trial
        switches a layer between windows of its steps (docs/gate.md, Live trials)."
      - V(started) starts the built-in O(workload) in live mode, or O(command), the user's
        program, which prints one step line per step (a number of ms, or a JSON object whose key
        C(step_ms) holds it), flushed, until it receives SIGTERM (then SIGKILL of its process group after 10 s). A
        session already running with the same program, arguments and environment is reused.
      - V(window) returns the steps of one window (O(live_window)), V(stopped) ends the session.
    type: str
    choices: [started, window, stopped]
    version_added: 0.2.0
  live_window:
    description:
      - "With O(live=window): C(seconds) of steps (3); C(fresh) (true after a switch of the
        layer: the window starts after C(drop_s) seconds and C(drop_steps) more steps; false
        continues where the last window ended, so no step between two requests is lost);
        C(hang_s), seconds without a step before the program is taken as hung (60)."
    type: dict
    version_added: 0.2.0
extends_documentation_fragment:
  - stacktune.gpu.journal.run_id
attributes:
  check_mode:
    support: full
    description: Skipped in check mode unless O(run_in_check_mode=true); never changes the host either way.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to diff.
  platform:
    support: full
    platforms: posix
    description: Linux hosts; GPU workloads need NVIDIA GPUs and PyTorch with CUDA in O(python).
notes:
  - With O(run_id), a block whose lease is lost stops its workload at once and the task fails
    with RV(failure=lease_lost); without it, the block runs on its own.
  - Conditions are read inside the workload process with C(pynvml) (package nvidia-ml-py)
    when that interpreter can import it; otherwise GPU conditions are left out and
    the C(nvml) key of RV(conditions) says why.
  - The workloads, what each measures and the command format are described in the
    collection's docs/bench.md.
  - Software power capping does not void a block; a GPU under full load normally sits at
    its power limit, and the power limit is itself a setting that can be tuned.
"""

EXAMPLES = r"""
- name: Measure a bf16 GEMM block on GPU 0 with the PyTorch interpreter
  stacktune.gpu.bench:
    workload: gemm
    python: /opt/torch/.venv/bin/python3
    steps: 200
    warmup: 20
  register: gemm_block

- name: Measure pinned host-to-device copies of 64 MiB
  stacktune.gpu.bench:
    workload: h2d_pinned
    size: 64
    python: /opt/torch/.venv/bin/python3

- name: CPU-only block (no GPU, no PyTorch needed), pinned to CPUs 0-3
  stacktune.gpu.bench:
    workload: cpu_dataloader
    workers: 4
    cpus: "0-3"

- name: Read batches of small files from the disk that holds the training data
  stacktune.gpu.bench:
    workload: file_dataloader
    data_dir: /data/stacktune-bench

- name: Measure the user's own training script, which prints one step_ms JSON line per step
  stacktune.gpu.bench:
    workload: command
    command:
      - /opt/torch/.venv/bin/python3
      - /srv/train/bench_step.py
      - --steps
      - "220"
    warmup: 20
    env:
      CUDA_VISIBLE_DEVICES: "0"
"""

RETURN = r"""
samples_ms:
  description: Measured step times in milliseconds, in the order they ran, warm-up excluded.
  returned: success, when not skipped
  type: list
  elements: float
  sample: [1.641, 1.637, 1.652]
warmup_discarded:
  description: Number of warm-up steps run and discarded before the measured ones.
  returned: success, when not skipped
  type: int
  sample: 20
throughput:
  description:
    - Work over the block divided by the summed step time (TFLOP/s, GB/s, samples/s or
      steps/s), or what a command printed on a C(throughput) line.
    - For V(allreduce) it is bus bandwidth, algorithm bandwidth times 2(n-1)/n.
  returned: success, when not skipped
  type: dict
  sample: {"value": 671.5, "unit": "TFLOP/s"}
summary:
  description:
    - Count, mean, stdev, min, max, p50, p90, p99 and p99.9 of RV(samples_ms), in ms.
    - A quantile is null when there are too few samples for it (p99 needs 100, p99.9 1000).
  returned: success, when not skipped
  type: dict
  sample: {"count": 200, "mean_ms": 1.64, "stdev_ms": 0.01, "min_ms": 1.62, "max_ms": 1.71,
           "p50_ms": 1.637, "p90_ms": 1.65, "p99_ms": 1.708, "p999_ms": null}
conditions:
  description:
    - State of the host and measured GPUs at the start (C(before)) and end (C(after)) of the
      measured steps, and what polling saw in between (C(during), per GPU index).
    - C(before.host) and C(after.host) hold cpu_count, affinity_cpus, loadavg_1m/5m/15m,
      shm_size_bytes, shm_free_bytes, thp_enabled, mem_available_bytes.
    - C(before.gpus) and C(after.gpus) list index, name, sm_clock_mhz, mem_clock_mhz,
      temperature_c, power_w and throttle_reasons (names such as sw_power_cap, hw_slowdown).
    - C(during) maps GPU index to polls, throttle_reasons_seen, sm_clock_min_mhz,
      sm_clock_max_mhz, temperature_max_c, power_max_w.
    - C(nvml) is V(ok), V(not used) (CPU workloads) or why NVML could not be read.
  returned: success, when not skipped
  type: dict
void:
  description:
    - True when a hardware, thermal or power-brake throttle reason was seen on a measured GPU.
    - A void block measured the cooling or the power supply, not the software; discard it and repeat.
  returned: success, when not skipped
  type: bool
  sample: false
void_reason:
  description: Which GPU showed which reasons, when RV(void) is true; null otherwise.
  returned: success, when not skipped
  type: str
  sample: "clocks were held down during the block (GPU 0: hw_thermal_slowdown)"
workload:
  description: The workload that ran (V(auto) resolved to what it chose).
  returned: always
  type: str
  sample: gemm
elapsed_s:
  description: Wall time of the whole call in seconds, interpreter start-up and warm-up included.
  returned: success, when not skipped
  type: float
  sample: 4.812
details:
  description:
    - How the block ran, for the report. For built-in workloads size, size_meaning, python,
      python_version, cpus (the affinity it ran with), measure_s and info (workload specific,
      e.g. torch and CUDA versions, GPU name, loss values). For V(command), the argv, the exit
      status and the number of step lines printed.
  returned: success, when not skipped
  type: dict
failure:
  description:
    - Why the block could not be measured, on failure. V(exit) the workload exited with a
      non-zero status or was killed by a signal; V(hang) it ran past O(timeout); V(error) the
      program reported an error; V(output) it printed no readable step times; V(start) it could
      not be started; V(options) a bad option; V(lease_lost) the run no longer holds the host.
    - The gate treats V(exit), V(hang), V(error) and V(output) as a measurement of the layer
      (the workload fails with or without it), the others as errors.
  returned: failure
  type: str
  sample: exit
runner_socket:
  description: With O(runner_state=started), the socket of the runner for the next blocks.
  returned: when a runner was started
  type: str
runner_reused:
  description: With O(runner_state=started) and O(runner_socket), true when the runner there was used.
  returned: when a runner was reused
  type: bool
runner_start_s:
  description: With O(runner_state=started), seconds until the runner answered (interpreter start and imports).
  returned: when a runner was started
  type: float
window:
  description:
    - With O(live=window), the window's step times (C(samples_ms)), the runner's clock at its
      start and end (C(start_t), C(end_t), seconds), the steps dropped before it (C(dropped))
      and when it was asked for (C(asked_t)).
  returned: with live=window
  type: dict
live_start_s:
  description: With O(live=started), seconds until the program printed its first step (0 when reused).
  returned: with live=started
  type: float
runner_imports:
  description: With O(runner_state=started), what the runner imported before answering, in order.
  returned: when a runner was started
  type: list
  elements: dict
  contains:
    module:
      description: The module imported.
      type: str
    seconds:
      description: Seconds the import took.
      type: float
    error:
      description: Why the import failed (a block that needs the module then reports it), or null.
      type: str
  sample: [{"module": "torch", "seconds": 4.8, "error": null}]
error_line:
  description: The workload's own last words on failure (the last line of its error output), when there are any.
  returned: failure
  type: str
  sample: "RuntimeError: unable to allocate shared memory(shm) for file </torch_1234_567_8>"
skipped:
  description: True in check mode unless O(run_in_check_mode=true).
  returned: check mode
  type: bool
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import journal_options
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import WORKLOAD_CHOICES, BenchFailure
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.measure import measure

ARGUMENT_SPEC = dict(
    workload=dict(type="str", default="auto", choices=list(WORKLOAD_CHOICES)),
    steps=dict(type="int"),
    warmup=dict(type="int", default=20),
    python=dict(type="path"),
    device=dict(type="int", default=0),
    size=dict(type="int"),
    workers=dict(type="int", default=4),
    cpus=dict(type="str"),
    data_dir=dict(type="path"),
    command=dict(type="list", elements="str"),
    timeout=dict(type="int", default=600),
    env=dict(type="dict", default={}),
    run_in_check_mode=dict(type="bool", default=False),
    **journal_options("run_id"),
    runner_state=dict(type="str", choices=["started", "stopped"]),
    runner_socket=dict(type="path"),
    runner_workloads=dict(type="list", elements="str"),
    live=dict(type="str", choices=["started", "window", "stopped"]),
    live_window=dict(type="dict"),
)


def default_params(**overrides):
    """ARGUMENT_SPEC defaults updated with ``overrides``, for callers outside Ansible."""
    params = {name: spec.get("default") for name, spec in ARGUMENT_SPEC.items()}
    params.update(overrides)
    return params


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("workload", "command", ("command",))],
        supports_check_mode=True,
    )
    if module.check_mode and not module.params["run_in_check_mode"]:
        module.exit_json(
            changed=False,
            skipped=True,
            workload=module.params["workload"],
            msg="Measuring is skipped in check mode; set run_in_check_mode=true to measure anyway",
        )
    try:
        result = measure(module.params)
    except BenchFailure as exc:
        module.fail_json(msg=exc.msg, **exc.extra)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
