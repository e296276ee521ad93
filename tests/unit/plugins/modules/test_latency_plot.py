# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The latency plot: one panel per layer and workload it was judged on, the caption (the verdict)
under the axes, the tail band shaded, the workload named in each panel's title."""

from __future__ import absolute_import, division, print_function

import json
import os
import random

import pytest

from ansible_collections.stacktune.gpu.plugins.modules import latency_plot

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "report")
with open(os.path.join(FIXTURES, "decisions.json")) as _handle:
    DECISIONS = json.load(_handle)


def steps(seed, n=400, level=10.0):
    rng = random.Random(seed)
    return [level * (1.0 + rng.random() * 0.1) for _unused in range(n)]


def records():
    return [
        {"layer": "kernel", "decision": "rollback", "gate": DECISIONS["rollback_tail"],
         "before_ms": steps(1), "after_ms": steps(2),
         "samples": {"dataloader": {"without": steps(3), "with": steps(4)},
                     "train_step": {"without": steps(1), "with": steps(2)}}},
        # a record of an older run: only the primary workload's steps
        {"layer": "nccl", "decision": "keep", "gate": DECISIONS["keep_improve"], "before_ms": steps(5),
         "after_ms": steps(6)},
        {"layer": "bios", "decision": "none", "gate": None, "before_ms": [], "after_ms": []},
    ]  # fmt: skip


def test_one_panel_per_layer_and_workload_in_the_order_judged():
    shown = latency_plot.panels(records())
    assert [(p[0], p[1]) for p in shown] == [
        ("kernel", "train_step"),
        ("kernel", "dataloader"),
        ("nccl", "train_step"),
    ]


def test_caption_is_the_verdict_and_the_workloads_own_decision():
    rec = records()[0]
    text = latency_plot.caption(rec, "train_step")  # the primary workload: worded as every other
    assert text.startswith("on train_step alone: rolled back: worse than allowed: tail (5%)")
    assert "tail +201.6%" in text and text.endswith("| the layer: rolled back (on train_step, dataloader)")
    other = latency_plot.caption(rec, "dataloader")
    assert other.startswith("on dataloader alone: rolled back: worse than allowed: tail (5%)")
    assert "tail +196.6%" in other and "+201.6%" not in other


def test_the_figure_puts_the_caption_outside_the_axes(tmp_path):
    matplotlib = pytest.importorskip("matplotlib", reason="matplotlib draws the plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = latency_plot.panels(records())
    fig = latency_plot.draw(plt, shown, "stacktune run on h")
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        plots = [ax for ax in fig.axes if ax.axison]
        notes = [ax for ax in fig.axes if not ax.axison]
        assert len(plots) == len(notes) == 3
        for ax, note in zip(plots, notes):
            assert " on " in ax.get_title(loc="left")
            caption = note.texts[0].get_window_extent(renderer)
            box = ax.get_window_extent(renderer)
            assert caption.y1 < box.y0, "the caption overlaps the axes"
            # the tail band: a shaded span up to the share of the slowest 1%
            assert any(abs(p.get_extents().y1 - ax.transData.transform((1, 0.01))[1]) < 1.5 for p in ax.patches)
        fig.savefig(str(tmp_path / "p.png"))
        assert (tmp_path / "p.png").stat().st_size > 10000
    finally:
        plt.close(fig)


def test_a_second_workloads_caption_has_its_own_numbers():
    gate = DECISIONS["noreg_keep_2wl"]  # primary gemm, also judged on train_step
    first = latency_plot.caption({"gate": gate}, "gemm")
    second = latency_plot.caption({"gate": gate}, "train_step")
    assert "throughput -1.3% ±4.3%" in first and "throughput -1.3%" not in second
    assert second.startswith("on train_step alone: keep: nothing measured worse; throughput +4.1% ±10.5%")
    assert second.endswith("| the layer: keep (on gemm, train_step)")


def test_a_caption_never_splits_a_value_from_its_noise():
    text = (
        "keep: throughput +15.3% ±17.2%, median step -15.8% ±34.6%, tail -14.0% ±39.3%, stalled steps -4.0 points ±3.4"
    )
    for width in range(20, 60):
        lines = latency_plot.wrapped(text, width).splitlines()
        assert not [line for line in lines if line.startswith("±")], (width, lines)
        assert " ".join(lines) == text


def _overlaps(boxes):
    boxes = sorted(boxes, key=lambda b: b.x0)
    return [(a, b) for a, b in zip(boxes, boxes[1:]) if b.x0 < a.x1]


@pytest.mark.parametrize("low, high", [(0.005, 0.05), (0.004, 0.3), (0.005, 50.0), (8.0, 12.0)])
def test_the_step_time_axis_labels_never_run_into_each_other(low, high):
    matplotlib = pytest.importorskip("matplotlib", reason="matplotlib draws the plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = random.Random(7)
    spread = [low * (high / low) ** rng.random() for _unused in range(400)]
    rec = {"layer": "kernel", "decision": "keep", "gate": DECISIONS["keep_improve"], "before_ms": spread,
           "after_ms": [v * 0.98 for v in spread]}  # fmt: skip
    fig = latency_plot.draw(plt, latency_plot.panels([rec]), "t")
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        ax = [a for a in fig.axes if a.axison][0]
        ticks = ax.xaxis.get_majorticklabels() + ax.xaxis.get_minorticklabels()
        shown = [t for t in ticks if t.get_visible() and t.get_text() and ax.get_xlim()[0] <= t.get_position()[0]]
        shown = [t for t in shown if t.get_position()[0] <= ax.get_xlim()[1]]
        assert len(shown) >= 2, "the axis has fewer than two labels: %s" % [t.get_text() for t in shown]
        assert not _overlaps([t.get_window_extent(renderer) for t in shown]), [t.get_text() for t in shown]
    finally:
        plt.close(fig)
