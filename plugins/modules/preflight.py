#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: preflight
short_description: Decide whether a GPU host is healthy enough to tune or accept
version_added: 0.1.0
author: stacktune maintainers (@stacktune)
description:
  - Reads the facts gathered by M(stacktune.gpu.gpu_topology_facts) and checks the driver
    against the CUDA runtime (minimum driver table and minor version compatibility), a
    deny-list of known-bad driver builds, the GPU count, NVML availability, degraded PCIe
    links and driver/NVML/kernel-module disagreement (as the facts module reported them),
    uncorrected ECC errors and pending row remapping, hardware/thermal throttling, the power
    budget against the declared PSU/PDU capacity, and XID errors in the kernel log.
  - Read-only. It fails the task when a finding at or above O(fail_on) exists.
options:
  facts:
    description:
      - The C(ansible_facts.stacktune) mapping (facts schema version 1).
    type: dict
    required: true
  expected_gpu_count:
    description:
      - GPUs this host must have. When set and above 0, a host where NVML is unavailable
        fails. Unset skips the count check.
    type: int
  psu_capacity_watts:
    description:
      - Declared PSU/PDU capacity feeding this host, in watts. Unset skips the power check.
    type: float
  platform_watts:
    description:
      - Declared non-GPU draw (CPUs, memory, fans, NICs, storage), in watts. Counted as 0
        when unset (reported as an info finding).
    type: float
  power_headroom_percent:
    description:
      - Share of O(psu_capacity_watts) kept free for transients, 0 to below 100.
    type: float
    default: 10
  power_limit_source:
    description:
      - C(limit) sums each GPU's current power limit; C(max) sums the maximum limit the
        board allows (the budget a later power-limit change could reach).
    type: str
    choices: [limit, max]
    default: limit
  driver_denylist:
    description:
      - Extra driver builds to refuse, each with a C(reason) and one of C(version) (exact),
        C(prefix) (for example C(515.65) matches C(515.65.*)), or C(min)/C(max) (inclusive
        range, either bound optional).
    type: list
    elements: dict
    default: []
  use_default_denylist:
    description:
      - Also apply the deny-list shipped with the collection (for example 515.65.01).
    type: bool
    default: true
  cuda_minor_compat_majors:
    description:
      - CUDA majors for which a driver below the toolkit's own minimum but at or above the
        major's minor-version-compatibility floor is accepted (reported as info).
    type: list
    elements: int
    default: [12, 13]
  kernel_log:
    description:
      - Read the kernel log for XID errors, with C(dmesg --level=err,warn) first and
        C(/var/log/kern.log) second. The source used is returned; an unreadable log is an
        info finding, not a failure.
    type: bool
    default: true
  other_writers:
    description:
      - Look for other tools and files that rewrite what stacktune manages (an active TuneD
        profile, a running irqbalance or nvidia-persistenced, sysctl.d, grub.d and tmpfiles.d
        drop-ins whose place in the boot order outranks stacktune's) and list them as info
        findings (check C(other_writers)); they never fail the preflight.
    type: bool
    default: true
  fail_on:
    description:
      - Fail the task when a finding of this severity or worse exists; C(never) only reports.
    type: str
    choices: [critical, warning, never]
    default: critical
attributes:
  check_mode:
    support: full
    description: The module only reads; check mode runs the same checks.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
  idempotent:
    support: full
    description: Read-only; never reports changed.
  platform:
    support: full
    platforms: [posix]
    description: Linux hosts with NVIDIA GPUs (or none, to report their absence).
notes:
  - XIDs in C(/var/log/kern.log) may be from earlier boots; the returned evidence names the source.
seealso:
  - module: stacktune.gpu.gpu_topology_facts
  - module: stacktune.gpu.gpu_acceptance
"""

EXAMPLES = r"""
- name: Gather GPU facts
  stacktune.gpu.gpu_topology_facts:

- name: Refuse an unhealthy host
  stacktune.gpu.preflight:
    facts: "{{ ansible_facts['stacktune'] }}"
    expected_gpu_count: 8
    psu_capacity_watts: 12000
    platform_watts: 2500
    driver_denylist:
      - version: "550.54.14"
        reason: "NCCL hangs on our HGX boards, ticket OPS-1234"
      - prefix: "535.54"
        reason: "whole 535.54 series: Xid 119 GSP timeouts"

- name: Report only
  stacktune.gpu.preflight:
    facts: "{{ ansible_facts['stacktune'] }}"
    fail_on: never
  register: preflight
"""

RETURN = r"""
ok:
  description: True when no finding is critical.
  returned: always
  type: bool
findings:
  description: Problems found, each with id, severity (info, warning, critical), subject, message, evidence.
  returned: always
  type: list
  elements: dict
  sample:
    - id: driver_denylisted
      severity: critical
      subject: host
      message: "driver 515.65.01 is deny-listed: corrupted CUDA-graph stream reuse ..."
      evidence: {driver: 515.65.01, entry: {version: 515.65.01}, list: default}
checks:
  description: Every check with name, status (pass, fail, skip) and why.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: power_budget, status: skip, why: PSU/PDU capacity not declared}
