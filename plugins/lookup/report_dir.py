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
    description: Sub-directories under the reports directory, joined in order (C(facts), C(fleet)).
    required: false
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Where this run's reports go
  ansible.builtin.debug:
    msg: "{{ lookup('stacktune.gpu.report_dir') }}"

- name: The facts reports
  ansible.builtin.debug:
    msg: "{{ lookup('stacktune.gpu.report_dir', 'facts') }}"
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
        parts = [to_text(t) for t in terms or []]
        for part in parts:
            if not part or part.startswith("/") or ".." in part.split("/"):
                raise AnsibleLookupError("report_dir: %r is no sub-directory name" % part)
        return [os.path.join(report_dir(), *parts)]
