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
import subprocess
import sys

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import judging as acc_judging
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import levels as acc_levels
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import limits as acc_limits
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import record as acc_record
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import runner as acc_runner

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
    cfg = acc_levels.build_config(level=level, **cfg_over)
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
    d = acc_levels.evaluate(report())
    assert d["accepted"] is True and d["verdict"] == "pass" and d["exit_code"] == 0
    assert d["rejections"] == [] and d["warnings"] == []
    assert d["summary"] == "accepted: 1 GPU(s), 3 rounds, all results bit-identical, all_reduce over 1 rank(s) exact"
    # a report without the bandwidth and health parts: not measured, never a failure
    assert "bandwidths not measured" in d["notes"]
    assert "memory and link health not measured" in d["notes"]


def test_healthy_eight_gpu_report_is_accepted():
    assert acc_levels.evaluate(report(8))["accepted"] is True


def test_forward_hash_differing_in_round_3_rejects():
    rep = report()
    rep["gpus"][0]["rounds"][2] = four_step(3, fwd="0" * 64)
    d = acc_levels.evaluate(rep)
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
    d = acc_levels.evaluate(rep)
    assert checks(d) == ["backward_determinism"]


def test_zeros_roundtrip_not_zero_rejects():
    rep = report()
    rep["gpus"][0]["rounds"][0]["zeros_item"] = 1.5e-45
    assert checks(acc_levels.evaluate(rep)) == ["zeros_roundtrip"]


def test_nan_loss_rejects():
    rep = report()
    for r in rep["gpus"][0]["rounds"]:
        r["loss"] = float("nan")
    assert checks(acc_levels.evaluate(rep)) == ["loss_not_finite"]


def test_missing_round_rejects():
    rep = report()
    del rep["gpus"][0]["rounds"][2]
    d = acc_levels.evaluate(rep)
    assert checks(d) == ["missing_rounds"]
    assert d["rejections"][0]["evidence"] == {"completed": 2, "expected": 3}


def test_round_error_rejects():
    rep = report()
    rep["gpus"][0]["rounds"][1] = {"round": 2, "error": "RuntimeError: CUDA error: an illegal memory access"}
    d = acc_levels.evaluate(rep)
    assert checks(d) == ["round_error"]


def test_gpu_computing_differently_from_its_siblings_rejects():
    rep = report(4)
    for r in rep["gpus"][2]["rounds"]:
        r["forward_sha256"] = "e" * 64
    d = acc_levels.evaluate(rep)
    assert checks(d) == ["cross_gpu_determinism"]
    assert d["rejections"][0]["subject"] == "gpu2"


def test_different_gpu_models_are_not_compared():
    rep = report(2)
    rep["gpus"][1]["name"] = "NVIDIA L40S"
    for r in rep["gpus"][1]["rounds"]:
        r["forward_sha256"] = "e" * 64
    assert acc_levels.evaluate(rep)["accepted"] is True


def test_wrong_all_reduce_sum_in_last_call_rejects():
    rep = report(4)
    call = rep["collective"]["ranks"][3]["rounds"][2]["calls"][2]
    call["sum"] -= 10.0
    call["min"] = 0.0
    d = acc_levels.evaluate(rep)
    assert checks(d) == ["allreduce_result"]
    rej = d["rejections"][0]
    assert rej["subject"] == "rank3" and rej["round"] == 3
    assert rej["evidence"]["expected_value"] == 10.0
    assert rej["evidence"]["expected_sum"] == 10.0 * 4 * 1024 * 1024


def test_silently_dropped_rank_rejects():
    rep = report(8)
    del rep["collective"]["ranks"][5]
    d = acc_levels.evaluate(rep)
    assert checks(d) == ["allreduce_missing_rank"]
    assert d["rejections"][0]["subject"] == "rank5"


def test_rank_missing_its_last_call_rejects():
    rep = report(2)
    del rep["collective"]["ranks"][1]["rounds"][2]["calls"][2]
    assert checks(acc_levels.evaluate(rep)) == ["allreduce_missing_calls"]


def test_world_size_smaller_than_gpus_rejects():
    rep = report(2)
    rep["collective"]["world_size"] = 1
    rep["collective"]["ranks"] = rep["collective"]["ranks"][:1]
    d = acc_levels.evaluate(rep)
    assert "allreduce_world_size" in checks(d)


def test_collective_error_rejects():
    rep = report(2)
    rep["collective"]["error"] = "timed out after 420s"
    assert "allreduce_error" in checks(acc_levels.evaluate(rep))
    rep = report(2)
    rep["collective"] = None
    assert checks(acc_levels.evaluate(rep)) == ["allreduce_missing"]


