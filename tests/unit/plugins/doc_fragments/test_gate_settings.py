# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One documentation of the gate's settings: the doc fragment stacktune.gpu.gate_settings is
written by tools/gate_doc_fragment.py from the tables (module_utils/gate/settings.py SETTINGS and
BUDGET) and documents exactly them, and the gate_layer module and the gate's filters take their
options from it, never by hand."""

import ast
import os

import yaml

from ansible_collections.stacktune.gpu.plugins.doc_fragments.gate_settings import ModuleDocFragment
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import BUDGET, SETTINGS

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FRAGMENT = "plugins/doc_fragments/gate_settings.py"


def _mismatches(where, options, table):
    wrong = []
    if list(options) != list(table):
        wrong.append("%s: options %s, the table's %s" % (where, list(options), list(table)))
    for name, row in table.items():
        option = options.get(name) or {}
        for field in ("type", "default"):
            if option.get(field) != getattr(row, field):
                wrong.append(
                    "%s: %s has %s %r, the table's is %r" % (where, name, field, option.get(field), getattr(row, field))
                )
        if not option.get("description"):
            wrong.append("%s: %s has no description" % (where, name))
    return wrong


def fragment_mismatches(fragment=ModuleDocFragment):
    """How the fragment's options differ from the tables, one line each (empty: the same)."""
    settings = yaml.safe_load(fragment.DOCUMENTATION)["options"]
    gate = yaml.safe_load(fragment.GATE)["options"]
    budget = yaml.safe_load(fragment.BUDGET)["options"]
    wrong = _mismatches(FRAGMENT + " DOCUMENTATION", settings, SETTINGS)
    if list(gate) != ["gate"] or gate["gate"].get("type") != "dict" or gate["gate"].get("default") != {}:
        wrong.append(FRAGMENT + " GATE: the one option gate, a dict defaulting to {}")
    wrong += _mismatches(FRAGMENT + " GATE gate", gate.get("gate", {}).get("suboptions") or {}, SETTINGS)
    if list(budget) != ["budget"] or budget["budget"].get("type") != "dict":
        wrong.append(FRAGMENT + " BUDGET: the one option budget, a dict")
    wrong += _mismatches(FRAGMENT + " BUDGET budget", budget.get("budget", {}).get("suboptions") or {}, BUDGET)
    return wrong


def test_the_fragment_documents_the_tables():
    assert fragment_mismatches() == []


def test_the_fragment_is_the_one_its_tables_write():
    """The committed text is tools/gate_doc_fragment.py's (plain strings, as ansible-test,
    ansible-doc and Galaxy read documentation); after a table change, run it with --write."""
    import subprocess
    import sys

    check = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "gate_doc_fragment.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_difference_is_named():
    class Stale:
        DOCUMENTATION = "options: {tail_quantile: {type: float, default: 0.9, description: x}}"
        GATE = ModuleDocFragment.GATE
        BUDGET = ModuleDocFragment.BUDGET

    wrong = fragment_mismatches(Stale)
    assert wrong[0].startswith(FRAGMENT + " DOCUMENTATION: options ['tail_quantile'], the table's")
    assert FRAGMENT + " DOCUMENTATION: tail_quantile has default 0.9, the table's is 0.99" in wrong


def test_the_fragment_says_each_range():
    settings = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    assert settings["tail_quantile"]["description"][0].endswith(" In (0.5, 1).")
    assert settings["tail_tolerance"]["description"][0].endswith(" In [0, 1).")
    budget = yaml.safe_load(ModuleDocFragment.BUDGET)["options"]["budget"]["suboptions"]
    assert budget["max_blocks"]["description"][0] == "Blocks per arm at most. In 2..200."


def _module_doc(name):
    with open(os.path.join(REPO, "plugins", "modules", name + ".py")) as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError(name)


def _filter_doc(name):
    with open(os.path.join(REPO, "plugins", "filter", name + ".yml")) as handle:
        return yaml.safe_load(handle)["DOCUMENTATION"]


def test_gate_layer_takes_gate_and_budget_from_the_fragment():
    doc = _module_doc("gate_layer")
    assert {"stacktune.gpu.gate_settings.gate", "stacktune.gpu.gate_settings.budget"} <= set(
        doc["extends_documentation_fragment"]
    )
    assert not {"gate", "budget"} & set(doc["options"]), "gate_layer documents gate or budget by hand"


def test_the_filters_take_the_settings_and_the_budget_from_the_fragment():
    perf_gate = _filter_doc("perf_gate")
    assert perf_gate["extends_documentation_fragment"] == ["stacktune.gpu.gate_settings"]
    assert not set(perf_gate["options"]) & set(SETTINGS), "perf_gate.yml documents a setting by hand"
    check = _filter_doc("gate_settings_check")
    assert check["extends_documentation_fragment"] == ["stacktune.gpu.gate_settings.budget"]
    assert "budget" not in check["options"]
