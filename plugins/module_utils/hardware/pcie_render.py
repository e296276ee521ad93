# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The PCIe facts as lines for people, and the comparison of stacktune's path classes with
``nvidia-smi topo -m``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.acs import ACS_SHORT


# --------------------------------------------------------------------------- table


def render_lines(facts, columns):
    """Lines of the facts table: GPU-NIC path classes, GPUDirect verdicts, ACS, peer memory, fabric.

    ``columns(headers, rows)`` lays out a table (the facts table's own layout helper).
    """
    lines = []
    gpudirect = facts.get("gpudirect") or {}
    pairs = gpudirect.get("pairs") or []
    gpu_ids = []
    for pair in pairs:
        if pair["gpu"] not in gpu_ids:
            gpu_ids.append(pair["gpu"])
    if pairs:
        nics = []
        for pair in pairs:
            if pair["nic_address"] not in [n[1] for n in nics]:
                nics.append((pair["nic"], pair["nic_address"]))
        by_key = {(p["gpu"], p["nic_address"]): p for p in pairs}
        rows = [[name, address] + [by_key[(g, address)]["path"] or "-" for g in gpu_ids] for name, address in nics]
        lines.append("")
        lines.extend(columns(["nic", "pci"] + ["gpu%s" % g for g in gpu_ids], rows))
    lines.append("")
    statement = gpudirect.get("statement") or "-"
    lines.append(statement if statement.startswith("GPUDirect RDMA") else "GPUDirect RDMA: " + statement)
    if gpudirect.get("applies"):
        # The pairs that matter: each GPU with its nearest RDMA NIC(s), or all of its
        # RDMA pairs while the paths are unknown; equal verdicts share a line.
        nearest = {n["gpu"]: set(n["nics"]) for n in gpudirect.get("nearest_nic") or [] if n.get("rdma")}
        shown = {}
        for pair in pairs:
            if pair.get("rdma_devices") and (not nearest.get(pair["gpu"]) or pair["nic"] in nearest[pair["gpu"]]):
                shown.setdefault(pair.get("text"), []).append("gpu%s-%s" % (pair["gpu"], pair["nic"]))
        for text, labels in shown.items():
            more = " and %d more" % (len(labels) - 4) if len(labels) > 4 else ""
            lines.append("  %s%s: %s" % (", ".join(labels[:4]), more, text))
        memory = gpudirect.get("peer_memory") or {}
        if memory.get("recorded"):
            dma_buf = {True: "ready", False: "not ready", None: "unknown"}[memory.get("dma_buf")]
            detail = memory.get("dma_buf_reasons") or memory.get("dma_buf_unknown") or []
            lines.append(
                "  peer memory: nvidia_peermem %s; DMA-BUF %s%s"
                % (
                    "loaded" if memory.get("nvidia_peermem") else "not loaded",
                    dma_buf,
                    " (%s)" % "; ".join(detail) if detail else "",
                )
            )
    acs_texts = {}
    for entry in facts.get("pcie_paths") or []:
        for bridge in entry.get("bridges") or []:
            if bridge.get("acs") is not None:
                acs_texts[bridge["address"]] = bridge["acs"]
    redirect = sorted(a for a, acs in acs_texts.items() if acs.get("redirect"))
    unreadable = sorted(a for a, acs in acs_texts.items() if acs.get("config") in ("not_root", "unreadable"))
    if redirect:
        lines.append(
            "ACS redirect: "
            + "; ".join("%s %s" % (a, ",".join(ACS_SHORT[n] for n in acs_texts[a]["redirect"])) for a in redirect)
        )
    elif acs_texts and any(acs.get("config") != "not_recorded" for acs in acs_texts.values()):
        lines.append("ACS redirect: none on %d bridge(s)" % (len(acs_texts) - len(unreadable)))
    if unreadable:
        lines.append("ACS unknown: %s (%s)" % (", ".join(unreadable), acs_texts[unreadable[0]].get("text")))
    fabric = facts.get("fabric") or {}
    if fabric.get("nvswitch"):
        manager = fabric.get("fabric_manager") or {}
        states = {}
        for gpu in fabric.get("gpus") or []:
            if not gpu.get("recorded"):
                key = "not recorded"
            elif gpu.get("supported"):
                key = "%s/%s" % (gpu.get("state"), gpu.get("status"))
            else:
                key = "unsupported"
            states[key] = states.get(key, 0) + 1
        on_pci = fabric.get("nvswitch_pci")
        if manager.get("recorded"):
            agree = {True: "agrees with", False: "DIFFERS from", None: "vs"}[manager.get("agree")]
            fm_text = "%s, %s %s driver %s" % (
                manager.get("active_state") or "state unknown",
                manager.get("version") or "version unknown",
                agree,
                manager.get("driver_version") or "-",
            )
        else:
            fm_text = "not recorded"
        lines.append(
            "NVSwitch: %s on PCI, %d GPU(s) NVLinked to one; fabric manager %s; GPU fabric %s"
            % (
                len(on_pci) if on_pci is not None else "unknown",
                len(fabric.get("gpus_on_nvswitch") or []),
                fm_text,
                ", ".join("%s x%d" % (k, v) for k, v in sorted(states.items())) or "-",
            )
        )
    return lines