def test_single_rank_expectation_is_one():
    rep = report(1, level="quick")
    call = rep["collective"]["ranks"][0]["rounds"][0]["calls"][0]
    assert call["min"] == call["max"] == 1.0 and call["sum"] == 1.0
    assert acc_levels.evaluate(rep)["accepted"] is True


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
    assert checks(acc_levels.evaluate(rep)) == ["burn_in_missing"]
    rep["burn_in"]["gpus"].append(
        {"gpu": 1, "iterations": 6000, "checks": 120, "mismatches": 2, "first_mismatch_iteration": 4150, "error": None}
    )
    d = acc_levels.evaluate(rep)
    assert checks(d) == ["burn_in_mismatch"]
    assert d["rejections"][0]["evidence"]["first_mismatch_iteration"] == 4150
    rep["burn_in"]["gpus"][1]["mismatches"] = 0
    assert acc_levels.evaluate(rep)["accepted"] is True


def test_burn_in_needs_the_round_after_burn_in():
    rep = report(1, level="burn_in", rounds=3)
    rep["burn_in"] = {
        "seconds": 300,
        "error": None,
        "gpus": [{"gpu": 0, "iterations": 10, "checks": 1, "mismatches": 0, "error": None}],
    }
    assert checks(acc_levels.evaluate(rep)) == ["missing_rounds"]


@pytest.mark.parametrize(
    ("fatal", "message"),
    [
        ({"kind": "no_torch", "message": "PyTorch is not importable by /usr/bin/python3"}, "PyTorch is not importable"),
        ({"kind": "no_cuda", "message": "torch.cuda.is_available() is False"}, "is_available() is False"),
        ({"kind": "no_gpu", "message": "requested GPU(s) [3], CUDA sees 1"}, "CUDA sees 1"),
    ],
)
def test_no_gpu_is_never_a_pass(fatal, message):
    rep = {"program_version": 1, "config": acc_levels.build_config(), "fatal": fatal, "gpus": []}
    msg = acc_levels.fatal_message(rep)
    assert msg.startswith("no GPU to accept: ") and message in msg
    d = acc_levels.evaluate(rep)
    assert d["accepted"] is False and checks(d) == ["no_gpu"]
    assert acc_levels.fatal_message(None).startswith("no GPU to accept")
    assert acc_levels.fatal_message({"fatal": None, "gpus": []}).startswith("no GPU to accept")


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
        acc_levels.build_config(**kwargs)
    assert needle in str(exc.value)


def test_levels():
    q, s, b = (acc_levels.build_config(level=x) for x in ("quick", "standard", "burn_in"))
    assert q["rounds"] == s["rounds"] == 3 and b["rounds"] > 3
    assert q["allreduce_numel"] < s["allreduce_numel"]
    assert q["model"]["hidden"] < s["model"]["hidden"]
    assert (q["burn_in"], s["burn_in"], b["burn_in"]) == (False, False, True)
    assert b["burn_in_seconds"] == 300 and s["burn_in_seconds"] == 0
    assert all(c["allreduce_calls"] == 3 for c in (q, s, b))


def test_program_env_defaults_and_overrides():
    env = acc_runner.program_env(base={"PATH": "/usr/bin"})
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["PATH"] == "/usr/bin"
    env = acc_runner.program_env({"NCCL_NVLS_ENABLE": 1, "NCCL_DEBUG": "WARN"}, base={})
    assert env["NCCL_NVLS_ENABLE"] == "1" and env["NCCL_DEBUG"] == "WARN"


def test_decide_timeout_rejects_even_with_a_clean_partial_report():
    run = {"rc": -9, "stdout": "", "stderr": "", "report": report(), "timed_out": True}
    fatal, d = acc_runner.decide(run, 60)
    assert fatal is None and d["accepted"] is False
    assert checks(d) == ["timeout"]
    crashed = {"rc": 1, "stdout": "", "stderr": "Segmentation fault", "report": None, "timed_out": False}
    fatal, d = acc_runner.decide(crashed, 60)
    assert d is None and "no report (rc=1): Segmentation fault" in fatal


def test_summarize_burn_in_uses_the_shared_stats():
    burn = {"gpus": [{"gpu": 0, "gemm_n": 8192, "batch_ms": [1.6, 1.7, 1.65, 1.62], "iterations": 200}]}
    out = acc_runner.summarize_burn_in(burn)
    g = out["gpus"][0]
    assert "batch_ms" not in g
    assert g["gemm_ms"]["p50_ms"] == pytest.approx(1.635)
    assert g["tflops_median"] == pytest.approx(2 * 8192**3 / 1.635e-3 / 1e12)
    assert burn["gpus"][0]["batch_ms"]  # input untouched


def test_program_compiles_and_without_torch_says_no_gpu():
    compile(acc_runner.program_source(), "acceptance_program", "exec")
    # The real program in a real interpreter that lacks PyTorch must yield "no GPU to accept".
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("this interpreter has torch")
    run = acc_runner.run_program(sys.executable, acc_levels.build_config(level="quick"), acc_runner.program_env(), 60)
    fatal, d = acc_runner.decide(run, 60)
    assert d is None
    assert fatal.startswith("no GPU to accept: PyTorch is not importable by ")


