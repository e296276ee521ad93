#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: drift_report
short_description: Verify every layer stacktune keeps on a host and record the drift in its Prometheus metrics
version_added: 0.2.0
author: stacktune maintainers (@stacktune)
description:
  - The report-only drift check of C(playbooks/drift.yml) (the C(drift) entry point of the
    C(stacktune.gpu.stacktune) role), for cron and AWX, in one module run per host.
  - Checks that no other run holds the host (I(check_lock_for)), verifies every journaled
    layer against its live and persisted state as M(stacktune.gpu.journal_info) with
    C(verify=true) does (RV(verified)), and writes the host's C(stacktune.prom) as
    M(stacktune.gpu.textfile_metrics) with C(playbook=drift) does, the drifted settings counted
    (C(stacktune_drift_settings)) and the run successful when nothing drifted.
  - It changes no setting. The only file it writes is the metrics file, and only with
    I(metrics=true). Correcting drift (C(stacktune_drift_fix=true)) takes the host and goes
    through M(stacktune.gpu.host_settings) instead.
options:
  metrics:
    description: Write the metrics file (C(metrics_enabled) of the C(stacktune.gpu.metrics) role).
    type: bool
    default: true
  metrics_directory:
    description:
      - node_exporter's textfile directory for C(stacktune.prom), or C(auto), as the I(directory) of
        M(stacktune.gpu.textfile_metrics) (the role passes C(stacktune_metrics_dir)).
    type: str
    default: auto
  metrics_mode:
    description: The metrics file's mode.
    type: str
    default: "0644"
extends_documentation_fragment:
  - stacktune.gpu.attributes
  - stacktune.gpu.journal
  - stacktune.gpu.journal.root
  - stacktune.gpu.journal.lock_check
attributes:
  check_mode:
    support: full
    description: Verifies the same way in check mode and writes no metrics.
  diff_mode:
    support: full
    description: Shows the metrics file before and after.
  idempotent:
    support: full
    description: A second run on an unchanged host reports no change (the metrics' timestamps alone are no change).
seealso:
  - module: stacktune.gpu.journal_info
  - module: stacktune.gpu.textfile_metrics
"""

EXAMPLES = r"""
- name: Report drift on every kept layer and record it for Prometheus
  stacktune.gpu.drift_report:
    check_lock_for: "drift-{{ now(utc=true, fmt='%Y%m%dT%H%M%SZ') }}"
  register: drift

- name: Fail on drift
  ansible.builtin.fail:
    msg: "drifted: {{ drift.drift | join(', ') }}"
  when: drift.drift | length > 0
"""

RETURN = r"""
layers:
  description: One row per journaled layer, as M(stacktune.gpu.journal_info) returns them.
  returned: always
  type: list
  elements: dict
verified:
  description:
    - Per readable layer, what M(stacktune.gpu.host_settings) C(state=verify) returns (C(settings) rows with
      C(status), C(drift), C(overridden), C(notes)).
  returned: always
  type: list
  elements: dict
drift:
  description: Ids of the drifted settings of every layer.
  returned: always
  type: list
  elements: str
  sample: ["sysctl:vm.swappiness"]
lock_holder:
  description: With I(check_lock_for), the run that held the lock (null when none).
  returned: when check_lock_for is given
  type: dict
metrics:
  description:
    - Where the metrics went (C(path), C(directory), C(directory_source), C(directory_detail)), whether they were
      C(written) and C(changed), and the number of C(series).
  returned: when metrics is true
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import rooted
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import journal_options
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import command_runner
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.listing import ListingFailed, read_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.node_exporter import AUTO
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.textfile import MetricsFailed, MetricsFile


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **journal_options("journal_dir", "root", "check_lock_for", "break_lock"),
            metrics=dict(type="bool", default=True),
            metrics_directory=dict(type="str", default=AUTO),
            metrics_mode=dict(type="str", default="0644"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    metrics = None
    try:
        if p["metrics"]:
            # a directory that cannot be used is refused before anything is read
            metrics = MetricsFile(module, p["metrics_directory"], p["metrics_mode"])
        result = read_journal(
            p["journal_dir"],
            p["root"],
            run_command=command_runner(module),
            verify=True,
            check_lock_for=p["check_lock_for"],
            break_lock=p["break_lock"],
        )
        result["drift"] = [sid for layer in result["verified"] for sid in layer["drift"]]
        result["changed"] = False
        if metrics is not None:
            journal_dir = rooted(p["root"] or "/", p["journal_dir"])
            written = metrics.write("drift", not result["drift"], journal_dir, drift_settings=len(result["drift"]),
                                    drift_corrected=0)  # fmt: skip
            result["changed"] = written["changed"]
            if "diff" in written:
                result["diff"] = written.pop("diff")
            result["metrics"] = dict(metrics.where, **{k: written[k] for k in ("changed", "written", "series")})
    except ListingFailed as exc:
        module.fail_json(msg=exc.msg, **exc.extra)
    except MetricsFailed as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
