# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The search's figure: throughput, p99 and J/step against the candidate value, drawn from a
search decision made on windows recorded on one H200 (tests/unit/fixtures/search: the power
limit switched live in one program, NVML's energy counter read at the windows' edges)."""

from __future__ import absolute_import, division, print_function

import importlib.util
import os
import random

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.search import Search, replay
from ansible_collections.stacktune.gpu.plugins.modules import latency_plot

_HERE = os.path.dirname(__file__)
_spec = importlib.util.spec_from_file_location(
    "search_data", os.path.join(_HERE, "..", "module_utils", "gate", "search_data.py")
)
data = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(data)

VARIABLE = "gpu_settings_power_limit_watts"
CANDIDATES = [700, 650, 600, 550, 500, 450]


def search_record(host=700, objective="efficiency", seed=1):
    """A layer's record as the tune flow keeps it, its gate decision a search's."""
    windows = data.power_windows()
    by_arm = {c: windows[c] for c in CANDIDATES}
    by_arm[None] = windows[host]
    switch, measure = replay(by_arm, random.Random(seed))
    res = Search(
        CANDIDATES, host, switch, measure, objective=objective, max_slowdown=0.05, rng=random.Random(seed + 1000)
    ).run()
    gate = {"decision": res["decision"], "method": "search", "search": dict(res, variable=VARIABLE)}
    return {"layer": "gpu_settings", "decision": res["decision"], "gate": gate, "samples": {}}


def test_a_search_is_a_search_panel_and_no_latency_panel():
    rec = search_record()
    assert latency_plot.panels([rec]) == []
    (found,) = latency_plot.search_panels([rec, {"layer": "kernel", "gate": {"decision": "keep"}}])
    assert found[0] == "gpu_settings" and found[2]["variable"] == VARIABLE
    assert latency_plot.search_dest("/r/run/h.png") == "/r/run/h-search.png"


def test_the_search_figure_has_the_three_measures_against_the_value_and_the_choice(tmp_path):
    matplotlib = pytest.importorskip("matplotlib", reason="matplotlib draws the plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rec = search_record()
    found = rec["gate"]["search"]
    assert found["decision"] == "keep", found["reason"]  # efficiency keeps a lower limit on this curve
    chosen = found["chosen"]
    rows = {r["value"]: r for r in found["rows"] if r["arm"] == "candidate"}
    fig = latency_plot.draw_search(plt, latency_plot.search_panels([rec]), "stacktune run on h")
    try:
        axes = fig.axes
        assert [ax.get_ylabel() for ax in axes] == [
            "throughput (steps/s)",
            "p99 step time (ms)",
            "energy per step (J)",
        ]
        assert axes[-1].get_xlabel() == "%s (candidate value)" % VARIABLE
        assert axes[0].get_title(loc="left") == "gpu_settings: search %s (efficiency): KEPT %s" % (VARIABLE, chosen)
        for ax, key in zip(axes, ("throughput", "p99_ms", "j_per_step")):
            # every candidate's point at its value, the measure as the search's row gives it
            points = {}
            for line in ax.get_lines():
                if line.get_linestyle() in ("None", "") and line.get_marker() == "o":
                    points.update(zip(line.get_xdata(), line.get_ydata()))
            assert points == pytest.approx({float(v): r[key] for v, r in rows.items()})
            star = [line for line in ax.get_lines() if line.get_marker() == "*"]
            assert len(star) == 1 and list(star[0].get_xdata()) == [chosen]
            assert list(star[0].get_ydata()) == [rows[chosen][key]]
            labels = ax.get_legend_handles_labels()[1]
            assert "chosen: %s" % chosen in labels and "host's own value (700)" in labels
            host_line = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
            assert host_line[0].get_ydata()[0] == next(r for r in found["rows"] if r["arm"] == "host")[key]
        dropped = [v for v, r in rows.items() if r["status"] == "dropped"]
        assert dropped, "the recorded curve drops candidates"
        hollow = [c.lines[0] for c in axes[0].containers if c.get_label() == "dropped candidates"]
        assert hollow and hollow[0].get_markerfacecolor() == "white"
        assert sorted(hollow[0].get_xdata()) == sorted(float(v) for v in dropped)
        path = tmp_path / "h-search.png"
        fig.savefig(str(path))
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10000
    finally:
        plt.close(fig)


def test_a_search_that_keeps_the_host_value_says_so_and_marks_no_candidate():
    matplotlib = pytest.importorskip("matplotlib", reason="matplotlib draws the plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rec = search_record(objective="throughput")  # on this curve 700 W, the host's own, is the best
    assert rec["gate"]["search"]["decision"] == "rollback"
    fig = latency_plot.draw_search(plt, latency_plot.search_panels([rec]), "t")
    try:
        assert "ROLLED BACK the host's own value (700)" in fig.axes[0].get_title(loc="left")
        assert not [line for ax in fig.axes for line in ax.get_lines() if line.get_marker() == "*"]
    finally:
        plt.close(fig)


def test_the_report_shows_the_search_figure_and_no_missing_latency_plot():
    from ansible_collections.stacktune.gpu.plugins.module_utils.reporting import report

    plot = {"skipped": False, "panels": [], "searches": ["gpu_settings: %s" % VARIABLE]}
    text = "\n".join(report.plot_lines("h", plot, False, []))
    assert "![throughput, p99 and energy per step against the candidate value](h-search.png)" in text
    assert "(h.png)" not in text
    plot["panels"] = ["kernel on train_step"]
    text = "\n".join(report.plot_lines("h", plot, False, []))
    assert "(h.png)" in text and "(h-search.png)" in text
