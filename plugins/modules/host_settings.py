#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_settings
short_description: Apply, verify, keep and restore host settings through the stacktune settings engine
version_added: 0.1.0
description:
  - The one module through which stacktune changes a host. Every layer role turns its
    variables and the GPU facts into a list of settings and hands them to this module.
  - Each setting has a I(kind). For every kind the engine reads the live value and the
    persisted value, writes both, snapshots them first and can restore them.
  - "Kinds: C(sysctl) (/proc/sys, persisted in /etc/sysctl.d/60-stacktune-<layer>.conf);
    C(sysfs) (a /sys attribute, persisted as a line of /etc/tmpfiles.d/stacktune-<layer>.conf);
    C(irq_affinity) (/proc/irq/N/smp_affinity_list for one IRQ or every IRQ of a PCI
    device, persisted in the same tmpfiles drop-in); C(kernel_arg) (a boot argument,
    persisted in /etc/default/grub.d/60-stacktune-<layer>.cfg, reported C(pending_reboot)
    until the next boot); C(grubby_arg) (a boot argument on a host that boots from BLS entries,
    RHEL 9 and its kin: set with C(grubby --update-kernel=ALL --args/--remove-args) in every
    entry under /boot/loader/entries, /etc/kernel/cmdline and GRUB_CMDLINE_LINUX, the files
    snapshotted whole and restored byte for byte, the next-boot value read from the default
    entry; C(pending_reboot) until the next boot; tested against a grubby stand-in on a
    constructed tree, not a real RHEL host); C(mount) (an option of a mounted tmpfs such as the size of
    /dev/shm, remounted live and persisted in /etc/fstab); C(file) (a whole file owned by
    stacktune such as /etc/nccl.conf); C(env_var) (one KEY=\"value\" line of a file such as
    /etc/default/irqbalance); C(nvml) (a GPU setting through NVML: persistence mode,
    power limit, compute mode, application clocks)."
  - Before anything is written, every setting is validated (a bad value fails the task
    naming the setting) and the previous values are written to the on-host journal
    (I(journal_dir)), so a run killed halfway can still be restored.
  - Live values that cannot be written here (a read-only /proc/sys in a container, no
    CAP_SYS_ADMIN for a remount, no NVML) are reported C(unsupported) with the reason;
    what can be persisted is still persisted.
