"""Shared fixtures of the GPU tier (`make test-gpu`, pytest marker `gpu`)."""

import os
import subprocess
import sys

import pytest


def _torch_python():
    """The first interpreter that imports PyTorch and sees a CUDA GPU, else skip."""
    candidates = [os.environ.get("STACKTUNE_TORCH_PYTHON"), "/opt/torch/.venv/bin/python3", sys.executable]
    for cand in candidates:
        if not cand or not os.path.exists(cand):
            continue
        rc = subprocess.call(
            [cand, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if rc == 0:
            return cand
    pytest.skip("no interpreter with PyTorch and a CUDA GPU")
    return None


@pytest.fixture(scope="module")
def python():
    """Interpreter that runs the GPU workloads (STACKTUNE_TORCH_PYTHON overrides)."""
    return _torch_python()