def test_run_program_files_are_private_and_removed(tmp_path, monkeypatch):
    seen = {}
    real_popen = subprocess.Popen

    def spy(argv, **kw):
        prog, cfg = argv[1], argv[2]
        seen["modes"] = (stat.S_IMODE(os.stat(prog).st_mode), stat.S_IMODE(os.stat(cfg).st_mode))
        seen["dir_mode"] = stat.S_IMODE(os.stat(os.path.dirname(prog)).st_mode)
        seen["dir"] = os.path.dirname(prog)
        seen["argv0"] = argv[0]
        return real_popen([sys.executable, "-c", "pass"], **kw)

    monkeypatch.setattr(subprocess, "Popen", spy)
    run = acc_runner.run_program(
        "/opt/torch/python", acc_levels.build_config(), {"PATH": os.environ.get("PATH", "")}, 30
    )
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
    d = acc_levels.evaluate(bad)
    assert checks(d) == ["allreduce_result", "backward_determinism", "forward_determinism"]
    assert {r["round"] for r in d["rejections"]} == {2}
    assert acc_levels.evaluate(rep)["accepted"] is True


# Reports the program returned on the H200 test host (torch 2.11.0+cu130, driver 580.159.04,
# 1 GPU), stored as returned (burn-in per-iteration times cut to 20 samples).
RECORDED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "acceptance")


def recorded(name):
    with open(os.path.join(RECORDED, "h200_%s.json" % name)) as fh:
        return json.load(fh)


@pytest.mark.parametrize("name", ["standard", "quick", "burn_in_short"])
def test_recorded_h200_reports_are_accepted(name):
    rep = recorded(name)
    d = acc_levels.evaluate(rep)
    assert d["accepted"] is True, d["rejections"]
    assert rep["collective"]["mode"] == "single_rank"
    assert "needs 2+ GPUs" in rep["collective"]["note"]


def test_recorded_h200_perturbed_round_2_is_rejected_for_round_2_only():
    rep = recorded("standard_perturb2")
    d = acc_levels.evaluate(rep)
    assert d["accepted"] is False
    assert checks(d) == ["allreduce_result", "backward_determinism", "forward_determinism"]
    assert {r["round"] for r in d["rejections"]} == {2}
    ar = next(r for r in d["rejections"] if r["check"] == "allreduce_result")
    assert ar["evidence"]["max"] == 2.0 and ar["evidence"]["expected_value"] == 1.0


def test_recorded_report_with_one_flipped_hash_is_rejected():
    rep = recorded("standard")
    h = rep["gpus"][0]["rounds"][2]["grad_sha256"]
    rep["gpus"][0]["rounds"][2]["grad_sha256"] = ("0" if h[0] != "0" else "1") + h[1:]
    d = acc_levels.evaluate(rep)
    assert checks(d) == ["backward_determinism"]


def test_recorded_burn_in_summary():
    out = acc_runner.summarize_burn_in(recorded("burn_in_short")["burn_in"])
    g = out["gpus"][0]
    assert g["mismatches"] == 0 and g["iterations"] > 0
    assert g["gemm_ms"]["count"] == 20
    assert 100 < g["tflops_median"] < 2000


def test_recorded_h200_reports_have_nothing_measured_beyond_determinism():
    # The captures predate the bandwidth, health and clock measurements: absent is "not measured".
    for name in ("standard", "quick", "burn_in_short"):
        d = acc_levels.evaluate(recorded(name))
        assert d["verdict"] == "pass" and d["exit_code"] == 0
        assert d["warnings"] == []
        assert "bandwidths not measured" in d["notes"]
    d = acc_levels.evaluate(recorded("burn_in_short"))
    assert "gpu0: SM clocks under load not measured" in d["notes"]
    assert acc_levels.evaluate(recorded("standard_perturb2"))["exit_code"] == 2


# ------------------------------------------------------------------ limits (constructed inputs)


def test_pcie_limit_from_generation_and_width():
    assert acc_limits.pcie_limit_gbps(5, 16) == pytest.approx(63.015, abs=0.001)
    assert acc_limits.pcie_limit_gbps(4, 16) == pytest.approx(31.508, abs=0.001)
    assert acc_limits.pcie_limit_gbps(3, 16) == pytest.approx(15.754, abs=0.001)
    assert acc_limits.pcie_limit_gbps(2, 16) == pytest.approx(8.0)
    assert acc_limits.pcie_limit_gbps(5, 8) == pytest.approx(31.508, abs=0.001)
    assert acc_limits.pcie_limit_gbps(None, 16) is None
    assert acc_limits.pcie_limit_gbps(6, 16) is None  # no limit known: measured, not judged
    assert acc_limits.pcie_limit_gbps(5, 0) is None


