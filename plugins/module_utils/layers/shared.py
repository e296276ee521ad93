# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the layer modules share: the error a layer raises for an argument it cannot use, and
readers of registered task results. Standard library only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64


class LayerError(ValueError):
    """An argument a layer cannot use; the message names the filter and the argument (the
    filters turn it into a filter error)."""


def slurped_text(results, path):
    """The text of ``path`` among M(ansible.builtin.slurp) loop results (each with item and content), or ''."""
    for result in results or []:
        if isinstance(result, dict) and result.get("item") == path and result.get("content"):
            return base64.b64decode(result["content"]).decode("utf-8", "replace")
    return ""


def unique(items):
    """The items in order, each once."""
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out
