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
version_added: 0.2.0
author: stacktune maintainers (@stacktune)
description:
  - Reads the journal that M(stacktune.gpu.host_settings) keeps on the host and returns one
    row per layer, what it owns now and what last happened to it. Changes nothing.
  - Drift, verify and rollback (the C(drift), C(verify) and C(rollback) entry points of the
    C(stacktune.gpu.stacktune) role) start from this list, and a tune run reads the host's last
    acceptance record from it (RV(acceptance)), so no playbook reads the journal's files.
  - With I(verify=true) it also verifies every layer's settings against the live and
    persisted state, as M(stacktune.gpu.host_settings) C(state=verify) does for one layer,
    in the same call (RV(verified)); drift and verify cost one module run per host.
options:
  verify:
    description: Also verify every journaled layer (read-only).
    type: bool
    default: false
  unowned_in:
    description:
      - Also look in these directories (and two levels below them) for files that carry
        stacktune's header but that no readable journal record owns (RV(unowned)); stacktune
        wrote them, and no journal knows what they held before.
      - Read after a rollback, this names what the rollback could not put back. In check mode
        the journal still owns the files a real rollback would restore, so they are not named.
    type: list
    elements: path
    default: []
extends_documentation_fragment:
  - stacktune.gpu.attributes
  - stacktune.gpu.attributes.no_diff
  - stacktune.gpu.journal
  - stacktune.gpu.journal.root
  - stacktune.gpu.journal.lock_check
attributes:
  check_mode:
    support: full
    description: Reads only; the same in check mode.
seealso:
  - module: stacktune.gpu.host_settings
"""

EXAMPLES = r"""
- name: List the layers in the journal
  stacktune.gpu.journal_info:
  register: journaled

- name: Name the stacktune files under /etc that no journal owns
  stacktune.gpu.journal_info:
    unowned_in: [/etc]
  register: journaled

- name: List and verify every layer in one call
  stacktune.gpu.journal_info:
    verify: true
  register: journaled

- name: The same for a drift report, refused while another run holds the host
  stacktune.gpu.journal_info:
    verify: true
    check_lock_for: drift-20261201T000000Z
  register: journaled
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
    error:
      description: Why the layer's record could not be read (its state is then C(unreadable)).
      type: str
verified:
  description:
    - With I(verify=true), per readable layer what M(stacktune.gpu.host_settings) C(state=verify)
      returns (C(layer), C(settings), C(drift), C(overridden), C(layer_state), C(notes) ...).
  returned: when verify is true
  type: list
  elements: dict
lock_holder:
  description:
    - With I(check_lock_for), the run that holds the host's lock (null when none), as
      M(stacktune.gpu.run_lock) returns it.
  returned: when check_lock_for is given
  type: dict
acceptance:
  description:
    - The host's last acceptance record (C(acceptance.json) in the journal, written by
      M(stacktune.gpu.gpu_acceptance)) with its C(verdict), C(level), C(time), C(summary),
      C(gpu_count) ...; empty when the host has none or it cannot be used (RV(acceptance_error)).
  returned: always
  type: dict
  sample: {verdict: pass, level: standard, time: "2026-12-01T10:00:00Z", gpu_count: 8}
acceptance_error:
  description:
    - Why the acceptance record that is there cannot be used (not a JSON object, or a file
      another user could have written); the record then counts as none.
  returned: when the record is there but cannot be used
  type: str
unowned:
  description: With I(unowned_in), the files there that carry stacktune's header and that no readable record owns.
  returned: when unowned_in is given
  type: list
  elements: str
  sample: [/etc/nccl.conf]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import journal_options
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import command_runner
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.listing import ListingFailed, read_journal


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **journal_options("journal_dir", "root", "check_lock_for", "break_lock"),
            verify=dict(type="bool", default=False),
            unowned_in=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = read_journal(
            p["journal_dir"],
            p["root"],
            run_command=command_runner(module),
            verify=p["verify"],
            unowned_in=p["unowned_in"],
            check_lock_for=p["check_lock_for"],
            break_lock=p["break_lock"],
        )
    except ListingFailed as exc:
        module.fail_json(msg=exc.msg, **exc.extra)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