def test_h200_reference_copy_is_87_percent_of_gen5_x16_and_passes():
    # measured on the H200 test host: 256 MiB pinned H2D at 55.0 GB/s
    fraction, status = acc_judging._judge(55.0, acc_limits.pcie_limit_gbps(5, 16), 0.75, 0.5)
    assert round(fraction, 3) == 0.873 and status == "ok"


def test_nvlink_and_memory_limits():
    assert acc_limits.nvlink_limit_gbps(4, 18) == 450.0
    assert acc_limits.nvlink_limit_gbps(3, 12) == 300.0
    assert acc_limits.nvlink_limit_gbps(5, 18) == 900.0
    assert acc_limits.nvlink_limit_gbps(9, 18) is None
    assert acc_limits.memory_limit_gbps("NVIDIA H200") == 4800.0
    assert acc_limits.memory_limit_gbps("NVIDIA H100 80GB HBM3") == 3350.0
    assert acc_limits.memory_limit_gbps("NVIDIA A100-SXM4-80GB") == 2039.0
    assert acc_limits.memory_limit_gbps("NVIDIA L4") is None
    table = acc_limits.validate_memory_table({"L4": 300})
    assert acc_limits.memory_limit_gbps("NVIDIA L4", table) == 300.0


def dev(index, bus, gen=5, width=16, links=()):
    return {
        "index": index,
        "pci_bus_id": bus,
        "pcie": {"gen_max": gen, "width_max": width, "gen_current": gen, "width_current": width},
        "nvlink": {"supported": bool(links), "links": list(links)},
    }


def nvl(link, remote, version=4, remote_type=0):
    return {"link": link, "active": True, "version": version, "remote_pci_bus_id": remote, "remote_type": remote_type}


def test_p2p_limit_direct_switch_and_pcie():
    a_bus, b_bus = "0000:18:00.0", "0000:2a:00.0"
    direct = dev(0, a_bus, links=[nvl(i, b_bus, 3) for i in range(4)])
    assert acc_limits.p2p_limit(direct, dev(1, b_bus), {a_bus, b_bus}) == (100.0, "NVLink3 x4")
    sw_a = dev(0, a_bus, links=[nvl(i, "0000:c5:00.0", 4, 2) for i in range(18)])
    sw_b = dev(1, b_bus, links=[nvl(i, "0000:c6:00.0", 4, 2) for i in range(18)])
    assert acc_limits.p2p_limit(sw_a, sw_b, {a_bus, b_bus}) == (450.0, "NVLink4 x18 (NVSwitch)")
    limit, label = acc_limits.p2p_limit(dev(0, a_bus), dev(1, b_bus, gen=4), {a_bus, b_bus})
    assert label == "PCIe Gen4 x16" and limit == pytest.approx(31.508, abs=0.001)


@pytest.mark.parametrize(
    "given, needle",
    [
        ({"pcie_warn_below": 1.5}, "acceptance_pcie_warn_below must be a fraction from 0 to 1, got 1.5"),
        ({"pcie_reject_below": "x"}, "acceptance_pcie_reject_below must be a fraction"),
        ({"pcie_reject_below": 0.8}, "acceptance_pcie_reject_below (0.8) must not be above acceptance_pcie_warn_below"),
        ({"max_uncorrectable_remapped_rows": -1}, "acceptance_max_uncorrectable_remapped_rows must be a whole number"),
        ({"clock_min_fraction": 0}, "acceptance_clock_min_fraction must be above 0"),
        ({"colour": 1}, "unknown threshold 'colour'"),
    ],
)
def test_thresholds_are_validated_naming_the_variable(given, needle):
    with pytest.raises(ValueError) as exc:
        acc_limits.validate_thresholds(given)
    assert needle in str(exc.value)


def test_thresholds_accept_templated_text_and_keep_defaults():
    t = acc_limits.validate_thresholds({"pcie_warn_below": "0.8", "max_uncorrectable_remapped_rows": "3"})
    assert t["pcie_warn_below"] == 0.8 and t["max_uncorrectable_remapped_rows"] == 3
    assert t["memory_warn_below"] == acc_limits.THRESHOLDS["memory_warn_below"]


def test_memory_table_is_validated():
    with pytest.raises(ValueError, match="acceptance_memory_bandwidth_gbps"):
        acc_limits.validate_memory_table({"L4": 0})


def test_role_defaults_and_argument_specs_match_the_module_defaults():
    import yaml

    root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "roles", "acceptance")
    with open(os.path.join(root, "defaults", "main.yml")) as fh:
        defaults = yaml.safe_load(fh)
    with open(os.path.join(root, "meta", "argument_specs.yml")) as fh:
        specs = yaml.safe_load(fh)["argument_specs"]["main"]["options"]
    for key, value in acc_limits.THRESHOLDS.items():
        assert defaults["acceptance_" + key] == value, key
        assert specs["acceptance_" + key]["default"] == value, key


