# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The topology facts as a table for people (``stacktune.gpu.topology_table``, ``make facts``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.pcie_render import render_lines


# --------------------------------------------------------------------------- table


def _fmt(value, suffix=""):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        value = ("%.1f" % value).rstrip("0").rstrip(".")
    return "%s%s" % (value, suffix)


def _pcie_cell(pcie):
    def part(gen, width):
        if gen is None and width is None:
            return "-"
        return "Gen%s x%s" % (_fmt(gen), _fmt(width))

    return "%s / %s" % (
        part(pcie.get("gen_current"), pcie.get("width_current")),
        part(pcie.get("gen_max"), pcie.get("width_max")),
    )


def _columns(headers, rows):
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return lines


def render_table(facts):
    """Plain-text report of the facts: one row per GPU, host lines, NICs, findings."""
    facts = facts or {}
    lines = []
    gpus = facts.get("gpus") or []
    if gpus:
        rows = []
        for gpu in gpus:
            power = gpu.get("power") or {}
            rows.append(
                [
                    _fmt(gpu.get("index")),
                    _fmt(gpu.get("name")),
                    _fmt(gpu.get("pci_bus_id")),
                    _pcie_cell(gpu.get("pcie") or {}),
                    _fmt(gpu.get("numa_node")),
                    _fmt(gpu.get("local_cpulist")),
                    _fmt(power.get("limit_w"), " W"),
                    _fmt(gpu.get("persistence_mode")),
                    _fmt(gpu.get("temperature_c"), " C"),
                    ",".join(gpu.get("throttle_reasons") or []) or "-",
                ]
            )
        headers = [
            "idx",
            "name",
            "bus id",
            "PCIe cur / max",
            "NUMA",
            "local CPUs",
            "power",
            "persist",
            "temp",
            "throttle",
        ]
        lines.extend(_columns(headers, rows))
    else:
        lines.append("GPUs: none (%s)" % (facts.get("reason") or "no reason recorded"))
    levels = (facts.get("topology") or {}).get("p2p_levels") or []
    if len(levels) > 1:
        # GPU-to-GPU paths, as `nvidia-smi topo -m` names them (NV18 = 18 bonded NVLinks)
        lines.append("")
        names = ["gpu%d" % i for i in range(len(levels))]
        lines.extend(_columns(["p2p"] + names, [[names[i]] + [_fmt(v) for v in row] for i, row in enumerate(levels)]))
    lines.append("")
    host = facts.get("host") or {}
    driver = facts.get("driver") or {}
    libs = facts.get("libraries") or {}
    bios = host.get("bios") or {}
    iommu = host.get("iommu") or {}
    agree = driver.get("agree")
    agree_text = {True: "agree", False: "MISMATCH", None: "unknown"}[agree]
    os_info = host.get("os") or {}
    host_lines = [
        ("kernel", _fmt(host.get("kernel_release"))),
        ("os", _fmt(os_info.get("pretty_name") or os_info.get("id"))),
        (
            "driver",
            "nvml %s / module %s (%s)"
            % (_fmt(driver.get("nvml_version")), _fmt(driver.get("kernel_module_version")), agree_text),
        ),
        ("CUDA driver", _fmt(driver.get("cuda_driver_version"))),
        ("CUDA runtime", _fmt(libs.get("cuda_runtime"))),
        ("cuDNN", _fmt(libs.get("cudnn"))),
        ("NCCL", _fmt(libs.get("nccl"))),
        ("BIOS", "%s %s (%s)" % (_fmt(bios.get("vendor")), _fmt(bios.get("version")), _fmt(bios.get("date")))),
        ("CPU", "%s, %s CPUs" % (_fmt(host.get("cpu_model")), _fmt(host.get("cpu_count")))),
        ("microcode", _fmt(host.get("cpu_microcode"))),
        ("ASPM", _fmt(host.get("aspm_policy"))),
        ("IOMMU", "%s (%s)" % (_fmt(iommu.get("mode")), _fmt(iommu.get("source")))),
        (
            "NUMA",
            "; ".join("node%s: %s" % (n.get("node"), n.get("cpulist") or "-") for n in host.get("numa_nodes") or [])
            or "-",
        ),
    ]
    width = max(len(k) for k, _v in host_lines)
    lines.extend("%s  %s" % (key.ljust(width), value) for key, value in host_lines)
    nics = facts.get("nics") or []
    if nics:
        lines.append("")
        rows = [
            [
                _fmt(n.get("name")),
                _fmt(n.get("kind")),
                _fmt(n.get("pci_address")),
                _fmt(n.get("numa_node")),
                _fmt(n.get("driver")),
                _fmt(n.get("speed_mbps"), " Mb/s"),
                _fmt(n.get("operstate")),
                _fmt(n.get("rdma_device")),
            ]
            for n in nics
        ]
        lines.extend(_columns(["nic", "kind", "pci", "NUMA", "driver", "speed", "state", "rdma"], rows))
    lines.extend(render_lines(facts, _columns))
    lines.append("")
    findings = facts.get("findings") or []
    if findings:
        lines.append("findings:")
        lines.extend("  [%s] %s: %s" % (f.get("severity"), f.get("subject"), f.get("message")) for f in findings)
    else:
        lines.append("findings: none")
    return "\n".join(lines) + "\n"
