"""NCCL transport check (module_utils/hardware/nccl_transport.py): parsing NCCL's INFO log and the verdict.

The logs below are CONSTRUCTED: they follow the line formats of NCCL 2.2x. No log of a host
with two or more GPUs is recorded yet; tests/gpu/record_nccl.py records one per injected fault
and checks its verdict as it records, and a replay of those recordings belongs here once they
are committed.
"""

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.nccl_transport import parse, verdict

P2P_LOG = """host:1:1 [0] NCCL INFO NCCL version 2.28.3+cuda13.0
host:1:1 [0] NCCL INFO NET/IB : No device found.
host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
host:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
host:2:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
STACKTUNE_RESULT 0 exact
STACKTUNE_RESULT 1 exact
"""


def test_all_pairs_peer_to_peer_pass():
    parsed = parse(P2P_LOG)
    assert parsed["version"] == "2.28.3+cuda13.0"
    assert parsed["pairs"] == [
        {"gpus": [0, 1], "via": ["P2P/CUMEM/read"], "transport": ["P2P"]},
        {"gpus": [1, 0], "via": ["P2P/CUMEM/read"], "transport": ["P2P"]},
    ]
    judged = verdict(parsed)
    assert judged["verdict"] == "pass"
    assert judged["summary"] == "2 GPU pair(s) via P2P; no RDMA NIC (GPUDirect RDMA does not apply)"


def test_shared_memory_is_a_warning():
    log = P2P_LOG.replace("P2P/CUMEM/read", "SHM/direct/direct")
    judged = verdict(parse(log))
    assert judged["verdict"] == "warning"
    assert "GPU 0 -> GPU 1 is staged through host memory (SHM/direct/direct)" in judged["findings"][0]["message"]


def test_network_between_local_gpus_and_a_wrong_result_are_critical():
    log = P2P_LOG.replace("0[0] -> 1[1] via P2P/CUMEM/read", "0[0] -> 1[1] [send] via NET/Socket/0")
    log = log.replace("STACKTUNE_RESULT 1 exact", "STACKTUNE_RESULT 1 wrong")
    judged = verdict(parse(log))
    assert judged["verdict"] == "critical"
    messages = [f["message"] for f in judged["findings"]]
    assert any("wrong result on rank(s) 1" in m for m in messages)
    assert any("GPU 0 -> GPU 1 goes through the network stack (NET/Socket/0)" in m for m in messages)


def test_gdr_disabled_for_an_hca_is_a_warning():
    log = P2P_LOG.replace(
        "NET/IB : No device found.", "GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module or not supported by GPU)"
    )
    judged = verdict(parse(log))
    assert judged["verdict"] == "warning"
    assert judged["summary"].endswith("GPUDirect RDMA mlx5_0 off")


@pytest.mark.parametrize("rc,timed_out,expect", [(1, False, "failed (rc=1)"), (None, True, "did not finish")])
def test_failed_or_hung_ranks_are_critical(rc, timed_out, expect):
    judged = verdict(parse(""), rc=rc, timed_out=timed_out)
    assert judged["verdict"] == "critical"
    assert expect in judged["findings"][0]["message"]


def test_one_gpu_skips():
    judged = verdict(parse("STACKTUNE_SKIP needs 2 GPUs, this host has 1\n"))
    assert judged == {"verdict": "skipped", "findings": [], "summary": "needs 2 GPUs, this host has 1"}
