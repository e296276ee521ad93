# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Why a task failed, from its result (documented in failure_reason.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

UNKNOWN = "unknown error"


def failure_reason(result):
    """The message of the first failed loop item, else the task's own message, else 'unknown error'."""
    if not hasattr(result, "get"):
        return UNKNOWN
    for item in result.get("results") or []:
        if hasattr(item, "get") and item.get("failed"):
            return item["msg"] if "msg" in item else result.get("msg", UNKNOWN)
    return result.get("msg", UNKNOWN)


class FilterModule:
    """stacktune.gpu failure filters."""

    def filters(self):
        return {"failure_reason": failure_reason}
