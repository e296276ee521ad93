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
  - "Draws one panel per layer the gate judged and per workload it was judged on: the exceedance
    curve (the share of steps at least that slow) of the step times measured without and with
    the layer, on log axes, with the tail (the slowest 1% of steps, the gate's tail quantile)
    shaded, so that a tail that grew is visible at a glance next to a median that did not move."
  - Each panel's title names the layer, the workload and the outcome; the layer's one-line
    verdict is printed under the axes, never over the curves.
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
      - The per-layer records of a tune run. Each has C(layer), C(decision), C(gate) (the
        decision), and the raw step times per workload in C(samples) (per workload its C(without) and C(with) lists);
        a record without C(samples) is drawn from C(before_ms) and C(after_ms), its primary
        workload's steps. Layers without steps are left out.
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
panels:
  description: The panels drawn (or that would be), C(<layer> on <workload>).
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

import math
import os
import sys
import textwrap

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.decision import WORDS, verdict


def exceedance(samples):
    """Sorted step times and, for each, the share of steps at least that slow."""
    values = sorted(float(v) for v in samples)
    n = len(values)
    return values, [(n - i) / float(n) for i in range(n)]


def panels(records):
    """One panel per layer and workload it was judged on: ``(layer, workload, record, without, with)``.

    ``samples`` (``{workload: {without, with}}``) gives every workload; a record without it
    has its primary workload's steps in ``before_ms`` / ``after_ms``."""
    out = []
    for rec in records:
        gate = rec.get("gate") or {}
        per = rec.get("samples") if isinstance(rec.get("samples"), dict) else {}
        order = [w for w in gate.get("workloads_measured") or [] if w in per] + sorted(
            w for w in per if w not in (gate.get("workloads_measured") or [])
        )
        shown = False
        for w in order:
            arms = per.get(w) or {}
            if arms.get("without") and arms.get("with"):
                out.append((rec.get("layer"), w, rec, arms["without"], arms["with"]))
                shown = True
        if not shown and rec.get("before_ms") and rec.get("after_ms"):
            out.append(
                (rec.get("layer"), gate.get("workload") or "its workload", rec, rec["before_ms"], rec["after_ms"])
            )
    return out


def caption(rec, workload):
    """The words under a panel: the verdict on this panel's workload, with its own numbers.

    The decision's top-level numbers are its primary workload's: the primary's panel reads the
    layer's one-line verdict (and its own decision when it was judged on several); every other
    workload's panel reads that workload's own decision and numbers, then the layer's outcome."""
    gate = rec.get("gate") or {}
    if not gate:
        return ""
    per = gate.get("workloads") or {}
    mine = per.get(workload) if len(per) > 1 and isinstance(per.get(workload), dict) else {}
    primary = gate.get("workload") or (gate.get("workloads_measured") or [workload])[0]
    if not mine or workload == primary:
        text = verdict(gate)
        if mine.get("decision"):
            text += " | on %s alone: %s" % (workload, mine["decision"])
        return text
    own = dict(mine, workload=workload, method=mine.get("method") or gate.get("method"))
    own.pop("workloads_measured", None)
    own.pop("workloads", None)
    layer = WORDS.get(gate.get("decision"), str(gate.get("decision") or "not decided"))
    return "on %s alone: %s | the layer: %s (on %s)" % (
        workload,
        verdict(own),
        layer,
        ", ".join(str(w) for w in gate.get("workloads_measured") or per),
    )


def tail_quantile(rec):
    gate = rec.get("gate") or {}
    try:
        return float((gate.get("tail") or {}).get("quantile") or 0.99)
    except (TypeError, ValueError):
        return 0.99


# Which minor ticks of the log step-time axis get a label, by how many decades the axis spans:
# within about half a decade 2 to 9 have room, within one 2, 3, 4, 5 and 7, within two and a
# half only 2 and 5, beyond that none (0.006 0.007 0.008 0.009 would run into each other).
MINOR_LABELS = ((0.6, (2, 3, 4, 5, 6, 7, 8, 9)), (1.2, (2, 3, 4, 5, 7)), (2.5, (2, 5)))


def minor_labels(ax):
    """A tick formatter for the x axis's minor ticks that labels only those with room (MINOR_LABELS);
    it reads the axis's span when the figure is drawn."""

    def label(value, _pos):
        low, high = ax.get_xlim()
        if value <= 0 or low <= 0 or high <= low:
            return ""
        decades = math.log10(high / low)
        digit = int(round(value / 10 ** math.floor(math.log10(value) + 1e-9)))
        for most, digits in MINOR_LABELS:
            if decades <= most:
                return "%g" % value if digit in digits else ""
        return ""

    return label


def draw(plt, shown, title, wrap=110):
    """The figure: per panel the exceedance curves without and with the layer on log axes, the
    tail band shaded, the layer, workload and outcome above and the verdict below the axes."""
    from matplotlib.gridspec import GridSpec
    from matplotlib.ticker import FuncFormatter

    height = 4.4 * len(shown) + 0.7
    fig = plt.figure(figsize=(9, height))
    grid = GridSpec(
        2 * len(shown),
        1,
        figure=fig,
        height_ratios=[3.2, 1.0] * len(shown),
        hspace=0.2,
        top=1.0 - 0.55 / height,
        bottom=0.2 / height,
    )
    plain_number = FuncFormatter(lambda v, _pos: "%g" % v)
    for i, (layer, workload, rec, without, with_) in enumerate(shown):
        ax = fig.add_subplot(grid[2 * i, 0])
        q = tail_quantile(rec)
        smallest = 1.0
        for label, steps, color in (("without the layer", without, "tab:blue"), ("with the layer", with_, "tab:red")):
            xs, ys = exceedance(steps)
            smallest = min(smallest, ys[-1])
            ax.step(xs, ys, where="post", color=color, label="%s (%d steps)" % (label, len(xs)))
        band = 1.0 - q
        ax.axhspan(
            smallest * 0.5,
            band,
            color="orange",
            alpha=0.15,
            lw=0,
            label="the tail: slowest %g%% of steps" % (band * 100),
        )
        ax.axhline(band, color="grey", linestyle=":", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(smallest * 0.5, 1.05)
        ax.xaxis.set_major_formatter(plain_number)
        ax.xaxis.set_minor_formatter(FuncFormatter(minor_labels(ax)))
        ax.tick_params(axis="x", which="minor", labelsize=7)
        ax.set_xlabel("step time (ms)", labelpad=1)
        ax.set_ylabel("share of steps this slow or slower")
        word = OUTCOME.get(rec.get("decision"), str(rec.get("decision") or ""))
        ax.set_title("%s on %s: %s" % (layer, workload, word), loc="left", fontsize=10, fontweight="bold")
        ax.legend(fontsize=7, loc="lower left")
        ax.grid(True, which="major", alpha=0.3)
        note = fig.add_subplot(grid[2 * i + 1, 0])
        note.axis("off")
        note.text(
            0.0,
            0.68,
            "\n".join(textwrap.wrap(caption(rec, workload), wrap)),
            fontsize=7.5,
            va="top",
            ha="left",
            transform=note.transAxes,
        )
    fig.suptitle(title, fontsize=11, y=1.0 - 0.15 / height)
    return fig


OUTCOME = {"keep": "KEPT", "rollback": "ROLLED BACK", "inconclusive": "INCONCLUSIVE"}


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
    shown = panels(module.params["records"])
    result = {
        "changed": False,
        "dest": dest,
        "layers": sorted({p[0] for p in shown}, key=[p[0] for p in shown].index),
        "panels": ["%s on %s" % (p[0], p[1]) for p in shown],
        "skipped": True,
    }
    if not shown:
        module.exit_json(reason="no layer was measured", **result)
    if module.check_mode:
        module.exit_json(reason="check mode", **result)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        module.exit_json(reason="matplotlib is not importable by %s" % sys.executable, **result)

    fig = draw(plt, shown, module.params["title"])
    try:
        directory = os.path.dirname(os.path.abspath(dest))
        if not os.path.isdir(directory):
            os.makedirs(directory)
        fig.savefig(dest, dpi=90, bbox_inches="tight")
    except (IOError, OSError) as exc:
        module.fail_json(msg="Failed to write plot %s: %s" % (dest, exc))
    finally:
        plt.close(fig)
    result.update(changed=True, skipped=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
