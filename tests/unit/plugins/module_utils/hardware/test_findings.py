# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one finding shape, and that every builder of findings uses it."""

from __future__ import absolute_import, division, print_function

import os
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.findings import finding

PLUGINS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "plugins")


def test_shape():
    assert finding("pcie_link_degraded", "warning", "gpu0", "slow") == {
        "id": "pcie_link_degraded",
        "severity": "warning",
        "subject": "gpu0",
        "message": "slow",
        "evidence": {},
    }


def test_evidence_kept_and_remediation_only_when_given():
    evidence = {"gen_max": 5}
    found = finding("x", "info", "host", "m", evidence, remediation="do this")
    assert found["evidence"] is evidence
    assert found["remediation"] == "do this"
    assert "remediation" not in finding("x", "info", None, "m")


def test_no_other_finding_constructor():
    """No plugin code defines a constructor of its own (def _finding) or spells the shape out again
    (plugins/modules is left out: its RETURN samples show the shape)."""
    spelled = re.compile(r"\{\s*\"id\":[^}]*\"severity\":")
    for root, _dirs, files in os.walk(PLUGINS):
        if os.path.basename(root) == "modules":
            continue
        for name in files:
            if not name.endswith(".py") or os.path.join(root, name).endswith(os.path.join("hardware", "findings.py")):
                continue
            with open(os.path.join(root, name)) as handle:
                text = handle.read()
            assert "def _finding(" not in text, name
            assert not spelled.search(text), name
