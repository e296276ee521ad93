# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PCIe Access Control Services (ACS) from a device's config space: which redirect bits are set
on the bridges between a GPU and a NIC (set, they send peer-to-peer traffic up to the root
complex).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import struct


# Config space: 4096 bytes with PCIe extended space; a process without CAP_SYS_ADMIN
# reads only the first 64 bytes of sysfs "config" (128 for CardBus bridges).
CONFIG_MAX_BYTES = 4096
CONFIG_BASIC_BYTES = 256
EXT_CAP_START = 0x100
EXT_CAP_MAX = (CONFIG_MAX_BYTES - EXT_CAP_START) // 8
EXT_CAP_ID_ACS = 0x000D
ACS_CAP_OFFSET = 4  # ACS Capability register (16 bits)
ACS_CTRL_OFFSET = 6  # ACS Control register (16 bits)
# ACS Capability / Control bits (PCI_ACS_SV ... PCI_ACS_DT in linux/pci_regs.h), with
# the short names lspci prints.
ACS_BITS = (
    (0x0001, "source_validation", "SrcValid"),
    (0x0002, "translation_blocking", "TransBlk"),
    (0x0004, "p2p_request_redirect", "ReqRedir"),
    (0x0008, "p2p_completion_redirect", "CmpltRedir"),
    (0x0010, "upstream_forwarding", "UpstreamFwd"),
    (0x0020, "p2p_egress_control", "EgressCtrl"),
    (0x0040, "direct_translated_p2p", "DirectTrans"),
)
# Enabled, these send peer-to-peer traffic up to the root complex instead of across the
# switch; they are the bits the kernel clears for pci=disable_acs_redir=.
ACS_REDIRECT_MASK = 0x0004 | 0x0008 | 0x0020
ACS_SHORT = {name: short for _bit, name, short in ACS_BITS}


# --------------------------------------------------------------------------- config space and ACS


def extended_capabilities(data):
    """PCIe extended capabilities in config space bytes: [{"id", "version", "offset"}]."""
    caps = []
    offset = EXT_CAP_START
    seen = set()
    while offset >= EXT_CAP_START and offset + 4 <= len(data) and offset not in seen and len(caps) < EXT_CAP_MAX:
        seen.add(offset)
        header = struct.unpack_from("<I", data, offset)[0]
        if header in (0, 0xFFFFFFFF):
            break
        caps.append({"id": header & 0xFFFF, "version": (header >> 16) & 0xF, "offset": offset})
        offset = (header >> 20) & 0xFFC
    return caps


def _bit_names(value):
    return [name for bit, name, _short in ACS_BITS if value & bit]


def parse_acs(data):
    """ACS capability and control of a bridge from its config space bytes (None: unreadable)."""
    out = {
        "config": None,
        "present": None,
        "offset": None,
        "capability": None,
        "control": None,
        "supported": [],
        "enabled": [],
        "redirect": [],
        "text": None,
    }
    if data is None:
        out["config"] = "unreadable"
        out["text"] = "unknown (config space unreadable)"
        return out
    if len(data) < CONFIG_BASIC_BYTES:
        out["config"] = "not_root"
        out["text"] = "unreadable (not root): %d bytes of config space readable" % len(data)
        return out
    if len(data) <= EXT_CAP_START:
        out["config"] = "no_extended_space"
        out["present"] = False
        out["text"] = "no ACS (no PCIe extended config space)"
        return out
    out["config"] = "full"
    acs = next((c for c in extended_capabilities(data) if c["id"] == EXT_CAP_ID_ACS), None)
    if acs is None or acs["offset"] + ACS_CTRL_OFFSET + 2 > len(data):
        out["present"] = False
        out["text"] = "no ACS capability"
        return out
    capability = struct.unpack_from("<H", data, acs["offset"] + ACS_CAP_OFFSET)[0]
    control = struct.unpack_from("<H", data, acs["offset"] + ACS_CTRL_OFFSET)[0]
    out.update(
        {
            "present": True,
            "offset": acs["offset"],
            "capability": capability,
            "control": control,
            "supported": _bit_names(capability),
            "enabled": _bit_names(control),
            "redirect": _bit_names(control & ACS_REDIRECT_MASK),
        }
    )
    if out["redirect"]:
        out["text"] = "redirects P2P (%s)" % ",".join(ACS_SHORT[n] for n in out["redirect"])
    elif out["enabled"]:
        out["text"] = "no P2P redirect (%s)" % ",".join(ACS_SHORT[n] for n in out["enabled"])
    else:
        out["text"] = "no ACS control bit set"
    return out


def not_recorded_acs():
    out = parse_acs(None)
    out.update({"config": "not_recorded", "text": "not recorded"})
    return out
