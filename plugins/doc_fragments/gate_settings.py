# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's settings and its budget, documented once: made from their tables.

The options are written here from ``module_utils.gate.settings`` (``SETTINGS``, ``BUDGET``)
when the fragment is loaded, so a new setting is documented by its table row alone; a unit
test checks that the options equal the tables (names, types, defaults).

- ``stacktune.gpu.gate_settings``: each setting as an option of its own (the perf_gate filter);
- ``stacktune.gpu.gate_settings.gate``: the option ``gate``, a dict of the settings (gate_layer);
- ``stacktune.gpu.gate_settings.budget``: the option ``budget``, ``stacktune_gate_budget``
  (gate_layer, the gate_settings_check filter).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import (
    BUDGET,
    BUDGET_NAME,
    SETTING_PREFIX,
    SETTINGS,
    bounds_text,
)


def _option(row, extra=()):
    return {
        "description": [row.meaning + " In %s." % bounds_text(row)] + list(extra),
        "type": row.type,
        "default": row.default,
    }


def _settings():
    return {name: _option(row) for name, row in SETTINGS.items()}


def _yaml(options):
    # JSON is YAML: the documentation loader reads it as it reads the other fragments
    return json.dumps({"options": options}, indent=2, sort_keys=False)


class ModuleDocFragment(object):
    # extends_documentation_fragment: stacktune.gpu.gate_settings
    DOCUMENTATION = _yaml(_settings())

    # extends_documentation_fragment: stacktune.gpu.gate_settings.gate
    GATE = _yaml(
        {
            "gate": {
                "description": [
                    "The gate's settings (the playbooks' variables C(%s<name>)), each checked here and in the"
                    " playbook's validation with the same rule (module_utils C(gate/settings.py))." % SETTING_PREFIX,
                    "The budget is not among them: give it in O(budget).",
                ],
                "type": "dict",
                "default": {},
                "suboptions": _settings(),
            }
        }
    )

    # extends_documentation_fragment: stacktune.gpu.gate_settings.budget
    BUDGET = _yaml(
        {
            "budget": {
                "description": [
                    "The gate's budget (C(%s)): how long it measures, not how it judges. Errors name"
                    " C(%s.<key>); a key not given takes its default." % (BUDGET_NAME, BUDGET_NAME),
                ],
                "type": "dict",
                "suboptions": {name: _option(row) for name, row in BUDGET.items()},
            }
        }
    )
