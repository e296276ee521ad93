# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The options every module of the on-host journal shares, documented once.

The argument spec they stand for is ``module_utils.engine.journal.JOURNAL_OPTIONS``
(``journal_options()``); a unit test keeps the two the same. Entry points give them once
for all these modules with module_defaults (meta/runtime.yml: the ``journal`` and ``run``
action groups).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # journal_dir: extends_documentation_fragment: stacktune.gpu.journal
    DOCUMENTATION = r"""
options:
  journal_dir:
    description:
      - Directory of the on-host journal (created 0700, its files 0600).
      - Entry points give it once for every module of the C(stacktune.gpu.journal) action group
        (C(module_defaults) C(group/stacktune.gpu.journal)).
    type: path
    default: /var/lib/stacktune
"""

    # root: extends_documentation_fragment: stacktune.gpu.journal.root
    ROOT = r"""
options:
  root:
    description:
      - Alternative filesystem root the journal and the files it names live under, for
        preparing images and for tests. Live changes that act through commands or NVML are
        skipped under an alternative root.
    type: path
    default: /
"""

    # run_id: extends_documentation_fragment: stacktune.gpu.journal.run_id
    RUN_ID = r"""
options:
  run_id:
    description:
      - The stacktune run the task belongs to, recorded in the journal and in the host's lock.
      - While a run holds the host (M(stacktune.gpu.run_lock)), only that run's tasks change it or
        measure on it; a measurement of the run renews its lease while it runs and stops when the
        lease is released, broken or taken over. Entry points give the run id once for every
        module of the C(stacktune.gpu.run) action group (C(module_defaults) C(group/stacktune.gpu.run)).
    type: str
"""

    # check_lock_for, break_lock: extends_documentation_fragment: stacktune.gpu.journal.lock_check
    LOCK_CHECK = r"""
options:
  check_lock_for:
    description:
      - The run id of a read-only run (verify, a drift report). Before anything is read, check
        that no other run holds the host's run lock, as M(stacktune.gpu.run_lock)
        C(state=checked) does, and fail naming the holder and the command to run if it is gone;
        so such a run costs one module run per host. Unset, the lock is not looked at.
    type: str
  break_lock:
    description: With O(check_lock_for), read even while another run holds the lock (C(stacktune_lock_break)).
    type: bool
    default: false
"""
