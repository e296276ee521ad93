# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Running the acceptance program (``acceptance/host/program.py``) on the host and deciding over
what it reported.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import summarize
from ansible_collections.stacktune.gpu.plugins.module_utils.common.process import (
    module_source,
    private_program,
    run_process,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance.host import program
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance.levels import (
    VERDICT_EXIT_CODES,
    evaluate,
    fatal_message,
    rejection,
)


DEFAULT_ENV = {
    # deterministic cuBLAS (required by torch.use_deterministic_algorithms on CUDA >= 10.2)
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    # NVLink multicast (NVLS) off: a fault there can take a shared host's GPUs out of service
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def program_source():
    """The acceptance program's text, as it is written for the host."""
    return module_source(program)


def program_env(overrides=None, base=None):
    """Environment for the program: the current one, the defaults above, then overrides."""
    env = dict(os.environ if base is None else base)
    env.update(DEFAULT_ENV)
    env.update({str(k): str(v) for k, v in (overrides or {}).items()})
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_program(python, config, env, timeout, tick=None):
    """Run the acceptance program (``acceptance/host/program.py``) with ``python`` in a private
    temporary folder (mode 0700; program and config files mode 0600; argv list, no shell).
    Returns rc, stdout, stderr, report (the parsed JSON report or None) and timed_out. The folder is removed afterwards.
    ``tick`` is called while it runs (renewing the run's lease; see run_process)."""
    with private_program(program_source(), "stacktune-acceptance-", "acceptance.py") as (tmpdir, prog):
        config = dict(config)
        config["result_path"] = os.path.join(tmpdir, "report.json")
        fd = os.open(os.path.join(tmpdir, "config.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(config, fh)
        rc, out, err, timed_out = run_process(
            [python, prog, os.path.join(tmpdir, "config.json")], env, timeout, cwd=tmpdir, tick=tick, tick_every=1.0
        )
        report = None
        if os.path.exists(config["result_path"]):
            with open(config["result_path"]) as fh:
                report = json.load(fh)
        return {"rc": rc, "stdout": out, "stderr": err, "report": report, "timed_out": timed_out}


def decide(run, timeout, **evaluate_kwargs):
    """Turn a run_program result into (fatal message or None, decision or None).

    ``evaluate_kwargs`` go to :func:`evaluate` (thresholds, previous_health, memory_table)."""
    report = run["report"]
    tail = (run["stderr"] or run["stdout"])[-2000:]
    if report is None:
        why = "timed out after %ds" % timeout if run["timed_out"] else "no report"
        return "%s (rc=%s): %s" % (why, run["rc"], tail.strip()), None
    fatal = fatal_message(report)
    if fatal:
        return fatal, None
    decision = evaluate(report, **evaluate_kwargs)
    if run["timed_out"]:
        decision["accepted"] = False
        decision["verdict"], decision["exit_code"] = "reject", VERDICT_EXIT_CODES["reject"]
        decision["rejections"].append(
            rejection("timeout", "host", "acceptance program killed after %ds" % timeout, {"stderr_tail": tail})
        )
        decision["summary"] = "rejected: timed out after %ds; %s" % (timeout, decision["summary"])
    return None, decision


def summarize_burn_in(burn):
    """Replace each GPU's raw per-iteration GEMM times with a summary (and median TFLOP/s)."""
    if not burn:
        return burn
    out = dict(burn)
    gpus = []
    for raw in burn.get("gpus") or []:
        g = dict(raw)
        samples = g.pop("batch_ms", None) or []
        clock_samples = g.pop("samples", None) or []
        g["clock_samples"] = len(clock_samples)
        g["gemm_ms"] = summarize(samples) if samples else None
        n = g.get("gemm_n")
        if samples and n:
            g["tflops_median"] = 2.0 * n**3 / (g["gemm_ms"]["p50_ms"] / 1000.0) / 1e12
        gpus.append(g)
    out["gpus"] = gpus
    return out
