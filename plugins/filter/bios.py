# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bios audit's notes from the host facts (documented in bios_notes.yml); the findings are
module_utils/hardware/bios.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.bios import bios_findings
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain

# A note is a finding as the bios role shows it (bios_notes): its message is the note.
NOTE_KEYS = ("id", "severity", "subject", "note", "remediation")


def bios_notes(facts, expected_aspm, min_version="", min_microcode=""):
    """The audit's notes: ``{id, severity, subject, note, remediation}`` per finding."""
    facts = plain(facts)
    if not isinstance(facts, dict):
        raise AnsibleFilterError(
            "bios_notes expects ansible_facts.stacktune (gpu_topology_facts), got %s" % type(facts).__name__
        )
    return [
        {key: f["message" if key == "note" else key] for key in NOTE_KEYS}
        for f in bios_findings(facts, expected_aspm, min_version, min_microcode)
    ]


class FilterModule:
    """stacktune.gpu bios filters."""

    def filters(self):
        return {"bios_notes": bios_notes}
