# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The acceptance program on a real GPU: a healthy node is accepted at level standard, and
the same node with a perturbed round is rejected for exactly that round. The bandwidths
(host copies from the local and, where there is one, a remote NUMA node; peer copies; device
memory) are measured and judged as fractions of their limits, the NVML health counters are
read, and the burn-in samples the clocks. tests/gpu/acceptance-depth.sh injects the faults.

Run on a GPU host: `pytest -m gpu tests/gpu/test_acceptance_gpu.py`. The interpreter with
PyTorch is $STACKTUNE_TORCH_PYTHON, else /opt/torch/.venv/bin/python3, else this one.
"""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import levels as acceptance_levels
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import runner as acceptance_runner

pytestmark = pytest.mark.gpu

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TIMEOUT = 900


PYTHON = None


def _run(python, level, **kw):
    cfg = acceptance_levels.build_config(level=level, **kw)
    run = acceptance_runner.run_program(python, cfg, acceptance_runner.program_env(), TIMEOUT)
    fatal, decision = acceptance_runner.decide(run, TIMEOUT)
    assert fatal is None, "%s\n%s" % (fatal, run["stderr"][-3000:])
    return run["report"], decision


def test_standard_level_accepts_a_healthy_node(python):
    report, decision = _run(python, "standard")
    assert decision["accepted"], json.dumps(decision["rejections"], indent=1)
    assert decision["rejections"] == []
    assert decision["verdict"] == "pass", json.dumps(decision["warnings"], indent=1)
    assert report["gpus"], "no GPU tested"
    for gpu in report["gpus"]:
        rounds = gpu["rounds"]
        assert [r["round"] for r in rounds] == [1, 2, 3]
        assert all(r["zeros_item"] == 0 for r in rounds)
        assert len({r["forward_sha256"] for r in rounds}) == 1
        assert len({r["grad_sha256"] for r in rounds}) == 1
        assert len({r["loss_hex"] for r in rounds}) == 1
        assert all(len(r["forward_sha256"]) == 64 for r in rounds)
    coll = report["collective"]
    n = len(report["gpus"])
    assert coll["world_size"] == n
    assert coll["mode"] == ("multi_gpu" if n >= 2 else "single_rank")
    assert len(coll["ranks"]) == n
    expected = n * (n + 1) / 2.0
    for rank in coll["ranks"]:
        assert rank["error"] is None
        assert len(rank["rounds"]) == 3
        for rd in rank["rounds"]:
            assert len(rd["calls"]) == 3
            for call in rd["calls"]:
                assert call["min"] == call["max"] == expected
                assert call["sum"] == expected * call["numel"]


def test_standard_level_measures_bandwidths_against_their_limits(python):
    report, decision = _run(python, "standard")
    m = decision["measurements"]
    n = len(report["gpus"])
    for device in report["devices"]:
        assert device["pcie"].get("gen_max") and device["pcie"].get("width_max"), device
    for idx in range(n):
        gpu = m["gpus"]["gpu%d" % idx]
        for key in ("h2d_local", "d2h_local"):
            entry = gpu[key]
            assert entry["status"] in ("ok", "warn", "reject"), entry
            assert 0.2 < entry["fraction"] < 1.05, entry
            assert entry["limit"].startswith("PCIe Gen")
        assert gpu["memory"]["gbps"] > 100, gpu["memory"]
        if gpu["memory"]["limit"]:
            assert 0.3 < gpu["memory"]["fraction"] < 1.05, gpu["memory"]
    nodes = report["bandwidth"].get("numa_nodes") or []
    if len(nodes) < 2:
        assert m["remote_numa"].startswith("no remote NUMA node")
        assert "h2d_remote" not in m["gpus"]["gpu0"]
    else:
        assert m["gpus"]["gpu0"]["h2d_remote"]["gbps"] > 0
    assert len(m["pairs"]) == n * (n - 1)
    for pair in m["pairs"].values():
        assert pair["gbps"] > 0 and pair["latency_us"] > 0, pair
        assert pair["fraction"] is not None and pair["limit"], pair


def test_health_counters_are_read_or_marked_unsupported(python):
    report, decision = _run(python, "quick")
    health = report["health"]
    assert health["error"] is None, health
    assert set(health["before"]) == set(health["after"]) == {str(g["index"]) for g in report["gpus"]}
    for snap in health["after"].values():
        rows = snap["remapped_rows"]
        assert "not_supported" in rows or {"correctable", "uncorrectable", "pending", "failure"} <= set(rows), rows
        pages = snap["retired_pages"]
        assert pages.get("not_supported") or "pending" in pages, pages
    assert not any(r["check"].startswith("remap") for r in decision["rejections"])


def test_perturbed_round_rejects_the_node(python):
    report, decision = _run(python, "standard", perturb_round=2)
    assert not decision["accepted"]
    checks = {r["check"] for r in decision["rejections"]}
    assert {"forward_determinism", "backward_determinism", "allreduce_result"} <= checks
    assert {r["round"] for r in decision["rejections"]} == {2}
    first = report["gpus"][0]["rounds"]
    assert first[1]["perturbed"] is True
    assert first[0]["forward_sha256"] == first[2]["forward_sha256"] != first[1]["forward_sha256"]


def test_burn_in_short_run_accepts(python):
    report, decision = _run(python, "burn_in", rounds=3, burn_in_seconds=15)
    assert decision["accepted"], json.dumps(decision["rejections"], indent=1)
    for g in report["burn_in"]["gpus"]:
        assert g["iterations"] > 0
        assert g["mismatches"] == 0
    for gpu in report["gpus"]:
        assert [r["phase"] for r in gpu["rounds"]][-1] == "after_burn_in"
    for g in report["burn_in"]["gpus"]:
        assert g.get("sampler_error") is None, g.get("sampler_error")
        assert len(g["samples"]) >= 10 and g["max_sm_mhz"] > 0
    for clock in decision["measurements"]["clocks"].values():
        assert clock["loaded"] > 0 and clock["median_sm_mhz"] > 0, clock


def test_module_end_to_end(python, tmp_path):
    pytest.importorskip("ansible.module_utils.basic")
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"python": python, "level": "quick", "fail_on_reject": False}}))
    paths = [os.path.join(REPO, "collections")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "plugins", "modules", "gpu_acceptance.py"), str(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["accepted"] is True, result
    assert result["changed"] is False
    assert result["rounds"] == 3
    assert result["verdict"] == "pass" and result["exit_code"] == 0


def test_module_writes_the_journal_record_and_the_metrics(python, tmp_path):
    pytest.importorskip("ansible.module_utils.basic")
    journal, prom = tmp_path / "journal", tmp_path / "textfile" / "stacktune_acceptance.prom"
    module_args = {
        "python": python,
        "level": "quick",
        "fail_on_reject": False,
        "journal_dir": str(journal),
        "metrics_dir": str(prom.parent),
    }
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}))
    paths = [os.path.join(REPO, "collections")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "plugins", "modules", "gpu_acceptance.py"), str(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )
    result = json.loads(proc.stdout)
    assert result["changed"] is True  # no record before
    record = json.loads((journal / "acceptance.json").read_text())
    assert record["verdict"] == result["verdict"] and record["gpu_name"]
    assert oct(os.stat(journal / "acceptance.json").st_mode & 0o777) == "0o600"
    text = prom.read_text()
    assert 'stacktune_acceptance_verdict{verdict="%s"} 1' % result["verdict"] in text
    assert result["metrics_path"] == str(prom)
    assert "_gbps" not in text and "_fraction" not in text  # base units and ratios only
