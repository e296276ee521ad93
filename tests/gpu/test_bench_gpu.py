# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU tier of the bench module: real GPU blocks through the module's own code path.

Run on a GPU host: `pytest -m gpu -o addopts="" tests/gpu/test_bench_gpu.py`. The
interpreter with PyTorch is $STACKTUNE_TORCH_PYTHON, else /opt/torch/.venv/bin/python3,
else this one; without one that sees a CUDA GPU every test is skipped. The test process
itself needs ansible-core (the module imports AnsibleModule).
"""

import subprocess

import pytest

pytestmark = pytest.mark.gpu

bench = pytest.importorskip("ansible_collections.stacktune.gpu.plugins.modules.bench")

from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import BenchFailure  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.measure import measure  # noqa: E402


def _gpu_count(python):
    out = subprocess.check_output([python, "-c", "import torch; print(torch.cuda.device_count())"])
    return int(out.decode().strip().splitlines()[-1])


def _block(python, workload, **kw):
    params = bench.default_params(workload=workload, python=python, timeout=300, **kw)
    result = measure(params)
    assert result["workload"] == workload
    assert len(result["samples_ms"]) == params["steps"]
    assert result["warmup_discarded"] == params["warmup"]
    assert all(v > 0 for v in result["samples_ms"])
    cond = result["conditions"]
    if cond["nvml"] == "ok":
        gpu = cond["before"]["gpus"][0]
        assert gpu["sm_clock_mhz"] > 0 and gpu["temperature_c"] > 0
        assert isinstance(gpu["throttle_reasons"], list)
        assert sum(entry["polls"] for entry in cond["during"].values()) >= 1
    return result


def test_gemm_reaches_datacenter_throughput(python):
    res = _block(python, "gemm", steps=50, warmup=10)
    assert res["throughput"]["unit"] == "TFLOP/s"
    name = res["details"]["info"]["gpu_name"]
    if any(tag in name for tag in ("H100", "H200", "H20", "B200", "A100", "GH200")):
        assert res["throughput"]["value"] > 100, res["summary"]
    else:
        assert res["throughput"]["value"] > 1
    assert res["summary"]["p50_ms"] < 100


def test_pinned_copies_beat_pageable(python):
    pinned = _block(python, "h2d_pinned", steps=30, warmup=5, size=128)
    pageable = _block(python, "h2d_pageable", steps=30, warmup=5, size=128)
    assert pinned["throughput"]["unit"] == pageable["throughput"]["unit"] == "GB/s"
    assert pinned["throughput"]["value"] > pageable["throughput"]["value"]
    assert 1 < pinned["throughput"]["value"] < 200  # no PCIe or C2C link beats this
    assert pinned["summary"]["p50_ms"] < pageable["summary"]["p50_ms"]


def test_dataloader_delivers_batches(python):
    res = _block(python, "dataloader", steps=20, warmup=4, size=16, workers=2)
    assert res["throughput"]["unit"] == "samples/s"
    assert 10 < res["throughput"]["value"] < 1e6
    assert res["details"]["info"]["workers"] == 2


def test_dataloader_without_workers(python):
    res = _block(python, "dataloader", steps=5, warmup=1, size=4, workers=0)
    assert res["throughput"]["value"] > 0


def test_train_step_learns(python):
    res = _block(python, "train_step", steps=20, warmup=5, size=8)
    info = res["details"]["info"]
    assert res["throughput"]["unit"] == "samples/s" and res["throughput"]["value"] > 0
    assert info["loss_last"] < info["loss_first"]


def test_auto_picks_gemm(python):
    res = measure(bench.default_params(python=python, steps=5, warmup=2, size=2048, timeout=300))
    assert res["workload"] == "gemm"


def test_allreduce(python):
    count = _gpu_count(python)
    params = bench.default_params(workload="allreduce", python=python, steps=20, warmup=5, size=64, timeout=300)
    if count < 2:
        with pytest.raises(BenchFailure, match="needs 2 or more GPUs"):
            measure(params)
        return
    res = measure(params)
    assert res["throughput"]["unit"] == "GB/s" and res["throughput"]["value"] > 1
    assert res["details"]["info"]["world_size"] == count


def test_bad_gpu_index_fails_clearly(python):
    count = _gpu_count(python)
    with pytest.raises(BenchFailure, match="does not exist"):
        measure(bench.default_params(workload="gemm", python=python, device=count, steps=1, warmup=0))
