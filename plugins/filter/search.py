# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a layer of one's own does with candidate values after the journal's searches
(documented in search_settled.yml); it is module_utils/layers/candidates.py's ``settled``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.module_utils.layers import candidates
from ansible_collections.stacktune.gpu.plugins.plugin_utils._plain import plain


def search_settled(values, layer, variable, journaled=None, retry_rejected=False):
    """``{"value", "search", "why"}``: the value the layer puts in place, and whether the gate searches."""
    values = plain(values)
    if not isinstance(values, list) or not values:
        raise AnsibleFilterError("search_settled expects the candidate values as a non-empty list, got %r" % (values,))
    return candidates.settled(layer, variable, values, plain(journaled), bool(retry_rejected))


class FilterModule:
    """stacktune.gpu search filters."""

    def filters(self):
        return {"search_settled": search_settled}
