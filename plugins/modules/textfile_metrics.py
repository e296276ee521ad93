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
  - Layer states, decisions and gate ratios come from the on-host journal (I(journal_dir)), so every
    playbook writes the same view of the layers; the records of the current tune run (I(records)) add the
    decisions of layers the journal does not hold.
  - "Series: C(stacktune_layer_state{layer,state}) (1 for the current journal state, 0 for the others:
    new, applying, applied, kept, rolled_back, restored); C(stacktune_layer_decision{layer,decision})
    (keep, rollback, inconclusive); C(stacktune_layer_settings{layer});
    C(stacktune_gate_throughput_ratio{layer}) and C(stacktune_gate_tail_ratio{layer}) (after / before);
    C(stacktune_drift_settings) and C(stacktune_drift_corrected_settings);
    C(stacktune_last_run_timestamp_seconds{playbook}) and C(stacktune_last_run_success{playbook})."
  - Series this run does not know are carried over from the existing file, so a tune run keeps the drift
    run's numbers and every playbook's last run stays visible.
  - The file is written through a temporary file in the same directory and a rename, so the collector never
    reads half a file. The directory is created (0755) when missing.
author: stacktune maintainers (@stacktune)
options:
  path:
    description: The metrics file. node_exporter reads files ending in C(.prom) in its textfile directory.
    type: path
    default: /var/lib/node_exporter/textfile_collector/stacktune.prom
  playbook:
    description: The playbook whose run is recorded (the C(playbook) label).
    type: str
    required: true
    choices: [tune, drift, rollback, verify]
  success:
    description: Whether the run succeeded on this host.
    type: bool
    required: true
  journal_dir:
    description: Directory of the on-host journal the layer states are read from. A missing journal means no layers.
    type: path
    default: /var/lib/stacktune
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

- name: Write somewhere else
  stacktune.gpu.textfile_metrics:
    path: /run/prometheus/textfile/stacktune.prom
    playbook: rollback
    success: true
"""

RETURN = r"""
path:
  description: The metrics file.
  returned: always
  type: str
  sample: /var/lib/node_exporter/textfile_collector/stacktune.prom
content:
  description: The file's content as written (or as it would be written in check mode).
  returned: always
  type: str
  sample: |
    # HELP stacktune_layer_state Journal state of each layer: 1 for the current state, 0 for the others.
    # TYPE stacktune_layer_state gauge
    stacktune_layer_state{layer="kernel",state="kept"} 1
series:
  description: Number of samples in the file.
  returned: always
  type: int
  sample: 24
written:
  description: Whether the file was written (false in check mode).
  returned: always
  type: bool
layers:
  description: Per layer the state, decision, owned settings and gate ratios that were exported.
  returned: always
  type: dict
"""

import os
import stat
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils._fileops import atomic_write, read_text
from ansible_collections.stacktune.gpu.plugins.module_utils._journal import Journal
from ansible_collections.stacktune.gpu.plugins.module_utils._metrics import (
    content_changed,
    layer_view,
    parse,
    render,
)


def journal_entries(journal_dir):
    journal = Journal(journal_dir)
    entries = []
    for layer in journal.layers():
        entry = journal.load(layer)
        if entry is not None:
            entries.append(entry)
    return entries


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/var/lib/node_exporter/textfile_collector/stacktune.prom"),
            playbook=dict(type="str", required=True, choices=["tune", "drift", "rollback", "verify"]),
            success=dict(type="bool", required=True),
            journal_dir=dict(type="path", default="/var/lib/stacktune"),
            records=dict(type="list", elements="dict", default=[]),
            drift_settings=dict(type="int"),
            drift_corrected_settings=dict(type="int"),
            mode=dict(type="str", default="0644"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        mode = int(p["mode"], 8)
    except ValueError:
        module.fail_json(msg="Failed to parse mode: %r is not an octal file mode" % p["mode"])
    if not 0 <= mode <= 0o7777:
        module.fail_json(msg="Failed to parse mode: %r is not an octal file mode" % p["mode"])
    for key in ("drift_settings", "drift_corrected_settings"):
        if p[key] is not None and p[key] < 0:
            module.fail_json(msg="Failed to validate %s: must not be negative, got %s" % (key, p[key]))

    try:
        entries = journal_entries(p["journal_dir"])
    except (IOError, OSError, ValueError) as exc:
        module.fail_json(msg="Failed to read the journal in %s: %s" % (p["journal_dir"], exc))
    layers = layer_view(entries, p["records"])
    before = read_text(p["path"]) if os.path.isfile(p["path"]) else None
    content = render(
        layers,
        p["playbook"],
        p["success"],
        time.time(),
        previous_text=before,
        drift_settings=p["drift_settings"],
        drift_corrected=p["drift_corrected_settings"],
    )
    changed = content_changed(before, content)
    if before is not None and stat.S_IMODE(os.stat(p["path"]).st_mode) != mode:
        changed = True
    written = False
    if not module.check_mode:
        try:
            atomic_write(p["path"], content.encode("utf-8"), mode=mode)
        except (IOError, OSError) as exc:
            module.fail_json(msg="Failed to write the metrics file %s: %s" % (p["path"], exc))
        written = True
    result = dict(
        changed=changed,
        path=p["path"],
        content=content,
        series=len(parse(content)),
        written=written,
        layers=layers,
    )
    if module._diff:
        result["diff"] = {
            "before": before or "",
            "after": content,
            "before_header": p["path"],
            "after_header": p["path"],
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
