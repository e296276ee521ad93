# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate's settings and its budget, documented once.

Written by tools/gate_doc_fragment.py from the tables in module_utils/gate/settings.py
(SETTINGS, BUDGET); do not edit by hand: change a table row and run
`python3 tools/gate_doc_fragment.py --write` (a unit test refuses a fragment that differs).

- ``stacktune.gpu.gate_settings``: each setting as an option of its own (the perf_gate filter);
- ``stacktune.gpu.gate_settings.gate``: the option ``gate``, a dict of the settings (gate_layer);
- ``stacktune.gpu.gate_settings.budget``: the option ``budget``, ``stacktune_gate_budget``
  (gate_layer, the gate_settings_check filter).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # extends_documentation_fragment: stacktune.gpu.gate_settings
    DOCUMENTATION = r"""
options:
  tail_quantile:
    description:
    - The tail quantile judged; the deciding tail statistic of a block is the mean of its slowest 1 -
      tail_quantile share of steps. In (0.5, 1).
    type: float
    default: 0.99
  tail_tolerance:
    description:
    - How much slower (as a fraction) the tail may get before it is a regression (0.05 = 5%). In [0, 1).
    type: float
    default: 0.05
  min_gain:
    description:
    - Smallest throughput or median change (as a fraction) that counts; also the tolerance for throughput
      and median regressions. In [0, 1).
    type: float
    default: 0.02
  confidence:
    description:
    - Confidence over the whole sequence of looks at one layer (each interval's with a single look). In
      (0.5, 1).
    type: float
    default: 0.95
  stall_factor:
    description:
    - Blocks only. A step slower than this many times the median step before is a stall. In (1, 100].
    type: float
    default: 3.0
  stall_tolerance:
    description:
    - Blocks only. Rise of the share of stalled steps tolerated (0.005 = half a percentage point). In
      [0, 1).
    type: float
    default: 0.005
  max_slowdown:
    description:
    - Searches with objective efficiency only. How much lower (as a fraction) the throughput may be than
      with the host's own value for a candidate that spends less energy per step (0.05 = 5%). In [0, 1).
    type: float
    default: 0.05
"""

    # extends_documentation_fragment: stacktune.gpu.gate_settings.gate
    GATE = r"""
options:
  gate:
    description:
    - The gate's settings (the playbooks' variables C(stacktune_gate_<name>)), each checked here and in
      the playbook's validation with the same rule (module_utils C(gate/settings.py)).
    - 'The budget is not among them: give it in O(budget).'
    type: dict
    default: {}
    suboptions:
      tail_quantile:
        description:
        - The tail quantile judged; the deciding tail statistic of a block is the mean of its slowest
          1 - tail_quantile share of steps. In (0.5, 1).
        type: float
        default: 0.99
      tail_tolerance:
        description:
        - How much slower (as a fraction) the tail may get before it is a regression (0.05 = 5%). In [0,
          1).
        type: float
        default: 0.05
      min_gain:
        description:
        - Smallest throughput or median change (as a fraction) that counts; also the tolerance for throughput
          and median regressions. In [0, 1).
        type: float
        default: 0.02
      confidence:
        description:
        - Confidence over the whole sequence of looks at one layer (each interval's with a single look).
          In (0.5, 1).
        type: float
        default: 0.95
      stall_factor:
        description:
        - Blocks only. A step slower than this many times the median step before is a stall. In (1, 100].
        type: float
        default: 3.0
      stall_tolerance:
        description:
        - Blocks only. Rise of the share of stalled steps tolerated (0.005 = half a percentage point).
          In [0, 1).
        type: float
        default: 0.005
      max_slowdown:
        description:
        - Searches with objective efficiency only. How much lower (as a fraction) the throughput may be
          than with the host's own value for a candidate that spends less energy per step (0.05 = 5%).
          In [0, 1).
        type: float
        default: 0.05
"""

    # extends_documentation_fragment: stacktune.gpu.gate_settings.budget
    BUDGET = r"""
options:
  budget:
    description:
    - 'The gate''s budget (C(stacktune_gate_budget)): how long it measures, not how it judges. Errors
      name C(stacktune_gate_budget.<key>); a key not given takes its default.'
    - 'A budget by name: C(preset) beside the keys (they come first), one of C(default) (max_blocks 8,
      max_seconds 1800, max_windows 20, min_blocks 4, window_s 3); C(small_changes) (max_blocks 16, max_seconds
      1800, max_windows 40, min_blocks 4, window_s 3).'
    type: dict
    suboptions:
      min_blocks:
        description:
        - Blocks per arm before the first look. In 2..50.
        type: int
        default: 4
      max_blocks:
        description:
        - Blocks per arm at most. In 2..200.
        type: int
        default: 8
      max_seconds:
        description:
        - Seconds of measuring per layer at most. In 1..86400.
        type: int
        default: 1800
      window_s:
        description:
        - Seconds per window of a live trial. In 1..600.
        type: int
        default: 3
      max_windows:
        description:
        - Windows per arm at most in a live trial. In 2..1000.
        type: int
        default: 20
"""
