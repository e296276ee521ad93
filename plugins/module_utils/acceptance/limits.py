# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a link or the memory of a GPU can carry, and the thresholds acceptance judges
measured bandwidth against (``stacktune_acceptance_thresholds``, the memory table).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import (
    NVLINK_DEVICE_TYPE_SWITCH,
    PCIE_GT_S,
)


# --------------------------------------------------------------------------- limits
#
# What a link or the memory can carry, per direction, in GB/s (10^9 bytes per second).
# PCIe: transfer rate (GT/s per lane) x lanes x line-code efficiency / 8 bits. Gen1 and
# Gen2 use 8b/10b, Gen3 to Gen5 128b/130b; this is the payload ceiling before packet
# headers, which no copy reaches. Gen5 x16: 32 x 16 x 128/130 / 8 = 63.0 GB/s.
PCIE_ENCODING = {1: 8.0 / 10.0, 2: 8.0 / 10.0, 3: 128.0 / 130.0, 4: 128.0 / 130.0, 5: 128.0 / 130.0}
# NVLink, per link and direction, by the version NVML reports (nvmlDeviceGetNvLinkVersion):
# NVLink 1 (P100) 20 GB/s, NVLink 2 (V100), 3 (A100) and 4 (H100/H200) 25 GB/s, NVLink 5
# (B200) 50 GB/s. An H200 with 18 links: 450 GB/s each way (900 GB/s both ways).
NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
# Peak memory bandwidth per GPU model (GB/s), from NVIDIA's product specifications,
# matched as a case-insensitive substring of the name NVML and CUDA report, first match
# wins. Only models with a published figure are listed; acceptance_memory_bandwidth_gbps
# adds others. A device copy reads and writes every byte, so it counts both.
MEMORY_BANDWIDTH_GBPS = (
    ("H200", 4800.0),  # H200 SXM and NVL, HBM3e
    ("H100 80GB HBM3", 3350.0),  # H100 SXM5
    ("H100 SXM", 3350.0),
    ("H100 PCIe", 2000.0),  # HBM2e
    ("A100-SXM4-80GB", 2039.0),  # HBM2e
    ("A100-SXM4-40GB", 1555.0),  # HBM2
    ("A100-PCIE-40GB", 1555.0),
)
# Thresholds, as fractions of the limit (the role's acceptance_<name> variables). A
# measurement below *_reject_below rejects, below *_warn_below warns; 0 turns a rule off.
# Calibration: on the H200 test host (PCIe Gen5 x16) a 256 MiB pinned host-to-device copy
# runs at 55.0 GB/s, 87% of 63.0 GB/s; a link trained one generation down or at half
# width gives at most 50%.
THRESHOLDS = {
    "pcie_warn_below": 0.75,
    "pcie_reject_below": 0.5,
    "pcie_remote_warn_below": 0.5,
    "pcie_remote_reject_below": 0.0,
    "p2p_warn_below": 0.6,
    "p2p_reject_below": 0.35,
    "memory_warn_below": 0.7,
    "memory_reject_below": 0.5,
    "clock_min_fraction": 0.85,
    "clock_max_low_share": 0.2,
    "max_uncorrectable_remapped_rows": 8,
}
THRESHOLD_PAIRS = (
    ("pcie_warn_below", "pcie_reject_below"),
    ("pcie_remote_warn_below", "pcie_remote_reject_below"),
    ("p2p_warn_below", "p2p_reject_below"),
    ("memory_warn_below", "memory_reject_below"),
)


def _var(key):
    return "acceptance_%s" % key


def finite_number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _from_text(value, kind):
    """Templated role variables may arrive as text: "0.75" -> 0.75; anything else unchanged."""
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            return value
    return value


def validate_thresholds(given=None):
    """THRESHOLDS with ``given`` over them. Raises ValueError naming the role variable."""
    out = dict(THRESHOLDS)
    for key, raw in (given or {}).items():
        if key not in THRESHOLDS:
            raise ValueError("unknown threshold %r; known: %s" % (key, ", ".join(sorted(THRESHOLDS))))
        if raw is None:
            continue
        value = _from_text(raw, int if key == "max_uncorrectable_remapped_rows" else float)
        if key == "max_uncorrectable_remapped_rows":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError("%s must be a whole number >= 0, got %r" % (_var(key), raw))
        else:
            value = finite_number(value)
            if value is None or not 0.0 <= value <= 1.0:
                raise ValueError("%s must be a fraction from 0 to 1, got %r" % (_var(key), raw))
        out[key] = value
    for warn, reject in THRESHOLD_PAIRS:
        if out[reject] > out[warn]:
            raise ValueError("%s (%s) must not be above %s (%s)" % (_var(reject), out[reject], _var(warn), out[warn]))
    if out["clock_min_fraction"] <= 0:
        raise ValueError("%s must be above 0, got %r" % (_var("clock_min_fraction"), out["clock_min_fraction"]))
    return out


