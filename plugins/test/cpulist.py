# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Jinja test: is a value a well-formed kernel CPU list? Documentation: cpulist.yml."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.cpulist import parse_cpulist


def cpulist(value):
    """True for a kernel CPU list such as 0-15,32-47 whose ranges run forwards."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return False
    try:
        return len(parse_cpulist(str(value))) > 0
    except ValueError:
        return False


class TestModule(object):
    def tests(self):
        return {"cpulist": cpulist}
