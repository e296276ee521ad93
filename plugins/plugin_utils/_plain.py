# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible hands filters lazy template containers; the collection's Python wants plain ones."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def plain(value):
    """Mappings and sequences as plain dicts and lists, all the way down."""
    if isinstance(value, dict) or (hasattr(value, "keys") and hasattr(value, "items")):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