def validate_memory_table(given=None):
    """Extra memory bandwidths (name substring -> GB/s) before the built-in table."""
    table = []
    for name, value in sorted((given or {}).items()):
        number = finite_number(value)
        if not str(name).strip() or number is None or number <= 0:
            raise ValueError(
                "acceptance_memory_bandwidth_gbps must map GPU name parts to GB/s above 0, got %r: %r" % (name, value)
            )
        table.append((str(name), number))
    return tuple(table) + MEMORY_BANDWIDTH_GBPS


def pcie_limit_gbps(gen, width):
    """Per-direction payload limit of a PCIe link in GB/s; None when unknown."""
    if isinstance(gen, bool) or isinstance(width, bool) or gen not in PCIE_ENCODING:
        return None
    if not isinstance(width, int) or width <= 0:
        return None
    return PCIE_GT_S[gen] * width * PCIE_ENCODING[gen] / 8.0


def nvlink_limit_gbps(version, links):
    """Per-direction NVLink bandwidth of ``links`` links of one version; None when unknown."""
    if version not in NVLINK_GBPS_PER_LINK or not isinstance(links, int) or links <= 0:
        return None
    return NVLINK_GBPS_PER_LINK[version] * links


def memory_limit_gbps(name, table=MEMORY_BANDWIDTH_GBPS):
    """Peak memory bandwidth of a GPU model by name; None when the model is not known."""
    if not name:
        return None
    lowered = str(name).lower()
    for part, gbps in table:
        if part.lower() in lowered:
            return gbps
    return None


def _active_links(device):
    nvlink = (device or {}).get("nvlink") or {}
    return [link for link in nvlink.get("links") or [] if isinstance(link, dict) and link.get("active")]


def pcie_limit_of(device):
    pcie = (device or {}).get("pcie") or {}
    gen, width = pcie.get("gen_max"), pcie.get("width_max")
    return pcie_limit_gbps(gen, width), ("PCIe Gen%s x%s" % (gen, width) if gen and width else None)


def p2p_limit(dev_a, dev_b, gpu_bus_ids=()):
    """(GB/s, label) of what carries a copy from GPU a to GPU b, per direction.

    Direct NVLinks between the two: their count times the per-link bandwidth. Both GPUs on
    NVSwitches: the smaller of their active link counts. Otherwise PCIe: the slower of the
    two GPUs' links (a copy between GPUs without NVLink crosses both).
    """
    links_a, links_b = _active_links(dev_a), _active_links(dev_b)
    bus_b = (dev_b or {}).get("pci_bus_id")
    direct = [link for link in links_a if bus_b and link.get("remote_pci_bus_id") == bus_b]

    def version(links):
        versions = [link.get("version") for link in links if link.get("version") in NVLINK_GBPS_PER_LINK]
        return min(versions) if versions else None

    if direct:
        v = version(direct)
        limit = nvlink_limit_gbps(v, len(direct))
        return limit, "NVLink%s x%d" % (v if v else "?", len(direct))

    def switched(links):
        return [
            link
            for link in links
            if link.get("remote_type") == NVLINK_DEVICE_TYPE_SWITCH
            or (link.get("remote_pci_bus_id") and link.get("remote_pci_bus_id") not in gpu_bus_ids)
        ]

    sw_a, sw_b = switched(links_a), switched(links_b)
    if sw_a and sw_b:
        count = min(len(sw_a), len(sw_b))
        v = version(sw_a + sw_b)
        return nvlink_limit_gbps(v, count), "NVLink%s x%d (NVSwitch)" % (v if v else "?", count)
    limit_a, label_a = pcie_limit_of(dev_a)
    limit_b, label_b = pcie_limit_of(dev_b)
    if limit_a is None or limit_b is None:
        return None, None
    return min(limit_a, limit_b), (label_a if limit_a <= limit_b else label_b)
