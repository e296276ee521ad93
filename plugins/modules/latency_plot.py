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
  - "A layer whose gate searched candidate values (its decision's C(method) is C(search)) gets a
    second figure, RV(search_dest): per search, throughput (steps/s), p99 step time (ms) and
    energy per step (J) against the candidate value, each with its noise, the host's own value
    as a dashed line, dropped candidates hollow and the chosen value marked."
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
search_dest:
  description:
    - The figure of the searches (I(dest) with C(-search) before its suffix), written when a
      layer's gate searched candidate values.
  returned: always
  type: str
searches:
  description: "The searches drawn (or that would be), C(<layer>: <variable>)."
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

    A layer judged on one workload reads its one-line verdict; one judged on several reads, on
    every panel alike, that workload's own decision and numbers (its blocks, whether it stopped
    early), then the layer's outcome and the workloads it was judged on."""
    gate = rec.get("gate") or {}
    if not gate:
        return ""
    per = gate.get("workloads") or {}
    mine = per.get(workload) if len(per) > 1 and isinstance(per.get(workload), dict) else {}
    if not mine:
        return verdict(gate)
    own = dict(mine, workload=workload, method=mine.get("method") or gate.get("method"))
    own.pop("workloads_measured", None)
    own.pop("workloads", None)
    if isinstance(gate.get("futility"), dict) and gate["futility"].get(workload):
        own["futility"] = gate["futility"][workload]
    layer = WORDS.get(gate.get("decision"), str(gate.get("decision") or "not decided"))
    return "on %s alone: %s | the layer: %s (on %s)" % (
        workload,
        verdict(own),
        layer,
        ", ".join(str(w) for w in gate.get("workloads_measured") or per),
    )


def wrapped(text, width):
    """``text`` in lines of at most ``width`` characters, a value never split from its noise
    (``+1.5% ±0.4%`` stays on one line)."""
    return "\n".join(line.replace("\u00a0", " ") for line in textwrap.wrap(text.replace(" ±", "\u00a0±"), width))


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


def draw(plt, shown, title, wrap=95):
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
            wrapped(caption(rec, workload), wrap),
            fontsize=9,
            va="top",
            ha="left",
            transform=note.transAxes,
        )
    fig.suptitle(title, fontsize=11, y=1.0 - 0.15 / height)
    return fig


def search_panels(records):
    """One search panel per layer whose gate searched candidate values: ``(layer, record, search)``
    with the search's rows (the host's own value and every candidate)."""
    out = []
    for rec in records:
        gate = rec.get("gate") or {}
        found = gate.get("search") if gate.get("method") == "search" else None
        if isinstance(found, dict) and any(r.get("arm") == "candidate" for r in found.get("rows") or []):
            out.append((rec.get("layer"), rec, found))
    return out


def search_dest(dest):
    """The searches' figure next to ``dest``: ``run.png`` -> ``run-search.png``."""
    stem, ext = os.path.splitext(dest)
    return "%s-search%s" % (stem, ext or ".png")


# a search's measures, each as its row gives it: (key, half-width key, axis label)
SEARCH_MEASURES = (
    ("throughput", "throughput_half", "throughput (steps/s)"),
    ("p99_ms", None, "p99 step time (ms)"),
    ("j_per_step", "j_per_step_half", "energy per step (J)"),
)