author: stacktune maintainers (@stacktune)
options:
  layer:
    description:
      - Name of the layer the settings belong to (lower-case letters, digits, underscores).
        The journal, the drop-in file names and drift checks are per layer.
    type: str
    required: true
  state:
    description:
      - C(present) applies I(settings) (or, with I(from_journal), the settings the layer
        already owns). Settings the layer owned before and no longer lists go back to
        their original values.
      - C(verify) changes nothing and reports per setting the expected, live and persisted
        value and a status (C(ok), C(drift), C(pending_reboot), C(overridden), C(unsupported)).
        C(overridden) means the value is persisted but another file sets it differently at the
        next boot (sysctl, read the way systemd-sysctl orders /etc, /run and /usr/lib sysctl.d).
      - C(kept) records that the gate kept the layer (with I(decision)).
      - C(restored) puts the layer back to I(restore_to); with I(restore_to=snapshot) and a
        I(decision), the gate rolled the layer back and its settings are not applied again.
      - C(suspended) switches an applied layer off for a measurement block (the host goes
        back to the layer's snapshot; the journal keeps the layer's settings and snapshot) and
        C(reapplied) switches it on again. The gate alternates them between blocks.
      - "C(switched) puts one candidate of a search in place: the layer switched off and applied
        with I(settings), the candidate's, keeping the snapshot of its first apply in the run;
        I(decision) names the candidate (C(value)) and the journal records C(candidate <value>
        in place for the search)."
      - C(interrupted) puts a layer that a run was measuring back to its snapshot because the
        run was stopped (a signal, a lost controller, a workload broken either way); the
        journal records the interruption with I(decision), no gate verdict, so the next run
        measures the layer again.
    type: str
    choices: [present, verify, kept, restored, suspended, reapplied, interrupted, switched]
    default: present
  settings:
    description:
      - The settings, each a dict with C(kind), C(key), C(value) and kind-specific keys
        (C(device) for irq_affinity, C(option) for mount, C(path) for env_var, C(mode) for
        file, C(gpu) for nvml).
      - "A C(sysfs) setting may name many attributes: C(key) with C(*) or C(?) wildcards
        (C(/sys/devices/system/cpu/cpufreq/policy*/scaling_governor)) expands to every attribute
        found, in natural order; C(missing=unsupported) (default C(fail)) reports an attribute the
        host does not expose as C(unsupported) with C(reason); C(choices_from) names the attribute
        of the same directory that lists the values the kernel takes (C(scaling_available_governors),
        or C(scheduler) itself), and a value not listed fails before anything changes."
      - A setting with C(at_least=true) and an integer C(value) is a minimum. It is applied
        only where the host's own value is lower, the original the journal kept while the
        layer holds the setting, else the live value. A host at or above it keeps its value,
        with a note. Once applied, the minimum is managed exactly like any other setting.
      - "C(takes_effect) says when a newly started process sees the setting's change:
        C(now), C(next_login) (read when a login session starts) or C(next_boot). Each kind
        knows its own (a C(kernel_arg) at the next boot, a C(file) under /etc/security/limits.d
        at the next login, the others now); give it where the program that reads the file
        says otherwise. The gate measures a layer only when one of its changes is seen now."
      - "C(seen_running) (true or false) says whether a process that is already running sees the
        change on its next steps. Each kind knows its own: C(sysctl), C(sysfs), C(irq_affinity),
        C(mount) and C(nvml) (power limit, application clocks; not the compute mode) yes, C(file),
        C(env_var) and C(kernel_arg) no; give it where the program that reads the file re-reads it
        while it runs. The gate switches a layer inside one running workload (a live trial) only
        when every change it measures is seen this way, else it starts a process per block."
      - With I(state=verify) and no I(settings), the layer's journaled settings are verified.
    type: list
    elements: dict
    default: []
  from_journal:
    description:
      - With I(state=present), apply the settings the journal says the layer owns instead
        of I(settings). Drift correction uses this; a layer the gate rolled back owns
        nothing, so it is never re-applied, and a layer a stopped run left undecided (applied,
        never judged by a gate) is put back to its snapshot instead of re-applied.
    type: bool
    default: false
  restore_to:
    description:
      - C(snapshot) returns to the state before the layer's latest apply (the gate's
        rollback); C(original) returns to the state before stacktune ever touched it.
    type: str
    choices: [snapshot, original]
    default: original
  retry_rejected:
    description:
      - With I(state=present), apply settings even when the gate rolled exactly these
        settings back before. By default such a layer is left alone, so a second run
        changes nothing.
    type: bool
    default: false
  decision:
    description:
      - The gate's decision record, stored in the journal with I(state=kept) or
        I(state=restored); with I(state=interrupted), what stopped the run (C(reason)); with
        I(state=switched), the candidate put in place (C(value)).
    type: dict
  run_id:
    default: manual
  lock_timeout:
    description:
      - Seconds to wait for another module call of stacktune on this host to finish.
      - Independently of this, a write is refused at once (naming the holder) while another
        run holds the host's run lock (see M(stacktune.gpu.run_lock)); a write of the run that
        holds it renews its lease, and a write of a run whose lease was released, broken or
        taken over is refused (RV(lease_lost)).
    type: int
    default: 300
  fail_on_drift:
    description: With I(state=verify), fail when any setting drifted.
    type: bool
    default: false
extends_documentation_fragment:
  - stacktune.gpu.attributes
  - stacktune.gpu.journal
  - stacktune.gpu.journal.root
  - stacktune.gpu.journal.run_id
attributes:
  check_mode:
    support: full
    description: Predicts per setting exactly what a real run changes and writes nothing.
  diff_mode:
    support: full
    description: Shows live and persisted values before and after, per setting.
notes:
  - The journal keeps previous file contents; it is readable by root only.
  - The C(nvml) kind needs nvidia-ml-py on the host Python.
"""

EXAMPLES = r"""
- name: Apply kernel settings for a training host
  stacktune.gpu.host_settings:
    layer: kernel
    settings:
      - {kind: sysctl, key: vm.swappiness, value: "10"}
      - {kind: sysctl, key: kernel.numa_balancing, value: "0"}
      - {kind: kernel_arg, key: pcie_aspm, value: "off"}

- name: Size /dev/shm and persist it in /etc/fstab
  stacktune.gpu.host_settings:
    layer: memory
    settings:
      - {kind: mount, key: /dev/shm, option: size, value: 64G}

