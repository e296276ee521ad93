# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verify table filter: one layer's verification as a fixed-width table, a list of lines.

Documentation lives next to this file in verify_table.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.states import legend
from ansible_collections.stacktune.gpu.plugins.plugin_utils._verify_table import render_layer
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def verify_table(result):
    """Lines of the table of one layer's verification."""
    result = plain(result)
    if not isinstance(result, dict) or "layer" not in result:
        raise AnsibleFilterError(
            "verify_table expects one layer's result of stacktune.gpu.host_settings state=verify "
            "(an item of journal_info's verified), got %s" % type(result).__name__
        )
    return render_layer(result)


def journal_state_legend(states):
    """``state: meaning`` lines for the journal states given (a list; duplicates once)."""
    states = plain(states)
    if isinstance(states, str) or not isinstance(states, list):
        raise AnsibleFilterError(
            "journal_state_legend expects a list of journal states, got %s" % type(states).__name__
        )
    return legend([str(s) for s in states if s])


class FilterModule:
    """stacktune.gpu verify filters."""

    def filters(self):
        return {"verify_table": verify_table, "journal_state_legend": journal_state_legend}
