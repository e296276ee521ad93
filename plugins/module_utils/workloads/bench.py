# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure logic of ``stacktune.gpu.bench``: option checks, parsing of a user command's
step lines and of the workload program's result, throughput, the void decision and the
result document. Nothing here starts a process or touches the host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import signal

from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import summarize
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import SLOWDOWN_REASONS
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.cpulist import parse_cpulist
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.registry import (
    CPU_WORKLOADS,
    DATA_DIR_WORKLOADS,
    GPU_WORKLOADS,
    MIN_WORKERS,
)

WORKLOAD_CHOICES = ("auto",) + GPU_WORKLOADS + CPU_WORKLOADS + ("command",)

# work unit of one step -> (throughput unit, divisor applied to work per second)
THROUGHPUT_UNITS = {
    "FLOP": ("TFLOP/s", 1e12),
    "B": ("GB/s", 1e9),
    "samples": ("samples/s", 1.0),
    "steps": ("steps/s", 1.0),
}

COMMAND_FORMAT = (
    "one step time in milliseconds per line, either a bare number (e.g. 12.5) or a JSON object "
    'with a numeric "step_ms" field (e.g. {"step_ms": 12.5}); optionally a JSON line '
    '{"throughput": <number>, "unit": "<unit>"}'
)


def validate_options(params):
    """Check and normalise the module's options; raise ValueError with the reason.

    Returns a dict with ``cpus`` as a list of CPU numbers (or None) and ``env`` with string
    values; the other options are returned as given.
    """
    out = dict(params)
    if params["workload"] not in WORKLOAD_CHOICES:
        raise ValueError("workload must be one of %s, got %r" % (", ".join(WORKLOAD_CHOICES), params["workload"]))
    if params.get("steps") is not None and params["steps"] < 1:
        raise ValueError("steps must be at least 1, got %d" % params["steps"])
    if params["warmup"] < 0:
        raise ValueError("warmup must be 0 or more, got %d" % params["warmup"])
    if params.get("size") is not None and params["size"] < 1:
        raise ValueError("size must be at least 1, got %d" % params["size"])
    if params["workers"] < 0:
        raise ValueError("workers must be 0 or more, got %d" % params["workers"])
    if params["workers"] < MIN_WORKERS.get(params["workload"], 0):
        raise ValueError("workload %s needs workers >= %d" % (params["workload"], MIN_WORKERS[params["workload"]]))
    out["data_dir"] = check_data_dir(params.get("data_dir"), params["workload"])
    if params["device"] < 0:
        raise ValueError("device must be a GPU index (0 or more), got %d" % params["device"])
    if params["timeout"] <= 0:
        raise ValueError("timeout must be positive, got %s" % params["timeout"])
    cpus = params.get("cpus")
    out["cpus"] = parse_cpu_list(cpus) if cpus not in (None, "") else None
    if params["workload"] == "command":
        command = params.get("command") or []
        if not command or not str(command[0]).strip():
            raise ValueError("command must be a non-empty list of arguments (argv) when workload=command")
        out["command"] = [str(arg) for arg in command]
    env = params.get("env") or {}
    bad = [key for key in env if not key or "=" in str(key)]
    if bad:
        raise ValueError("env names must be non-empty and contain no '=': %r" % (bad,))
    out["env"] = {str(k): "" if v is None else str(v) for k, v in env.items()}
    return out


def check_data_dir(data_dir, workload):
    """The ``data_dir`` option: None or an absolute path without ``..``; a workload that reads
    files there needs one. Whether the directory is there and usable the workload checks on the
    host, before it writes anything."""
    if data_dir in (None, ""):
        if workload in DATA_DIR_WORKLOADS:
            raise ValueError(
                "workload %s needs data_dir (the role's stacktune_bench_data_dir): a directory on the disk that "
                "holds the training data, where it writes and removes its own files" % workload
            )
        return None
    data_dir = str(data_dir)
    if not os.path.isabs(data_dir) or ".." in data_dir.split("/"):
        raise ValueError(
            "data_dir (stacktune_bench_data_dir) must be an absolute path without '..', got %r" % (data_dir,)
        )
    return data_dir


def _step_value(value, lineno):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("line %d: step_ms must be a number, got %r" % (lineno, value))
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError("line %d: step time must be a finite number >= 0, got %r" % (lineno, value))
    return value


def parse_command_output(text):
    """Parse a user command's standard output into (step times in ms, throughput or None).

    Step lines are bare numbers or JSON objects with ``step_ms``; a JSON object with a
    numeric ``throughput`` (and optional ``unit``) sets the throughput (the last one wins).
    Every other line is ignored. A step line with a negative or non-finite value is an
    error: it means the command's timer is broken.
    """
    steps = []
    throughput = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if not isinstance(doc, dict):
                continue
            if "step_ms" in doc:
                steps.append(_step_value(doc["step_ms"], lineno))
            tp = doc.get("throughput")
            if tp is not None and not isinstance(tp, bool) and isinstance(tp, (int, float)) and math.isfinite(tp):
                throughput = {"value": float(tp), "unit": str(doc.get("unit") or "units/s")}
            continue
        try:
            value = float(line)
        except ValueError:
            continue
        steps.append(_step_value(value, lineno))
    return steps, throughput