# ------------------------------------------------------------------ bandwidth (constructed inputs)


def measured_report(n_gpus=2, h2d=55.0, d2h=53.0, remote=(48.0, 47.0), memory=4100.0, p2p=380.0, nodes=2):
    """A standard-level report as the program returns it, with constructed measurements."""
    rep = report(n_gpus)
    buses = ["0000:%02x:00.0" % (0x18 + 0x10 * i) for i in range(n_gpus)]
    rep["devices"] = [dev(i, buses[i], links=[nvl(k, "0000:c5:00.0", 4, 2) for k in range(18)]) for i in range(n_gpus)]
    for i, d in enumerate(rep["devices"]):
        d.update(uuid="GPU-%d" % i, numa_node=0 if i < n_gpus / 2 else 1, max_sm_mhz=1980, power_limit_w=700.0)
    host = []
    for i in range(n_gpus):
        host.append({"gpu": i, "numa": "local", "node": 0, "error": None, "h2d": {"gbps": h2d}, "d2h": {"gbps": d2h}})
        if nodes > 1:
            host.append(
                {
                    "gpu": i,
                    "numa": "remote",
                    "node": 1,
                    "error": None,
                    "h2d": {"gbps": remote[0]},
                    "d2h": {"gbps": remote[1]},
                }
            )
    rep["bandwidth"] = {
        "host": host,
        "memory": [{"gpu": i, "gbps": memory, "error": None} for i in range(n_gpus)],
        "p2p": [
            {"src": a, "dst": b, "access": True, "gbps": p2p, "latency_us": 11.5, "error": None}
            for a in range(n_gpus)
            for b in range(n_gpus)
            if a != b
        ],
        "remote_note": None if nodes > 1 else "no remote NUMA node: the host has one NUMA node",
        "error": None,
    }
    healthy = {
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "retired_pages": {"not_supported": True},
        "nvlink_errors": {str(k): {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0} for k in range(18)},
        "pcie_replay": 0,
    }
    rep["health"] = {
        "error": None,
        "before": {str(i): copy.deepcopy(healthy) for i in range(n_gpus)},
        "after": {str(i): copy.deepcopy(healthy) for i in range(n_gpus)},
    }
    return rep


def test_constructed_healthy_two_gpu_node_passes_with_fractions():
    d = acc_levels.evaluate(measured_report())
    assert d["verdict"] == "pass", d["rejections"] + d["warnings"]
    gpu0 = d["measurements"]["gpus"]["gpu0"]
    assert gpu0["h2d_local"]["fraction"] == pytest.approx(0.8728, abs=1e-4)
    assert gpu0["h2d_local"]["limit"] == "PCIe Gen5 x16"
    assert gpu0["h2d_remote"]["status"] == "ok"
    assert gpu0["memory"]["fraction"] == pytest.approx(4100 / 4800.0, abs=1e-4)
    pair = d["measurements"]["pairs"]["gpu0->gpu1"]
    assert pair["limit"] == "NVLink4 x18 (NVSwitch)" and pair["fraction"] == pytest.approx(380 / 450.0, abs=1e-4)
    assert pair["latency_us"] == 11.5
    assert "gpu0: page retirement not supported (the GPU remaps rows)" in d["notes"]


def test_one_numa_node_says_there_is_no_remote_node():
    d = acc_levels.evaluate(measured_report(nodes=1))
    assert d["verdict"] == "pass"
    assert d["measurements"]["remote_numa"] == "no remote NUMA node: the host has one NUMA node"
    assert "h2d_remote" not in d["measurements"]["gpus"]["gpu0"]


@pytest.mark.parametrize(
    "kwargs, check, verdict",
    [
        ({"h2d": 42.0}, "pcie_bandwidth", "warn"),  # 67% of Gen5 x16
        ({"h2d": 26.0}, "pcie_bandwidth", "reject"),  # trained one generation down
        ({"memory": 3000.0}, "memory_bandwidth", "warn"),
        ({"memory": 2000.0}, "memory_bandwidth", "reject"),
        ({"p2p": 200.0}, "p2p_bandwidth", "warn"),
        ({"p2p": 100.0}, "p2p_bandwidth", "reject"),
        ({"remote": (25.0, 25.0)}, "pcie_remote_bandwidth", "warn"),  # remote reject is off by default
    ],
)
def test_constructed_slow_paths_warn_or_reject(kwargs, check, verdict):
    d = acc_levels.evaluate(measured_report(**kwargs))
    assert d["verdict"] == verdict
    found = d["rejections"] if verdict == "reject" else d["warnings"]
    assert check in {p["check"] for p in found}
    assert d["exit_code"] == acc_levels.VERDICT_EXIT_CODES[verdict]
    one = next(p for p in found if p["check"] == check)
    assert "%" in one["message"] and one["evidence"]["fraction"] < one["evidence"]["threshold"]


