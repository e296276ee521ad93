# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which transport NCCL really picks between the GPUs of one host, read from its own log.

"Supports P2P" and "supports RDMA" are claims; NCCL's INFO log at communicator set-up says
what it chose for every channel (``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM``) and
whether GPUDirect RDMA is on for each HCA. :data:`PROGRAM` starts one rank per GPU (up to
a limit) with ``NCCL_DEBUG=INFO``, runs one all_reduce and checks its result;
:func:`parse` reads the log and :func:`verdict` judges it:

- every GPU-to-GPU channel via ``P2P`` (NVLink or PCIe peer access): pass;
- via ``SHM`` (staged through host memory): warning, peer access is off or refused
  (PCIe ACS redirect, IOMMU, ``NCCL_P2P_DISABLE``, a VM without peer support);
- via ``NET`` between GPUs of one host: critical;
- an RDMA NIC whose GPUDirect RDMA NCCL reports disabled: warning.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.common.process import private_program, run_process

CHANNEL = re.compile(
    r"Channel (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+)\[(?P<src_dev>\d+)\] -> (?P<dst>\d+)\[(?P<dst_dev>\d+)\]"
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>\S+)"
)
GDR = re.compile(r"GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<hca>\d+) '(?P<name>[^']+)'")
VERSION = re.compile(r"NCCL version (?P<version>\S+)")
NO_IB = re.compile(r"NET/IB : No device found")
NVLS = re.compile(r"NVLS multicast support is (?P<state>available|not available)")
RESULT = re.compile(r"^STACKTUNE_RESULT (?P<rank>\d+) (?P<result>\S+)$")
SKIP = re.compile(r"^STACKTUNE_SKIP (?P<why>.+)$")
KEEP_LINE = re.compile(r"NCCL INFO (Channel |GPU Direct RDMA|NET/|NCCL version|NVLS|comm 0x)")

PROGRAM = r"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    t = torch.ones(1 << 22, device="cuda")
    for _ in range(3):
        dist.all_reduce(t)
        t.div_(world)
    torch.cuda.synchronize()
    exact = bool(torch.all(t == 1).item())
    dist.destroy_process_group()
    print("STACKTUNE_RESULT %d %s" % (rank, "exact" if exact else "wrong"), flush=True)


if __name__ == "__main__":
    limit = int(sys.argv[1])
    count = torch.cuda.device_count()
    world = min(count, limit)
    if world < 2:
        print("STACKTUNE_SKIP needs 2 GPUs, this host has %d" % count, flush=True)
        sys.exit(0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world, port), nprocs=world)