# --------------------------------------------------------------------------- nvidia-smi topo -m

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
TOPO_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def parse_nvidia_smi_topo(text):
    """The matrix of ``nvidia-smi topo -m``: {(row, column): cell} with NICn named by the NIC legend.

    Rows and columns are ``GPU0``..., NIC names (``mlx5_0``); affinity columns are left out.
    """
    lines = [_ANSI.sub("", line) for line in (text or "").splitlines()]
    legend = {}
    for line in lines:
        match = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
        if match:
            legend[match.group(1)] = match.group(2)
    header = None
    matrix = {}
    for line in lines:
        if header is not None and (not line.strip() or line.strip().startswith("Legend")):
            break
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            if len(cells) > 1 and cells[0] == "" and cells[1].startswith("GPU"):
                header = [legend.get(c, c) for c in cells[1:]]
            continue
        row = legend.get(cells[0], cells[0])
        for column, cell in zip(header, cells[1:]):
            if column and column not in TOPO_AFFINITY_COLUMNS:
                matrix[(row, column)] = cell
    return matrix


def compare_with_nvidia_smi(facts, matrix):
    """Cells where the facts' classes differ from ``nvidia-smi topo -m`` (parsed by :func:`parse_nvidia_smi_topo`).

    GPU pairs shown as NV# are held against ``topology.p2p_levels``, other GPU pairs
    against ``topology.pcie_levels``, GPU-NIC cells against the ``gpudirect`` pairs. Each
    difference is ``(row, column, ours, nvidia_smi)``; cells nvidia-smi does not show are
    skipped.
    """
    out = []
    topology = facts.get("topology") or {}
    p2p = topology.get("p2p_levels") or []
    levels = topology.get("pcie_levels") or []
    for i, row in enumerate(levels):
        for j, pcie_class in enumerate(row):
            theirs = matrix.get(("GPU%d" % i, "GPU%d" % j))
            if theirs is None:
                continue
            ours = pcie_class
            if theirs.startswith("NV"):
                ours = p2p[i][j] if i < len(p2p) and j < len(p2p[i]) else None
            if ours != theirs:
                out.append(("GPU%d" % i, "GPU%d" % j, ours, theirs))
    for pair in (facts.get("gpudirect") or {}).get("pairs") or []:
        for name in pair.get("rdma_devices") or [pair.get("nic")]:
            theirs = matrix.get(("GPU%s" % pair["gpu"], name))
            if theirs is not None and pair["path"] != theirs:
                out.append(("GPU%s" % pair["gpu"], name, pair["path"], theirs))
    return out
