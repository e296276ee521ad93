"""Write the doc fragment of the gate's settings from their tables.

plugins/doc_fragments/gate_settings.py documents the gate's settings and budget for the
perf_gate filter, gate_layer and the gate_settings_check filter. Its text is made here from
plugins/module_utils/gate/settings.py (SETTINGS, BUDGET) and committed as plain strings, as
every reader of plugin documentation (ansible-doc, ansible-test, Galaxy) expects.

    python3 tools/gate_doc_fragment.py            print the fragment
    python3 tools/gate_doc_fragment.py --write    rewrite plugins/doc_fragments/gate_settings.py
    python3 tools/gate_doc_fragment.py --check    exit 1 when the committed fragment differs

tests/unit/plugins/doc_fragments/test_gate_settings.py runs the check.
"""

import os
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAGMENT = os.path.join(REPO, "plugins", "doc_fragments", "gate_settings.py")
HEADER = '''# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's settings and its budget, documented once.

Written by tools/gate_doc_fragment.py from the tables in module_utils/gate/settings.py
(SETTINGS, BUDGET); do not edit by hand: change a table row and run
`python3 tools/gate_doc_fragment.py --write` (a unit test refuses a fragment that differs).

- ``stacktune.gpu.gate_settings``: each setting as an option of its own (the perf_gate filter);
- ``stacktune.gpu.gate_settings.gate``: the option ``gate``, a dict of the settings (gate_layer);
- ``stacktune.gpu.gate_settings.budget``: the option ``budget``, ``stacktune_gate_budget``
  (gate_layer, the gate_settings_check filter).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
'''


def tables():
    """SETTINGS, BUDGET and their helpers, from this checkout's module_utils."""
    # a checkout (collections/ links the collection) or a copy laid out as ansible_collections/stacktune/gpu
    inside = os.path.join("ansible_collections", "stacktune", "gpu")
    top = REPO[: -len(inside)].rstrip(os.sep) if REPO.endswith(inside) else os.path.join(REPO, "collections")
    sys.path.insert(0, top)
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate import settings

    return settings


def _option(row, bounds_text):
    return {
        "description": [row.meaning + " In %s." % bounds_text(row)],
        "type": row.type,
        "default": row.default,
    }


def fragment_text(settings):
    each = {name: _option(row, settings.bounds_text) for name, row in settings.SETTINGS.items()}
    gate = {
        "gate": {
            "description": [
                "The gate's settings (the playbooks' variables C(%s<name>)), each checked here and in the"
                " playbook's validation with the same rule (module_utils C(gate/settings.py))."
                % settings.SETTING_PREFIX,
                "The budget is not among them: give it in O(budget).",
            ],
            "type": "dict",
            "default": {},
            "suboptions": each,
        }
    }
    budget = {
        "budget": {
            "description": [
                "The gate's budget (C(%s)): how long it measures, not how it judges. Errors name"
                " C(%s.<key>); a key not given takes its default." % (settings.BUDGET_NAME, settings.BUDGET_NAME),
            ]
            + [
                "A budget by name: C(preset) beside the keys (they come first), one of %s."
                % "; ".join(
                    "C(%s) (%s)" % (name, ", ".join("%s %s" % (k, v) for k, v in sorted(keys.items())))
                    for name, keys in sorted(settings.BUDGET_PRESETS.items())
                )
            ],
            "type": "dict",
            "suboptions": {name: _option(row, settings.bounds_text) for name, row in settings.BUDGET.items()},
        }
    }
    parts = [
        ("DOCUMENTATION", "stacktune.gpu.gate_settings", each),
        ("GATE", "stacktune.gpu.gate_settings.gate", gate),
        ("BUDGET", "stacktune.gpu.gate_settings.budget", budget),
    ]
    text = HEADER
    for number, (name, used_as, options) in enumerate(parts):
        body = yaml.safe_dump({"options": options}, sort_keys=False, width=100, default_flow_style=False)
        assert '"""' not in body
        text += "%s    # extends_documentation_fragment: %s\n" % ("\n" if number else "", used_as)
        text += '    %s = r"""\n%s"""\n' % (name, body)
    return text


def main(argv):
    text = fragment_text(tables())
    if "--write" in argv:
        with open(FRAGMENT, "w") as handle:
            handle.write(text)
        return 0
    if "--check" in argv:
        with open(FRAGMENT) as handle:
            if handle.read() != text:
                print("%s differs from its tables: run python3 tools/gate_doc_fragment.py --write" % FRAGMENT)
                return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
