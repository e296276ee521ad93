#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: textfile_metrics
short_description: Write stacktune's state as Prometheus metrics for node_exporter's textfile collector
version_added: 0.2.0
description:
  - Writes one Prometheus text exposition file per host with the state of every layer, its last gate
    decision and ratios, the drift found by the last drift run, and the time and result of the last run of
    each stacktune playbook. node_exporter's textfile collector publishes it
    (C(--collector.textfile.directory)).
  - Layer states, decisions and gate ratios come from the on-host journal (I(journal_dir); a missing
    journal means no layers), so every playbook writes the same view of the layers; the records of
    the current tune run (I(records)) add the decisions of layers the journal does not hold.
  - "Series: C(stacktune_layer_state{layer,state}) (1 for the current journal state, 0 for the others:
    new, applying, applied, kept, rolled_back, restored); C(stacktune_layer_decision{layer,decision})
    (keep, rollback, inconclusive); C(stacktune_layer_settings{layer});
    C(stacktune_gate_throughput_ratio{layer}) and C(stacktune_gate_tail_ratio{layer}) (after / before);
    C(stacktune_drift_settings) and C(stacktune_drift_corrected_settings);
    C(stacktune_last_run_timestamp_seconds{playbook}) and C(stacktune_last_run_success{playbook})."
  - Series this run does not know are carried over from the existing file, so a tune run keeps the drift
    run's numbers and every playbook's last run stays visible.
  - The file is C(stacktune.prom) in I(directory), written through a temporary file in the same directory and a
    rename, so the collector never reads half a file. The directory is created (0755) when missing.
author: stacktune maintainers (@stacktune)
options:
  directory:
    description:
      - The textfile directory node_exporter reads (its C(--collector.textfile.directory)); the role passes
        C(stacktune_metrics_dir), and errors name that variable.
      - C(auto) asks the host, in this order. C(process) - the C(--collector.textfile.directory) (C(=DIR) or
        C(DIR) as the next argument) on the command line of a running C(node_exporter) or
        C(prometheus-node-exporter) (from C(/proc/<pid>/cmdline)); C(package_default) - a running
        C(prometheus-node-exporter) (Debian, Ubuntu) without the flag reads C(/var/lib/prometheus/node-exporter);
        C(defaults_file) - the flag in C(ARGS) of C(/etc/default/prometheus-node-exporter); C(distribution) -
        on Debian, Ubuntu and their derivatives the package's default, C(/var/lib/prometheus/node-exporter);
        C(fallback) - C(/var/lib/node_exporter/textfile_collector). A node_exporter running in a container
        is skipped with a warning (its path is one of its own view).
      - An absolute path is used as given (source C(configured)). A relative path, a path with C(..), a
        directory that is a symbolic link or not a directory, and a C(stacktune.prom) that is a symbolic link
        are refused before anything is written.
    type: str
    default: auto
  playbook:
    description:
      - The playbook whose run is recorded (the C(playbook) label). Required unless I(validate_only).
    type: str
    choices: [tune, drift, rollback, verify]
  success:
    description: Whether the run succeeded on this host. Required unless I(validate_only).
    type: bool
  validate_only:
    description:
      - Find and check the directory, return it with its source, and write nothing. The metrics role runs
        this before a playbook changes anything on the host.
    type: bool
    default: false
  records:
    description:
      - Per-layer records of the current tune run, each a dict with C(layer), C(decision) and C(gate) (the gate's
        result with C(throughput.ratio) and C(tail.ratio), or null when the layer was not measured).
      - For the layers named here the decision and ratios win over the journal's.
    type: list
    elements: dict
    default: []
  drift_settings:
    description:
      - Settings found drifted and left uncorrected by this run. Omit outside drift runs to keep the last
        drift run's value.
    type: int
  drift_corrected_settings:
    description: Drifted settings this run re-applied from the journal. Omit outside drift runs.
    type: int
  mode:
    description: Mode of the metrics file (node_exporter runs as an unprivileged user and must read it).
    type: str
    default: "0644"
