# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: report_dir
short_description: Where stacktune's controller-side reports go
version_added: 0.2.0
author: stacktune maintainers (@stacktune)
description:
  - The C(reports) directory under the directory C(ansible-playbook) runs from (C(PWD)), when
    the controller user can write there (it exists and is writable, or the directory above it
    is).
  - Otherwise C($XDG_STATE_HOME/stacktune/reports) (C(~/.local/state/stacktune/reports) when
    C(XDG_STATE_HOME) is unset), so a read-only project directory (AWX, an execution
    environment) still gets its reports, and they never go inside an installed collection.
  - The default of C(stacktune_report_dir), C(facts_report_dir), C(fleet_report_dir) and
    C(acceptance_report_dir).
options:
  _terms:
    description:
      - Sub-directories under the reports directory, joined in order (C(facts), C(fleet), a run id).
      - Each one is a single path component (no C(/), not C(.) or C(..), no control character), and the
        result must not resolve (through links that already exist) outside the reports directory;
        anything else fails, naming the term.
    required: false
    type: list
    elements: str
  base:
    description: The reports directory to join the terms under, instead of the one found (C(stacktune_report_dir)).
    required: false
    type: str
"""

EXAMPLES = r"""
- name: Where this run's reports go
  ansible.builtin.debug:
    msg: "{{ lookup('stacktune.gpu.report_dir') }}"

- name: The facts reports
  ansible.builtin.debug:
    msg: "{{ lookup('stacktune.gpu.report_dir', 'facts') }}"

- name: This run's reports under the chosen reports directory
  ansible.builtin.debug:
    msg: "{{ lookup('stacktune.gpu.report_dir', stacktune_run_id, base=stacktune_report_dir) }}"
"""

RETURN = r"""
_raw:
  description: One absolute directory path (created by the task that writes there, not by this lookup).
  type: list
  elements: str
"""

import os

from ansible.errors import AnsibleLookupError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.lookup import LookupBase
from ansible_collections.stacktune.gpu.plugins.module_utils.policy.values import inside


def writable_dir(path):
    """Whether the current user can write in ``path``, or create it in its nearest existing parent."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def report_dir(environ=None, cwd=None):
    """The reports directory for a controller whose environment is ``environ``."""
    environ = os.environ if environ is None else environ
    base = environ.get("PWD") or cwd or os.getcwd()
    here = os.path.join(os.path.abspath(base), "reports")
    if writable_dir(here):
        return here
    home = environ.get("HOME") or os.path.expanduser("~")
    state = environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    return os.path.join(os.path.abspath(state), "stacktune", "reports")


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        base = kwargs.get("base") or report_dir()
        parts = [to_text(t) for t in terms or []]
        try:
            return [inside(base, *parts)]
        except ValueError as exc:
            raise AnsibleLookupError("report_dir: no sub-directory of %s: %s" % (base, exc)) from None