- name: Pin a GPU's interrupts to its local NUMA CPUs
  stacktune.gpu.host_settings:
    layer: numa_irq
    settings:
      - {kind: irq_affinity, device: "0000:3b:00.0", value: "0-31"}

- name: Verify what the kernel layer owns
  stacktune.gpu.host_settings:
    layer: kernel
    state: verify
  register: kernel_verify

- name: Gate said no - put the layer back as it was before this run
  stacktune.gpu.host_settings:
    layer: kernel
    state: restored
    restore_to: snapshot
    decision: "{{ gate_result }}"
"""

RETURN = r"""
layer:
  description: The layer.
  returned: always
  type: str
action:
  description: What was done (present, verify, kept, restored).
  returned: always
  type: str
settings:
  description: One row per setting.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Stable id, C(<kind>:<key>).
      type: str
    expected:
      description: The value stacktune wants (for restores, the value restored to).
      type: raw
    live:
      description: The live value after the action (null when it cannot be read).
      type: raw
    persisted:
      description: The value the persistence unit holds (null when not persisted).
      type: raw
    persisted_in:
      description: The file that persists the setting.
      type: str
    at_boot:
      description: The value the next boot applies, where the kind can tell (sysctl), else null.
      type: raw
    at_boot_from:
      description: The file that value comes from.
      type: str
    status:
      description: ok, changed, drift, pending_reboot, overridden or unsupported.
      type: str
    reason:
      description: Why a setting is unsupported, pending or overridden.
      type: str
    changed:
      description: Whether this setting was written.
      type: bool
    effect:
      description:
        - For a setting written, when a newly started process sees the change, C(now),
          C(next_login) or C(next_boot); C(next_boot) also for a value only persisted, where the
          live value could not be or did not need to be written.
      type: str
      returned: when the setting was written
    seen_running:
      description:
        - For a setting written with C(effect=now), whether a process already running sees the
          change (its kind's answer, or the setting's C(seen_running)).
      type: bool
      returned: when the setting was written with effect now
    settle_s:
      description:
        - For a setting written with C(effect=now), seconds a running process needs after the
          switch before its steps show the new value (the live trial drops them).
      type: float
      returned: when the setting was written with effect now
    other_writers:
      description:
        - With I(state=verify), the other tools running on the host that may rewrite the setting
          (tuned, irqbalance, nvidia-persistenced); the layer's C(notes) say how.
      type: list
      elements: str
counts:
  description: Number of settings per status.
  returned: always
  type: dict
drift:
  description: Ids of drifted settings.
  returned: always
  type: list
  elements: str
overridden:
  description: Ids of settings that another file overrides at the next boot (the row's C(reason) names it).
  returned: always
  type: list
  elements: str
pending_reboot:
  description: Ids of settings that take effect at the next boot.
  returned: always
  type: list
  elements: str
layer_state:
  description: The layer's journal state (applied, kept, rolled_back, restored ...).
  returned: always
  type: str
kept_as:
  description:
    - "For a kept layer, why it stays, in the words verify shows, for example 'kept (measured: helps)',
      'kept (measured: no harm)' or 'kept (not measured: every change takes effect at the next login or
      boot)'; null otherwise."
    - A keep (I(state=kept)) must say why in its I(decision) (C(basis) C(gain), C(no_harm), or C(unmeasured)
      with C(unmeasured) naming why no trial could measure it). One that would leave a change a running
      program sees without a trial is refused, and the layer is put back to its snapshot first.
  returned: always
  type: str
notes:
  description: What the engine did besides settings (bootloader regenerated ...).
  returned: always
  type: list
  elements: str
lease_lost:
  description: True when the run's lease was released, broken or taken over; nothing was written.
  returned: on failure
  type: bool