def test_thresholds_change_the_verdict():
    rep = measured_report(h2d=42.0)
    assert acc_levels.evaluate(rep)["verdict"] == "warn"
    assert acc_levels.evaluate(rep, thresholds={"pcie_warn_below": 0.6})["verdict"] == "pass"


def test_unknown_memory_model_is_measured_but_not_judged():
    rep = measured_report(memory=10.0)
    for g in rep["gpus"]:
        g["name"] = "NVIDIA Future GPU"
    d = acc_levels.evaluate(rep)
    assert d["measurements"]["gpus"]["gpu0"]["memory"]["status"] == "no_limit"
    assert "memory_bandwidth" not in {p["check"] for p in d["rejections"] + d["warnings"]}


def test_measurement_error_warns():
    rep = measured_report()
    rep["bandwidth"]["memory"][0] = {"gpu": 0, "error": "OutOfMemoryError: CUDA out of memory"}
    d = acc_levels.evaluate(rep)
    assert d["verdict"] == "warn"
    assert d["measurements"]["gpus"]["gpu0"]["memory"]["status"] == "not_measured"


# ------------------------------------------------------------------ health (constructed inputs)


def test_pending_remap_warns_and_failed_remap_rejects():
    rep = measured_report()
    rep["health"]["after"]["0"]["remapped_rows"].update(pending=True, correctable=2)
    d = acc_levels.evaluate(rep)
    assert d["verdict"] == "warn"
    assert any("reset the GPU before use" in w["message"] for w in d["warnings"])
    rep["health"]["after"]["1"]["remapped_rows"]["failure"] = True
    d = acc_levels.evaluate(rep)
    assert d["verdict"] == "reject" and checks(d) == ["remap_failure"]


def test_uncorrectable_rows_above_the_limit_reject():
    rep = measured_report()
    rep["health"]["after"]["0"]["remapped_rows"]["uncorrectable"] = 9
    assert checks(acc_levels.evaluate(rep)) == ["remapped_rows_uncorrectable"]
    assert acc_levels.evaluate(rep, thresholds={"max_uncorrectable_remapped_rows": 9})["verdict"] == "pass"


def test_growing_replay_counters_warn_during_the_run_and_since_the_last_record():
    rep = measured_report()
    rep["health"]["after"]["0"]["nvlink_errors"]["3"]["replay"] = 5
    rep["health"]["after"]["1"]["pcie_replay"] = 2
    d = acc_levels.evaluate(rep)
    assert d["verdict"] == "warn"
    assert {w["check"] for w in d["warnings"]} == {"nvlink_errors_growing", "pcie_replay_growing"}
    # the last record saw fewer replays than this run started with
    previous = {"GPU-0": copy.deepcopy(rep["health"]["before"]["0"])}
    rep2 = measured_report()
    rep2["health"]["before"]["0"]["pcie_replay"] = rep2["health"]["after"]["0"]["pcie_replay"] = 7
    d = acc_levels.evaluate(rep2, previous_health=previous)
    assert [w["check"] for w in d["warnings"]] == ["pcie_replay_grew_since_last"]


# ------------------------------------------------------------------ clocks (constructed inputs)


def burn_report(samples, max_mhz=1980):
    rep = report(1, level="burn_in", rounds=3, burn_in_seconds=10)
    rep["gpus"][0]["rounds"].append(four_step(4, phase="after_burn_in"))
    rep["burn_in"] = {
        "seconds": 10,
        "error": None,
        "gpus": [
            {
                "gpu": 0,
                "iterations": 500,
                "checks": 10,
                "mismatches": 0,
                "first_mismatch_iteration": None,
                "batch_ms": [1.64] * 10,
                "batch_size": 50,
                "error": None,
                "gemm_n": 8192,
                "max_sm_mhz": max_mhz,
                "power_limit_w": 700.0,
                "samples": samples,
            }
        ],
    }
    return rep


POWER_CAP, APP_CLOCKS, HW_SLOWDOWN, SW_THERMAL, IDLE = 0x4, 0x2, 0x8, 0x20, 0x1


def samples(mhz, reasons, n=20, power=690.0):
    return [{"t": i * 0.5, "sm_mhz": mhz, "power_w": power, "reasons": reasons, "temp_c": 60} for i in range(n)]


def test_clocks_held_by_the_power_cap_pass():
    d = acc_levels.evaluate(burn_report(samples(1500, POWER_CAP)))
    assert d["verdict"] == "pass", d["rejections"]
    clock = d["measurements"]["clocks"]["gpu0"]
    assert clock["median_sm_mhz"] == 1500 and clock["median_fraction"] == pytest.approx(0.7576, abs=1e-4)


