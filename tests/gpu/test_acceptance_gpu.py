# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The acceptance program on a real GPU: a healthy node is accepted at level standard, and
the same node with a perturbed round is rejected for exactly that round.

Run on a GPU host: `pytest -m gpu tests/gpu/test_acceptance_gpu.py`. The interpreter with
PyTorch is $STACKTUNE_TORCH_PYTHON, else /opt/torch/.venv/bin/python3, else this one.
"""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils import _acceptance

pytestmark = pytest.mark.gpu

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TIMEOUT = 900


PYTHON = None


def _run(python, level, **kw):
    cfg = _acceptance.build_config(level=level, **kw)
    run = _acceptance.run_program(python, cfg, _acceptance.program_env(), TIMEOUT)
    fatal, decision = _acceptance.decide(run, TIMEOUT)
    assert fatal is None, "%s\n%s" % (fatal, run["stderr"][-3000:])
    return run["report"], decision


def test_standard_level_accepts_a_healthy_node(python):
    report, decision = _run(python, "standard")
    assert decision["accepted"], json.dumps(decision["rejections"], indent=1)
    assert decision["rejections"] == []
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
