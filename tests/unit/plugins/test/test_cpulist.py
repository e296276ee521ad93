# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cpulist test: the CPU lists the IRQ layer accepts, and the ones it refuses."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible_collections.stacktune.gpu.plugins.test import cpulist as plugin

cpulist = plugin.cpulist


@pytest.mark.parametrize("value", ["0", "0-15", "0-15,32-47", "3,1,2", " 0-3 ", 7, "8191"])
def test_accepts_kernel_cpu_lists(value):
    assert cpulist(value) is True


@pytest.mark.parametrize(
    "value", ["7-3", "a,b", "", "0-", "-3", "0--3", "0;1", ["0-3"], None, True, "0-99999999", "0,,1"]
)
def test_refuses_everything_else(value):
    assert cpulist(value) is False


def test_registered_as_cpulist():
    assert plugin.TestModule().tests() == {"cpulist": cpulist}
