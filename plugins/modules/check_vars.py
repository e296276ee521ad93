#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: check_vars
short_description: Check a role's variables strictly against its argument spec before anything changes
version_added: 0.2.0
author: stacktune maintainers (@stacktune)
description:
  - "An action plugin: it runs on the controller and touches no host."
  - Reads the calling role's C(meta/argument_specs.yml) and checks every option of one entry
    point against the variable's value as the role would see it (templated).
  - "Stricter than Ansible's own role argument validation, which converts where it can
    (C(7) passes as a list) but hands the role the variable as written: here a list must be
    a list, a mapping a mapping, a number a number, and choices hold for every element."
  - Every message names the variable, the expected form and the value given; all bad
    variables are reported at once.
  - Every role of the collection calls it first, so a role included directly validates its
    variables like C(tune.yml) does.
  - "Every text of a variable that lands in a line of a file a shell sources or a program reads line by
    line (C(numa_irq_irqbalance_args), C(kernel_sysctl), C(nccl_env) ...) must be plain text on that one
    line: no line break (none of the characters Python's C(str.splitlines) splits on, such as U+2028),
    no control character, no C($) (command substitution, expansion), backtick, quote or backslash.
    The settings engine refuses the same values, so a role cannot write past this check."
  - "A value that names a file or directory (C(layer_name), C(stacktune_run_id), the host's inventory
    name, which names its report files) must be one path component: no C(/), not C(.) or C(..), no
    control character; C(stacktune_run_id) must also stay inside C(stacktune_report_dir). Both are checked
    in every role, whenever they are defined."
  - A variable the collection no longer reads (C(metrics_textfile_path), C(acceptance_metrics_path)) is refused
    wherever it is set, naming the variable that replaced it, so a run never ignores it silently.
options:
  entry_point:
    description: The entry point of the argument spec whose options are checked.
    type: str
    default: main
  role_path:
    description: The role directory; defaults to the role the task belongs to.
    type: path
  skip:
    description: Options not to check (checked elsewhere with a more specific message).
    type: list
    elements: str
    default: []
  typos:
    description:
      - Also refuse a variable that no role of the collection declares but that is within two
        edits of one that does (C(stacktune_layer), C(kernel_sysctls)). Misspelled in group_vars,
        it would be ignored and the run would tune with the defaults. The message names the
        variable meant. Variables of other roles that look nothing like these
        (C(kernel_settings_sysctl)) are never reported; C(stacktune_allow_unknown_vars=true)
        turns the check off.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Checks the same way in check mode; it never changes anything.
  diff_mode:
    support: none
    description: Nothing to show a diff of.
  platform:
    support: full
    platforms: all
    description: Runs on the controller only; the host is not contacted.
notes:
  - Ranges and relations between variables are checked by each role's C(validate) tasks after this.
"""

EXAMPLES = r"""
- name: Check this role's variables (first task of tasks/validate.yml)
  stacktune.gpu.check_vars:

- name: Check the variables of another entry point
  stacktune.gpu.check_vars:
    entry_point: verify
"""

RETURN = r"""
checked:
  description: The variables that were checked.
  returned: always
  type: list
  elements: str
errors:
  description: One message per variable the spec does not describe.
  returned: failed
  type: list
  elements: str
"""
