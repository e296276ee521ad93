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
short_description: Take, check or release the lock a whole stacktune run holds on a host
version_added: 0.2.0
description:
  - Every stacktune entry point that changes a host (tune, drift with fixing, rollback,
    calibrate, acceptance) takes this lock first and releases it at its end. While one run
    holds it, a second run against the same host is refused with a message naming the
    holder (or waits up to I(wait) seconds), and M(stacktune.gpu.host_settings) refuses
    every write of any other run id, so two runs never interleave writes.
  - There is one lock per host, C(/var/lib/stacktune/run.lock), whatever I(journal_dir),
    two runs with different journal directories still exclude each other.
  - The lock is a short lease (I(ttl)) that the run renews with every engine write and
    every measured block. It records the run id, the owner, the controller (host, boot,
    user and the pid of its ansible-playbook process) and the entry point. A killed
    controller's lease runs out after I(ttl) seconds; the action plugin of this module lets
    a later run from the same controller take it over at once when that pid is gone.
  - The lease's expiry is judged on the host's boot clock (C(CLOCK_BOOTTIME)), which a step of
    the wall clock (NTP, a resumed VM) does not move; wall time counts only across a reboot. A
    renewal that sees the wall clock jump records it in the lease and says so.
  - A lease with the same run id taken from another controller process is another run's and
    is refused. A lock record that cannot be read (torn, not JSON) is refused naming the
    file, never read as a free host; I(force) replaces it.
  - A release never needs free space. When the record cannot be rewritten (a full disk), it
    is emptied, which frees the host.
  - A run whose lease was released, broken or taken over is refused every later write
    (C(lease_lost)), so a worker process that outlived its controller stops without
    touching the host.
  - With I(recover=true), taking the lock also puts back every layer that an interrupted
    run left mid-apply (C(applying)), switched off for a measurement (C(suspended)) or
    applied but never judged by the gate (C(applied) by another run id), to the snapshot
    taken before that apply, and records the interruption. The run that follows then starts
    from the same state an uninterrupted run would have, and measures those layers again.
  - The task reports C(changed) only when it recovered layers or took over (or released)
    another run's lock; a run taking and releasing its own lease leaves the host's
    configuration as it was.
author: stacktune maintainers (@stacktune)
options:
  state:
    description:
      - C(locked) takes (or renews) the lock; C(unlocked) releases it; C(checked) only fails
        when another run holds a live lease (read-only entry points such as verify use it).
      - A run whose lease another ended (the host's watchdog after the lease ran out, a
        broken or taken-over lease) is refused C(locked); C(checked) and C(unlocked) succeed
        and return how it ended (RV(lease_ended)).
      - Releasing a lock that another run holds leaves it in place (without I(force)), so a
        refused run's cleanup never frees the host under the run that holds it.
    type: str
    choices: [locked, unlocked, checked]
    default: locked
  run_id:
    description: Id of the run that holds the lock; the same id renews it.
    required: true
  owner:
    description: Who runs it (for example the controller user and host), shown to a second run.
    type: str
  controller:
    description:
      - Where the run's controller process lives (C(host), C(boot_id), C(user), C(pid),
        C(pid_start)); the action plugin fills it in. Recorded with the lease.
    type: dict
  takeover:
    description:
      - Take over the live lease of this run id (and only of it), because its controller
        process is known to be gone. The action plugin sets it after checking the pid.
    type: str
  entry:
    description: The entry point that takes the lock (tune, rollback, drift ...), shown to a second run.
    type: str
  ttl:
    description: Lease length in seconds; each write and each measured block of the holding run renews it.
    type: int
    default: 300
  wait:
    description: Seconds to wait for another run's lease to be released before failing.
    type: int
    default: 0
  force:
    description:
      - Take or release the lock even though another run id holds a live lease. Only for a
        run that is known to be gone (killed controller, lost connection). With
        I(state=checked), go on despite another run's lease.
    type: bool
    default: false
  recover:
    description: With I(state=locked), put back the layers an interrupted run left undecided.
    type: bool
    default: true
  watch:
    description:
      - "With I(state=locked), start the run's watchdog on the host (unless it runs): a small
        process that holds the host's C(run.hold) flock for the run's whole length (no other
        run takes the host while it runs, whatever the clocks say or the lease record holds),
        puts back every layer the run left undecided once the run's lease expires (its
        controller cut off - powered off, the network gone) or its controller process on this
        machine is gone (stopped by a signal), releases the lease with a note of what it put
        back and what to run (shown by the next run), and ends as soon as the run no longer
        holds the host. It never ends a lease whose controller process runs on this machine.
        Every entry point that takes the host sets it."
    type: bool
    default: false
    version_added: 0.2.0
extends_documentation_fragment:
  - stacktune.gpu.attributes
  - stacktune.gpu.attributes.no_diff
  - stacktune.gpu.journal
  - stacktune.gpu.journal.root
  - stacktune.gpu.journal.run_id
attributes:
  check_mode:
    support: full
    description: Reports whether another run's lock would be broken and what would be recovered; writes nothing.
seealso:
  - module: stacktune.gpu.host_settings
"""

EXAMPLES = r"""
- name: Take the host for this run (a second run is refused, naming this one)
  stacktune.gpu.run_lock:
    state: locked
    run_id: "{{ stacktune_run_id }}"
    entry: tune

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
  description: The lock as it is now (null when free); on a refusal, the lease that refused it.
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
lease_lost:
  description:
    - True when this run's own lease was released, broken or taken over by another run, or
      ended by the host's watchdog. With I(state=locked) the run is refused; with
      I(state=checked) and I(state=unlocked) the task succeeds and says so in RV(lease_ended).
  returned: on failure, and with state checked or unlocked when this run's lease was ended by another
  type: bool