"""


def parse(text):
    """The transports, GPUDirect RDMA states and results in NCCL's INFO log (and the program's lines)."""
    channels = {}
    gdr = {}
    out = {"version": None, "no_ib_device": False, "nvls": None, "results": {}, "skip": None, "lines": []}
    for raw in (text or "").splitlines():
        line = raw.strip()
        match = RESULT.match(line)
        if match:
            out["results"][int(match.group("rank"))] = match.group("result")
            continue
        match = SKIP.match(line)
        if match:
            out["skip"] = match.group("why")
            continue
        if KEEP_LINE.search(line) and len(out["lines"]) < 200:
            out["lines"].append(line[line.index("NCCL INFO") :])
        match = CHANNEL.search(line)
        if match:
            pair = (int(match.group("src_dev")), int(match.group("dst_dev")))
            if pair[0] != pair[1]:
                channels.setdefault(pair, set()).add(match.group("via"))
            continue
        match = GDR.search(line)
        if match:
            gdr[match.group("name")] = match.group("state") == "Enabled"
            continue
        match = VERSION.search(line)
        if match and out["version"] is None:
            out["version"] = match.group("version")
        if NO_IB.search(line):
            out["no_ib_device"] = True
        match = NVLS.search(line)
        if match:
            out["nvls"] = match.group("state") == "available"
    out["pairs"] = [
        {"gpus": list(pair), "via": sorted(vias), "transport": sorted({v.split("/")[0] for v in vias})}
        for pair, vias in sorted(channels.items())
    ]
    out["gdr"] = [{"hca": name, "enabled": state} for name, state in sorted(gdr.items())]
    return out


def verdict(parsed, rc=0, timed_out=False):
    """``{"verdict": pass|warning|critical|skipped, "findings": [...], "summary": str}``."""
    findings = []

    def add(severity, message):
        findings.append({"severity": severity, "message": message})

    if parsed.get("skip"):
        return {"verdict": "skipped", "findings": [], "summary": parsed["skip"]}
    if timed_out:
        add("critical", "the NCCL ranks did not finish in time (a hang at set-up points at the fabric or P2P)")
    elif rc != 0:
        add("critical", "the NCCL program failed (rc=%s)" % rc)
    wrong = sorted(r for r, v in parsed.get("results", {}).items() if v != "exact")
    if wrong:
        add("critical", "all_reduce gave a wrong result on rank(s) %s" % ", ".join(str(r) for r in wrong))
    pairs = parsed.get("pairs") or []
    if not pairs and rc == 0 and not timed_out:
        add("warning", "NCCL logged no channel (NCCL_DEBUG=INFO lines missing): the transport is unknown")
    for pair in pairs:
        label = "GPU %d -> GPU %d" % tuple(pair["gpus"])
        if "NET" in pair["transport"]:
            add(
                "critical",
                "%s goes through the network stack (%s) although both GPUs are in this host"
                % (label, ", ".join(pair["via"])),
            )
        elif "SHM" in pair["transport"]:
            add(
                "warning",
                "%s is staged through host memory (%s): peer-to-peer access is off or refused (PCIe ACS redirect, "
                "IOMMU, NCCL_P2P_DISABLE, or a VM without peer support)" % (label, ", ".join(pair["via"])),
            )
    for hca in parsed.get("gdr") or []:
        if not hca["enabled"]:
            add(
                "warning",
                "NCCL reports GPUDirect RDMA disabled for %s: traffic to the network is staged through host memory "
                "(nvidia_peermem or DMA-BUF missing, or the GPU and NIC too far apart)" % hca["hca"],
            )
    severities = [f["severity"] for f in findings]
    result = "critical" if "critical" in severities else ("warning" if "warning" in severities else "pass")
    transports = sorted({t for p in pairs for t in p["transport"]})
    summary = "%d GPU pair(s) via %s" % (len(pairs), "/".join(transports) or "nothing logged")
    if parsed.get("gdr"):
        summary += "; GPUDirect RDMA %s" % ", ".join(
            "%s %s" % (h["hca"], "on" if h["enabled"] else "off") for h in parsed["gdr"]
        )
    elif parsed.get("no_ib_device"):
        summary += "; no RDMA NIC (GPUDirect RDMA does not apply)"
    return {"verdict": result, "findings": findings, "summary": summary}


def run(python, max_ranks=8, env=None, timeout=300):
    """Run :data:`PROGRAM` with ``python`` in a private temporary folder; ``{rc, output, timed_out}``."""
    full_env = dict(os.environ)
    full_env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "PYTHONUNBUFFERED": "1"})
    full_env.update(env or {})
    with private_program(PROGRAM, "stacktune-nccl-", "nccl_transport.py") as (tmpdir, prog):
        rc, out, err, timed_out = run_process([python, prog, str(int(max_ranks))], full_env, timeout, cwd=tmpdir)
    # NCCL logs to stdout, Python's errors go to stderr: the parser reads lines from both
    return {"rc": rc, "output": out + ("\n" + err if err else ""), "timed_out": timed_out}


def check(python, max_ranks=8, env=None, timeout=300):
    """Run, parse and judge: the module's whole result."""
    ran = run(python, max_ranks, env, timeout)
    parsed = parse(ran["output"])
    judged = verdict(parsed, ran["rc"], ran["timed_out"])
    judged.update(
        {
            "nccl_version": parsed["version"],
            "pairs": parsed["pairs"],
            "gdr": parsed["gdr"],
            "nvls": parsed["nvls"],
            "log": parsed["lines"],
            "rc": ran["rc"],
        }
    )
    if ran["rc"] != 0 or ran["timed_out"]:
        judged["output_tail"] = ran["output"][-4000:]
    return judged