def split_warmup(steps_ms, warmup, steps):
    """Drop the first ``warmup`` samples and keep at most ``steps`` after them.

    Raises ValueError when no sample is left after the warm-up.
    """
    if len(steps_ms) <= warmup:
        raise ValueError(
            "the command printed %d step line(s), not more than warmup=%d; expected %s"
            % (len(steps_ms), warmup, COMMAND_FORMAT)
        )
    return list(steps_ms[warmup : warmup + steps])


def compute_throughput(samples_ms, work_per_step, work_unit):
    """Throughput over the block: total work / total measured time, in a readable unit.

    ``work_unit`` is what one step does: FLOP (-> TFLOP/s), B (-> GB/s), samples or steps.
    The value is None when the samples add up to no time at all.
    """
    unit, divisor = THROUGHPUT_UNITS[work_unit]
    total_s = math.fsum(samples_ms) / 1000.0
    if total_s <= 0:
        return {"value": None, "unit": unit}
    return {"value": work_per_step * len(samples_ms) / total_s / divisor, "unit": unit}


def parse_program_output(stdout):
    """The result document the workload program printed (its last non-empty line)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the workload program printed nothing")
    try:
        doc = json.loads(lines[-1])
    except ValueError:
        raise ValueError("the workload program printed no JSON result: %r" % lines[-1][-200:]) from None
    if not isinstance(doc, dict):
        raise ValueError("the workload program printed %r, not a JSON object" % lines[-1][-200:])
    if "error" not in doc:
        missing = [key for key in ("samples_ms", "work_per_step", "work_unit", "conditions") if key not in doc]
        if missing:
            raise ValueError("the workload program's result lacks %s" % ", ".join(missing))
    return doc


def throttle_reasons_seen(conditions):
    """Map GPU index (as a string) -> sorted throttle-reason names seen before/during/after."""
    seen = {}
    if not conditions:
        return seen
    for phase in ("before", "after"):
        snap = conditions.get(phase) or {}
        for gpu in snap.get("gpus") or ():
            names = seen.setdefault(str(gpu.get("index")), set())
            names.update(gpu.get("throttle_reasons") or ())
    for index, entry in (conditions.get("during") or {}).items():
        seen.setdefault(str(index), set()).update(entry.get("throttle_reasons_seen") or ())
    return {index: sorted(names) for index, names in seen.items()}


def decide_void(conditions):
    """(void, reason): void when a hardware, thermal or power-brake reason was seen on any GPU."""
    problems = []
    for index, names in sorted(throttle_reasons_seen(conditions).items()):
        bad = [name for name in names if name in SLOWDOWN_REASONS]
        if bad:
            problems.append("GPU %s: %s" % (index, ", ".join(bad)))
    if not problems:
        return False, None
    return True, "clocks were held down during the block (%s)" % "; ".join(problems)


def build_result(workload, samples_ms, warmup, throughput, conditions, elapsed_s, details=None):
    """The module's result for one measured block."""
    void, void_reason = decide_void(conditions)
    samples_ms = [round(float(v), 6) for v in samples_ms]
    return {
        "changed": False,
        "workload": workload,
        "samples_ms": samples_ms,
        "warmup_discarded": warmup,
        "throughput": throughput,
        "summary": summarize(samples_ms),
        "conditions": conditions,
        "void": void,
        "void_reason": void_reason,
        "elapsed_s": round(elapsed_s, 3),
        "details": details or {},
    }


def program_args(params, workload):
    """The JSON argument document handed to the workload program."""
    args = {
        "workload": workload,
        "steps": params["steps"],
        "warmup": params["warmup"],
        "size": params.get("size"),
        "workers": params["workers"],
        "device": params["device"],
        "cpus": params.get("cpus"),
    }
    if params.get("data_dir"):
        args["data_dir"] = params["data_dir"]
    return json.dumps(args, sort_keys=True)


def tail(text, lines=20, chars=4000):
    """The last lines of a process's output, for error messages."""
    text = (text or "").rstrip()
    return "\n".join(text.splitlines()[-lines:])[-chars:]


def parse_cpu_list(text):
    """The CPUs a block is pinned to (``0-7,16``): the kernel's CPU list (hardware/cpulist.py),
    which must name at least one CPU."""
    cpus = parse_cpulist(text)
    if not cpus:
        raise ValueError("empty CPU list")
    return cpus


class BenchFailure(Exception):
    """A block could not be measured; ``msg`` is the task's message, ``extra`` its other keys."""

    def __init__(self, msg, **extra):
        super().__init__(msg)
        self.msg = msg
        self.extra = extra


def last_line(text):
    """The last non-empty line of a program's output (its own last words), or None."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:500] if lines else None


def exit_words(rc):
    """How a process ended, in words: 'exit status 2', 'killed by SIGKILL'."""
    if rc is not None and rc < 0:
        try:
            return "killed by %s" % signal.Signals(-rc).name
        except ValueError:
            return "killed by signal %d" % -rc
    return "exit status %s" % rc