attributes:
  check_mode:
    support: full
    description: Computes the new content and reports whether it differs; writes nothing.
  diff_mode:
    support: full
    description: Returns the file's content before and after.
  idempotent:
    support: partial
    description:
      - Every run rewrites the file so that C(stacktune_last_run_timestamp_seconds) stays current (staleness
        alerts rely on it), but a rewrite that only moves timestamps reports C(changed=false). Any other
        difference (a state, a decision, a ratio, a drift count, a run result, the file's mode) reports
        C(changed=true).
  platform:
    support: full
    platforms: posix
    description: Any POSIX host; no node_exporter is needed to write the file.
extends_documentation_fragment:
  - stacktune.gpu.journal
notes:
  - The journal is readable by root only; run the module with the privileges that tuned the host.
seealso:
  - name: node_exporter textfile collector
    description: How node_exporter publishes C(.prom) files.
    link: https://github.com/prometheus/node_exporter#textfile-collector
"""

EXAMPLES = r"""
- name: Record a tune run with its per-layer records
  stacktune.gpu.textfile_metrics:
    playbook: tune
    success: true
    records: "{{ stacktune_results }}"

- name: Record a drift run that found and corrected three settings
  stacktune.gpu.textfile_metrics:
    playbook: drift
    success: true
    drift_settings: 0
    drift_corrected_settings: 3

- name: Write where this host's node_exporter reads (--collector.textfile.directory=/run/prometheus)
  stacktune.gpu.textfile_metrics:
    directory: /run/prometheus
    playbook: rollback
    success: true

- name: Say where node_exporter reads, and why
  stacktune.gpu.textfile_metrics:
    validate_only: true
  register: metrics_dir
"""

RETURN = r"""
path:
  description: The metrics file (C(stacktune.prom) in I(directory)).
  returned: always
  type: str
  sample: /var/lib/prometheus/node-exporter/stacktune.prom
directory:
  description: The textfile directory used.
  returned: always
  type: str
  sample: /var/lib/prometheus/node-exporter
directory_source:
  description:
    - How the directory was chosen - C(configured), C(process), C(package_default), C(defaults_file),
      C(distribution) or C(fallback) (see I(directory)).
  returned: always
  type: str
  sample: process
directory_detail:
  description: What the choice was read from, in words.
  returned: always
  type: str
  sample: node_exporter (pid 812) --collector.textfile.directory=/run/prometheus
content:
  description: The file's content as written (or as it would be written in check mode).
  returned: success and not validate_only
  type: str
  sample: |
    # HELP stacktune_layer_state Journal state of each layer: 1 for the current state, 0 for the others.
    # TYPE stacktune_layer_state gauge
    stacktune_layer_state{layer="kernel",state="kept"} 1
series:
  description: Number of samples in the file.
  returned: success and not validate_only
  type: int
  sample: 24
written:
  description: Whether the file was written (false in check mode and with validate_only).
  returned: always
  type: bool
layers:
  description: Per layer the state, decision, owned settings and gate ratios that were exported.
  returned: success and not validate_only
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import journal_options
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.node_exporter import AUTO
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.textfile import MetricsFailed, MetricsFile


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directory=dict(type="str", default=AUTO),
            playbook=dict(type="str", choices=["tune", "drift", "rollback", "verify"]),
            success=dict(type="bool"),
            validate_only=dict(type="bool", default=False),
            **journal_options("journal_dir"),
            records=dict(type="list", elements="dict", default=[]),
            drift_settings=dict(type="int"),
            drift_corrected_settings=dict(type="int"),
            mode=dict(type="str", default="0644"),
        ),
        required_if=[("validate_only", False, ("playbook", "success"))],
        supports_check_mode=True,
    )
    p = module.params
    try:
        metrics = MetricsFile(module, p["directory"], p["mode"])
        if p["validate_only"]:
            module.exit_json(changed=False, written=False, **metrics.where)
        result = metrics.write(
            p["playbook"],
            p["success"],
            p["journal_dir"],
            records=p["records"],
            drift_settings=p["drift_settings"],
            drift_corrected=p["drift_corrected_settings"],
        )
    except MetricsFailed as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**dict(metrics.where, **result))


if __name__ == "__main__":
    main()
