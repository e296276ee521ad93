# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One call of ``stacktune.gpu.bench``, less Ansible's argument handling: ``measure(params)``.

It checks the options, then measures one block of a built-in workload (the workload program
in a fresh interpreter from a private folder, or forked by the block runner) or of the user's
command, or serves a runner or live-session request (``runner_client.py``). Failures are
raised as ``BenchFailure``, whose ``msg`` and ``extra`` are the task's failure. Benchmarks and
the GPU test tier call it to run exactly the code a task runs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.common import process
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import HostLocked, lease_ticker
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import LeaseRenewalFailed
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.base import DEFAULT_STEPS_OTHER, Monitor
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import (
    COMMAND_FORMAT,
    BenchFailure,
    build_result,
    compute_throughput,
    exit_words,
    last_line,
    parse_command_output,
    parse_program_output,
    program_args,
    split_warmup,
    tail,
    validate_options,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.runner_client import (
    LEASE_TICK_S,
    ensure_runner,
    live_request,
    run_in_runner,
    stop_runner,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.source import PROGRAM_NAME, program_source


def run_process(what, argv, env, timeout, cpus=None, cwd=None, run_id=None):
    """Run argv (see common/process.py run_process); turn start failures and timeouts into BenchFailure.

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
    except LeaseRenewalFailed as exc:
        raise BenchFailure("Failed to measure a block: %s" % exc, failure="lease_lost") from None
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


def run_builtin(params):
    """Measure a built-in workload in the ``python`` interpreter; return the module result."""
    python = params["python"] or sys.executable
    requested = params["workload"]
    env = dict(os.environ)
    env.update(params["env"])
    started = time.monotonic()
    if params.get("runner_socket"):
        renew = lease_ticker(params["run_id"]) if params["run_id"] else None
        try:
            if renew is not None:
                renew()
            rc, out, err = run_in_runner(params, json.loads(program_args(params, requested)), params["env"], renew)
        except HostLocked as exc:
            raise BenchFailure("Failed to measure a block: %s" % exc, failure="lease_lost", lease_lost=True) from None
        except LeaseRenewalFailed as exc:
            raise BenchFailure("Failed to measure a block: %s" % exc, failure="lease_lost") from None
    else:
        with process.private_program(program_source(), "stacktune-bench-", PROGRAM_NAME) as (tmpdir, path):
            argv = [python, path, program_args(params, requested)]
            rc, out, err = run_process(
                "workload %s" % requested, argv, env, params["timeout"], cwd=tmpdir, run_id=params["run_id"]
            )
    elapsed = time.monotonic() - started
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
    started = time.monotonic()
    monitor.begin()
    try:
        rc, out, err = run_process(
            "command %s" % argv[0], argv, env, params["timeout"], cpus=params["cpus"], run_id=params["run_id"]
        )
    finally:
        monitor.end()
        conditions = monitor.result()
    elapsed = time.monotonic() - started
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


def measure(params):
    """Validate options (a dict shaped like the bench module's ARGUMENT_SPEC, see its
    ``default_params``) and measure one block, or serve a runner or live request.

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
