# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Acceptance of a new GPU node: the torch program it runs and the decision over its results.

The program (``acceptance/host/program.py``) runs in a separate interpreter that has PyTorch; the
rest of this package only needs the stdlib. For every selected GPU and every round it does the four-step check:
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
clocks under load by the rules in :mod:`hardware/health.py`. The verdict is pass, warn or reject.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math


from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance.judging import (
    evaluate_bandwidth,
    evaluate_clocks,
    evaluate_health,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance.limits import (
    MEMORY_BANDWIDTH_GBPS,
    validate_thresholds,
)

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


def rejection(check, subject, message, evidence=None, round_no=None):
    return {"check": check, "subject": subject, "round": round_no, "message": message, "evidence": evidence or {}}


def _evaluate_gpu(gpu, expected_rounds, rejections):
    subj = "gpu%s" % gpu.get("index")
    rounds = gpu.get("rounds") or []
    if gpu.get("error"):
        rejections.append(rejection("gpu_error", subj, "GPU check failed: %s" % gpu["error"], {"error": gpu["error"]}))
    if len(rounds) < expected_rounds:
        rejections.append(
            rejection(
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
                rejection("round_error", subj, "round %s failed: %s" % (rn, r["error"]), {"error": r["error"]}, rn)
            )
            continue
        z = r.get("zeros_item")
        if z != 0:
            rejections.append(
                rejection(
                    "zeros_roundtrip",
                    subj,
                    "torch.zeros(1).cuda().cpu().item() returned %r, not 0" % (z,),
                    {"value": z},
                    rn,
                )
            )
        loss = r.get("loss")
        if not isinstance(loss, (int, float)) or isinstance(loss, bool) or not math.isfinite(loss):
            rejections.append(rejection("loss_not_finite", subj, "loss is %r" % (loss,), {"loss": loss}, rn))
        if reference is None:
            reference = r
            continue
        for key, check, what in (
            ("forward_sha256", "forward_determinism", "forward output"),
            ("grad_sha256", "backward_determinism", "gradients"),
        ):
            if r.get(key) != reference.get(key):
                rejections.append(
                    rejection(
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
                    rejection(
                        "cross_gpu_determinism",
                        "gpu%s" % gpu.get("index"),
                        "forward output differs from %d other %s GPU(s)" % (counts[majority], name),
                        {"sha256": ref.get("forward_sha256"), "majority_sha256": majority},
                    )
                )


def _evaluate_collective(coll, gpu_indices, expected_rounds, calls_per_round, rejections):
    if not coll:
        rejections.append(rejection("allreduce_missing", "host", "no all_reduce result was returned"))
        return
    if coll.get("error"):
        rejections.append(
            rejection("allreduce_error", "host", "all_reduce failed: %s" % coll["error"], {"error": coll["error"]})
        )
    world = coll.get("world_size") or 0
    if world != len(gpu_indices):
        rejections.append(
            rejection(
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
            rejections.append(
                rejection("allreduce_missing_rank", subj, "rank %d returned no result (dropped rank)" % rank)
            )
            continue
        if r.get("error"):
            rejections.append(
                rejection("allreduce_error", subj, "rank %d failed: %s" % (rank, r["error"]), {"error": r["error"]})
            )
        rounds = r.get("rounds") or []
        if len(rounds) < expected_rounds:
            rejections.append(
                rejection(
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
                    rejection(
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
                        rejection(
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
        rejections.append(rejection("burn_in_missing", "host", "burn-in returned no result"))
        return
    if burn.get("error"):
        rejections.append(
            rejection("burn_in_error", "host", "burn-in failed: %s" % burn["error"], {"error": burn["error"]})
        )
    seen = {g.get("gpu"): g for g in burn.get("gpus") or []}
    for idx in gpu_indices:
        subj = "gpu%s" % idx
        g = seen.get(idx)
        if g is None:
            rejections.append(rejection("burn_in_missing", subj, "GPU %s returned no burn-in result" % idx))
            continue
        if g.get("error"):
            rejections.append(
                rejection("burn_in_error", subj, "burn-in failed: %s" % g["error"], {"error": g["error"]})
            )
        if g.get("mismatches"):
            rejections.append(
                rejection(
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
            rejections.append(rejection("burn_in_error", subj, "burn-in ran no GEMM iteration", {}))


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
            "rejections": [rejection("no_gpu", "host", msg)],
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
        target.append(rejection(p["check"], p["subject"], p["message"], p["evidence"]))
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


VERDICT_EXIT_CODES = {"pass": 0, "warn": 1, "reject": 2}
