#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: journal_info
short_description: List the layers the on-host journal of stacktune holds
version_added: 0.1.0
author: stacktune maintainers (@stacktune)
description:
  - Reads the journal that M(stacktune.gpu.host_settings) keeps on the host and returns one
    row per layer, what it owns now and what last happened to it. Changes nothing.
  - Drift, verify and rollback (the C(drift), C(verify) and C(rollback) entry points of the
    C(stacktune.gpu.stacktune) role) start from this list, so no playbook reads the
    journal's files.
options:
  journal_dir:
    description: Directory of the on-host journal.
    type: path
    default: /var/lib/stacktune
  root:
    description: Alternative filesystem root the journal lives under (images, tests).
    type: path
    default: /
attributes:
  check_mode:
    support: full
    description: Reads only; the same in check mode.
  diff_mode:
    support: none
    description: No diff is returned.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
seealso:
  - module: stacktune.gpu.host_settings
"""

EXAMPLES = r"""
- name: List the layers in the journal
  stacktune.gpu.journal_info:
  register: journaled

- name: Verify each layer
  stacktune.gpu.host_settings:
    layer: "{{ item.layer }}"
    state: verify
  loop: "{{ journaled.layers }}"
"""

RETURN = r"""
layers:
  description: One row per layer in the journal, sorted by name. Empty when the journal does not exist.
  returned: always
  type: list
  elements: dict
  contains:
    layer:
      description: The layer's name.
      type: str
    state:
      description: The layer's journal state (applied, kept, rolled_back, restored ...).
      type: str
    run_id:
      description: The run that last changed the layer.
      type: str
    settings:
      description: How many settings the layer owns now (0 after a rollback or restore).
      type: int
    decision:
      description: The gate's last decision on the layer (keep, rollback ...), null when none.
      type: str
    updated:
      description: When the journal last recorded an action on the layer (UTC, ISO 8601).
      type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils._fileops import rooted
from ansible_collections.stacktune.gpu.plugins.module_utils._journal import Journal


def main():
    module = AnsibleModule(
        argument_spec=dict(
            journal_dir=dict(type="path", default="/var/lib/stacktune"),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    directory = rooted(p["root"], p["journal_dir"]) if p["root"] != "/" else p["journal_dir"]
    try:
        layers = Journal(directory).summary()
    except (OSError, IOError, ValueError) as exc:
        module.fail_json(msg="Failed to read the journal %s: %s" % (p["journal_dir"], exc))
    module.exit_json(changed=False, layers=layers)


if __name__ == "__main__":
    main()
