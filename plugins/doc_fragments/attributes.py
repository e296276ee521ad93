# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module attributes the on-host modules share, documented once. A module gives its own
C(check_mode) (what it does in check mode differs per module) and takes these:
``stacktune.gpu.attributes`` (the platform) and ``stacktune.gpu.attributes.no_diff`` (no diff)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # extends_documentation_fragment: stacktune.gpu.attributes
    DOCUMENTATION = r"""
attributes:
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
"""

    # extends_documentation_fragment: stacktune.gpu.attributes.no_diff
    NO_DIFF = r"""
attributes:
  diff_mode:
    support: none
    description: No diff is returned.
"""