kernel_log:
  description: Where the kernel log was read from (source), what was tried, and any error.
  returned: always
  type: dict
  sample: {source: "dmesg --level=err,warn", tried: ["dmesg --level=err,warn"], error: null}
blocking:
  description: The findings at or above O(fail_on).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.preflight import (
    findings_at_or_above,
    run_preflight,
    validate_policy,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.writers import host_writers

KERN_LOG_PATHS = ("/var/log/kern.log",)
KERN_LOG_TAIL_BYTES = 8 * 1024 * 1024


def _read_tail(path, limit):
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - limit))
        return fh.read().decode("utf-8", "replace")


def read_kernel_log(module):
    """Kernel log text from dmesg, else kern.log; never raises."""
    tried = []
    errors = []
    dmesg = module.get_bin_path("dmesg")
    if dmesg:
        argv = [dmesg, "--level=err,warn"]
        tried.append("dmesg --level=err,warn")
        rc, out, err = module.run_command(argv)
        if rc == 0:
            return {"source": "dmesg --level=err,warn", "text": out, "error": None, "tried": tried}
        errors.append("dmesg: rc=%d %s" % (rc, (err or out).strip()[:200]))
    else:
        errors.append("dmesg: not installed")
    for path in KERN_LOG_PATHS:
        tried.append(path)
        try:
            text = _read_tail(path, KERN_LOG_TAIL_BYTES)
        except (IOError, OSError) as e:
            errors.append("%s: %s" % (path, e))
            continue
        return {"source": path, "text": text, "error": None, "tried": tried}
    return {"source": None, "text": "", "error": "; ".join(errors), "tried": tried}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            facts=dict(type="dict", required=True),
            expected_gpu_count=dict(type="int"),
            psu_capacity_watts=dict(type="float"),
            platform_watts=dict(type="float"),
            power_headroom_percent=dict(type="float", default=10),
            power_limit_source=dict(type="str", choices=["limit", "max"], default="limit"),
            driver_denylist=dict(type="list", elements="dict", default=[]),
            use_default_denylist=dict(type="bool", default=True),
            cuda_minor_compat_majors=dict(type="list", elements="int", default=[12, 13]),
            kernel_log=dict(type="bool", default=True),
            other_writers=dict(type="bool", default=True),
            fail_on=dict(type="str", choices=["critical", "warning", "never"], default="critical"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    policy = {
        "expected_gpu_count": p["expected_gpu_count"],
        "psu_capacity_watts": p["psu_capacity_watts"],
        "platform_watts": p["platform_watts"],
        "power_headroom_percent": p["power_headroom_percent"],
        "power_limit_source": p["power_limit_source"],
        "driver_denylist": p["driver_denylist"],
        "use_default_denylist": p["use_default_denylist"],
        "minor_compat_majors": p["cuda_minor_compat_majors"],
        "fail_on": p["fail_on"],
    }
    names = {k: k for k in policy}
    names["minor_compat_majors"] = "cuda_minor_compat_majors"
    try:
        policy = validate_policy(policy, names=names)
    except ValueError as e:
        module.fail_json(msg="Failed to validate preflight options: %s" % e)

    kernel_log = read_kernel_log(module) if p["kernel_log"] else None
    try:
        writers = host_writers(Context("preflight")) if p["other_writers"] else None
        result = run_preflight(p["facts"], policy, kernel_log, writers)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        module.fail_json(msg="Failed to run preflight checks on the facts: %s" % e)

    blocking = findings_at_or_above(result["findings"], p["fail_on"])
    log_info = {
        "source": kernel_log.get("source") if kernel_log else None,
        "tried": kernel_log.get("tried") if kernel_log else [],
        "error": kernel_log.get("error") if kernel_log else "not read (kernel_log=false)",
    }
    out = dict(
        changed=False,
        ok=result["ok"],
        findings=result["findings"],
        checks=result["checks"],
        kernel_log=log_info,
        blocking=blocking,
    )
    if blocking:
        lines = ["%s [%s] %s: %s" % (f["id"], f["severity"], f["subject"], f["message"]) for f in blocking]
        module.fail_json(
            msg="Failed to pass preflight: %d finding(s) at or above %s: %s"
            % (len(blocking), p["fail_on"], " | ".join(lines)),
            **out,
        )
    module.exit_json(**out)


if __name__ == "__main__":
    main()
