# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bios audit: its findings, each with the remediation a person carries out (the bios role
prints them as notes through the bios_notes filter)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import version_order
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.findings import finding

ASPM_ARG = re.compile(r"^pcie_aspm(\.policy)?=")


def _or(value, fallback):
    """The value, or the fallback when it is empty (None, '', 0, [])."""
    return value if value else fallback


def _board_words(board):
    """``Supermicro X13DEG-OAD``, the half that is known, or ``unknown``."""
    return " ".join(str(x) for x in (board.get("vendor"), board.get("name")) if x) or "unknown"


def _hex(value):
    """A microcode revision as a number ('0x2b000603' or '2b000603'); 0 when it is none."""
    text = str(value)
    try:
        return int(text, 16)
    except ValueError:
        try:
            return int(float(text))
        except ValueError:
            return 0


def _aspm(host, cmdline, expected):
    if expected == "ignore":
        return []
    aspm = host.get("aspm_policy")
    if "pcie_aspm=off" in cmdline:
        return [
            finding(
                "aspm_left_to_firmware",
                "info",
                "host",
                "pcie_aspm=off is on the kernel command line: the kernel leaves ASPM exactly as the firmware set it",
                remediation="Make sure the BIOS setting 'PCIe ASPM' (or 'ASPM Support') is Disabled; to have the"
                " kernel turn ASPM off itself, replace pcie_aspm=off with pcie_aspm.policy=%s (kernel layer:"
                " kernel_cmdline_args)" % expected,
            )
        ]
    if aspm is None:
        return [
            finding(
                "aspm_policy_unknown",
                "info",
                "host",
                "PCIe ASPM policy is unreadable (/sys/module/pcie_aspm/parameters/policy is absent)",
                remediation="Check in BIOS setup that 'PCIe ASPM' is Disabled; the kernel may be built without ASPM"
                " support",
            )
        ]
    if aspm == expected:
        return []
    args = [a for a in cmdline if ASPM_ARG.match(a)]
    return [
        finding(
            "aspm_policy",
            "warning",
            "host",
            "PCIe ASPM policy is %s, expected %s (bios_expected_aspm); kernel command line: %s. Links in low-power"
            " states down-clock and add wake-up stalls to the tail latency"
            % (aspm, expected, " ".join(args) if args else "no pcie_aspm= argument"),
            remediation="BIOS setup: 'PCIe ASPM' Disabled. Kernel layer: kernel_aspm_policy: %s (live) and"
            " kernel_cmdline_args: {pcie_aspm.policy: %s} (from the next boot)" % (expected, expected),
        )
    ]


def _pcie_links(facts):
    out = []
    for f in _or(facts.get("findings"), []):
        if f.get("id") != "pcie_link_degraded":
            continue
        ev = _or(f.get("evidence"), {})
        out.append(
            finding(
                "pcie_link_below_max",
                f.get("severity"),
                f.get("subject"),
                f.get("message"),
                ev,
                remediation="%sReseat the card and its riser, check that the slot is wired x%s and not bifurcated or"
                " shared, and set the BIOS PCIe link speed of that slot to Auto or Gen%s"
                % (
                    "Check again under load first (an idle GPU lowers its link speed). "
                    if f.get("severity") == "info"
                    else "",
                    _or(ev.get("width_max"), "16"),
                    _or(ev.get("gen_max"), "max"),
                ),
            )
        )
    return out


def _iommu(facts, host):
    mode = _or(_or(host.get("iommu"), {}).get("mode"), "unknown")
    if mode == "on":
        rdma_nics = [n.get("name") for n in _or(facts.get("nics"), []) if n.get("rdma_device")]
        rdma_host = bool(rdma_nics) and int(_or(facts.get("gpu_count"), 0)) > 0
        return [
            finding(
                "iommu_translated",
                "warning" if rdma_host else "info",
                "host",
                "The IOMMU translates device DMA (mode on)"
                + (
                    " on a host with GPUs and RDMA NICs (%s): GPUDirect RDMA traffic pays for the translation or is"
                    " refused" % ", ".join(str(n) for n in rdma_nics)
                    if rdma_host
                    else "; GPUDirect RDMA hosts should run it in pass-through mode"
                ),
                remediation="Kernel layer: kernel_cmdline_args: {iommu: pt} (keep intel_iommu=on / amd_iommu=on only"
                " if VMs or VFIO need them); or disable VT-d / AMD-Vi in BIOS setup when nothing on the host needs an"
                " IOMMU",
            )
        ]
    if mode == "unknown":
        return [
            finding(
                "iommu_unknown",
                "info",
                "host",
                "The IOMMU mode could not be determined from the kernel command line or sysfs",
                remediation="Check dmesg for DMAR/AMD-Vi lines; GPUDirect RDMA hosts should boot with iommu=pt",
            )
        ]
    return []


