#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: latency_plot
short_description: Plot step-time distributions before and after each gated layer as a PNG
version_added: 0.1.0
description:
  - Draws, for every layer the gate judged, the exceedance curve (the share of steps slower
    than a given time) of the step times measured without and with the layer, on log axes,
    so that a tail that grew is visible at a glance next to a median that did not move.
  - "Meant to run on the controller (C(delegate_to: localhost)) at the end of a tune run."
  - Needs matplotlib on the Python that runs it; without it the module reports
    C(skipped) with the reason instead of failing.
author: stacktune maintainers (@stacktune)
options:
  dest:
    description: Path of the PNG file to write.
    type: path
    required: true
  records:
    description:
      - The per-layer records of a tune run. Each has C(layer), C(decision), and the raw
        step times C(before_ms) and C(after_ms); layers without both are left out.
    type: list
    elements: dict
    required: true
  title:
    description: Title of the figure.
    type: str
    default: stacktune
attributes:
  check_mode:
    support: full
    description: In check mode nothing is written.
  diff_mode:
    support: none
    description: A PNG has no useful text diff.
  platform:
    support: full
    platforms: posix
    description: Any controller with matplotlib.
"""

EXAMPLES = r"""
- name: Plot the run's latency distributions
  stacktune.gpu.latency_plot:
    dest: "reports/{{ stacktune_run_id }}/{{ inventory_hostname }}.png"
    records: "{{ stacktune_results }}"
    title: "{{ inventory_hostname }}"
  delegate_to: localhost
"""

RETURN = r"""
dest:
  description: The file written.
  returned: always
  type: str
layers:
  description: The layers that were plotted.
  returned: always
  type: list
  elements: str
skipped:
  description: True when nothing was drawn (no gated layer, matplotlib missing, check mode).
  returned: always
  type: bool
reason:
  description: Why nothing was drawn.
  returned: when skipped
  type: str
"""

import os
import sys
import textwrap

from ansible.module_utils.basic import AnsibleModule


def exceedance(samples):
    """Sorted step times and, for each, the share of steps at least that slow."""
    values = sorted(float(v) for v in samples)
    n = len(values)
    return values, [(n - i) / float(n) for i in range(n)]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            records=dict(type="list", elements="dict", required=True),
            title=dict(type="str", default="stacktune"),
        ),
        supports_check_mode=True,
    )
    dest = module.params["dest"]
    gated = [r for r in module.params["records"] if r.get("before_ms") and r.get("after_ms")]
    result = {"changed": False, "dest": dest, "layers": [r.get("layer") for r in gated], "skipped": True}
    if not gated:
        module.exit_json(reason="no layer was measured", **result)
    if module.check_mode:
        module.exit_json(reason="check mode", **result)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        module.exit_json(reason="matplotlib is not importable by %s" % sys.executable, **result)

    fig, axes = plt.subplots(len(gated), 1, figsize=(8, 3.2 * len(gated)), squeeze=False)
    for ax, rec in zip(axes[:, 0], gated):
        for label, key, color in (("without layer", "before_ms", "tab:blue"), ("with layer", "after_ms", "tab:red")):
            xs, ys = exceedance(rec[key])
            ax.step(xs, ys, where="post", color=color, label="%s (n=%d)" % (label, len(xs)))
        ax.axhline(0.01, color="grey", linestyle=":", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("step time (ms)")
        ax.set_ylabel("share of steps slower")
        gate = rec.get("gate") or {}
        ax.set_title("%s: %s" % (rec.get("layer"), (rec.get("decision") or "").upper()), loc="left", fontsize=10)
        reason = "\n".join(textwrap.wrap(gate.get("reason") or "", 120)[:6])
        ax.text(0.01, 0.02, reason, transform=ax.transAxes, fontsize=6, va="bottom")
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(module.params["title"])
    fig.tight_layout()
    try:
        directory = os.path.dirname(os.path.abspath(dest))
        if not os.path.isdir(directory):
            os.makedirs(directory)
        fig.savefig(dest, dpi=90)
    except (IOError, OSError) as exc:
        module.fail_json(msg="Failed to write plot %s: %s" % (dest, exc))
    finally:
        plt.close(fig)
    result.update(changed=True, skipped=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