lease_ended:
  description:
    - How this run's lease ended while the run was away, in words (for example the host's
      watchdog put its undecided layers back after the lease ran out); null while the run
      holds the host or when it released the host itself. The tune report and the run's end
      say it.
  returned: always
  type: str
watchdog_pid:
  description: With O(watch), the pid of the watchdog started (null when one already ran for the run).
  returned: with watch, when the lock was taken
  type: int
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import journal_options, open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine import watchdog
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import (
    HostLocked,
    LeaseLost,
    LockTimeout,
    RunLock,
    UnreadableLock,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError, command_runner


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", default="locked", choices=["locked", "unlocked", "checked"]),
            **journal_options("run_id", run_id={"required": True}),
            owner=dict(type="str"),
            controller=dict(type="dict"),
            takeover=dict(type="str"),
            entry=dict(type="str"),
            ttl=dict(type="int", default=300),
            wait=dict(type="int", default=0),
            force=dict(type="bool", default=False),
            recover=dict(type="bool", default=True),
            watch=dict(type="bool", default=False),
            **journal_options("journal_dir", "root"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["ttl"] < 1 or p["wait"] < 0:
        module.fail_json(msg="Failed to validate run_lock: ttl must be >= 1 and wait >= 0")

    run_command = command_runner(module)

    journal = open_journal(p["journal_dir"], p["root"])
    lock = RunLock(p["root"])
    deadline = time.monotonic() + p["wait"]
    verb = {"locked": "take", "unlocked": "release", "checked": "check"}[p["state"]]
    result = {"changed": False, "holder": None, "previous": None, "recovered": [], "notes": [], "lease_ended": None}
    while True:
        locked = False
        try:
            lost = _lease_ended(lock, p["run_id"], tolerate_torn=p["force"])
            if lost:
                result.update(lease_ended=lost, lease_lost=True)
                if p["state"] == "locked":
                    # a run never takes back a host it lost: what it measured is no longer true
                    raise LeaseLost("run %s no longer holds the host: %s" % (p["run_id"], lost), holder=lock.holder())
            if not module.check_mode and p["state"] != "checked":
                journal.lock(60)
                locked = True
            if p["state"] == "locked":
                _taken, result["previous"] = lock.take(
                    p["run_id"],
                    p["owner"],
                    p["ttl"],
                    force=p["force"],
                    check_mode=module.check_mode,
                    takeover=p["takeover"],
                    controller=p["controller"],
                    entry=p["entry"],
                )
                if p["recover"]:
                    for layer in journal.layers():
                        ctx = Context(layer, root=p["root"], run_command=run_command)
                        engine = Engine(ctx, journal, check_mode=module.check_mode)
                        outcome = engine.recover(p["run_id"])
                        if outcome["changed"]:
                            result["recovered"].append(layer)
                            result["notes"].extend(outcome["notes"])
                if p["watch"] and not module.check_mode and p["run_id"] != "manual":
                    result["watchdog_pid"] = watchdog.spawn(p["run_id"], p["journal_dir"], p["root"])
            elif p["state"] == "checked":
                result["previous"] = lock.holder(tolerate_torn=p["force"])
                if not p["force"] and not lost:
                    lock.check(p["run_id"])
            else:
                _released, result["previous"] = lock.release(
                    p["run_id"], force=p["force"], check_mode=module.check_mode
                )
            previous = result["previous"]
            result["changed"] = p["state"] != "checked" and (
                bool(result["recovered"]) or bool(previous and previous["run_id"] != p["run_id"])
            )
            try:
                result["holder"] = lock.holder()
            except UnreadableLock:
                if p["state"] != "unlocked":
                    raise
                # a release left an unreadable record as found, and said so in its notes
            result["notes"].extend(lock.notes)
            break
        except HostLocked as exc:
            if isinstance(exc, LeaseLost) or time.monotonic() >= deadline:
                result["holder"] = exc.holder
                result["notes"].extend(lock.notes)
                result["lease_lost"] = isinstance(exc, LeaseLost)
                module.fail_json(msg="Failed to %s the run lock: %s" % (verb, exc), **result)
        except (LockTimeout, SpecError, OSError, IOError, ValueError) as exc:
            module.fail_json(msg="Failed to %s the run lock: %s" % (verb, exc), **result)
        finally:
            if locked:
                journal.unlock()
        time.sleep(1)
    module.exit_json(**result)


def _lease_ended(lock, run_id, tolerate_torn=False):
    """How run_id's lease ended, in words, when something other than the run itself ended it
    (the host's watchdog, another run breaking or taking it over); None while it holds the host.
    ``tolerate_torn`` (stacktune_lock_break): an unreadable record tells nothing, so None."""
    holder = lock.holder(tolerate_torn=tolerate_torn)
    if holder is not None and holder["run_id"] == run_id:
        return None
    ended = lock.ended(run_id, tolerate_torn=tolerate_torn)
    if ended is None or (ended.get("ended") == "released" and ended.get("by") == run_id):
        return None
    if ended.get("ended") == "watchdog":
        return (
            "the host's watchdog ended the run: its lease ran out at %s with nobody renewing it, and the host "
            "put the layers the run left undecided back" % ended.get("time")
        )
    return "its lease ended at %s (%s by run %s)" % (ended.get("time"), ended.get("ended"), ended.get("by"))


if __name__ == "__main__":
    main()