def _bios_version(bios, board, min_version):
    if not min_version:
        return []
    if not bios.get("version"):
        return [
            finding(
                "bios_version_unknown",
                "warning",
                "host",
                "BIOS version is unknown (DMI not readable); cannot compare with bios_min_version %s" % min_version,
                remediation="Read it with dmidecode -s bios-version as root, or from the BMC",
            )
        ]
    if version_order(bios["version"]) >= version_order(min_version):
        return []
    return [
        finding(
            "bios_version_old",
            "warning",
            "host",
            "BIOS %s (%s, %s) is older than the fleet minimum %s (bios_min_version)"
            % (
                bios["version"],
                _or(bios.get("vendor"), "unknown vendor"),
                _or(bios.get("date"), "no date"),
                min_version,
            ),
            remediation="Update the BIOS to %s or later with the tools of the board vendor (%s), through the BMC;"
            " update every node of a batch together" % (min_version, _board_words(board)),
        )
    ]


def _microcode(host, min_microcode):
    if not min_microcode:
        return []
    mc = host.get("cpu_microcode")
    if not mc:
        return [
            finding(
                "microcode_unknown",
                "warning",
                "host",
                "CPU microcode revision is unknown (/proc/cpuinfo has none); cannot compare with bios_min_microcode %s"
                % min_microcode,
                remediation="Read it with grep -m1 microcode /proc/cpuinfo on the host, or from the BMC",
            )
        ]
    if _hex(mc) >= _hex(min_microcode):
        return []
    return [
        finding(
            "microcode_old",
            "critical",
            "host",
            "CPU microcode %s (%s) is below the fleet minimum %s (bios_min_microcode); older revisions miss security"
            " fixes" % (mc, _or(host.get("cpu_model"), "unknown CPU"), min_microcode),
            remediation="Update the BIOS (it carries the microcode), or install the OS microcode package"
            " (intel-microcode / amd64-microcode, microcode_ctl on EL) and reboot",
        )
    ]


def _inventory(facts, host, bios, board):
    out = [
        finding(
            "firmware_inventory",
            "info",
            "host",
            "BIOS %s (%s, %s), board %s, CPU %s, microcode %s"
            % (
                _or(bios.get("version"), "unknown"),
                _or(bios.get("vendor"), "unknown vendor"),
                _or(bios.get("date"), "no date"),
                _board_words(board),
                _or(host.get("cpu_model"), "unknown"),
                _or(host.get("cpu_microcode"), "unknown"),
            ),
            remediation="Nothing to change: compare across the fleet; nodes of one SKU should match",
        )
    ]
    for g in _or(facts.get("gpus"), []):
        out.append(
            finding(
                "vbios_inventory",
                "info",
                "gpu%s" % g.get("index"),
                "GPU %s %s (%s) VBIOS %s"
                % (
                    g.get("index"),
                    _or(g.get("name"), "unknown"),
                    _or(g.get("pci_bus_id"), "?"),
                    _or(g.get("vbios"), "unknown"),
                ),
                remediation="Nothing to change: compare across the fleet; update VBIOS only with the server vendor"
                " firmware package",
            )
        )
    return out


def bios_findings(facts, expected_aspm, min_version="", min_microcode=""):
    """The audit's findings, each with its remediation, in the order they are printed."""
    host = _or(facts.get("host"), {})
    cmdline = str(_or(host.get("cmdline"), "")).split()
    bios = _or(host.get("bios"), {})
    board = _or(host.get("board"), {})
    min_version = str(min_version) if min_version else ""
    min_microcode = str(min_microcode) if min_microcode else ""
    return (
        _aspm(host, cmdline, expected_aspm)
        + _pcie_links(facts)
        + _iommu(facts, host)
        + _bios_version(bios, board, min_version)
        + _microcode(host, min_microcode)
        + _inventory(facts, host, bios, board)
    )