lease_trouble:
  description:
    - Undo first, record after. When the run's lease record could not be read or written and the run's
      watchdog could not rewrite it, a call that puts a layer back (I(state=suspended), C(restored) or
      C(interrupted)) of a layer this run applied still puts it back, then says here what could not be recorded.
    - Also when the journal could not record a put-back (a full disk); the host is back, the journal still says
      what it said before, and the next run or rollback finds nothing left to put back.
  returned: when the lease could not be renewed, or the journal could not record a put-back
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import lease
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import (
    check_layer_name,
    journal_options,
    open_journal,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import LeaseLost, LockTimeout, RunLock
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import (
    Context,
    SpecError,
    Unsupported,
    command_runner,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            layer=dict(type="str", required=True),
            state=dict(
                type="str",
                default="present",
                choices=["present", "verify", "kept", "restored", "suspended", "reapplied", "interrupted", "switched"],
            ),
            settings=dict(type="list", elements="dict", default=[]),
            from_journal=dict(type="bool", default=False),
            restore_to=dict(type="str", default="original", choices=["snapshot", "original"]),
            retry_rejected=dict(type="bool", default=False),
            decision=dict(type="dict"),
            **journal_options("journal_dir", "root", "run_id", run_id={"default": "manual"}),
            lock_timeout=dict(type="int", default=300),
            fail_on_drift=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("settings", "from_journal")],
        supports_check_mode=True,
    )
    p = module.params
    try:
        check_layer_name(p["layer"])
    except ValueError as exc:
        module.fail_json(msg="Failed to validate layer: %s" % exc)

    run_command = command_runner(module)

    ctx = Context(p["layer"], root=p["root"], run_command=run_command)
    journal = open_journal(p["journal_dir"], p["root"])
    engine = Engine(ctx, journal, check_mode=module.check_mode, retry_rejected=p["retry_rejected"])
    verb = {
        "present": "apply",
        "verify": "verify",
        "kept": "keep",
        "restored": "restore",
        "suspended": "switch off",
        "reapplied": "re-apply",
        "interrupted": "put back",
        "switched": "switch to a candidate of",
    }[p["state"]]
    locked = False
    lock_notes = []
    trouble = None
    try:
        if p["state"] != "verify" and not module.check_mode:
            journal.lock(p["lock_timeout"])
            locked = True
            lock = RunLock(p["root"])

            def owns_layer():
                entry = engine.load(p["layer"])
                return entry is not None and entry.get("run_id") == p["run_id"]

            # undo first, record after: a layer goes back even where its lease record cannot be kept
            trouble = lease.renew(lock, p["run_id"], p["state"], owns_layer)
            lock_notes = lock.notes  # a wall-clock step the renewal saw, a repaired record
        if p["state"] == "present":
            result = engine.apply(p["settings"], p["run_id"], from_journal=p["from_journal"])
        elif p["state"] == "verify":
            result = engine.verify(p["settings"])
        elif p["state"] == "kept":
            result = engine.keep(p["run_id"], p["decision"])
        elif p["state"] == "reapplied":
            result = engine.reapply(p["run_id"])
        elif p["state"] == "suspended":
            result = engine.suspend(p["run_id"])
        elif p["state"] == "switched":
            result = engine.switch(p["settings"], p["run_id"], (p["decision"] or {}).get("value"))
        elif p["state"] == "interrupted":
            result = engine.interrupt(p["run_id"], (p["decision"] or {}).get("reason") or "the run was stopped")
        else:
            result = engine.restore(p["restore_to"], p["run_id"], p["decision"])
    except LeaseLost as exc:
        module.fail_json(msg="Failed to %s layer %s: %s" % (verb, p["layer"], exc), lease_lost=True)
    except (SpecError, LockTimeout) as exc:
        module.fail_json(msg="Failed to %s layer %s: %s" % (verb, p["layer"], exc))
    except (Unsupported, RuntimeError, OSError, IOError, ValueError) as exc:
        module.fail_json(msg="Failed to %s layer %s: %s" % (verb, p["layer"], exc))
    finally:
        if locked:
            journal.unlock()

    result["notes"] = lock_notes + result.get("notes", [])
    trouble = "; ".join(t for t in (trouble, engine.unrecorded) if t)
    if trouble:
        result["lease_trouble"] = trouble
        if trouble not in result["notes"]:
            result["notes"].append(trouble)
    if module._diff and p["state"] in ("present", "reapplied", "switched"):
        result["diff"] = {
            "before": {
                r["id"]: {
                    "live": r.get("live_before", r["live"]),
                    "persisted": r.get("persisted_before", r["persisted"]),
                }
                for r in result["settings"]
                if r["changed"]
            },
            "after": {
                r["id"]: {"live": r["expected"], "persisted": r["expected"] if r.get("persisted_in") else None}
                for r in result["settings"]
                if r["changed"]
            },
        }
    if p["state"] == "verify" and p["fail_on_drift"] and result["drift"]:
        module.fail_json(msg="Drift in layer %s: %s" % (p["layer"], ", ".join(result["drift"])), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
