# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: gate_settings
short_description: The gate's settings as the playbook's variables give them
version_added: 0.2.0
author: stacktune maintainers (@stacktune)
description:
  - One dictionary of every gate setting, C(<name>) from the variable C(stacktune_gate_<name>), for
    every setting in the gate's table of them (C(plugins/module_utils/gate/settings.py)); a variable
    that is not defined gives the setting's default.
  - What the stacktune role hands to the P(stacktune.gpu.gate_settings_check#filter) filter and to
    M(stacktune.gpu.gate_layer) (its O(stacktune.gpu.gate_layer#module:gate)), so a new setting needs no
    line in the role's vars. The values are not checked here; the filter and the module check them.
  - The budget (C(stacktune_gate_budget)) is not a setting and is not in it.
options: {}
"""

EXAMPLES = r"""
- name: The gate's settings of this play
  ansible.builtin.debug:
    msg: "{{ lookup('stacktune.gpu.gate_settings') }}"
"""

RETURN = r"""
_raw:
  description: One dictionary, setting name to value.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.loader import lookup_loader
from ansible.plugins.lookup import LookupBase
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import SETTING_PREFIX, SETTINGS


def variable_names():
    """The playbook's variable of every gate setting, in the table's order."""
    return {name: SETTING_PREFIX + name for name in SETTINGS}


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms or kwargs:
            raise AnsibleLookupError("gate_settings takes no terms or options")
        # the core's vars lookup reads (and templates) each variable as every ansible-core does
        read = lookup_loader.get("ansible.builtin.vars", loader=self._loader, templar=self._templar)
        out = {}
        for name, variable in variable_names().items():
            out[name] = read.run([variable], variables, default=SETTINGS[name].default)[0]
        return [out]
