# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stacktune GPU acceptance program: run by stacktune.gpu.gpu_acceptance in an interpreter
that has PyTorch. argv[1]: config JSON path; the report is written to config["result_path"].

This file is read back as source (``acceptance/runner.py``) and run by that interpreter as a
script; it imports only the standard library at module level and torch inside ``main``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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
        t = t.detach().contiguous().cpu().reshape(-1)  # noqa: PLW2901
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


# ---------------------------------------------------------------- NUMA, NVML, bandwidths

NVML_ERROR_NOT_SUPPORTED = 3


def _cpulist(text):
    cpus = []
    for part in (text or "").strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.extend(range(int(lo), int(hi.split(":")[0]) + 1))
        else:
            cpus.append(int(part))
    return cpus


def numa_nodes(base="/sys/devices/system/node"):
    # NUMA nodes with CPUs (memory-only nodes cannot be bound by CPU affinity)
    nodes = []
    try:
        names = os.listdir(base)
    except OSError:
        return nodes
    for name in names:
        if not name.startswith("node") or not name[4:].isdigit():
            continue
        try:
            with open(os.path.join(base, name, "cpulist")) as fh:
                cpus = _cpulist(fh.read())
        except (OSError, ValueError):
            continue
        if cpus:
            nodes.append({"node": int(name[4:]), "cpus": cpus})
    return sorted(nodes, key=lambda n: n["node"])


def _sysfs_int(path):
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _sysfs_gen(path):
    # "32.0 GT/s PCIe" -> 5
    try:
        with open(path) as fh:
            rate = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    for gen, gts in ((5, 32.0), (4, 16.0), (3, 8.0), (2, 5.0), (1, 2.5)):
        if abs(rate - gts) < 0.01:
            return gen
    return None