def test_locked_low_clock_without_a_cap_rejects_naming_the_reason():
    d = acc_levels.evaluate(burn_report(samples(600, APP_CLOCKS, power=250.0) + samples(1900, 0, n=2)))
    assert checks(d) == ["clock_low"]
    msg = d["rejections"][0]["message"]
    assert "without a power or thermal cap" in msg and "applications_clocks_setting" in msg


def test_hardware_slowdown_rejects_and_thermal_target_warns():
    d = acc_levels.evaluate(burn_report(samples(900, HW_SLOWDOWN | POWER_CAP)))
    assert checks(d) == ["clock_throttled_hw"] and "hw_slowdown" in d["rejections"][0]["message"]
    d = acc_levels.evaluate(burn_report(samples(1400, SW_THERMAL)))
    assert d["verdict"] == "warn" and d["warnings"][0]["check"] == "clock_thermal"


def test_idle_samples_are_not_judged_and_a_short_dip_is_tolerated():
    d = acc_levels.evaluate(
        burn_report(samples(300, IDLE, n=5) + samples(1900, POWER_CAP, n=18) + samples(700, 0, n=2))
    )
    assert d["verdict"] == "pass"
    assert d["measurements"]["clocks"]["gpu0"]["loaded"] == 20


# ------------------------------------------------------------------ record, metrics, journal


def test_record_metrics_and_history(tmp_path):
    rep = measured_report(memory=3000.0)
    d = acc_levels.evaluate(rep)
    rec = acc_record.build_record(d, rep, "standard", 1764500000.0)
    assert rec["verdict"] == "warn" and rec["exit_code"] == 1
    assert rec["gpu_name"] == "NVIDIA H200" and rec["gpu_count"] == 2
    assert rec["metrics"]["memory_gbps"] == 3000.0
    assert rec["metrics"]["h2d_local_gbps"] == 55.0 and rec["metrics"]["p2p_latency_us"] == 11.5
    assert rec["problems"][0]["severity"] == "warn"
    assert set(rec["health"]) == {"GPU-0", "GPU-1"}
    journal = tmp_path / "journal"
    acc_record.write_record(str(journal), rec)
    path = journal / "acceptance.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = acc_record.build_record(d, rep, "standard", 1764500100.0, previous=acc_record.read_record(str(journal)))
    assert [h["time"] for h in again["history"]] == ["2025-11-30T10:53:20Z", "2025-11-30T10:55:00Z"]
    assert acc_record.read_record(str(tmp_path / "none")) is None


def test_metrics_textfile():
    rep = measured_report(h2d=26.0)
    rep["health"]["after"]["0"]["remapped_rows"]["pending"] = True
    rec = acc_record.build_record(acc_levels.evaluate(rep), rep, "standard", 1764500000.0)
    text = acc_record.render_metrics(rec)
    assert 'stacktune_acceptance_verdict{verdict="reject"} 1' in text
    assert 'stacktune_acceptance_verdict{verdict="pass"} 0' in text
    assert "stacktune_acceptance_exit_code 2" in text
    assert 'stacktune_acceptance_problems{check="pcie_bandwidth",severity="reject"} 2' in text
    assert 'stacktune_acceptance_bandwidth_bytes_per_second{gpu="gpu0",path="h2d_local"} 26000000000' in text
    assert 'stacktune_acceptance_p2p_latency_seconds{dst="gpu1",src="gpu0"} 1.15e-05' in text
    assert 'stacktune_acceptance_remap_pending{gpu="gpu0"} 1' in text
    assert "# TYPE stacktune_acceptance_verdict gauge" in text


def measured_metrics_file(tmp_path):
    """The textfile of a measured burn-in record, written as the module writes it."""
    rep = measured_report(h2d=26.0)
    rep["health"]["after"]["0"]["remapped_rows"]["pending"] = True
    rec = acc_record.build_record(acc_levels.evaluate(rep), rep, "standard", 1764500000.0)
    rec["measurements"]["clocks"] = {"gpu0": {"median_fraction": 0.97}}
    path = tmp_path / "textfile" / acc_record.METRICS_FILE
    acc_record.write_metrics(str(path), acc_record.render_metrics(rec))
    return rec, path.read_text()


def test_metrics_file_parses_in_base_units(tmp_path, prometheus_families):
    rec, text = measured_metrics_file(tmp_path)
    families = prometheus_families(text)
    assert set(families) == {name for name, _help in acc_record.METRIC_FAMILIES}
    assert all(f.type == "gauge" and f.documentation for f in families.values())
    assert not [n for n in families if n.endswith(("_gbps", "_fraction", "_ms", "_us"))]
    gpus = rec["measurements"]["gpus"]
    for sample in families["stacktune_acceptance_bandwidth_bytes_per_second"].samples:
        entry = gpus[sample.labels["gpu"]][sample.labels["path"]]
        assert sample.value == pytest.approx(entry["gbps"] * 1e9)
    for sample in families["stacktune_acceptance_bandwidth_ratio"].samples:
        assert sample.value == pytest.approx(gpus[sample.labels["gpu"]][sample.labels["path"]]["fraction"])
    pairs = rec["measurements"]["pairs"]
    for sample in families["stacktune_acceptance_p2p_bandwidth_bytes_per_second"].samples:
        entry = pairs["%s->%s" % (sample.labels["src"], sample.labels["dst"])]
        assert sample.value == pytest.approx(entry["gbps"] * 1e9)
    assert [s.value for s in families["stacktune_acceptance_sm_clock_ratio"].samples] == [0.97]