def _search_x(values):
    """Where each candidate value goes on the x axis, and the tick labels: the values
    themselves when all are numbers, else their positions in the given order."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values], None
    return [float(i) for i in range(len(values))], [str(v) for v in values]


def draw_search(plt, searches, title):
    """The searches' figure: per search three axes (throughput, p99, J/step) against the
    candidate value, error bars the measure's noise, the host's own value a dashed line, a
    dropped candidate hollow, the chosen value marked with a star and named in the title."""
    fig, axes = plt.subplots(
        3 * len(searches), 1, figsize=(8, 7.2 * len(searches) + 0.6), squeeze=False, constrained_layout=True
    )
    for i, (layer, _rec, found) in enumerate(searches):
        rows = found.get("rows") or []
        cands = [r for r in rows if r.get("arm") == "candidate"]
        host = next((r for r in rows if r.get("arm") == "host"), {})
        xs, names = _search_x([r.get("value") for r in cands])
        chosen = found.get("chosen")
        host_chosen = found.get("decision") != "keep"
        where = "the host's own value (%s)" % host.get("value") if host_chosen else str(chosen)
        for j, (key, half, label) in enumerate(SEARCH_MEASURES):
            ax = axes[3 * i + j, 0]
            pts = [(x, r) for x, r in zip(xs, cands) if r.get(key) is not None]
            if not pts:
                ax.text(0.5, 0.5, "%s: not measured" % label, ha="center", va="center", transform=ax.transAxes)
                ax.set_ylabel(label)
                continue
            for dropped in (False, True):
                mine = [(x, r) for x, r in pts if (r.get("status") == "dropped") == dropped]
                if not mine:
                    continue
                ax.errorbar(
                    [x for x, _r in mine],
                    [r[key] for _x, r in mine],
                    yerr=[r.get(half) or 0.0 for _x, r in mine] if half else None,
                    fmt="o",
                    color="tab:blue",
                    mfc="white" if dropped else "tab:blue",
                    capsize=3,
                    label="dropped candidates" if dropped else "candidates",
                )
            ax.plot(xs, [r.get(key) for r in cands], color="tab:blue", alpha=0.35, linewidth=1)
            if host.get(key) is not None:
                ax.axhline(
                    host[key],
                    color="grey",
                    linestyle="--",
                    linewidth=1,
                    label="host's own value (%s)" % host.get("value"),
                )
            if not host_chosen and chosen in [r.get("value") for r in cands]:
                x, r = next((x, r) for x, r in zip(xs, cands) if r.get("value") == chosen)
                if r.get(key) is not None:
                    ax.plot(
                        [x],
                        [r[key]],
                        marker="*",
                        markersize=16,
                        color="tab:red",
                        linestyle="",
                        label="chosen: %s" % chosen,
                    )
            if names:
                ax.set_xticks(xs)
                ax.set_xticklabels(names)
            ax.set_ylabel(label)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7, loc="best")
            if j == 0:
                ax.set_title(
                    "%s: search %s (%s): %s %s"
                    % (
                        layer,
                        found.get("variable"),
                        found.get("objective"),
                        OUTCOME.get(found.get("decision"), ""),
                        where,
                    ),
                    loc="left",
                    fontsize=10,
                    fontweight="bold",
                )
            if j == len(SEARCH_MEASURES) - 1:
                ax.set_xlabel("%s (candidate value)" % found.get("variable"))
    fig.suptitle("%s: searches" % title, fontsize=11)
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
    searches = search_panels(module.params["records"])
    result = {
        "changed": False,
        "dest": dest,
        "layers": sorted({p[0] for p in shown}, key=[p[0] for p in shown].index),
        "panels": ["%s on %s" % (p[0], p[1]) for p in shown],
        "search_dest": search_dest(dest),
        "searches": ["%s: %s" % (p[0], p[2].get("variable")) for p in searches],
        "skipped": True,
    }
    if not shown and not searches:
        module.exit_json(reason="no layer was measured", **result)
    if module.check_mode:
        module.exit_json(reason="check mode", **result)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        module.exit_json(reason="matplotlib is not importable by %s" % sys.executable, **result)

    figures = [(dest, lambda: draw(plt, shown, module.params["title"]))] if shown else []
    if searches:
        figures.append((search_dest(dest), lambda: draw_search(plt, searches, module.params["title"])))
    for path, make in figures:
        fig = make()
        try:
            directory = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(directory):
                os.makedirs(directory)
            fig.savefig(path, dpi=90, bbox_inches="tight")
        except (IOError, OSError) as exc:
            module.fail_json(msg="Failed to write plot %s: %s" % (path, exc))
        finally:
            plt.close(fig)
    result.update(changed=True, skipped=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
