# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The accept/reject decision over acceptance-program reports.

Reports are in the program's own shape. The base report below is built like the one the
program returned on the H200 test host (1 GPU, level standard, torch 2.11.0+cu130); each
test changes one thing the way a faulty node would.
"""

import copy
import json
import os
import stat
import sys

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils import _acceptance as acc

FWD = "4f1d8e0a" * 8
GRAD = "9be0c77d" * 8


def four_step(round_no, fwd=FWD, grad=GRAD, zeros=0.0, loss=1.0126340389251709, phase="rounds"):
    return {
        "round": round_no,
        "phase": phase,
        "error": None,
        "zeros_item": zeros,
        "forward_sha256": fwd,
        "grad_sha256": grad,
        "loss": loss,
        "loss_hex": float(loss).hex(),
        "timings_ms": {"zeros": 0.05, "forward": 0.21, "backward": 0.44, "total": 2.1},
    }


def ar_rank(rank, world, rounds=3, numel=4 * 1024 * 1024):
    expected = world * (world + 1) / 2.0
    return {
        "rank": rank,
        "gpu": rank,
        "error": None,
        "rounds": [
            {
                "round": r,
                "calls": [
                    {
                        "call": c,
                        "numel": numel,
                        "error": None,
                        "ms": 0.3,
                        "sum": expected * numel,
                        "min": expected,
                        "max": expected,
                        "expected_value": expected,
                    }
                    for c in (1, 2, 3)
                ],
            }
            for r in range(1, rounds + 1)
        ],
    }


def report(n_gpus=1, level="standard", **cfg_over):
    cfg = acc.build_config(level=level, **cfg_over)
    return {
        "program_version": 1,
        "config": cfg,
        "fatal": None,
        "torch_version": "2.11.0+cu130",
        "cuda_version": "13.0",
        "nccl_version": "2.28.3",
        "device_count": n_gpus,
        "gpus": [
            {
                "index": i,
                "name": "NVIDIA H200",
                "uuid": "GPU-%d" % i,
                "rounds": [four_step(r) for r in range(1, cfg["rounds"] + 1)],
                "error": None,
            }
            for i in range(n_gpus)
        ],
        "collective": {
            "world_size": n_gpus,
            "mode": "multi_gpu" if n_gpus >= 2 else "single_rank",
            "error": None,
            "ranks": [ar_rank(r, n_gpus, cfg["rounds"], cfg["allreduce_numel"]) for r in range(n_gpus)],
        },
    }


def checks(decision):
    return sorted({r["check"] for r in decision["rejections"]})


def test_healthy_single_gpu_report_is_accepted():
    d = acc.evaluate(report())
    assert d == {
        "accepted": True,
        "rejections": [],
        "summary": "accepted: 1 GPU(s), 3 rounds, all results bit-identical, all_reduce over 1 rank(s) exact",
    }


def test_healthy_eight_gpu_report_is_accepted():
    assert acc.evaluate(report(8))["accepted"] is True


def test_forward_hash_differing_in_round_3_rejects():
    rep = report()
    rep["gpus"][0]["rounds"][2] = four_step(3, fwd="0" * 64)
    d = acc.evaluate(rep)
    assert d["accepted"] is False
    assert checks(d) == ["forward_determinism"]
    rej = d["rejections"][0]
    assert rej["round"] == 3 and rej["subject"] == "gpu0"
    assert rej["evidence"]["reference_round"] == 1
    assert rej["evidence"]["reference_sha256"] == FWD
    assert rej["evidence"]["round_sha256"] == "0" * 64


def test_gradient_only_difference_rejects():
    rep = report()
    rep["gpus"][0]["rounds"][1]["grad_sha256"] = "1" * 64
    d = acc.evaluate(rep)
    assert checks(d) == ["backward_determinism"]


def test_zeros_roundtrip_not_zero_rejects():
    rep = report()
    rep["gpus"][0]["rounds"][0]["zeros_item"] = 1.5e-45
    assert checks(acc.evaluate(rep)) == ["zeros_roundtrip"]


def test_nan_loss_rejects():
    rep = report()
    for r in rep["gpus"][0]["rounds"]:
        r["loss"] = float("nan")
    assert checks(acc.evaluate(rep)) == ["loss_not_finite"]


def test_missing_round_rejects():
    rep = report()
    del rep["gpus"][0]["rounds"][2]
    d = acc.evaluate(rep)
    assert checks(d) == ["missing_rounds"]
    assert d["rejections"][0]["evidence"] == {"completed": 2, "expected": 3}


def test_round_error_rejects():
    rep = report()
    rep["gpus"][0]["rounds"][1] = {"round": 2, "error": "RuntimeError: CUDA error: an illegal memory access"}
    d = acc.evaluate(rep)
    assert checks(d) == ["round_error"]


def test_gpu_computing_differently_from_its_siblings_rejects():
    rep = report(4)
    for r in rep["gpus"][2]["rounds"]:
        r["forward_sha256"] = "e" * 64
    d = acc.evaluate(rep)
    assert checks(d) == ["cross_gpu_determinism"]
    assert d["rejections"][0]["subject"] == "gpu2"


def test_different_gpu_models_are_not_compared():
    rep = report(2)
    rep["gpus"][1]["name"] = "NVIDIA L40S"
    for r in rep["gpus"][1]["rounds"]:
        r["forward_sha256"] = "e" * 64
    assert acc.evaluate(rep)["accepted"] is True


def test_wrong_all_reduce_sum_in_last_call_rejects():
    rep = report(4)
    call = rep["collective"]["ranks"][3]["rounds"][2]["calls"][2]
    call["sum"] -= 10.0
    call["min"] = 0.0
    d = acc.evaluate(rep)
    assert checks(d) == ["allreduce_result"]
    rej = d["rejections"][0]
    assert rej["subject"] == "rank3" and rej["round"] == 3
    assert rej["evidence"]["expected_value"] == 10.0
    assert rej["evidence"]["expected_sum"] == 10.0 * 4 * 1024 * 1024


def test_silently_dropped_rank_rejects():
    rep = report(8)
    del rep["collective"]["ranks"][5]
    d = acc.evaluate(rep)
    assert checks(d) == ["allreduce_missing_rank"]
    assert d["rejections"][0]["subject"] == "rank5"


def test_rank_missing_its_last_call_rejects():
    rep = report(2)
    del rep["collective"]["ranks"][1]["rounds"][2]["calls"][2]
    assert checks(acc.evaluate(rep)) == ["allreduce_missing_calls"]


def test_world_size_smaller_than_gpus_rejects():
    rep = report(2)
    rep["collective"]["world_size"] = 1
    rep["collective"]["ranks"] = rep["collective"]["ranks"][:1]
    d = acc.evaluate(rep)
    assert "allreduce_world_size" in checks(d)


def test_collective_error_rejects():
    rep = report(2)
    rep["collective"]["error"] = "timed out after 420s"
    assert "allreduce_error" in checks(acc.evaluate(rep))
    rep = report(2)
    rep["collective"] = None
    assert checks(acc.evaluate(rep)) == ["allreduce_missing"]


def test_single_rank_expectation_is_one():
    rep = report(1, level="quick")
    call = rep["collective"]["ranks"][0]["rounds"][0]["calls"][0]
    assert call["min"] == call["max"] == 1.0 and call["sum"] == 1.0
    assert acc.evaluate(rep)["accepted"] is True


def test_burn_in_mismatch_and_missing_gpu_reject():
    rep = report(2, level="burn_in", rounds=3, burn_in_seconds=10)
    for g in rep["gpus"]:
        g["rounds"].append(four_step(4, phase="after_burn_in"))
    rep["burn_in"] = {
        "seconds": 10,
        "error": None,
        "gpus": [
            {
                "gpu": 0,
                "iterations": 6000,
                "checks": 120,
                "mismatches": 0,
                "first_mismatch_iteration": None,
                "error": None,
            }
        ],
    }
    assert checks(acc.evaluate(rep)) == ["burn_in_missing"]
    rep["burn_in"]["gpus"].append(
        {"gpu": 1, "iterations": 6000, "checks": 120, "mismatches": 2, "first_mismatch_iteration": 4150, "error": None}
    )
    d = acc.evaluate(rep)
    assert checks(d) == ["burn_in_mismatch"]
    assert d["rejections"][0]["evidence"]["first_mismatch_iteration"] == 4150
    rep["burn_in"]["gpus"][1]["mismatches"] = 0
    assert acc.evaluate(rep)["accepted"] is True


def test_burn_in_needs_the_round_after_burn_in():
    rep = report(1, level="burn_in", rounds=3)
    rep["burn_in"] = {
        "seconds": 300,
        "error": None,
        "gpus": [{"gpu": 0, "iterations": 10, "checks": 1, "mismatches": 0, "error": None}],
    }
    assert checks(acc.evaluate(rep)) == ["missing_rounds"]


@pytest.mark.parametrize(
    ("fatal", "message"),
    [
        ({"kind": "no_torch", "message": "PyTorch is not importable by /usr/bin/python3"}, "PyTorch is not importable"),
        ({"kind": "no_cuda", "message": "torch.cuda.is_available() is False"}, "is_available() is False"),
        ({"kind": "no_gpu", "message": "requested GPU(s) [3], CUDA sees 1"}, "CUDA sees 1"),
    ],
)
def test_no_gpu_is_never_a_pass(fatal, message):
    rep = {"program_version": 1, "config": acc.build_config(), "fatal": fatal, "gpus": []}
    msg = acc.fatal_message(rep)
    assert msg.startswith("no GPU to accept: ") and message in msg
    d = acc.evaluate(rep)
    assert d["accepted"] is False and checks(d) == ["no_gpu"]
    assert acc.fatal_message(None).startswith("no GPU to accept")
    assert acc.fatal_message({"fatal": None, "gpus": []}).startswith("no GPU to accept")


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"level": "smoke"}, "level must be one of"),
        ({"rounds": 2}, "rounds must be a whole number >= 3"),
        ({"gpus": [0, 0]}, "twice"),
        ({"gpus": [-1]}, "indices"),
        ({"perturb_round": 4}, "perturb_round must be between 1 and rounds (3)"),
        ({"burn_in_seconds": 0}, "burn_in_seconds must be positive"),
    ],
)
def test_build_config_rejects(kwargs, needle):
    with pytest.raises(ValueError) as exc:
        acc.build_config(**kwargs)
    assert needle in str(exc.value)


def test_levels():
    q, s, b = (acc.build_config(level=x) for x in ("quick", "standard", "burn_in"))
    assert q["rounds"] == s["rounds"] == 3 and b["rounds"] > 3
    assert q["allreduce_numel"] < s["allreduce_numel"]
    assert q["model"]["hidden"] < s["model"]["hidden"]
    assert (q["burn_in"], s["burn_in"], b["burn_in"]) == (False, False, True)
    assert b["burn_in_seconds"] == 300 and s["burn_in_seconds"] == 0
    assert all(c["allreduce_calls"] == 3 for c in (q, s, b))


def test_program_env_defaults_and_overrides():
    env = acc.program_env(base={"PATH": "/usr/bin"})
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["PATH"] == "/usr/bin"
    env = acc.program_env({"NCCL_NVLS_ENABLE": 1, "NCCL_DEBUG": "WARN"}, base={})
    assert env["NCCL_NVLS_ENABLE"] == "1" and env["NCCL_DEBUG"] == "WARN"


def test_decide_timeout_rejects_even_with_a_clean_partial_report():
    run = {"rc": -9, "stdout": "", "stderr": "", "report": report(), "timed_out": True}
    fatal, d = acc.decide(run, 60)
    assert fatal is None and d["accepted"] is False
    assert checks(d) == ["timeout"]
    crashed = {"rc": 1, "stdout": "", "stderr": "Segmentation fault", "report": None, "timed_out": False}
    fatal, d = acc.decide(crashed, 60)
    assert d is None and "no report (rc=1): Segmentation fault" in fatal


def test_summarize_burn_in_uses_the_shared_stats():
    burn = {"gpus": [{"gpu": 0, "gemm_n": 8192, "batch_ms": [1.6, 1.7, 1.65, 1.62], "iterations": 200}]}
    out = acc.summarize_burn_in(burn)
    g = out["gpus"][0]
    assert "batch_ms" not in g
    assert g["gemm_ms"]["p50_ms"] == pytest.approx(1.635)
    assert g["tflops_median"] == pytest.approx(2 * 8192**3 / 1.635e-3 / 1e12)
    assert burn["gpus"][0]["batch_ms"]  # input untouched


def test_program_compiles_and_without_torch_says_no_gpu():
    compile(acc.PROGRAM, "acceptance_program", "exec")
    # The real program in a real interpreter that lacks PyTorch must yield "no GPU to accept".
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("this interpreter has torch")
    run = acc.run_program(sys.executable, acc.build_config(level="quick"), acc.program_env(), 60)
    fatal, d = acc.decide(run, 60)
    assert d is None
    assert fatal.startswith("no GPU to accept: PyTorch is not importable by ")


def test_run_program_files_are_private_and_removed(tmp_path, monkeypatch):
    seen = {}
    real_popen = acc.subprocess.Popen

    def spy(argv, **kw):
        prog, cfg = argv[1], argv[2]
        seen["modes"] = (stat.S_IMODE(os.stat(prog).st_mode), stat.S_IMODE(os.stat(cfg).st_mode))
        seen["dir_mode"] = stat.S_IMODE(os.stat(os.path.dirname(prog)).st_mode)
        seen["dir"] = os.path.dirname(prog)
        seen["argv0"] = argv[0]
        return real_popen([sys.executable, "-c", "pass"], **kw)

    monkeypatch.setattr(acc.subprocess, "Popen", spy)
    run = acc.run_program("/opt/torch/python", acc.build_config(), {"PATH": os.environ.get("PATH", "")}, 30)
    assert seen["modes"] == (0o600, 0o600)
    assert seen["dir_mode"] == 0o700
    assert seen["argv0"] == "/opt/torch/python"
    assert not os.path.exists(seen["dir"])
    assert run["report"] is None and run["rc"] == 0


def test_perturbed_report_copy_is_rejected_only_for_that_round():
    rep = report(1, perturb_round=2)
    bad = copy.deepcopy(rep)
    bad["gpus"][0]["rounds"][1].update(forward_sha256="a" * 64, grad_sha256="b" * 64, perturbed=True)
    call = bad["collective"]["ranks"][0]["rounds"][1]["calls"][2]
    call.update(sum=call["sum"] + 1.0, max=2.0)
    d = acc.evaluate(bad)
    assert checks(d) == ["allreduce_result", "backward_determinism", "forward_determinism"]
    assert {r["round"] for r in d["rejections"]} == {2}
    assert acc.evaluate(rep)["accepted"] is True


# Reports the program returned on the H200 test host (torch 2.11.0+cu130, driver 580.159.04,
# 1 GPU), stored as returned (burn-in per-iteration times cut to 20 samples).
RECORDED = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "acceptance")


def recorded(name):
    with open(os.path.join(RECORDED, "h200_%s.json" % name)) as fh:
        return json.load(fh)


@pytest.mark.parametrize("name", ["standard", "quick", "burn_in_short"])
def test_recorded_h200_reports_are_accepted(name):
    rep = recorded(name)
    d = acc.evaluate(rep)
    assert d["accepted"] is True, d["rejections"]
    assert rep["collective"]["mode"] == "single_rank"
    assert "needs 2+ GPUs" in rep["collective"]["note"]


def test_recorded_h200_perturbed_round_2_is_rejected_for_round_2_only():
    rep = recorded("standard_perturb2")
    d = acc.evaluate(rep)
    assert d["accepted"] is False
    assert checks(d) == ["allreduce_result", "backward_determinism", "forward_determinism"]
    assert {r["round"] for r in d["rejections"]} == {2}
    ar = next(r for r in d["rejections"] if r["check"] == "allreduce_result")
    assert ar["evidence"]["max"] == 2.0 and ar["evidence"]["expected_value"] == 1.0


def test_recorded_report_with_one_flipped_hash_is_rejected():
    rep = recorded("standard")
    h = rep["gpus"][0]["rounds"][2]["grad_sha256"]
    rep["gpus"][0]["rounds"][2]["grad_sha256"] = ("0" if h[0] != "0" else "1") + h[1:]
    d = acc.evaluate(rep)
    assert checks(d) == ["backward_determinism"]


def test_recorded_burn_in_summary():
    out = acc.summarize_burn_in(recorded("burn_in_short")["burn_in"])
    g = out["gpus"][0]
    assert g["mismatches"] == 0 and g["iterations"] > 0
    assert g["gemm_ms"]["count"] == 20
    assert 100 < g["tflops_median"] < 2000
