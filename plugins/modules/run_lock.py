#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: run_lock
short_description: Take or release the host lock a whole stacktune run holds
version_added: 0.1.0
description:
  - A tuning run takes this lock at its start and releases it at its end. While one run
    holds it, a second run against the same host is refused with a message naming the
    holder (or waits up to I(wait) seconds), and M(stacktune.gpu.host_settings) refuses
    every write of any other run id, so two runs never interleave writes.
  - The lock is a lease stored in C(<journal_dir>/run.lock) (0600). Each write of the run
    that holds it renews the lease. A run that was killed leaves the lease behind until
    it expires after I(ttl) seconds; release it earlier with I(state=unlocked) and
    I(force=true) once you know that run is gone.
  - With I(recover=true), taking the lock also puts back every layer that an interrupted
    run left mid-apply (C(applying)) or applied but never judged by the gate (C(applied)
    by another run id), to the snapshot taken before that apply. The run that follows then
    starts from the same state an uninterrupted run would have.
  - The task reports C(changed) only when it recovered layers or took over (or released)
    another run's lock; a run taking and releasing its own lease leaves the host's
    configuration as it was.
author: stacktune maintainers (@stacktune)
options:
  state:
    description:
      - C(locked) takes (or renews) the lock; C(unlocked) releases it. Releasing a lock that
        another run holds leaves it in place (without I(force)), so a refused run's cleanup
        never frees the host under the run that holds it.
    type: str
    choices: [locked, unlocked]
    default: locked
  run_id:
    description: Id of the run that holds the lock; the same id renews it.
    type: str
    required: true
  owner:
    description: Who runs it (for example the controller user and host), shown to a second run.
    type: str
  ttl:
    description: Lease length in seconds; each write of the holding run renews it.
    type: int
    default: 3600
  wait:
    description: Seconds to wait for another run's lease to be released before failing.
    type: int
    default: 0
  force:
    description:
      - Take or release the lock even though another run id holds a live lease. Only for a
        run that is known to be gone (killed controller, lost connection).
    type: bool
    default: false
  recover:
    description: With I(state=locked), put back the layers an interrupted run left undecided.
    type: bool
    default: true
  journal_dir:
    description: Directory of the on-host journal.
    type: path
    default: /var/lib/stacktune
  root:
    description: Alternative filesystem root, as for M(stacktune.gpu.host_settings).
    type: path
    default: /
attributes:
  check_mode:
    support: full
    description: Reports whether another run's lock would be broken and what would be recovered; writes nothing.
  diff_mode:
    support: none
    description: No diff is returned.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
seealso:
  - module: stacktune.gpu.host_settings
"""

EXAMPLES = r"""
- name: Take the host for this run (a second run is refused, naming this one)
  stacktune.gpu.run_lock:
    state: locked
    run_id: "{{ stacktune_run_id }}"
    owner: "{{ lookup('ansible.builtin.env', 'USER') }}@{{ lookup('ansible.builtin.pipe', 'hostname') }}"

- name: Give the host back at the end of the run
  stacktune.gpu.run_lock:
    state: unlocked
    run_id: "{{ stacktune_run_id }}"

- name: A run was killed - release its lock by hand
  stacktune.gpu.run_lock:
    state: unlocked
    run_id: manual
    force: true
"""

RETURN = r"""
holder:
  description: The lock as it is now (null when free).
  returned: always
  type: dict
previous:
  description: The lock as it was found (null when free); C(expired) says whether its lease had run out.
  returned: always
  type: dict
recovered:
  description: Layers put back to their snapshot because an interrupted run left them undecided.
  returned: always
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils._engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils._fileops import rooted
from ansible_collections.stacktune.gpu.plugins.module_utils._journal import HostLocked, Journal, LockTimeout, RunLock
from ansible_collections.stacktune.gpu.plugins.module_utils._kind_base import Context, SpecError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="locked", choices=["locked", "unlocked"]),
            run_id=dict(type="str", required=True),
            owner=dict(type="str"),
            ttl=dict(type="int", default=3600),
            wait=dict(type="int", default=0),
            force=dict(type="bool", default=False),
            recover=dict(type="bool", default=True),
            journal_dir=dict(type="path", default="/var/lib/stacktune"),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["ttl"] < 1 or p["wait"] < 0:
        module.fail_json(msg="Failed to validate run_lock: ttl must be >= 1 and wait >= 0")

    def run_command(argv):
        binary = module.get_bin_path(argv[0])
        if binary is None:
            return 127, "", "No such file: %s" % argv[0]
        return module.run_command([binary] + list(argv[1:]))

    journal = Journal(rooted(p["root"], p["journal_dir"]) if p["root"] != "/" else p["journal_dir"])
    lock = RunLock(journal)
    deadline = time.time() + p["wait"]
    verb = "take" if p["state"] == "locked" else "release"
    result = {"changed": False, "holder": None, "previous": None, "recovered": [], "notes": []}
    while True:
        locked = False
        try:
            if not module.check_mode:
                journal.lock(60)
                locked = True
            if p["state"] == "locked":
                _taken, result["previous"] = lock.take(
                    p["run_id"], p["owner"], p["ttl"], force=p["force"], check_mode=module.check_mode
                )
                if p["recover"]:
                    for layer in journal.layers():
                        ctx = Context(layer, root=p["root"], run_command=run_command)
                        engine = Engine(ctx, journal, check_mode=module.check_mode)
                        outcome = engine.recover(p["run_id"])
                        if outcome["changed"]:
                            result["recovered"].append(layer)
                            result["notes"].extend(outcome["notes"])
            else:
                _released, result["previous"] = lock.release(
                    p["run_id"], force=p["force"], check_mode=module.check_mode
                )
            previous = result["previous"]
            result["changed"] = bool(result["recovered"]) or bool(previous and previous["run_id"] != p["run_id"])
            result["holder"] = lock.holder()
            break
        except HostLocked as exc:
            if time.time() >= deadline:
                module.fail_json(msg="Failed to %s the run lock: %s" % (verb, exc), **result)
        except (LockTimeout, SpecError, OSError, IOError, ValueError) as exc:
            module.fail_json(msg="Failed to %s the run lock: %s" % (verb, exc), **result)
        finally:
            if locked:
                journal.unlock()
        time.sleep(1)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
