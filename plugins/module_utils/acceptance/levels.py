# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Acceptance of a new GPU node: the torch program it runs and the decision over its results.

The program (``PROGRAM``) runs in a separate interpreter that has PyTorch; this file only
needs the stdlib. For every selected GPU and every round it does the four-step check:
``torch.zeros(1).cuda().cpu().item() == 0``; a tiny seeded model forward with
deterministic algorithms; a backward; SHA-256 of the output and gradient bytes. Then per
round three NCCL all_reduce calls over all selected GPUs (one process per GPU; a single
GPU runs a one-rank group) whose results must equal n(n+1)/2 exactly, element for element
and in ``result.sum()``. ``burn_in`` adds a sustained GEMM on every GPU at once whose
result must stay bit-identical, with the SM clock, power and throttle reasons sampled
through NVML, then one more four-step round. ``standard`` and ``burn_in`` also measure
what the links carry: pinned host-to-device and device-to-host copies from the GPU's own
NUMA node and from a remote one, peer-to-peer bandwidth and small-copy latency for every
GPU pair, and on-device memory bandwidth. Every level reads the NVML memory and link
health counters before and after the load.

:func:`evaluate` decides: any non-determinism across rounds (or between GPUs of the same
model), a wrong or missing collective result, a missing round, or an error rejects the
node. Nothing is averaged away. Bandwidths are judged as fractions of what the link or
memory can carry (:func:`pcie_limit_gbps`, :func:`nvlink_limit_gbps`,
:func:`memory_limit_gbps`) against configurable thresholds; memory and link health and
clocks under load by the rules in :mod:`_health`. The verdict is pass, warn or reject.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import atomic_write
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import (
    NVLINK_DEVICE_TYPE_SWITCH,
    PCIE_GT_S,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.health import (
    evaluate_clock_samples,
    evaluate_link_errors,
    evaluate_memory_health,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import Journal
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.metrics import escape_label, format_value
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.stats import summarize
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.parsers import decode_clocks_event_reasons
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.process import private_program, run_process

PROGRAM_VERSION = 2
MIN_ROUNDS = 3

LEVELS = {
    # quick: the smallest check, three rounds, a one-element all_reduce; health counters only.
    "quick": {
        "rounds": 3,
        "model": {"batch": 8, "in_features": 16, "hidden": 32, "out_features": 8},
        "allreduce_numel": 1,
        "burn_in": False,
        "bandwidth": False,
    },
    # standard: a larger model and a 16 MiB all_reduce, three rounds, bandwidths.
    "standard": {
        "rounds": 3,
        "model": {"batch": 64, "in_features": 128, "hidden": 256, "out_features": 16},
        "allreduce_numel": 4 * 1024 * 1024,
        "burn_in": False,
        "bandwidth": True,
    },
    # burn_in: many rounds, bandwidths, a sustained GEMM on every GPU at once with its
    # clocks sampled, then one more round.
    "burn_in": {
        "rounds": 10,
        "model": {"batch": 64, "in_features": 128, "hidden": 256, "out_features": 16},
        "allreduce_numel": 4 * 1024 * 1024,
        "burn_in": True,
        "bandwidth": True,
    },
}

DEFAULT_BURN_IN_SECONDS = 300
DEFAULT_GEMM_N = 8192
# Bandwidth measurement sizes: a 256 MiB host copy (the size the H200 reference was
# measured with), a 256 MiB peer copy, an 8-byte peer copy for latency, and a device copy
# of up to 2 GiB (read + write, so 4 GiB moved per copy).
COPY_BYTES = 256 * 1024 * 1024
P2P_BYTES = 256 * 1024 * 1024
LATENCY_BYTES = 8
MEMORY_BYTES = 2 * 1024 * 1024 * 1024
COPY_ITERATIONS = 10
LATENCY_ITERATIONS = 100
DEFAULT_ENV = {
    # deterministic cuBLAS (required by torch.use_deterministic_algorithms on CUDA >= 10.2)
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    # NVLink multicast (NVLS) off: a fault there can take a shared host's GPUs out of service
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def build_config(
    level="standard",
    rounds=None,
    gpus=None,
    perturb_round=None,
    burn_in_seconds=None,
    collective_timeout=300,
    seed=1234,
    bandwidth=None,
    remote_buffer=False,
):
    """The configuration the program reads. Raises ValueError naming the bad option.

    ``bandwidth`` overrides the level's choice of measuring copies and memory bandwidth.
    ``remote_buffer`` is fault injection: the copies labelled local are made from a
    buffer on a remote NUMA node, so that a node must be flagged for them.
    """
    if level not in LEVELS:
        raise ValueError("level must be one of %s, got %r" % (", ".join(sorted(LEVELS)), level))
    spec = LEVELS[level]
    if rounds is None:
        rounds = spec["rounds"]
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < MIN_ROUNDS:
        raise ValueError(
            "rounds must be a whole number >= %d (non-determinism must show by the third round), got %r"
            % (MIN_ROUNDS, rounds)
        )
    if gpus is not None:
        if not isinstance(gpus, (list, tuple)) or not all(
            isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus
        ):
            raise ValueError("gpus must be a list of GPU indices >= 0, got %r" % (gpus,))
        if len(set(gpus)) != len(gpus):
            raise ValueError("gpus lists an index twice: %r" % (gpus,))
        gpus = list(gpus)
    if perturb_round is not None and not 1 <= perturb_round <= rounds:
        raise ValueError("perturb_round must be between 1 and rounds (%d), got %r" % (rounds, perturb_round))
    if burn_in_seconds is None:
        burn_in_seconds = DEFAULT_BURN_IN_SECONDS
    if burn_in_seconds <= 0:
        raise ValueError("burn_in_seconds must be positive, got %r" % (burn_in_seconds,))
    return {
        "program_version": PROGRAM_VERSION,
        "level": level,
        "rounds": rounds,
        "gpus": gpus,
        "perturb_round": perturb_round,
        "model": dict(spec["model"]),
        "allreduce_numel": spec["allreduce_numel"],
        "allreduce_calls": 3,
        "burn_in": spec["burn_in"],
        "burn_in_seconds": burn_in_seconds if spec["burn_in"] else 0,
        "gemm_n": DEFAULT_GEMM_N,
        "collective_timeout": collective_timeout,
        "seed": seed,
        "bandwidth": spec["bandwidth"] if bandwidth is None else bool(bandwidth),
        "remote_buffer": bool(remote_buffer),
        "copy_bytes": COPY_BYTES,
        "p2p_bytes": P2P_BYTES,
        "latency_bytes": LATENCY_BYTES,
        "memory_bytes": MEMORY_BYTES,
        "copy_iterations": COPY_ITERATIONS,
        "latency_iterations": LATENCY_ITERATIONS,
        "sample_seconds": max(0.5, burn_in_seconds / 600.0) if spec["burn_in"] else 0.5,
    }


def fatal_message(report):
    """ "no GPU to accept: ..." when the program could not test anything; else None."""
    if not isinstance(report, dict):
        return "no GPU to accept: the acceptance program returned no report"
    fatal = report.get("fatal")
    if fatal:
        return "no GPU to accept: %s" % fatal.get("message", fatal.get("kind"))
    if not report.get("gpus"):
        return "no GPU to accept: the acceptance program tested no GPU"
    return None


def _rej(check, subject, message, evidence=None, round_no=None):
    return {"check": check, "subject": subject, "round": round_no, "message": message, "evidence": evidence or {}}


def _evaluate_gpu(gpu, expected_rounds, rejections):
    subj = "gpu%s" % gpu.get("index")
    rounds = gpu.get("rounds") or []
    if gpu.get("error"):
        rejections.append(_rej("gpu_error", subj, "GPU check failed: %s" % gpu["error"], {"error": gpu["error"]}))
    if len(rounds) < expected_rounds:
        rejections.append(
            _rej(
                "missing_rounds",
                subj,
                "%d of %d rounds completed" % (len(rounds), expected_rounds),
                {"completed": len(rounds), "expected": expected_rounds},
            )
        )
    reference = None
    for r in rounds:
        rn = r.get("round")
        if r.get("error"):
            rejections.append(
                _rej("round_error", subj, "round %s failed: %s" % (rn, r["error"]), {"error": r["error"]}, rn)
            )
            continue
        z = r.get("zeros_item")
        if z != 0:
            rejections.append(
                _rej(
                    "zeros_roundtrip",
                    subj,
                    "torch.zeros(1).cuda().cpu().item() returned %r, not 0" % (z,),
                    {"value": z},
                    rn,
                )
            )
        loss = r.get("loss")
        if not isinstance(loss, (int, float)) or isinstance(loss, bool) or not math.isfinite(loss):
            rejections.append(_rej("loss_not_finite", subj, "loss is %r" % (loss,), {"loss": loss}, rn))
        if reference is None:
            reference = r
            continue
        for key, check, what in (
            ("forward_sha256", "forward_determinism", "forward output"),
            ("grad_sha256", "backward_determinism", "gradients"),
        ):
            if r.get(key) != reference.get(key):
                rejections.append(
                    _rej(
                        check,
                        subj,
                        "%s of round %s differ from round %s (bit-for-bit)" % (what, rn, reference.get("round")),
                        {
                            "reference_round": reference.get("round"),
                            "reference_sha256": reference.get(key),
                            "round_sha256": r.get(key),
                            "reference_loss_hex": reference.get("loss_hex"),
                            "round_loss_hex": r.get("loss_hex"),
                        },
                        rn,
                    )
                )
    return reference


def _evaluate_cross_gpu(gpus, references, rejections):
    """GPUs of the same model must compute bit-identical results for the same program."""
    by_name = {}
    for gpu, ref in zip(gpus, references):
        if ref is None:
            continue
        by_name.setdefault(gpu.get("name"), []).append((gpu, ref))
    for name, members in by_name.items():
        if len(members) < 2:
            continue
        counts = {}
        for _gpu, ref in members:
            counts[ref.get("forward_sha256")] = counts.get(ref.get("forward_sha256"), 0) + 1
        majority = max(counts, key=lambda k: counts[k])
        for gpu, ref in members:
            if ref.get("forward_sha256") != majority:
                rejections.append(
                    _rej(
                        "cross_gpu_determinism",
                        "gpu%s" % gpu.get("index"),
                        "forward output differs from %d other %s GPU(s)" % (counts[majority], name),
                        {"sha256": ref.get("forward_sha256"), "majority_sha256": majority},
                    )
                )


def _evaluate_collective(coll, gpu_indices, expected_rounds, calls_per_round, rejections):
    if not coll:
        rejections.append(_rej("allreduce_missing", "host", "no all_reduce result was returned"))
        return
    if coll.get("error"):
        rejections.append(
            _rej("allreduce_error", "host", "all_reduce failed: %s" % coll["error"], {"error": coll["error"]})
        )
    world = coll.get("world_size") or 0
    if world != len(gpu_indices):
        rejections.append(
            _rej(
                "allreduce_world_size",
                "host",
                "all_reduce ran with %d rank(s) for %d GPU(s)" % (world, len(gpu_indices)),
                {"world_size": world, "gpus": list(gpu_indices)},
            )
        )
    expected_value = world * (world + 1) / 2.0
    ranks = {r.get("rank"): r for r in coll.get("ranks") or []}
    for rank in range(world):
        subj = "rank%d" % rank
        r = ranks.get(rank)
        if r is None:
            rejections.append(_rej("allreduce_missing_rank", subj, "rank %d returned no result (dropped rank)" % rank))
            continue
        if r.get("error"):
            rejections.append(
                _rej("allreduce_error", subj, "rank %d failed: %s" % (rank, r["error"]), {"error": r["error"]})
            )
        rounds = r.get("rounds") or []
        if len(rounds) < expected_rounds:
            rejections.append(
                _rej(
                    "allreduce_missing_rounds",
                    subj,
                    "rank %d completed %d of %d all_reduce rounds" % (rank, len(rounds), expected_rounds),
                    {"completed": len(rounds), "expected": expected_rounds},
                )
            )
        for rd in rounds:
            rn = rd.get("round")
            calls = rd.get("calls") or []
            if len(calls) < calls_per_round:
                rejections.append(
                    _rej(
                        "allreduce_missing_calls",
                        subj,
                        "rank %d round %s completed %d of %d all_reduce calls"
                        % (rank, rn, len(calls), calls_per_round),
                        {"completed": len(calls), "expected": calls_per_round},
                        rn,
                    )
                )
            for c in calls:
                numel = c.get("numel")
                exp_sum = expected_value * numel if isinstance(numel, int) else None
                bad = (
                    c.get("sum") != exp_sum
                    or c.get("min") != expected_value
                    or c.get("max") != expected_value
                    or c.get("error")
                )
                if bad:
                    rejections.append(
                        _rej(
                            "allreduce_result",
                            subj,
                            "rank %d round %s call %s: sum %r, min %r, max %r; expected every element %r (sum %r)"
                            % (
                                rank,
                                rn,
                                c.get("call"),
                                c.get("sum"),
                                c.get("min"),
                                c.get("max"),
                                expected_value,
                                exp_sum,
                            ),
                            {
                                "sum": c.get("sum"),
                                "min": c.get("min"),
                                "max": c.get("max"),
                                "expected_value": expected_value,
                                "expected_sum": exp_sum,
                                "numel": numel,
                                "world_size": world,
                                "error": c.get("error"),
                            },
                            rn,
                        )
                    )


def _evaluate_burn_in(burn, gpu_indices, rejections):
    if not burn:
        rejections.append(_rej("burn_in_missing", "host", "burn-in returned no result"))
        return
    if burn.get("error"):
        rejections.append(_rej("burn_in_error", "host", "burn-in failed: %s" % burn["error"], {"error": burn["error"]}))
    seen = {g.get("gpu"): g for g in burn.get("gpus") or []}
    for idx in gpu_indices:
        subj = "gpu%s" % idx
        g = seen.get(idx)
        if g is None:
            rejections.append(_rej("burn_in_missing", subj, "GPU %s returned no burn-in result" % idx))
            continue
        if g.get("error"):
            rejections.append(_rej("burn_in_error", subj, "burn-in failed: %s" % g["error"], {"error": g["error"]}))
        if g.get("mismatches"):
            rejections.append(
                _rej(
                    "burn_in_mismatch",
                    subj,
                    "GEMM result changed %d time(s) under sustained load (first at iteration %s)"
                    % (g["mismatches"], g.get("first_mismatch_iteration")),
                    {
                        "mismatches": g["mismatches"],
                        "checks": g.get("checks"),
                        "first_mismatch_iteration": g.get("first_mismatch_iteration"),
                    },
                )
            )
        if not g.get("error") and not g.get("iterations"):
            rejections.append(_rej("burn_in_error", subj, "burn-in ran no GEMM iteration", {}))


def verdict_of(rejections, warnings):
    """pass, warn or reject, and its exit code (0, 1, 2)."""
    verdict = "reject" if rejections else ("warn" if warnings else "pass")
    return verdict, VERDICT_EXIT_CODES[verdict]


def evaluate(report, thresholds=None, previous_health=None, memory_table=None):
    """Decide from a program report.

    Returns {accepted, verdict (pass/warn/reject), exit_code, rejections, warnings, notes,
    measurements, summary}. ``thresholds``: overrides of THRESHOLDS. ``previous_health``:
    the last acceptance record's health snapshots (GPU uuid -> snapshot), for counters
    that grew since then. ``memory_table``: from :func:`validate_memory_table`.
    Measurements a report lacks are "not measured": never a failure, never a pass of
    their own.
    """
    thresholds = validate_thresholds(thresholds)
    msg = fatal_message(report)
    if msg:
        return {
            "accepted": False,
            "verdict": "reject",
            "exit_code": VERDICT_EXIT_CODES["reject"],
            "rejections": [_rej("no_gpu", "host", msg)],
            "warnings": [],
            "notes": [],
            "measurements": {},
            "summary": msg,
        }
    cfg = report.get("config") or {}
    expected_rounds = int(cfg.get("rounds") or MIN_ROUNDS)
    rejections = []
    warnings = []
    gpus = report.get("gpus") or []
    references = []
    for gpu in gpus:
        extra = 1 if cfg.get("burn_in") else 0
        references.append(_evaluate_gpu(gpu, expected_rounds + extra, rejections))
    _evaluate_cross_gpu(gpus, references, rejections)
    indices = [g.get("index") for g in gpus]
    _evaluate_collective(
        report.get("collective"), indices, expected_rounds, int(cfg.get("allreduce_calls") or 3), rejections
    )
    if cfg.get("burn_in"):
        _evaluate_burn_in(report.get("burn_in"), indices, rejections)
    measurements, problems, notes = evaluate_bandwidth(report, thresholds, memory_table or MEMORY_BANDWIDTH_GBPS)
    health, health_problems, health_notes = evaluate_health(report, thresholds, previous_health)
    clocks, clock_problems, clock_notes = ({}, [], [])
    if cfg.get("burn_in"):
        clocks, clock_problems, clock_notes = evaluate_clocks(report.get("burn_in"), thresholds)
    measurements["health"] = health
    measurements["clocks"] = clocks
    for p in problems + health_problems + clock_problems:
        target = rejections if p["severity"] == "reject" else warnings
        target.append(_rej(p["check"], p["subject"], p["message"], p["evidence"]))
    notes = notes + health_notes + clock_notes
    verdict, exit_code = verdict_of(rejections, warnings)
    if verdict != "reject":
        summary = "accepted: %d GPU(s), %d rounds, all results bit-identical, all_reduce over %d rank(s) exact" % (
            len(gpus),
            expected_rounds,
            (report.get("collective") or {}).get("world_size", 0),
        )
        if warnings:
            summary += "; %d warning(s) (%s)" % (len(warnings), ", ".join(sorted({w["check"] for w in warnings})))
    else:
        checks = sorted({r["check"] for r in rejections})
        summary = "rejected: %d problem(s) (%s)" % (len(rejections), ", ".join(checks))
    return {
        "accepted": verdict != "reject",
        "verdict": verdict,
        "exit_code": exit_code,
        "rejections": rejections,
        "warnings": warnings,
        "notes": notes,
        "measurements": measurements,
        "summary": summary,
    }


# --------------------------------------------------------------------------- limits
#
# What a link or the memory can carry, per direction, in GB/s (10^9 bytes per second).
# PCIe: transfer rate (GT/s per lane) x lanes x line-code efficiency / 8 bits. Gen1 and
# Gen2 use 8b/10b, Gen3 to Gen5 128b/130b; this is the payload ceiling before packet
# headers, which no copy reaches. Gen5 x16: 32 x 16 x 128/130 / 8 = 63.0 GB/s.
PCIE_ENCODING = {1: 8.0 / 10.0, 2: 8.0 / 10.0, 3: 128.0 / 130.0, 4: 128.0 / 130.0, 5: 128.0 / 130.0}

# NVLink, per link and direction, by the version NVML reports (nvmlDeviceGetNvLinkVersion):
# NVLink 1 (P100) 20 GB/s, NVLink 2 (V100), 3 (A100) and 4 (H100/H200) 25 GB/s, NVLink 5
# (B200) 50 GB/s. An H200 with 18 links: 450 GB/s each way (900 GB/s both ways).
NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}

# Peak memory bandwidth per GPU model (GB/s), from NVIDIA's product specifications,
# matched as a case-insensitive substring of the name NVML and CUDA report, first match
# wins. Only models with a published figure are listed; acceptance_memory_bandwidth_gbps
# adds others. A device copy reads and writes every byte, so it counts both.
MEMORY_BANDWIDTH_GBPS = (
    ("H200", 4800.0),  # H200 SXM and NVL, HBM3e
    ("H100 80GB HBM3", 3350.0),  # H100 SXM5
    ("H100 SXM", 3350.0),
    ("H100 PCIe", 2000.0),  # HBM2e
    ("A100-SXM4-80GB", 2039.0),  # HBM2e
    ("A100-SXM4-40GB", 1555.0),  # HBM2
    ("A100-PCIE-40GB", 1555.0),
)

# Thresholds, as fractions of the limit (the role's acceptance_<name> variables). A
# measurement below *_reject_below rejects, below *_warn_below warns; 0 turns a rule off.
# Calibration: on the H200 test host (PCIe Gen5 x16) a 256 MiB pinned host-to-device copy
# runs at 55.0 GB/s, 87% of 63.0 GB/s; a link trained one generation down or at half
# width gives at most 50%.
THRESHOLDS = {
    "pcie_warn_below": 0.75,
    "pcie_reject_below": 0.5,
    "pcie_remote_warn_below": 0.5,
    "pcie_remote_reject_below": 0.0,
    "p2p_warn_below": 0.6,
    "p2p_reject_below": 0.35,
    "memory_warn_below": 0.7,
    "memory_reject_below": 0.5,
    "clock_min_fraction": 0.85,
    "clock_max_low_share": 0.2,
    "max_uncorrectable_remapped_rows": 8,
}
THRESHOLD_PAIRS = (
    ("pcie_warn_below", "pcie_reject_below"),
    ("pcie_remote_warn_below", "pcie_remote_reject_below"),
    ("p2p_warn_below", "p2p_reject_below"),
    ("memory_warn_below", "memory_reject_below"),
)
VERDICT_EXIT_CODES = {"pass": 0, "warn": 1, "reject": 2}
HISTORY_KEEP = 20
RECORD_FILE = "acceptance.json"
RECORD_SCHEMA = 1


def _var(key):
    return "acceptance_%s" % key


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _from_text(value, kind):
    """Templated role variables may arrive as text: "0.75" -> 0.75; anything else unchanged."""
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            return value
    return value


def validate_thresholds(given=None):
    """THRESHOLDS with ``given`` over them. Raises ValueError naming the role variable."""
    out = dict(THRESHOLDS)
    for key, raw in (given or {}).items():
        if key not in THRESHOLDS:
            raise ValueError("unknown threshold %r; known: %s" % (key, ", ".join(sorted(THRESHOLDS))))
        if raw is None:
            continue
        value = _from_text(raw, int if key == "max_uncorrectable_remapped_rows" else float)
        if key == "max_uncorrectable_remapped_rows":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError("%s must be a whole number >= 0, got %r" % (_var(key), raw))
        else:
            value = _number(value)
            if value is None or not 0.0 <= value <= 1.0:
                raise ValueError("%s must be a fraction from 0 to 1, got %r" % (_var(key), raw))
        out[key] = value
    for warn, reject in THRESHOLD_PAIRS:
        if out[reject] > out[warn]:
            raise ValueError("%s (%s) must not be above %s (%s)" % (_var(reject), out[reject], _var(warn), out[warn]))
    if out["clock_min_fraction"] <= 0:
        raise ValueError("%s must be above 0, got %r" % (_var("clock_min_fraction"), out["clock_min_fraction"]))
    return out


def validate_memory_table(given=None):
    """Extra memory bandwidths (name substring -> GB/s) before the built-in table."""
    table = []
    for name, value in sorted((given or {}).items()):
        number = _number(value)
        if not str(name).strip() or number is None or number <= 0:
            raise ValueError(
                "acceptance_memory_bandwidth_gbps must map GPU name parts to GB/s above 0, got %r: %r" % (name, value)
            )
        table.append((str(name), number))
    return tuple(table) + MEMORY_BANDWIDTH_GBPS


def pcie_limit_gbps(gen, width):
    """Per-direction payload limit of a PCIe link in GB/s; None when unknown."""
    if isinstance(gen, bool) or isinstance(width, bool) or gen not in PCIE_ENCODING:
        return None
    if not isinstance(width, int) or width <= 0:
        return None
    return PCIE_GT_S[gen] * width * PCIE_ENCODING[gen] / 8.0


def nvlink_limit_gbps(version, links):
    """Per-direction NVLink bandwidth of ``links`` links of one version; None when unknown."""
    if version not in NVLINK_GBPS_PER_LINK or not isinstance(links, int) or links <= 0:
        return None
    return NVLINK_GBPS_PER_LINK[version] * links


def memory_limit_gbps(name, table=MEMORY_BANDWIDTH_GBPS):
    """Peak memory bandwidth of a GPU model by name; None when the model is not known."""
    if not name:
        return None
    lowered = str(name).lower()
    for part, gbps in table:
        if part.lower() in lowered:
            return gbps
    return None


def _active_links(device):
    nvlink = (device or {}).get("nvlink") or {}
    return [link for link in nvlink.get("links") or [] if isinstance(link, dict) and link.get("active")]


def _pcie_of(device):
    pcie = (device or {}).get("pcie") or {}
    gen, width = pcie.get("gen_max"), pcie.get("width_max")
    return pcie_limit_gbps(gen, width), ("PCIe Gen%s x%s" % (gen, width) if gen and width else None)


def p2p_limit(dev_a, dev_b, gpu_bus_ids=()):
    """(GB/s, label) of what carries a copy from GPU a to GPU b, per direction.

    Direct NVLinks between the two: their count times the per-link bandwidth. Both GPUs on
    NVSwitches: the smaller of their active link counts. Otherwise PCIe: the slower of the
    two GPUs' links (a copy between GPUs without NVLink crosses both).
    """
    links_a, links_b = _active_links(dev_a), _active_links(dev_b)
    bus_b = (dev_b or {}).get("pci_bus_id")
    direct = [link for link in links_a if bus_b and link.get("remote_pci_bus_id") == bus_b]

    def version(links):
        versions = [link.get("version") for link in links if link.get("version") in NVLINK_GBPS_PER_LINK]
        return min(versions) if versions else None

    if direct:
        v = version(direct)
        limit = nvlink_limit_gbps(v, len(direct))
        return limit, "NVLink%s x%d" % (v if v else "?", len(direct))

    def switched(links):
        return [
            link
            for link in links
            if link.get("remote_type") == NVLINK_DEVICE_TYPE_SWITCH
            or (link.get("remote_pci_bus_id") and link.get("remote_pci_bus_id") not in gpu_bus_ids)
        ]

    sw_a, sw_b = switched(links_a), switched(links_b)
    if sw_a and sw_b:
        count = min(len(sw_a), len(sw_b))
        v = version(sw_a + sw_b)
        return nvlink_limit_gbps(v, count), "NVLink%s x%d (NVSwitch)" % (v if v else "?", count)
    limit_a, label_a = _pcie_of(dev_a)
    limit_b, label_b = _pcie_of(dev_b)
    if limit_a is None or limit_b is None:
        return None, None
    return min(limit_a, limit_b), (label_a if limit_a <= limit_b else label_b)


# --------------------------------------------------------------------------- measurements


def _r(value, digits=3):
    return None if value is None else round(float(value), digits)


def _judge(value, limit, warn_below, reject_below):
    """(fraction, status): ok, warn, reject, not_measured or no_limit."""
    value = _number(value)
    if value is None:
        return None, "not_measured"
    if not limit:
        return None, "no_limit"
    fraction = value / limit
    if reject_below > 0 and fraction < reject_below:
        return fraction, "reject"
    if warn_below > 0 and fraction < warn_below:
        return fraction, "warn"
    return fraction, "ok"


def _entry(value, limit, label, warn_below, reject_below):
    fraction, status = _judge(value, limit, warn_below, reject_below)
    return {
        "gbps": _r(value),
        "limit_gbps": _r(limit),
        "limit": label,
        "fraction": _r(fraction, 4),
        "status": status,
    }


def _problem(severity, check, subject, message, evidence=None):
    return {"severity": severity, "check": check, "subject": subject, "message": message, "evidence": evidence or {}}


def _bandwidth_problem(check, subject, what, entry, warn_below, reject_below):
    bound = reject_below if entry["status"] == "reject" else warn_below
    return _problem(
        entry["status"],
        check,
        subject,
        "%s: %.1f GB/s = %d%% of %s (%.1f GB/s), below %d%%"
        % (
            what,
            entry["gbps"],
            round(entry["fraction"] * 100),
            entry["limit"],
            entry["limit_gbps"],
            round(bound * 100),
        ),
        dict(entry, threshold=bound),
    )


DIRECTIONS = {"h2d": "host-to-device", "d2h": "device-to-host"}


def evaluate_bandwidth(report, thresholds, memory_table=MEMORY_BANDWIDTH_GBPS):
    """Per-GPU and per-pair bandwidths as fractions of their limits, and the problems.

    Returns ``(measurements, problems, notes)``. A report without bandwidth results (level
    quick, or a program from before these measurements) has every value "not measured".
    """
    t = thresholds
    devices = {d.get("index"): d for d in report.get("devices") or [] if isinstance(d, dict)}
    names = {g.get("index"): g.get("name") for g in report.get("gpus") or []}
    gpu_bus_ids = {d.get("pci_bus_id") for d in devices.values() if d.get("pci_bus_id")}
    bw = report.get("bandwidth")
    measurements = {"gpus": {}, "pairs": {}, "remote_numa": None}
    problems, notes = [], []
    for idx, name in names.items():
        measurements["gpus"]["gpu%s" % idx] = {"name": name}
    if not isinstance(bw, dict):
        notes.append("bandwidths not measured")
        return measurements, problems, notes
    measurements["remote_numa"] = bw.get("remote_note") or "measured"
    if bw.get("remote_note"):
        notes.append(bw["remote_note"])
    if bw.get("remote_buffer"):
        notes.append("fault injection: the copies labelled local were made from a remote NUMA node")
    if bw.get("error"):
        problems.append(_problem("warn", "measurement_error", "host", "bandwidth measurement failed: %s" % bw["error"]))
    for rec in bw.get("host") or []:
        idx = rec.get("gpu")
        subject = "gpu%s" % idx
        gpu = measurements["gpus"].setdefault(subject, {"name": names.get(idx)})
        label = "remote" if rec.get("numa") == "remote" else "local"
        if rec.get("error"):
            problems.append(
                _problem("warn", "measurement_error", subject, "%s copies failed: %s" % (label, rec["error"]))
            )
        limit, limit_label = _pcie_of(devices.get(idx))
        warn, reject = (
            (t["pcie_remote_warn_below"], t["pcie_remote_reject_below"])
            if label == "remote"
            else (t["pcie_warn_below"], t["pcie_reject_below"])
        )
        for direction in ("h2d", "d2h"):
            entry = _entry((rec.get(direction) or {}).get("gbps"), limit, limit_label, warn, reject)
            entry["numa_node"] = rec.get("node")
            gpu["%s_%s" % (direction, label)] = entry
            if entry["status"] in ("warn", "reject"):
                what = "%s copy from NUMA node %s (%s)" % (DIRECTIONS[direction], rec.get("node"), label)
                check = "pcie_remote_bandwidth" if label == "remote" else "pcie_bandwidth"
                problems.append(_bandwidth_problem(check, subject, what, entry, warn, reject))
            elif entry["status"] == "no_limit":
                notes.append("%s: PCIe link generation/width unknown, %s copy not judged" % (subject, direction))
    for rec in bw.get("memory") or []:
        idx = rec.get("gpu")
        subject = "gpu%s" % idx
        gpu = measurements["gpus"].setdefault(subject, {"name": names.get(idx)})
        if rec.get("error"):
            problems.append(_problem("warn", "measurement_error", subject, "memory copy failed: %s" % rec["error"]))
        limit = memory_limit_gbps(names.get(idx), memory_table)
        label = "%s memory" % names.get(idx) if limit else None
        entry = _entry(rec.get("gbps"), limit, label, t["memory_warn_below"], t["memory_reject_below"])
        gpu["memory"] = entry
        if entry["status"] in ("warn", "reject"):
            problems.append(
                _bandwidth_problem(
                    "memory_bandwidth",
                    subject,
                    "device memory copy (read + write)",
                    entry,
                    t["memory_warn_below"],
                    t["memory_reject_below"],
                )
            )
        elif entry["status"] == "no_limit":
            notes.append("%s: no memory bandwidth known for %s, measured but not judged" % (subject, names.get(idx)))
    for rec in bw.get("p2p") or []:
        a, b = rec.get("src"), rec.get("dst")
        subject = "gpu%s->gpu%s" % (a, b)
        if rec.get("error"):
            problems.append(_problem("warn", "measurement_error", subject, "peer copy failed: %s" % rec["error"]))
        limit, label = p2p_limit(devices.get(a), devices.get(b), gpu_bus_ids)
        entry = _entry(rec.get("gbps"), limit, label, t["p2p_warn_below"], t["p2p_reject_below"])
        entry["latency_us"] = _r(rec.get("latency_us"))
        entry["peer_access"] = rec.get("access")
        measurements["pairs"][subject] = entry
        if entry["status"] in ("warn", "reject"):
            what = "peer copy" if rec.get("access") else "copy without peer access"
            problems.append(
                _bandwidth_problem("p2p_bandwidth", subject, what, entry, t["p2p_warn_below"], t["p2p_reject_below"])
            )
    if len(names) < 2:
        notes.append("one GPU: no peer-to-peer pair to measure")
    return measurements, problems, notes


def _uuid_key(device, gpu):
    return (device or {}).get("uuid") or (gpu or {}).get("uuid") or "gpu%s" % (gpu or {}).get("index")


def evaluate_health(report, thresholds, previous=None):
    """Memory and link health from the NVML snapshots the program took before and after
    its load. ``previous``: the last acceptance record's ``health`` (GPU uuid -> snapshot)."""
    health = report.get("health")
    problems, notes, out = [], [], {}
    if not isinstance(health, dict):
        notes.append("memory and link health not measured")
        return out, problems, notes
    if health.get("error"):
        notes.append("NVML not available: %s" % health["error"])
    devices = {d.get("index"): d for d in report.get("devices") or [] if isinstance(d, dict)}
    before = health.get("before") or {}
    after = health.get("after") or {}
    previous = previous if isinstance(previous, dict) else {}
    for gpu in report.get("gpus") or []:
        idx = gpu.get("index")
        subject = "gpu%s" % idx
        snap_before = before.get(str(idx))
        snap_after = after.get(str(idx)) or snap_before
        key = _uuid_key(devices.get(idx), gpu)
        out[key] = snap_after
        for f in evaluate_memory_health(snap_after, thresholds["max_uncorrectable_remapped_rows"]):
            if f["severity"] == "info":
                notes.append("%s: %s" % (subject, f["message"]))
            else:
                problems.append(_problem(f["severity"], f["check"], subject, f["message"], f["evidence"]))
        for f in evaluate_link_errors(snap_before, snap_after, previous.get(key)):
            if f["severity"] == "info":
                notes.append("%s: %s" % (subject, f["message"]))
            else:
                problems.append(_problem(f["severity"], f["check"], subject, f["message"], f["evidence"]))
    return out, problems, notes


def evaluate_clocks(burn, thresholds):
    """SM clocks under the burn-in GEMM, per GPU: (summaries, problems, notes)."""
    summaries, problems, notes = {}, [], []
    for g in (burn or {}).get("gpus") or []:
        subject = "gpu%s" % g.get("gpu")
        samples = []
        for s in g.get("samples") or []:
            if not isinstance(s, dict):
                continue
            mask = s.get("reasons")
            names = decode_clocks_event_reasons(mask) if isinstance(mask, int) and not isinstance(mask, bool) else []
            samples.append({"sm_mhz": s.get("sm_mhz"), "reasons": names, "power_w": s.get("power_w")})
        if g.get("sampler_error"):
            notes.append("%s: clock sampling failed: %s" % (subject, g["sampler_error"]))
        summary, findings = evaluate_clock_samples(
            samples, g.get("max_sm_mhz"), thresholds["clock_min_fraction"], thresholds["clock_max_low_share"]
        )
        if summary is not None:
            summary["power_limit_w"] = g.get("power_limit_w")
            summaries[subject] = summary
        for f in findings:
            if f["severity"] == "info":
                notes.append("%s: %s" % (subject, f["message"]))
            else:
                problems.append(_problem(f["severity"], f["check"], subject, f["message"], f["evidence"]))
    return summaries, problems, notes


def program_env(overrides=None, base=None):
    """Environment for the program: the current one, the defaults above, then overrides."""
    env = dict(os.environ if base is None else base)
    env.update(DEFAULT_ENV)
    env.update({str(k): str(v) for k, v in (overrides or {}).items()})
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_program(python, config, env, timeout, tick=None):
    """Run PROGRAM with ``python`` in a private temporary folder (mode 0700; program and
    config files mode 0600; argv list, no shell). Returns rc, stdout, stderr, report (the
    parsed JSON report or None) and timed_out. The folder is removed afterwards.
    ``tick`` is called while it runs (renewing the run's lease; see run_process)."""
    with private_program(PROGRAM, "stacktune-acceptance-", "acceptance.py") as (tmpdir, prog):
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
            _rej("timeout", "host", "acceptance program killed after %ds" % timeout, {"stderr_tail": tail})
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


# --------------------------------------------------------------------------- the node's record
#
# The journal keeps the latest acceptance of the host in <journal_dir>/acceptance.json
# (mode 0600, like the rest of the journal), with a short history; the fleet report reads
# its ``metrics`` (one number per metric for the whole host: the worst GPU or pair) and
# ``gpu_name`` to compare hosts of the same GPU model.

# (metric, which way is better, label): the host-level numbers the fleet compares.
FLEET_METRICS = (
    ("h2d_local_gbps", "higher", "host-to-device, local NUMA (GB/s)"),
    ("d2h_local_gbps", "higher", "device-to-host, local NUMA (GB/s)"),
    ("h2d_remote_gbps", "higher", "host-to-device, remote NUMA (GB/s)"),
    ("d2h_remote_gbps", "higher", "device-to-host, remote NUMA (GB/s)"),
    ("p2p_gbps", "higher", "peer-to-peer (GB/s)"),
    ("p2p_latency_us", "lower", "peer-to-peer small copy (us)"),
    ("memory_gbps", "higher", "device memory (GB/s)"),
    ("gemm_tflops", "higher", "burn-in GEMM (TFLOP/s)"),
    ("sm_clock_mhz", "higher", "SM clock under burn-in (MHz)"),
)


def fleet_metrics(measurements, burn_in_summary=None):
    """One number per FLEET_METRICS entry for the whole host: its worst GPU or pair."""
    out = {}

    def worst(key, values, better):
        values = [v for v in values if _number(v) is not None]
        if values:
            out[key] = _r(min(values) if better == "higher" else max(values))

    gpus = (measurements or {}).get("gpus") or {}
    for direction in ("h2d", "d2h"):
        for numa in ("local", "remote"):
            key = "%s_%s" % (direction, numa)
            worst(key + "_gbps", [(g.get(key) or {}).get("gbps") for g in gpus.values()], "higher")
    worst("memory_gbps", [(g.get("memory") or {}).get("gbps") for g in gpus.values()], "higher")
    pairs = (measurements or {}).get("pairs") or {}
    worst("p2p_gbps", [p.get("gbps") for p in pairs.values()], "higher")
    worst("p2p_latency_us", [p.get("latency_us") for p in pairs.values()], "lower")
    clocks = (measurements or {}).get("clocks") or {}
    worst("sm_clock_mhz", [c.get("median_sm_mhz") for c in clocks.values()], "higher")
    worst("gemm_tflops", [g.get("tflops_median") for g in (burn_in_summary or {}).get("gpus") or []], "higher")
    return out


def _iso(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def build_record(decision, report, level, now, previous=None):
    """The journal record of one acceptance run (also what the role writes on the controller)."""
    report = report if isinstance(report, dict) else {}
    decision = decision or {}
    gpus = report.get("gpus") or []
    names = sorted({str(g.get("name")) for g in gpus if g.get("name")})
    measurements = decision.get("measurements") or {}
    burn = summarize_burn_in(report.get("burn_in")) if report.get("burn_in") else None
    problems = [
        {"severity": severity, "check": p["check"], "subject": p["subject"], "message": p["message"]}
        for severity, items in (("reject", decision.get("rejections") or []), ("warn", decision.get("warnings") or []))
        for p in items
    ]
    record = {
        "schema": RECORD_SCHEMA,
        "time": _iso(now),
        "timestamp": round(now, 3),
        "level": level,
        "verdict": decision.get("verdict", "reject"),
        "exit_code": decision.get("exit_code", VERDICT_EXIT_CODES["reject"]),
        "summary": decision.get("summary", ""),
        "problems": problems,
        "gpu_name": ", ".join(names) if names else None,
        "gpu_count": len(gpus),
        "gpus": [{"index": g.get("index"), "name": g.get("name"), "uuid": g.get("uuid")} for g in gpus],
        "metrics": fleet_metrics(measurements, burn),
        "measurements": {k: v for k, v in measurements.items() if k != "health"},
        "health": measurements.get("health") or {},
        "notes": decision.get("notes") or [],
    }
    history = list((previous or {}).get("history") or [])
    history.append({k: record[k] for k in ("time", "level", "verdict", "summary")})
    record["history"] = history[-HISTORY_KEEP:]
    return record


def read_record(journal_dir):
    """The last acceptance record in the journal; None when there is none or it is unreadable."""
    path = os.path.join(journal_dir, RECORD_FILE)
    try:
        with open(path) as fh:
            record = json.load(fh)
    except (IOError, OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def write_record(journal_dir, record, lock_timeout=60):
    """Write the record atomically (mode 0600) under the journal lock."""
    journal = Journal(journal_dir)
    journal.lock(lock_timeout)
    try:
        data = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8")
        atomic_write(os.path.join(journal_dir, RECORD_FILE), data, mode=0o600)
    finally:
        journal.unlock()


# The file's name in node_exporter's textfile directory (stacktune_metrics_dir).
METRICS_FILE = "stacktune_acceptance.prom"

# (name, help), in the order they are written; every family is a gauge. Base units
# (bytes per second, seconds) and ratios, as Prometheus names them.
METRIC_FAMILIES = (
    ("stacktune_acceptance_verdict", "Verdict of the last acceptance: 1 for the verdict given, 0 for the others."),
    ("stacktune_acceptance_exit_code", "Exit code of the last acceptance: 0 pass, 1 warn, 2 reject."),
    ("stacktune_acceptance_timestamp_seconds", "Unix time of the last acceptance."),
    ("stacktune_acceptance_problems", "Checks of the last acceptance that warned or rejected, by check and severity."),
    (
        "stacktune_acceptance_bandwidth_bytes_per_second",
        "Measured copy bandwidth per GPU and path, in bytes per second.",
    ),
    (
        "stacktune_acceptance_bandwidth_ratio",
        "Measured bandwidth over what the link or memory carries (PCIe, memory), per GPU and path.",
    ),
    (
        "stacktune_acceptance_p2p_bandwidth_bytes_per_second",
        "Peer-to-peer copy bandwidth per GPU pair, in bytes per second.",
    ),
    ("stacktune_acceptance_p2p_bandwidth_ratio", "Peer-to-peer bandwidth over the NVLink or PCIe limit, per GPU pair."),
    ("stacktune_acceptance_p2p_latency_seconds", "Time of a small peer-to-peer copy, launch included."),
    ("stacktune_acceptance_sm_clock_ratio", "Median SM clock under the burn-in GEMM over the GPU's maximum SM clock."),
    ("stacktune_acceptance_remapped_rows", "Rows remapped by the GPU, by cause (correctable, uncorrectable)."),
    ("stacktune_acceptance_remap_pending", "1 when a row remapping waits for a GPU reset."),
    ("stacktune_acceptance_remap_failure", "1 when a row remapping has failed."),
)


def _sample(name, labels, value):
    if labels:
        inner = ",".join('%s="%s"' % (k, escape_label(v)) for k, v in sorted(labels.items()))
        return "%s{%s} %s" % (name, inner, format_value(value))
    return "%s %s" % (name, format_value(value))


def _bytes_per_second(gbps):
    """GB/s (10^9 bytes per second, as the measurements are kept) in bytes per second."""
    return round(float(gbps) * 1e9)


def render_metrics(record):
    """The Prometheus textfile of an acceptance record (node_exporter's textfile collector)."""
    samples = {name: [] for name, _help in METRIC_FAMILIES}
    for verdict in ("pass", "warn", "reject"):
        samples["stacktune_acceptance_verdict"].append(({"verdict": verdict}, int(record.get("verdict") == verdict)))
    samples["stacktune_acceptance_exit_code"].append(({}, int(record.get("exit_code", 2))))
    samples["stacktune_acceptance_timestamp_seconds"].append(({}, float(record.get("timestamp") or 0)))
    counts = {}
    for p in record.get("problems") or []:
        key = (p.get("check"), p.get("severity"))
        counts[key] = counts.get(key, 0) + 1
    for (check, severity), count in sorted(counts.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        samples["stacktune_acceptance_problems"].append(({"check": check, "severity": severity}, count))
    measurements = record.get("measurements") or {}
    for gpu, entries in sorted((measurements.get("gpus") or {}).items()):
        for path in ("h2d_local", "d2h_local", "h2d_remote", "d2h_remote", "memory"):
            entry = entries.get(path) or {}
            if _number(entry.get("gbps")) is not None:
                samples["stacktune_acceptance_bandwidth_bytes_per_second"].append(
                    ({"gpu": gpu, "path": path}, _bytes_per_second(entry["gbps"]))
                )
            if _number(entry.get("fraction")) is not None:
                samples["stacktune_acceptance_bandwidth_ratio"].append(({"gpu": gpu, "path": path}, entry["fraction"]))
    for pair, entry in sorted((measurements.get("pairs") or {}).items()):
        src, _sep, dst = pair.partition("->")
        labels = {"src": src, "dst": dst}
        if _number(entry.get("gbps")) is not None:
            samples["stacktune_acceptance_p2p_bandwidth_bytes_per_second"].append(
                (labels, _bytes_per_second(entry["gbps"]))
            )
        if _number(entry.get("fraction")) is not None:
            samples["stacktune_acceptance_p2p_bandwidth_ratio"].append((labels, entry["fraction"]))
        if _number(entry.get("latency_us")) is not None:
            samples["stacktune_acceptance_p2p_latency_seconds"].append((labels, entry["latency_us"] / 1e6))
    for gpu, clock in sorted((measurements.get("clocks") or {}).items()):
        if _number(clock.get("median_fraction")) is not None:
            samples["stacktune_acceptance_sm_clock_ratio"].append(({"gpu": gpu}, clock["median_fraction"]))
    uuids = {g.get("uuid"): "gpu%s" % g.get("index") for g in record.get("gpus") or []}
    for key, snap in sorted((record.get("health") or {}).items()):
        rows = (snap or {}).get("remapped_rows") or {}
        gpu = uuids.get(key, key)
        for cause in ("correctable", "uncorrectable"):
            if _number(rows.get(cause)) is not None:
                samples["stacktune_acceptance_remapped_rows"].append(({"gpu": gpu, "cause": cause}, rows[cause]))
        for flag, name in (
            ("pending", "stacktune_acceptance_remap_pending"),
            ("failure", "stacktune_acceptance_remap_failure"),
        ):
            if isinstance(rows.get(flag), bool):
                samples[name].append(({"gpu": gpu}, int(rows[flag])))
    lines = []
    for name, help_text in METRIC_FAMILIES:
        if not samples[name]:
            continue
        lines.append("# HELP %s %s" % (name, help_text))
        lines.append("# TYPE %s gauge" % name)
        for labels, value in samples[name]:
            lines.append(_sample(name, labels, value))
    return "\n".join(lines) + "\n"


def write_metrics(path, text):
    """Write the textfile atomically (mode 0644; the directory is created when missing)."""
    atomic_write(path, text.encode("utf-8"), mode=0o644)


PROGRAM = r"""
# stacktune GPU acceptance program: run by stacktune.gpu.gpu_acceptance in an interpreter
# that has PyTorch. argv[1]: config JSON path; the report is written to config["result_path"].
import hashlib
import json
import os
import sys
import time
import traceback


def _err(e):
    return "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:300] if str(e).strip() else "")


def _write(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh)
    os.replace(tmp, path)


def _sha(torch, tensors):
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().contiguous().cpu().reshape(-1)
        raw = t.view(torch.uint8)
        try:
            b = raw.numpy().tobytes()
        except Exception:
            b = bytes(raw.tolist())
        h.update(str(tuple(t.shape)).encode() + str(t.dtype).encode())
        h.update(b)
    return h.hexdigest()


def _model(torch, cfg):
    m = cfg["model"]
    torch.manual_seed(cfg["seed"])
    net = torch.nn.Sequential(
        torch.nn.Linear(m["in_features"], m["hidden"]),
        torch.nn.GELU(),
        torch.nn.Linear(m["hidden"], m["hidden"]),
        torch.nn.GELU(),
        torch.nn.Linear(m["hidden"], m["out_features"]),
    )
    gen = torch.Generator().manual_seed(cfg["seed"] + 1)
    x = torch.randn(m["batch"], m["in_features"], generator=gen)
    y = torch.randn(m["batch"], m["out_features"], generator=gen)
    return net, x, y


def _ms(t0):
    return (time.perf_counter() - t0) * 1000.0


def four_step(torch, g, cfg, round_no, phase, perturb):
    dev = torch.device("cuda", g)
    rec = {"round": round_no, "phase": phase, "error": None, "timings_ms": {}}
    try:
        t_all = time.perf_counter()
        t0 = time.perf_counter()
        rec["zeros_item"] = torch.zeros(1).cuda(g).cpu().item()
        rec["timings_ms"]["zeros"] = _ms(t0)
        net, x, y = _model(torch, cfg)
        net = net.to(dev)
        x = x.to(dev)
        y = y.to(dev)
        if perturb:
            # fault injection for proving the check works: one input element changes
            x.view(-1)[0] += 0.5
            rec["perturbed"] = True
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        out = net(x)
        torch.cuda.synchronize(dev)
        rec["timings_ms"]["forward"] = _ms(t0)
        loss = torch.nn.functional.mse_loss(out, y)
        t0 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize(dev)
        rec["timings_ms"]["backward"] = _ms(t0)
        rec["forward_sha256"] = _sha(torch, [out])
        rec["grad_sha256"] = _sha(torch, [p.grad for p in net.parameters()])
        lv = loss.item()
        rec["loss"] = lv
        rec["loss_hex"] = float(lv).hex()
        rec["timings_ms"]["total"] = _ms(t_all)
    except Exception as e:
        rec["error"] = _err(e)
    return rec


def allreduce_worker(rank, world, gpus, cfg, tmpdir):
    import datetime

    import torch
    import torch.distributed as dist

    g = gpus[rank]
    res = {"rank": rank, "gpu": g, "rounds": [], "error": None}
    try:
        torch.cuda.set_device(g)
        kwargs = dict(
            backend="nccl",
            init_method="file://" + os.path.join(tmpdir, "nccl_store"),
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=cfg["collective_timeout"]),
        )
        try:
            dist.init_process_group(device_id=torch.device("cuda", g), **kwargs)
        except TypeError:
            dist.init_process_group(**kwargs)
        expected = world * (world + 1) / 2.0
        numel = cfg["allreduce_numel"]
        for r in range(1, cfg["rounds"] + 1):
            calls = []
            for c in range(1, cfg["allreduce_calls"] + 1):
                call = {"call": c, "numel": numel, "error": None}
                try:
                    t = torch.full((numel,), float(rank + 1), device="cuda:%d" % g, dtype=torch.float32)
                    if cfg.get("perturb_round") == r and c == cfg["allreduce_calls"] and rank == 0:
                        t[0] += 1.0
                    torch.cuda.synchronize(g)
                    t0 = time.perf_counter()
                    dist.all_reduce(t)
                    torch.cuda.synchronize(g)
                    call["ms"] = _ms(t0)
                    call["sum"] = t.to(torch.float64).sum().item()
                    call["min"] = t.min().item()
                    call["max"] = t.max().item()
                    call["expected_value"] = expected
                except Exception as e:
                    call["error"] = _err(e)
                calls.append(call)
            res["rounds"].append({"round": r, "calls": calls})
        dist.destroy_process_group()
    except Exception as e:
        res["error"] = _err(e)
        res["traceback"] = traceback.format_exc()[-2000:]
    _write(os.path.join(tmpdir, "allreduce_rank%d.json" % rank), res)


# ---------------------------------------------------------------- NUMA, NVML, bandwidths

NVML_ERROR_NOT_SUPPORTED = 3


def _cpulist(text):
    cpus = []
    for part in (text or "").strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.extend(range(int(lo), int(hi.split(":")[0]) + 1))
        else:
            cpus.append(int(part))
    return cpus


def numa_nodes(base="/sys/devices/system/node"):
    # NUMA nodes with CPUs (memory-only nodes cannot be bound by CPU affinity)
    nodes = []
    try:
        names = os.listdir(base)
    except OSError:
        return nodes
    for name in names:
        if not name.startswith("node") or not name[4:].isdigit():
            continue
        try:
            with open(os.path.join(base, name, "cpulist")) as fh:
                cpus = _cpulist(fh.read())
        except (OSError, ValueError):
            continue
        if cpus:
            nodes.append({"node": int(name[4:]), "cpus": cpus})
    return sorted(nodes, key=lambda n: n["node"])


def _sysfs_int(path):
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _sysfs_gen(path):
    # "32.0 GT/s PCIe" -> 5
    try:
        with open(path) as fh:
            rate = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    for gen, gts in ((5, 32.0), (4, 16.0), (3, 8.0), (2, 5.0), (1, 2.5)):
        if abs(rate - gts) < 0.01:
            return gen
    return None


def _s(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _norm_bus(bus):
    # "00000000:3B:00.0" -> "0000:3b:00.0"
    if not bus:
        return None
    parts = _s(bus).strip().lower().split(":")
    if len(parts) == 3:
        parts[0] = parts[0][-4:].rjust(4, "0")
    elif len(parts) == 2:
        parts = ["0000"] + parts
    out = ":".join(parts)
    return out if "." in out else out + ".0"


def _nv(fn, *args):
    # (value, None), (None, "not_supported") or (None, error text)
    if fn is None:
        return None, "not_supported"
    try:
        return fn(*args), None
    except Exception as e:
        if getattr(e, "value", None) == NVML_ERROR_NOT_SUPPORTED or "Not Supported" in str(e):
            return None, "not_supported"
        return None, _err(e)


def nvml_open():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, None
    except Exception as e:
        return None, _err(e)


def nvml_handle(nv, uuid, bus):
    # the NVML handle of a CUDA device, by UUID, else by PCI bus id
    if nv is None:
        return None
    want = (uuid or "").lower().replace("gpu-", "")
    count, _ = _nv(nv.nvmlDeviceGetCount)
    for i in range(count or 0):
        h, err = _nv(nv.nvmlDeviceGetHandleByIndex, i)
        if err:
            continue
        u, _ = _nv(nv.nvmlDeviceGetUUID, h)
        if want and u and _s(u).lower().replace("gpu-", "") == want:
            return h
    if bus:
        h, err = _nv(nv.nvmlDeviceGetHandleByPciBusId, bus)
        if not err:
            return h
    return None


def device_info(torch, nv, g):
    p = torch.cuda.get_device_properties(g)
    uuid = str(getattr(p, "uuid", "") or "") or None
    bus = None
    if getattr(p, "pci_bus_id", None) is not None:
        bus = "%04x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), p.pci_bus_id, getattr(p, "pci_device_id", 0))
    info = {"index": g, "uuid": uuid, "pci_bus_id": bus, "numa_node": None, "nvml": False,
            "pcie": {}, "nvlink": {"supported": None, "links": []}, "max_sm_mhz": None, "power_limit_w": None}
    h = nvml_handle(nv, uuid, bus)
    if h is not None:
        info["nvml"] = True
        pci, _ = _nv(nv.nvmlDeviceGetPciInfo, h)
        if pci is not None:
            info["pci_bus_id"] = _norm_bus(pci.busId)
        for key, name in (("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                          ("width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
                          ("gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
                          ("width_current", "nvmlDeviceGetCurrPcieLinkWidth")):
            info["pcie"][key] = _nv(getattr(nv, name, None), h)[0]
        info["max_sm_mhz"] = _nv(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)[0]
        mw = _nv(nv.nvmlDeviceGetEnforcedPowerLimit, h)[0]
        info["power_limit_w"] = mw / 1000.0 if mw else None
        links = []
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            state, err = _nv(nv.nvmlDeviceGetNvLinkState, h, link)
            if err == "not_supported":
                if link == 0:
                    info["nvlink"]["supported"] = False
                    break
                continue
            if err:
                continue
            entry = {"link": link, "active": bool(state)}
            if state:
                entry["version"] = _nv(nv.nvmlDeviceGetNvLinkVersion, h, link)[0]
                rp, _ = _nv(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
                entry["remote_pci_bus_id"] = _norm_bus(rp.busId) if rp is not None else None
                entry["remote_type"] = _nv(getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None), h, link)[0]
            links.append(entry)
        if links:
            info["nvlink"] = {"supported": True, "links": links}
    if info["pci_bus_id"]:
        base = "/sys/bus/pci/devices/%s/" % info["pci_bus_id"]
        node = _sysfs_int(base + "numa_node")
        info["numa_node"] = node if node is not None and node >= 0 else None
        if not info["pcie"].get("gen_max"):
            info["pcie"] = {"gen_max": _sysfs_gen(base + "max_link_speed"),
                            "width_max": _sysfs_int(base + "max_link_width"),
                            "gen_current": _sysfs_gen(base + "current_link_speed"),
                            "width_current": _sysfs_int(base + "current_link_width"),
                            "source": "sysfs"}
    return info, h


def health_snapshot(nv, h, links):
    snap = {}
    v, err = _nv(nv.nvmlDeviceGetRemappedRows, h)
    if v is not None:
        snap["remapped_rows"] = {"correctable": int(v[0]), "uncorrectable": int(v[1]),
                                 "pending": bool(v[2]), "failure": bool(v[3])}
    else:
        snap["remapped_rows"] = {"not_supported": True} if err == "not_supported" else {"error": err}
    pages = {}
    for key, const, default in (("single_bit", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
                                ("double_bit", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)):
        v, err = _nv(getattr(nv, "nvmlDeviceGetRetiredPages", None), h, getattr(nv, const, default))
        if err == "not_supported":
            pages = {"not_supported": True}
            break
        pages[key] = len(v) if v is not None else None
        if err:
            pages[key + "_error"] = err
    if not pages.get("not_supported"):
        v, err = _nv(getattr(nv, "nvmlDeviceGetRetiredPagesPendingStatus", None), h)
        pages["pending"] = bool(v) if v is not None else None
    snap["retired_pages"] = pages
    counters = {}
    for link in links:
        if not link.get("active"):
            continue
        c = {}
        for key, const, default in (("replay", "NVML_NVLINK_ERROR_DL_REPLAY", 0),
                                    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY", 1),
                                    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT", 2),
                                    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA", 3)):
            c[key] = _nv(nv.nvmlDeviceGetNvLinkErrorCounter, h, link["link"], getattr(nv, const, default))[0]
        counters[str(link["link"])] = c
    snap["nvlink_errors"] = counters
    v, err = _nv(getattr(nv, "nvmlDeviceGetPcieReplayCounter", None), h)
    snap["pcie_replay"] = v
    if err == "not_supported":
        snap["pcie_replay_not_supported"] = True
    return snap


def _median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2.0


def _event_times(torch, dev, fn, iters):
    # milliseconds of fn() per iteration, timed with CUDA events on the device's stream
    times = []
    with torch.cuda.device(dev):
        fn()
        torch.cuda.synchronize(dev)
        for _ in range(iters):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
    return times


def _host_buffer(torch, nbytes):
    # a pinned host buffer whose pages were first touched by this thread: allocated
    # pageable, filled with one memset on this thread, then registered with CUDA
    import ctypes

    host = torch.empty(nbytes, dtype=torch.uint8)
    ctypes.memset(host.data_ptr(), 1, nbytes)
    rc = torch.cuda.cudart().cudaHostRegister(host.data_ptr(), nbytes, 0)
    code = int(getattr(rc, "value", rc))
    if code != 0:
        raise RuntimeError("cudaHostRegister failed with error %d" % code)
    return host


def host_copies(torch, g, node, label, cfg):
    nbytes = cfg["copy_bytes"]
    rec = {"gpu": g, "numa": label, "node": node["node"] if node else None, "bytes": nbytes, "error": None}
    old = os.sched_getaffinity(0)
    host = None
    try:
        if node:
            cpus = set(node["cpus"]) & set(old)
            if not cpus:
                raise RuntimeError("no CPU of NUMA node %s is allowed to this process" % node["node"])
            os.sched_setaffinity(0, cpus)
        with torch.cuda.device(g):
            host = _host_buffer(torch, nbytes)
            dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % g)
            for direction, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
                ms = _event_times(torch, g, lambda: dst.copy_(src, non_blocking=True), cfg["copy_iterations"])
                rec[direction] = {"gbps": nbytes / (_median(ms) / 1000.0) / 1e9,
                                  "best_gbps": nbytes / (min(ms) / 1000.0) / 1e9}
            del dev
    except Exception as e:
        rec["error"] = _err(e)
    finally:
        if host is not None:
            try:
                torch.cuda.synchronize(g)
                torch.cuda.cudart().cudaHostUnregister(host.data_ptr())
            except Exception:
                pass
        os.sched_setaffinity(0, old)
    return rec


def memory_copy(torch, g, cfg):
    rec = {"gpu": g, "error": None}
    try:
        free, _total = torch.cuda.mem_get_info(g)
        n = min(cfg["memory_bytes"], free // 4)
        a = torch.empty(n, dtype=torch.uint8, device="cuda:%d" % g).fill_(1)
        b = torch.empty_like(a)
        ms = _event_times(torch, g, lambda: b.copy_(a), cfg["copy_iterations"])
        rec["bytes"] = n
        rec["gbps"] = 2.0 * n / (_median(ms) / 1000.0) / 1e9
        del a, b
        torch.cuda.empty_cache()
    except Exception as e:
        rec["error"] = _err(e)
    return rec


def peer_copy(torch, a, b, cfg):
    rec = {"src": a, "dst": b, "error": None}
    try:
        rec["access"] = bool(torch.cuda.can_device_access_peer(a, b))
        n = cfg["p2p_bytes"]
        src = torch.empty(n, dtype=torch.uint8, device="cuda:%d" % a).fill_(1)
        dst = torch.empty(n, dtype=torch.uint8, device="cuda:%d" % b)
        reps = 5

        def sync():
            torch.cuda.synchronize(a)
            torch.cuda.synchronize(b)

        dst.copy_(src)
        sync()
        times = []
        for _ in range(cfg["copy_iterations"]):
            t0 = time.perf_counter()
            for _ in range(reps):
                dst.copy_(src, non_blocking=True)
            sync()
            times.append((time.perf_counter() - t0) / reps)
        rec["gbps"] = n / _median(times) / 1e9
        small_src = torch.ones(cfg["latency_bytes"], dtype=torch.uint8, device="cuda:%d" % a)
        small_dst = torch.empty(cfg["latency_bytes"], dtype=torch.uint8, device="cuda:%d" % b)
        small_dst.copy_(small_src)
        sync()
        lat = []
        for _ in range(cfg["latency_iterations"]):
            t0 = time.perf_counter()
            small_dst.copy_(small_src)
            sync()
            lat.append(time.perf_counter() - t0)
        rec["latency_us"] = _median(lat) * 1e6
        del src, dst, small_src, small_dst
        torch.cuda.empty_cache()
    except Exception as e:
        rec["error"] = _err(e)
    return rec


def measure_bandwidth(torch, gpus, devices, cfg):
    bw = {"host": [], "p2p": [], "memory": [], "remote_note": None, "error": None,
          "remote_buffer": bool(cfg.get("remote_buffer"))}
    try:
        nodes = numa_nodes()
        allowed = os.sched_getaffinity(0)
        usable = [n for n in nodes if set(n["cpus"]) & allowed]
        bw["numa_nodes"] = [n["node"] for n in nodes]
        if len(usable) < 2:
            bw["remote_note"] = ("no remote NUMA node: the host has one NUMA node" if len(nodes) < 2
                                 else "no remote NUMA node: this process may run on one node only")
        for g in gpus:
            local_id = devices[g].get("numa_node")
            if local_id is None and len(nodes) == 1:
                local_id = nodes[0]["node"]
            local = next((n for n in usable if n["node"] == local_id), None)
            remote = next((n for n in usable if n["node"] != local_id), None) if local is not None else None
            if local is not None and remote is None and len(usable) >= 2:
                bw["remote_note"] = "GPU %d: no remote NUMA node to copy from" % g
            if local is None and len(usable) >= 2:
                bw["remote_note"] = "GPU %d: its NUMA node is unknown, local and remote cannot be told apart" % g
            if cfg.get("remote_buffer"):
                if remote is None:
                    bw["remote_note"] = "remote buffer requested but there is no remote NUMA node"
                    bw["host"].append({"gpu": g, "numa": "local", "node": None, "error": "no remote NUMA node"})
                else:
                    bw["host"].append(host_copies(torch, g, remote, "local", cfg))
                continue
            bw["host"].append(host_copies(torch, g, local, "local", cfg))
            if remote is not None:
                bw["host"].append(host_copies(torch, g, remote, "remote", cfg))
        for g in gpus:
            bw["memory"].append(memory_copy(torch, g, cfg))
        for a in gpus:
            for b in gpus:
                if a != b:
                    bw["p2p"].append(peer_copy(torch, a, b, cfg))
    except Exception as e:
        bw["error"] = _err(e)
    return bw


def _clock_sampler(nv, h, stop, out, interval):
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    t0 = time.perf_counter()
    while not stop.wait(interval):
        mw = _nv(nv.nvmlDeviceGetPowerUsage, h)[0]
        out.append({
            "t": round(time.perf_counter() - t0, 2),
            "sm_mhz": _nv(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)[0],
            "power_w": mw / 1000.0 if mw is not None else None,
            "reasons": _nv(reasons, h)[0],
            "temp_c": _nv(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)[0],
        })


def burn_in_worker(rank, gpus, cfg, tmpdir, nvml_ids=None):
    import threading

    import torch

    g = gpus[rank]
    res = {"gpu": g, "iterations": 0, "checks": 0, "mismatches": 0, "first_mismatch_iteration": None,
           "batch_ms": [], "batch_size": 50, "error": None}
    try:
        torch.use_deterministic_algorithms(True)
        torch.cuda.set_device(g)
        n = cfg["gemm_n"]
        gen = torch.Generator(device="cuda:%d" % g).manual_seed(cfg["seed"])
        a = torch.randn(n, n, device="cuda:%d" % g, dtype=torch.bfloat16, generator=gen)
        b = torch.randn(n, n, device="cuda:%d" % g, dtype=torch.bfloat16, generator=gen)
        ref = a @ b
        c = torch.empty_like(ref)
        torch.cuda.synchronize(g)
        ids = (nvml_ids or {}).get(str(g)) or {}
        nv, nv_err = nvml_open()
        h = nvml_handle(nv, ids.get("uuid"), ids.get("pci_bus_id"))
        samples, stop = [], threading.Event()
        if h is not None:
            res["max_sm_mhz"] = _nv(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)[0]
            mw = _nv(nv.nvmlDeviceGetEnforcedPowerLimit, h)[0]
            res["power_limit_w"] = mw / 1000.0 if mw else None
            interval = cfg.get("sample_seconds", 0.5)
            sampler = threading.Thread(target=_clock_sampler, args=(nv, h, stop, samples, interval), daemon=True)
            sampler.start()
        else:
            res["sampler_error"] = nv_err or "no NVML handle for GPU %d" % g
        deadline = time.perf_counter() + cfg["burn_in_seconds"]
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        bs = res["batch_size"]
        while time.perf_counter() < deadline:
            start.record()
            for _ in range(bs):
                torch.matmul(a, b, out=c)
            end.record()
            end.synchronize()
            res["iterations"] += bs
            res["batch_ms"].append(start.elapsed_time(end) / bs)
            res["checks"] += 1
            if not torch.equal(c, ref):
                res["mismatches"] += 1
                if res["first_mismatch_iteration"] is None:
                    res["first_mismatch_iteration"] = res["iterations"]
        stop.set()
        res["samples"] = samples
        res["gemm_n"] = n
    except Exception as e:
        res["error"] = _err(e)
    _write(os.path.join(tmpdir, "burn_in_gpu%d.json" % g), res)


def _run_spawned(torch, fn, args, nprocs, timeout_s):
    import torch.multiprocessing as mp

    ctx = mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.time() + timeout_s
    try:
        while not ctx.join(timeout=1):
            if time.time() > deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                return "timed out after %ds" % timeout_s
    except Exception as e:
        return _err(e)
    return None


def main():
    with open(sys.argv[1]) as fh:
        cfg = json.load(fh)
    report = {"program_version": cfg["program_version"], "config": cfg, "fatal": None, "gpus": []}
    result_path = cfg["result_path"]
    try:
        import torch
    except Exception as e:
        msg = "PyTorch is not importable by %s (%s)" % (sys.executable, _err(e))
        report["fatal"] = {"kind": "no_torch", "message": msg}
        _write(result_path, report)
        return 0
    report["torch_version"] = torch.__version__
    report["cuda_version"] = torch.version.cuda
    try:
        report["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    except Exception:
        report["nccl_version"] = None
    try:
        report["cudnn_version"] = torch.backends.cudnn.version()
    except Exception:
        report["cudnn_version"] = None
    if not torch.version.cuda:
        report["fatal"] = {"kind": "no_cuda", "message": "PyTorch %s was built without CUDA" % torch.__version__}
        _write(result_path, report)
        return 0
    if not torch.cuda.is_available():
        msg = "torch.cuda.is_available() is False (no GPU or no working driver)"
        report["fatal"] = {"kind": "no_cuda", "message": msg}
        _write(result_path, report)
        return 0
    count = torch.cuda.device_count()
    report["device_count"] = count
    gpus = cfg["gpus"] if cfg["gpus"] is not None else list(range(count))
    bad = [g for g in gpus if g >= count]
    if not gpus or bad:
        report["fatal"] = {"kind": "no_gpu", "message": "requested GPU(s) %s, CUDA sees %d" % (gpus, count)}
        _write(result_path, report)
        return 0
    nv, nv_err = nvml_open()
    devices, handles = {}, {}
    for g in gpus:
        try:
            devices[g], handles[g] = device_info(torch, nv, g)
        except Exception as e:
            devices[g], handles[g] = {"index": g, "error": _err(e)}, None
    report["devices"] = [devices[g] for g in gpus]
    health = {"error": None if nv is not None else "pynvml: %s" % nv_err, "before": {}, "after": {}}
    report["health"] = health
    for g in gpus:
        if handles[g] is not None:
            health["before"][str(g)] = health_snapshot(nv, handles[g], devices[g]["nvlink"]["links"])
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    first = gpus[0]
    for g in gpus:
        p = torch.cuda.get_device_properties(g)
        entry = {"index": g, "name": p.name, "uuid": str(getattr(p, "uuid", "")) or None,
                 "total_memory_mib": p.total_memory // (1024 * 1024), "rounds": [], "error": None}
        for r in range(1, cfg["rounds"] + 1):
            entry["rounds"].append(four_step(torch, g, cfg, r, "rounds", cfg.get("perturb_round") == r and g == first))
        report["gpus"].append(entry)
    _write(result_path, report)

    tmpdir = os.path.dirname(result_path)
    world = len(gpus)
    coll = {"world_size": world, "mode": "multi_gpu" if world >= 2 else "single_rank", "error": None, "ranks": []}
    if world < 2:
        coll["note"] = "one GPU: NCCL all_reduce ran as a one-rank group; the multi-GPU all_reduce needs 2+ GPUs"
    t0 = time.perf_counter()
    coll["error"] = _run_spawned(torch, allreduce_worker, (world, gpus, cfg, tmpdir), world,
                                 cfg["collective_timeout"] + 120)
    coll["wall_ms"] = _ms(t0)
    for rank in range(world):
        path = os.path.join(tmpdir, "allreduce_rank%d.json" % rank)
        if os.path.exists(path):
            with open(path) as fh:
                coll["ranks"].append(json.load(fh))
    report["collective"] = coll
    _write(result_path, report)

    if cfg.get("bandwidth"):
        torch.use_deterministic_algorithms(False)
        report["bandwidth"] = measure_bandwidth(torch, gpus, devices, cfg)
        torch.use_deterministic_algorithms(True)
        _write(result_path, report)

    if cfg.get("burn_in"):
        burn = {"seconds": cfg["burn_in_seconds"], "gpus": [], "error": None}
        ids = {str(g): {"uuid": devices[g].get("uuid"), "pci_bus_id": devices[g].get("pci_bus_id")} for g in gpus}
        burn["error"] = _run_spawned(torch, burn_in_worker, (gpus, cfg, tmpdir, ids), world,
                                     cfg["burn_in_seconds"] + 300)
        for g in gpus:
            path = os.path.join(tmpdir, "burn_in_gpu%d.json" % g)
            if os.path.exists(path):
                with open(path) as fh:
                    burn["gpus"].append(json.load(fh))
        report["burn_in"] = burn
        for entry in report["gpus"]:
            g = entry["index"]
            entry["rounds"].append(four_step(torch, g, cfg, cfg["rounds"] + 1, "after_burn_in", False))
    for g in gpus:
        if handles[g] is not None:
            health["after"][str(g)] = health_snapshot(nv, handles[g], devices[g]["nvlink"]["links"])
    _write(result_path, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
"""
