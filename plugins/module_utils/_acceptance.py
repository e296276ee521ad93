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
result must stay bit-identical, then one more four-step round.

:func:`evaluate` decides: any non-determinism across rounds (or between GPUs of the same
model), a wrong or missing collective result, a missing round, or an error rejects the
node. Nothing is averaged away.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import shutil
import signal
import subprocess
import tempfile

from ansible_collections.stacktune.gpu.plugins.module_utils._stats import summarize

PROGRAM_VERSION = 1
MIN_ROUNDS = 3

LEVELS = {
    # quick: the smallest check, three rounds, a one-element all_reduce.
    "quick": {
        "rounds": 3,
        "model": {"batch": 8, "in_features": 16, "hidden": 32, "out_features": 8},
        "allreduce_numel": 1,
        "burn_in": False,
    },
    # standard: a larger model and a 16 MiB all_reduce, three rounds.
    "standard": {
        "rounds": 3,
        "model": {"batch": 64, "in_features": 128, "hidden": 256, "out_features": 16},
        "allreduce_numel": 4 * 1024 * 1024,
        "burn_in": False,
    },
    # burn_in: many rounds, a sustained GEMM on every GPU at once, then one more round.
    "burn_in": {
        "rounds": 10,
        "model": {"batch": 64, "in_features": 128, "hidden": 256, "out_features": 16},
        "allreduce_numel": 4 * 1024 * 1024,
        "burn_in": True,
    },
}

DEFAULT_BURN_IN_SECONDS = 300
DEFAULT_GEMM_N = 8192
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
):
    """The configuration the program reads. Raises ValueError naming the bad option."""
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


def evaluate(report):
    """Decide accept/reject from a program report. Returns {accepted, rejections, summary}."""
    msg = fatal_message(report)
    if msg:
        return {"accepted": False, "rejections": [_rej("no_gpu", "host", msg)], "summary": msg}
    cfg = report.get("config") or {}
    expected_rounds = int(cfg.get("rounds") or MIN_ROUNDS)
    rejections = []
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
    accepted = not rejections
    if accepted:
        summary = "accepted: %d GPU(s), %d rounds, all results bit-identical, all_reduce over %d rank(s) exact" % (
            len(gpus),
            expected_rounds,
            (report.get("collective") or {}).get("world_size", 0),
        )
    else:
        checks = sorted({r["check"] for r in rejections})
        summary = "rejected: %d problem(s) (%s)" % (len(rejections), ", ".join(checks))
    return {"accepted": accepted, "rejections": rejections, "summary": summary}


def program_env(overrides=None, base=None):
    """Environment for the program: the current one, the defaults above, then overrides."""
    env = dict(os.environ if base is None else base)
    env.update(DEFAULT_ENV)
    env.update({str(k): str(v) for k, v in (overrides or {}).items()})
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_program(python, config, env, timeout):
    """Run PROGRAM with ``python`` in a private temporary folder (mode 0700; program and
    config files mode 0600; argv list, no shell). Returns rc, stdout, stderr, report (the
    parsed JSON report or None) and timed_out. The folder is removed afterwards."""
    tmpdir = tempfile.mkdtemp(prefix="stacktune-acceptance-")
    try:
        os.chmod(tmpdir, 0o700)
        fd, prog = tempfile.mkstemp(prefix="acceptance_", suffix=".py", dir=tmpdir)
        with os.fdopen(fd, "w") as fh:
            fh.write(PROGRAM)
        config = dict(config)
        config["result_path"] = os.path.join(tmpdir, "report.json")
        fd, cfg_path = tempfile.mkstemp(prefix="config_", suffix=".json", dir=tmpdir)
        with os.fdopen(fd, "w") as fh:
            json.dump(config, fh)
        proc = subprocess.Popen(
            [python, prog, cfg_path],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=tmpdir,
            start_new_session=True,
        )
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            out, err = proc.communicate()
        report = None
        if os.path.exists(config["result_path"]):
            with open(config["result_path"]) as fh:
                report = json.load(fh)
        return {
            "rc": proc.returncode,
            "stdout": out.decode("utf-8", "replace"),
            "stderr": err.decode("utf-8", "replace"),
            "report": report,
            "timed_out": timed_out,
        }
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def decide(run, timeout):
    """Turn a run_program result into (fatal message or None, decision or None)."""
    report = run["report"]
    tail = (run["stderr"] or run["stdout"])[-2000:]
    if report is None:
        why = "timed out after %ds" % timeout if run["timed_out"] else "no report"
        return "%s (rc=%s): %s" % (why, run["rc"], tail.strip()), None
    fatal = fatal_message(report)
    if fatal:
        return fatal, None
    decision = evaluate(report)
    if run["timed_out"]:
        decision["accepted"] = False
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
        g["gemm_ms"] = summarize(samples) if samples else None
        n = g.get("gemm_n")
        if samples and n:
            g["tflops_median"] = 2.0 * n**3 / (g["gemm_ms"]["p50_ms"] / 1000.0) / 1e12
        gpus.append(g)
    out["gpus"] = gpus
    return out


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


def burn_in_worker(rank, gpus, cfg, tmpdir):
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

    if cfg.get("burn_in"):
        burn = {"seconds": cfg["burn_in_seconds"], "gpus": [], "error": None}
        burn["error"] = _run_spawned(torch, burn_in_worker, (gpus, cfg, tmpdir), world,
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
    _write(result_path, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
"""
