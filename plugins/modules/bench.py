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

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.stacktune.gpu.plugins.module_utils.common import process
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.base import DEFAULT_STEPS_OTHER, Monitor
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.program import runner_preload
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.source import program_source
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import read_text
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import (
    HostLocked,
    RunLock,
    journal_options,
    lease_ticker,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import runner_client
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.runner_client import ask_runner
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import (
    COMMAND_FORMAT,
    WORKLOAD_CHOICES,
    build_result,
    compute_throughput,
    parse_command_output,
    parse_program_output,
    program_args,
    split_warmup,
    tail,
    validate_options,
)

PROGRAM_NAME = "stacktune_workload.py"

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
RUNNER_START_TIMEOUT_S = 180
RUNNER_IDLE_S = 900
# How often a running block checks that its run still holds the host (it renews the lease,
# which is minutes long, every 20 s of those checks).
LEASE_TICK_S = 1.0


class BenchFailure(Exception):
    """A block could not be measured; ``msg`` is the task's message, ``extra`` its other keys."""

    def __init__(self, msg, **extra):
        super().__init__(msg)
        self.msg = msg
        self.extra = extra


def workload_source():
    """Source text of the workload program (also when module_utils come from a zip)."""
    return program_source()


def last_line(text):
    """The last non-empty line of a program's output (its own last words), or None."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:500] if lines else None


def run_process(what, argv, env, timeout, cpus=None, cwd=None, run_id=None):
    """Run argv (see workloads/process.py run_process); turn start failures and timeouts into BenchFailure.

    With ``run_id``, the block starts only while that run holds the host and renews its
    lease while it runs; a lost lease kills the workload and fails the block.
    """
    renew = lease_ticker(run_id) if run_id else None
    try:
        if renew is not None:
            renew()
        rc, out, err, timed_out = process.run_process(
            argv, env, timeout, cpus=cpus, cwd=cwd, tick=renew, tick_every=LEASE_TICK_S
        )
    except HostLocked as exc:
        raise BenchFailure("Failed to measure a block: %s" % exc, failure="lease_lost", lease_lost=True) from None
    except (OSError, ValueError) as exc:
        raise BenchFailure("Failed to start %s: %s" % (what, exc), cmd=argv, failure="start") from None
    if timed_out:
        raise BenchFailure(
            "Failed to run %s: still running after timeout=%d s, killed it and its children" % (what, timeout),
            failure="hang",
            error_line="still running after %d s" % timeout,
            stdout_tail=tail(out),
            stderr_tail=tail(err),
        )
    return rc, out, err


def exit_words(rc):
    """How a process ended, in words: 'exit status 2', 'killed by SIGKILL'."""
    if rc is not None and rc < 0:
        try:
            return "killed by %s" % signal.Signals(-rc).name
        except ValueError:
            return "killed by signal %d" % -rc
    return "exit status %s" % rc


RUNNER_PREFIX = "stacktune-runner-"


def sweep_runner_folders(base):
    """Remove the folders of runners that are gone (killed with SIGKILL, their host's power cut
    short of a reboot): this user's, whose socket no runner answers on any more."""
    removed = []
    for name in os.listdir(base):
        path = os.path.join(base, name)
        if not name.startswith(RUNNER_PREFIX) or os.path.islink(path) or not os.path.isdir(path):
            continue
        if os.lstat(path).st_uid != os.geteuid():
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            try:
                probe.connect(os.path.join(path, "runner.sock"))
                continue  # a runner answers there: another run's, or this one's
            except (ConnectionRefusedError, FileNotFoundError):
                pass
            except OSError:
                continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def runner_folder():
    """A private folder (0700) for a runner's socket, program and block outputs."""
    base = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
    sweep_runner_folders(base)
    folder = tempfile.mkdtemp(prefix=RUNNER_PREFIX, dir=base)
    os.chmod(folder, 0o700)
    return folder


def start_runner(params):
    """Start a block runner for ``python`` and wait until it answers; return the module result."""
    python = params["python"] or sys.executable
    folder = runner_folder()
    program = os.path.join(folder, PROGRAM_NAME)
    fd = os.open(program, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(workload_source())
    sock = os.path.join(folder, "runner.sock")
    cfg = {
        "serve": {
            "socket": sock,
            "run_id": params["run_id"],
            "lock_path": RunLock().path,
            "idle_s": RUNNER_IDLE_S,
            "preload": runner_preload(params["runner_workloads"] or [params["workload"]]),
        }
    }
    started = time.time()
    try:
        proc = process.start_detached([python, program, json.dumps(cfg)], folder, os.path.join(folder, "runner.log"))
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise BenchFailure("Failed to start the block runner with %s: %s" % (python, exc), failure="start") from None
    while not os.path.exists(sock):
        if proc.poll() is not None or time.time() - started > RUNNER_START_TIMEOUT_S:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            text = read_text(os.path.join(folder, "runner.log")) or ""
            shutil.rmtree(folder, ignore_errors=True)
            raise BenchFailure(
                "Failed to start the block runner with %s: %s" % (python, last_line(text) or "it did not answer"),
                failure="start",
            )
        time.sleep(0.05)
    try:
        with open(os.path.join(folder, "ready.json")) as handle:
            imports = json.load(handle).get("imports") or []
    except (IOError, OSError, ValueError):
        imports = []
    return {
        "changed": False,
        "runner_socket": sock,
        "runner_start_s": round(time.time() - started, 2),
        "runner_imports": imports,
        "workload": params["workload"],
    }


def runner_answers(sock, modules):
    """Whether a runner answers at ``sock`` having imported every one of ``modules``:
    ``(answers, covers)``."""
    try:
        answer = ask_runner(sock, {"ping": True})
    except (OSError, ValueError):
        return False, False
    if not isinstance(answer, dict) or not answer.get("pong"):
        return False, False
    return True, set(modules) <= set(answer.get("preloaded") or [])


def ensure_runner(params):
    """The runner at ``runner_socket`` when it answers with the imports the workloads need
    (a layer of the same run started it), else a new one (the old one, if any, is stopped)."""
    sock = params.get("runner_socket")
    if sock:
        answers, covers = runner_answers(sock, runner_preload(params["runner_workloads"] or [params["workload"]]))
        if answers and covers:
            return {
                "changed": False,
                "runner_socket": sock,
                "runner_reused": True,
                "runner_start_s": 0.0,
                "runner_imports": [],
                "workload": params["workload"],
            }
        if answers:
            stop_runner(sock)
    return start_runner(params)


def stop_runner(sock):
    """Ask the runner at ``sock`` to end (it removes its folder); a runner already gone is fine."""
    with contextlib.suppress(OSError, ValueError):
        ask_runner(sock, {"stop": True})
    return {"changed": False, "runner_socket": sock, "stopped": True}


def run_in_runner(params, args, env, renew):
    """One block in the runner: ``(rc, stdout, stderr)`` as a fresh process would give them."""
    sock, timeout = params["runner_socket"], params["timeout"]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock)
    except OSError as exc:
        conn.close()
        raise BenchFailure("Failed to reach the block runner at %s: %s" % (sock, exc), failure="start") from None
    with conn:
        conn.sendall((json.dumps({"args": args, "env": env}) + "\n").encode("utf-8"))
        deadline, answer, killed = time.monotonic() + timeout, b"", False
        while not answer.endswith(b"\n"):
            ready, _w, _x = select.select([conn], [], [], LEASE_TICK_S)
            if ready:
                chunk = conn.recv(65536)
                if not chunk:
                    raise BenchFailure("Failed to run a block: the block runner at %s ended" % sock, failure="start")
                answer += chunk
                continue
            if renew is not None:
                renew()  # HostLocked: leaving closes the socket, and the runner kills the block
            if time.monotonic() > deadline and not killed:
                conn.sendall(b"kill\n")
                killed = True
    done = json.loads(answer.decode("utf-8"))
    out = read_text(done["out"]) or ""
    err = read_text(done["err"]) or ""
    for path in (done["out"], done["err"]):
        with contextlib.suppress(OSError):
            os.unlink(path)
    if killed:
        raise BenchFailure(
            "Failed to run workload %s: still running after timeout=%d s, killed it and its children"
            % (params["workload"], timeout),
            failure="hang",
            error_line="still running after %d s" % timeout,
            stderr_tail=tail(err),
        )
    return done["rc"], out, err


def run_builtin(params):
    """Measure a built-in workload in the ``python`` interpreter; return the module result."""
    python = params["python"] or sys.executable
    requested = params["workload"]
    env = dict(os.environ)
    env.update(params["env"])
    started = time.time()
    if params.get("runner_socket"):
        renew = lease_ticker(params["run_id"]) if params["run_id"] else None
        try:
            if renew is not None:
                renew()
            rc, out, err = run_in_runner(params, json.loads(program_args(params, requested)), params["env"], renew)
        except HostLocked as exc:
            raise BenchFailure("Failed to measure a block: %s" % exc, failure="lease_lost", lease_lost=True) from None
    else:
        with process.private_program(workload_source(), "stacktune-bench-", PROGRAM_NAME) as (tmpdir, path):
            argv = [python, path, program_args(params, requested)]
            rc, out, err = run_process(
                "workload %s" % requested, argv, env, params["timeout"], cwd=tmpdir, run_id=params["run_id"]
            )
    elapsed = time.time() - started
    try:
        doc = parse_program_output(out)
    except ValueError as exc:
        raise BenchFailure(
            "Failed to run workload %s with %s: %s (%s)" % (requested, python, exc, exit_words(rc)),
            rc=rc,
            failure="exit" if rc != 0 else "output",
            error_line=last_line(err) or exit_words(rc),
            stderr_tail=tail(err),
        ) from None
    if "error" in doc:
        extra = {"rc": rc, "stderr_tail": tail(err), "failure": "error", "error_line": str(doc["error"])[:500]}
        if doc.get("traceback"):
            extra["exception"] = doc["traceback"]
        raise BenchFailure("Failed to run workload %s with %s: %s" % (requested, python, doc["error"]), **extra)
    if rc != 0:
        raise BenchFailure(
            "Failed to run workload %s with %s: %s" % (requested, python, exit_words(rc)),
            rc=rc,
            failure="exit",
            error_line=last_line(err) or exit_words(rc),
            stderr_tail=tail(err),
        )
    throughput = compute_throughput(doc["samples_ms"], doc["work_per_step"], doc["work_unit"])
    keys = ("size", "size_meaning", "python", "python_version", "cpus", "measure_s", "info")
    details = {key: doc.get(key) for key in keys}
    return build_result(
        doc["workload"], doc["samples_ms"], doc["warmup"], throughput, doc["conditions"], elapsed, details
    )


def run_user_command(params):
    """Measure the user's command; return the module result."""
    argv = params["command"]
    env = dict(os.environ)
    env.update(params["env"])
    monitor = Monitor([{"index": params["device"], "uuid": None}])
    started = time.time()
    monitor.begin()
    try:
        rc, out, err = run_process(
            "command %s" % argv[0], argv, env, params["timeout"], cpus=params["cpus"], run_id=params["run_id"]
        )
    finally:
        monitor.end()
        conditions = monitor.result()
    elapsed = time.time() - started
    if rc != 0:
        last = tail(err, lines=5, chars=1000)
        raise BenchFailure(
            "Failed to run command %s: %s%s" % (argv[0], exit_words(rc), (": " + last) if last else ""),
            rc=rc,
            cmd=argv,
            failure="exit",
            error_line=last_line(err) or exit_words(rc),
            stderr_tail=tail(err),
            stdout_tail=tail(out),
        )
    try:
        steps_ms, printed_throughput = parse_command_output(out)
        if not steps_ms:
            raise ValueError("it printed no step lines; expected %s" % COMMAND_FORMAT)
        kept = split_warmup(steps_ms, params["warmup"], params["steps"] or DEFAULT_STEPS_OTHER)
    except ValueError as exc:
        raise BenchFailure(
            "Failed to read step times from command %s: %s" % (argv[0], exc),
            cmd=argv,
            failure="output",
            error_line=last_line(err) or str(exc),
            stdout_tail=tail(out),
        ) from None
    throughput = printed_throughput or compute_throughput(kept, 1.0, "steps")
    details = {"command": argv, "rc": rc, "step_lines": len(steps_ms), "cpus": params["cpus"]}
    return build_result("command", kept, params["warmup"], throughput, conditions, elapsed, details)


def live_request(params):
    """A live session's request (``live``): start it, take a window of it, or end it."""
    sock = params.get("runner_socket")
    if not sock:
        raise BenchFailure("live=%s needs runner_socket (a runner from runner_state=started)" % params["live"])
    renew = lease_ticker(params["run_id"]) if params["run_id"] else None
    try:
        if renew is not None:
            renew()
        if params["live"] == "stopped":
            return {"changed": False, "live": "stopped", "ended": runner_client.live_stop(sock)}
        if params["live"] == "started":
            spec = {"env": params["env"]}
            if params["workload"] == "command":
                spec["command"] = params["command"]
            else:
                spec["args"] = json.loads(program_args(params, params["workload"]))
            answer, bad = runner_client.live_start(sock, spec, params["timeout"], renew)
            result = {"changed": False, "live": "started", "reused": bool(answer.get("reused"))}
            result["live_start_s"] = answer.get("start_s") or 0.0
        else:
            window = dict(params.get("live_window") or {})
            seconds = float(window.get("seconds", 3.0))
            timeout = seconds + float(window.get("drop_s", 0.0)) + float(window.get("hang_s", 60.0)) + 60.0
            win, bad = runner_client.live_window(sock, window, timeout, renew)
            result = {"changed": False, "live": "window", "window": win}
    except HostLocked as exc:
        raise BenchFailure("Failed to measure a window: %s" % exc, failure="lease_lost", lease_lost=True) from None
    except (OSError, ValueError, runner_client.RunnerError) as exc:
        raise BenchFailure("Failed to reach the live session: %s" % exc, failure="start") from None
    if bad:
        raise BenchFailure(
            "The live %s failed: %s" % (params["workload"], bad.get("error") or bad.get("failure")),
            failure=bad.get("failure") or "error",
            error_line=str(bad.get("error") or "")[:500],
            stderr_tail=bad.get("stderr_tail") or "",
        )
    return result


def measure(params):
    """Validate options (a dict shaped like ARGUMENT_SPEC) and measure one block.

    Raises BenchFailure. This is the whole module minus Ansible's argument handling, so
    benchmarks and the GPU test tier run exactly the code a task runs.
    """
    try:
        params = validate_options(params)
    except ValueError as exc:
        raise BenchFailure("Failed to validate bench options: %s" % exc, failure="options") from None
    if params.get("runner_state") == "started":
        return ensure_runner(params)
    if params.get("runner_state") == "stopped":
        return stop_runner(params["runner_socket"])
    if params.get("live"):
        return live_request(params)
    if params["workload"] == "command":
        return run_user_command(params)
    return run_builtin(params)


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