def _s(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _norm_bus(bus):
    # "00000000:3B:00.0" -> "0000:3b:00.0"
    if not bus:
        return None
    parts = _s(bus).strip().lower().split(":")
    if len(parts) == 3:
        parts[0] = parts[0][-4:].rjust(4, "0")
    elif len(parts) == 2:
        parts = ["0000"] + parts
    out = ":".join(parts)
    return out if "." in out else out + ".0"


def _nv(fn, *args):
    # (value, None), (None, "not_supported") or (None, error text)
    if fn is None:
        return None, "not_supported"
    try:
        return fn(*args), None
    except Exception as e:
        if getattr(e, "value", None) == NVML_ERROR_NOT_SUPPORTED or "Not Supported" in str(e):
            return None, "not_supported"
        return None, _err(e)


def nvml_open():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, None
    except Exception as e:
        return None, _err(e)


def nvml_handle(nv, uuid, bus):
    # the NVML handle of a CUDA device, by UUID, else by PCI bus id
    if nv is None:
        return None
    want = (uuid or "").lower().replace("gpu-", "")
    count, _error = _nv(nv.nvmlDeviceGetCount)
    for i in range(count or 0):
        h, err = _nv(nv.nvmlDeviceGetHandleByIndex, i)
        if err:
            continue
        u, _error = _nv(nv.nvmlDeviceGetUUID, h)
        if want and u and _s(u).lower().replace("gpu-", "") == want:
            return h
    if bus:
        h, err = _nv(nv.nvmlDeviceGetHandleByPciBusId, bus)
        if not err:
            return h
    return None


def device_info(torch, nv, g):
    p = torch.cuda.get_device_properties(g)
    uuid = str(getattr(p, "uuid", "") or "") or None
    bus = None
    if getattr(p, "pci_bus_id", None) is not None:
        bus = "%04x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), p.pci_bus_id, getattr(p, "pci_device_id", 0))
    info = {
        "index": g,
        "uuid": uuid,
        "pci_bus_id": bus,
        "numa_node": None,
        "nvml": False,
        "pcie": {},
        "nvlink": {"supported": None, "links": []},
        "max_sm_mhz": None,
        "power_limit_w": None,
    }
    h = nvml_handle(nv, uuid, bus)
    if h is not None:
        info["nvml"] = True
        pci, _error = _nv(nv.nvmlDeviceGetPciInfo, h)
        if pci is not None:
            info["pci_bus_id"] = _norm_bus(pci.busId)
        for key, name in (
            ("gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
            ("width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
            ("gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
            ("width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
        ):
            info["pcie"][key] = _nv(getattr(nv, name, None), h)[0]
        info["max_sm_mhz"] = _nv(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)[0]
        mw = _nv(nv.nvmlDeviceGetEnforcedPowerLimit, h)[0]
        info["power_limit_w"] = mw / 1000.0 if mw else None
        links = []
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            state, err = _nv(nv.nvmlDeviceGetNvLinkState, h, link)
            if err == "not_supported":
                if link == 0:
                    info["nvlink"]["supported"] = False
                    break
                continue
            if err:
                continue
            entry = {"link": link, "active": bool(state)}
            if state:
                entry["version"] = _nv(nv.nvmlDeviceGetNvLinkVersion, h, link)[0]
                rp, _error = _nv(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
                entry["remote_pci_bus_id"] = _norm_bus(rp.busId) if rp is not None else None
                entry["remote_type"] = _nv(getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None), h, link)[0]
            links.append(entry)
        if links:
            info["nvlink"] = {"supported": True, "links": links}
    if info["pci_bus_id"]:
        base = "/sys/bus/pci/devices/%s/" % info["pci_bus_id"]
        node = _sysfs_int(base + "numa_node")
        info["numa_node"] = node if node is not None and node >= 0 else None
        if not info["pcie"].get("gen_max"):
            info["pcie"] = {
                "gen_max": _sysfs_gen(base + "max_link_speed"),
                "width_max": _sysfs_int(base + "max_link_width"),
                "gen_current": _sysfs_gen(base + "current_link_speed"),
                "width_current": _sysfs_int(base + "current_link_width"),
                "source": "sysfs",
            }
    return info, h


def health_snapshot(nv, h, links):
    snap = {}
    v, err = _nv(nv.nvmlDeviceGetRemappedRows, h)
    if v is not None:
        snap["remapped_rows"] = {
            "correctable": int(v[0]),
            "uncorrectable": int(v[1]),
            "pending": bool(v[2]),
            "failure": bool(v[3]),
        }
    else:
        snap["remapped_rows"] = {"not_supported": True} if err == "not_supported" else {"error": err}
    pages = {}
    for key, const, default in (
        ("single_bit", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
        ("double_bit", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1),
    ):
        v, err = _nv(getattr(nv, "nvmlDeviceGetRetiredPages", None), h, getattr(nv, const, default))
        if err == "not_supported":
            pages = {"not_supported": True}
            break
        pages[key] = len(v) if v is not None else None
        if err:
            pages[key + "_error"] = err
    if not pages.get("not_supported"):
        v, err = _nv(getattr(nv, "nvmlDeviceGetRetiredPagesPendingStatus", None), h)
        pages["pending"] = bool(v) if v is not None else None
    snap["retired_pages"] = pages
    counters = {}
    for link in links:
        if not link.get("active"):
            continue
        c = {}
        for key, const, default in (
            ("replay", "NVML_NVLINK_ERROR_DL_REPLAY", 0),
            ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY", 1),
            ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT", 2),
            ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA", 3),
        ):
            c[key] = _nv(nv.nvmlDeviceGetNvLinkErrorCounter, h, link["link"], getattr(nv, const, default))[0]
        counters[str(link["link"])] = c
    snap["nvlink_errors"] = counters
    v, err = _nv(getattr(nv, "nvmlDeviceGetPcieReplayCounter", None), h)
    snap["pcie_replay"] = v
    if err == "not_supported":
        snap["pcie_replay_not_supported"] = True
    return snap


def _median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2.0


def _event_times(torch, dev, fn, iters):
    # milliseconds of fn() per iteration, timed with CUDA events on the device's stream
    times = []
    with torch.cuda.device(dev):
        fn()
        torch.cuda.synchronize(dev)
        for _repeat in range(iters):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
    return times


def _host_buffer(torch, nbytes):
    # a pinned host buffer whose pages were first touched by this thread: allocated
    # pageable, filled with one memset on this thread, then registered with CUDA
    import ctypes

    host = torch.empty(nbytes, dtype=torch.uint8)
    ctypes.memset(host.data_ptr(), 1, nbytes)
    rc = torch.cuda.cudart().cudaHostRegister(host.data_ptr(), nbytes, 0)
    code = int(getattr(rc, "value", rc))
    if code != 0:
        raise RuntimeError("cudaHostRegister failed with error %d" % code)
    return host


def host_copies(torch, g, node, label, cfg):
    nbytes = cfg["copy_bytes"]
    rec = {"gpu": g, "numa": label, "node": node["node"] if node else None, "bytes": nbytes, "error": None}
    old = os.sched_getaffinity(0)
    host = None
    try:
        if node:
            cpus = set(node["cpus"]) & set(old)
            if not cpus:
                raise RuntimeError("no CPU of NUMA node %s is allowed to this process" % node["node"])
            os.sched_setaffinity(0, cpus)
        with torch.cuda.device(g):
            host = _host_buffer(torch, nbytes)
            dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % g)
            for direction, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
                ms = _event_times(torch, g, lambda: dst.copy_(src, non_blocking=True), cfg["copy_iterations"])  # noqa: B023 - called within this iteration
                rec[direction] = {
                    "gbps": nbytes / (_median(ms) / 1000.0) / 1e9,
                    "best_gbps": nbytes / (min(ms) / 1000.0) / 1e9,
                }
            del dev
    except Exception as e:
        rec["error"] = _err(e)
    finally:
        if host is not None:
            try:
                torch.cuda.synchronize(g)
                torch.cuda.cudart().cudaHostUnregister(host.data_ptr())
            except Exception:
                pass
        os.sched_setaffinity(0, old)
    return rec


def memory_copy(torch, g, cfg):
    rec = {"gpu": g, "error": None}
    try:
        free, _total = torch.cuda.mem_get_info(g)
        n = min(cfg["memory_bytes"], free // 4)
        a = torch.empty(n, dtype=torch.uint8, device="cuda:%d" % g).fill_(1)
        b = torch.empty_like(a)
        ms = _event_times(torch, g, lambda: b.copy_(a), cfg["copy_iterations"])  # noqa: F821 - a, b bound above
        rec["bytes"] = n
        rec["gbps"] = 2.0 * n / (_median(ms) / 1000.0) / 1e9
        del a, b
        torch.cuda.empty_cache()
    except Exception as e:
        rec["error"] = _err(e)
    return rec


def peer_copy(torch, a, b, cfg):
    rec = {"src": a, "dst": b, "error": None}
    try:
        rec["access"] = bool(torch.cuda.can_device_access_peer(a, b))
        n = cfg["p2p_bytes"]
        src = torch.empty(n, dtype=torch.uint8, device="cuda:%d" % a).fill_(1)
        dst = torch.empty(n, dtype=torch.uint8, device="cuda:%d" % b)
        reps = 5

        def sync():
            torch.cuda.synchronize(a)
            torch.cuda.synchronize(b)

        dst.copy_(src)
        sync()
        times = []
        for _repeat in range(cfg["copy_iterations"]):
            t0 = time.perf_counter()
            for _copy in range(reps):
                dst.copy_(src, non_blocking=True)
            sync()
            times.append((time.perf_counter() - t0) / reps)
        rec["gbps"] = n / _median(times) / 1e9
        small_src = torch.ones(cfg["latency_bytes"], dtype=torch.uint8, device="cuda:%d" % a)
        small_dst = torch.empty(cfg["latency_bytes"], dtype=torch.uint8, device="cuda:%d" % b)
        small_dst.copy_(small_src)
        sync()
        lat = []
        for _repeat in range(cfg["latency_iterations"]):
            t0 = time.perf_counter()
            small_dst.copy_(small_src)
            sync()
            lat.append(time.perf_counter() - t0)
        rec["latency_us"] = _median(lat) * 1e6
        del src, dst, small_src, small_dst
        torch.cuda.empty_cache()
    except Exception as e:
        rec["error"] = _err(e)
    return rec


def measure_bandwidth(torch, gpus, devices, cfg):
    bw = {
        "host": [],
        "p2p": [],
        "memory": [],
        "remote_note": None,
        "error": None,
        "remote_buffer": bool(cfg.get("remote_buffer")),
    }
    try:
        nodes = numa_nodes()
        allowed = os.sched_getaffinity(0)
        usable = [n for n in nodes if set(n["cpus"]) & allowed]
        bw["numa_nodes"] = [n["node"] for n in nodes]
        if len(usable) < 2:
            bw["remote_note"] = (
                "no remote NUMA node: the host has one NUMA node"
                if len(nodes) < 2
                else "no remote NUMA node: this process may run on one node only"
            )
        for g in gpus:
            local_id = devices[g].get("numa_node")
            if local_id is None and len(nodes) == 1:
                local_id = nodes[0]["node"]
            local = next((n for n in usable if n["node"] == local_id), None)
            remote = next((n for n in usable if n["node"] != local_id), None) if local is not None else None
            if local is not None and remote is None and len(usable) >= 2:
                bw["remote_note"] = "GPU %d: no remote NUMA node to copy from" % g
            if local is None and len(usable) >= 2:
                bw["remote_note"] = "GPU %d: its NUMA node is unknown, local and remote cannot be told apart" % g
            if cfg.get("remote_buffer"):
                if remote is None:
                    bw["remote_note"] = "remote buffer requested but there is no remote NUMA node"
                    bw["host"].append({"gpu": g, "numa": "local", "node": None, "error": "no remote NUMA node"})
                else:
                    bw["host"].append(host_copies(torch, g, remote, "local", cfg))
                continue
            bw["host"].append(host_copies(torch, g, local, "local", cfg))
            if remote is not None:
                bw["host"].append(host_copies(torch, g, remote, "remote", cfg))
        for g in gpus:
            bw["memory"].append(memory_copy(torch, g, cfg))
        for a in gpus:
            for b in gpus:
                if a != b:
                    bw["p2p"].append(peer_copy(torch, a, b, cfg))
    except Exception as e:
        bw["error"] = _err(e)
    return bw


def _clock_sampler(nv, h, stop, out, interval):
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    t0 = time.perf_counter()
    while not stop.wait(interval):
        mw = _nv(nv.nvmlDeviceGetPowerUsage, h)[0]
        out.append(
            {
                "t": round(time.perf_counter() - t0, 2),
                "sm_mhz": _nv(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)[0],
                "power_w": mw / 1000.0 if mw is not None else None,
                "reasons": _nv(reasons, h)[0],
                "temp_c": _nv(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)[0],
            }
        )


def burn_in_worker(rank, gpus, cfg, tmpdir, nvml_ids=None):
    import threading

    import torch

    g = gpus[rank]
    res = {
        "gpu": g,
        "iterations": 0,
        "checks": 0,
        "mismatches": 0,
        "first_mismatch_iteration": None,
        "batch_ms": [],
        "batch_size": 50,
        "error": None,
    }
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
        ids = (nvml_ids or {}).get(str(g)) or {}
        nv, nv_err = nvml_open()
        h = nvml_handle(nv, ids.get("uuid"), ids.get("pci_bus_id"))
        samples, stop = [], threading.Event()
        if h is not None:
            res["max_sm_mhz"] = _nv(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)[0]
            mw = _nv(nv.nvmlDeviceGetEnforcedPowerLimit, h)[0]
            res["power_limit_w"] = mw / 1000.0 if mw else None
            interval = cfg.get("sample_seconds", 0.5)
            sampler = threading.Thread(target=_clock_sampler, args=(nv, h, stop, samples, interval), daemon=True)
            sampler.start()
        else:
            res["sampler_error"] = nv_err or "no NVML handle for GPU %d" % g
        deadline = time.perf_counter() + cfg["burn_in_seconds"]
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        bs = res["batch_size"]
        while time.perf_counter() < deadline:
            start.record()
            for _repeat in range(bs):
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
        stop.set()
        res["samples"] = samples
        res["gemm_n"] = n
    except Exception as e:
        res["error"] = _err(e)
    _write(os.path.join(tmpdir, "burn_in_gpu%d.json" % g), res)


def _run_spawned(torch, fn, args, nprocs, timeout_s):
    import torch.multiprocessing as mp

    ctx = mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
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
    nv, nv_err = nvml_open()
    devices, handles = {}, {}
    for g in gpus:
        try:
            devices[g], handles[g] = device_info(torch, nv, g)
        except Exception as e:
            devices[g], handles[g] = {"index": g, "error": _err(e)}, None
    report["devices"] = [devices[g] for g in gpus]
    health = {"error": None if nv is not None else "pynvml: %s" % nv_err, "before": {}, "after": {}}
    report["health"] = health
    for g in gpus:
        if handles[g] is not None:
            health["before"][str(g)] = health_snapshot(nv, handles[g], devices[g]["nvlink"]["links"])
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    first = gpus[0]
    for g in gpus:
        p = torch.cuda.get_device_properties(g)
        entry = {
            "index": g,
            "name": p.name,
            "uuid": str(getattr(p, "uuid", "")) or None,
            "total_memory_mib": p.total_memory // (1024 * 1024),
            "rounds": [],
            "error": None,
        }
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
    coll["error"] = _run_spawned(
        torch, allreduce_worker, (world, gpus, cfg, tmpdir), world, cfg["collective_timeout"] + 120
    )
    coll["wall_ms"] = _ms(t0)
    for rank in range(world):
        path = os.path.join(tmpdir, "allreduce_rank%d.json" % rank)
        if os.path.exists(path):
            with open(path) as fh:
                coll["ranks"].append(json.load(fh))
    report["collective"] = coll
    _write(result_path, report)

    if cfg.get("bandwidth"):
        torch.use_deterministic_algorithms(False)
        report["bandwidth"] = measure_bandwidth(torch, gpus, devices, cfg)
        torch.use_deterministic_algorithms(True)
        _write(result_path, report)

    if cfg.get("burn_in"):
        burn = {"seconds": cfg["burn_in_seconds"], "gpus": [], "error": None}
        ids = {str(g): {"uuid": devices[g].get("uuid"), "pci_bus_id": devices[g].get("pci_bus_id")} for g in gpus}
        burn["error"] = _run_spawned(
            torch, burn_in_worker, (gpus, cfg, tmpdir, ids), world, cfg["burn_in_seconds"] + 300
        )
        for g in gpus:
            path = os.path.join(tmpdir, "burn_in_gpu%d.json" % g)
            if os.path.exists(path):
                with open(path) as fh:
                    burn["gpus"].append(json.load(fh))
        report["burn_in"] = burn
        for entry in report["gpus"]:
            g = entry["index"]
            entry["rounds"].append(four_step(torch, g, cfg, cfg["rounds"] + 1, "after_burn_in", False))
    for g in gpus:
        if handles[g] is not None:
            health["after"][str(g)] = health_snapshot(nv, handles[g], devices[g]["nvlink"]["links"])
    _write(result_path, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