def test_metrics_file_passes_promtool(tmp_path, promtool_check):
    _rec, text = measured_metrics_file(tmp_path)
    promtool_check(text)


def test_fleet_metrics_take_the_worst_gpu_and_pair():
    rep = measured_report(n_gpus=4)
    rep["bandwidth"]["memory"][2]["gbps"] = 3900.0
    rep["bandwidth"]["p2p"][5]["latency_us"] = 19.0
    rec = acc_record.build_record(acc_levels.evaluate(rep), rep, "standard", 1764500000.0)
    assert rec["metrics"]["memory_gbps"] == 3900.0
    assert rec["metrics"]["p2p_latency_us"] == 19.0


# ------------------------------------------------------------------ the program's NVML readers, with a stand-in NVML


class FakeNvmlError(Exception):
    def __init__(self, value):
        super().__init__("Not Supported" if value == 3 else "Unknown Error")
        self.value = value


class FakeNvml:
    """Answers like an H200 through pynvml: rows remapped, no retired pages, one NVLink."""

    NVML_NVLINK_MAX_LINKS = 2

    def nvmlDeviceGetRemappedRows(self, h):
        return (1, 0, 1, 0)

    def nvmlDeviceGetRetiredPages(self, h, cause):
        raise FakeNvmlError(3)

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        return {0: 4, 1: 0, 2: 1, 3: 0}[counter]

    def nvmlDeviceGetPcieReplayCounter(self, h):
        raise FakeNvmlError(3)


def program_namespace():
    ns = {"__name__": "acceptance_program"}
    exec(compile(acc_runner.program_source(), "acceptance_program", "exec"), ns)
    return ns


def test_program_health_snapshot_records_not_supported():
    ns = program_namespace()
    snap = ns["health_snapshot"](FakeNvml(), object(), [{"link": 0, "active": True}, {"link": 1, "active": False}])
    assert snap["remapped_rows"] == {"correctable": 1, "uncorrectable": 0, "pending": True, "failure": False}
    assert snap["retired_pages"] == {"not_supported": True}
    assert snap["nvlink_errors"] == {"0": {"replay": 4, "recovery": 0, "crc_flit": 1, "crc_data": 0}}
    assert snap["pcie_replay"] is None and snap["pcie_replay_not_supported"] is True


def test_program_numa_and_bus_helpers(tmp_path):
    ns = program_namespace()
    for node, cpus in ((0, "0-3,8"), (1, "4-7"), (2, "")):
        (tmp_path / ("node%d" % node)).mkdir()
        (tmp_path / ("node%d" % node) / "cpulist").write_text(cpus + "\n")
    assert ns["numa_nodes"](str(tmp_path)) == [{"node": 0, "cpus": [0, 1, 2, 3, 8]}, {"node": 1, "cpus": [4, 5, 6, 7]}]
    assert ns["_norm_bus"]("00000000:3B:00.0") == "0000:3b:00.0"
    assert ns["_norm_bus"](b"0000:3b:00.0") == "0000:3b:00.0"


@pytest.mark.parametrize(
    "name,verdict,checks",
    [
        ("standard", "pass", []),
        ("burn_in", "pass", []),
        # a second process hammering host-to-device copies on the same PCIe link
        ("contention", "reject", ["pcie_bandwidth"]),
        # SM clock locked to 345-885 MHz through NVML during the burn-in
        ("clock_cap", "reject", ["clock_low", "memory_bandwidth"]),
    ],
)
def test_recorded_h200_depth_runs_and_injected_faults(name, verdict, checks):
    """Reports recorded on the one-H200 host on 2026-12-01 (tests/gpu/acceptance-depth.sh, as root)."""
    path = os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "fixtures", "acceptance", "h200_depth_%s.json" % name
    )
    with open(path) as handle:
        rep = json.load(handle)
    d = acc_levels.evaluate(rep)
    assert d["verdict"] == verdict, d["summary"]
    assert sorted({r["check"] for r in d["rejections"]}) == checks
    copy = d["measurements"]["gpus"]["gpu0"]["h2d_local"]
    assert (copy["limit"], copy["limit_gbps"]) == ("PCIe Gen5 x16", 63.015)
    assert 0.4 < copy["fraction"] < 0.95
