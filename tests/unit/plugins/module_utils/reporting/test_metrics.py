# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus text rendering of stacktune's state.

Gate decisions come from the real gate (_gate.judge) on deterministic step-time samples:
a layer that speeds up every step, and one that leaves the median alone but adds tail spikes.
"""

from __future__ import absolute_import, division, print_function

import re

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.reporting import metrics
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.steps import judge

NOW = 1764500000.25


def steps(base, spikes=0, spike_ms=0.0, n=600):
    out = [base + 0.01 * (i % 17) for i in range(n)]
    for i in range(spikes):
        out[(i * 37) % n] += spike_ms
    return out


@pytest.fixture(scope="module")
def kept_gate():
    return judge({"samples_ms": steps(20.0)}, {"samples_ms": steps(18.0)}, policy="improve", final=True, seed=1)


@pytest.fixture(scope="module")
def rollback_gate():
    return judge(
        {"samples_ms": steps(20.0)},
        {"samples_ms": steps(19.8, spikes=30, spike_ms=180.0)},
        policy="improve",
        final=True,
        seed=1,
    )


def journal(kept_gate, rollback_gate):
    return [
        {"layer": "kernel", "state": "rolled_back", "settings": [], "decision": rollback_gate},
        {"layer": "memory", "state": "kept", "settings": [{"id": "a"}, {"id": "b"}], "decision": kept_gate},
        {
            "layer": "nccl",
            "state": "kept",
            "settings": [{"id": "file:/etc/nccl.conf"}],
            "decision": {"decision": "keep", "reason": "gate disabled"},
        },
    ]


def samples_of(text):
    return {(name, tuple(sorted(labels.items()))): value for name, labels, value in metrics.parse(text)}


def test_the_real_gate_decided_as_the_test_needs(kept_gate, rollback_gate):
    assert kept_gate["decision"] == "keep"
    assert rollback_gate["decision"] == "rollback"


def test_layer_view_from_the_journal(kept_gate, rollback_gate):
    view = metrics.layer_view(journal(kept_gate, rollback_gate))
    assert view["kernel"]["state"] == "rolled_back" and view["kernel"]["decision"] == "rollback"
    assert view["kernel"]["tail_ratio"] == pytest.approx(rollback_gate["tail"]["ratio"])
    assert view["kernel"]["tail_ratio"] > 1.05
    assert view["memory"]["settings"] == 2
    assert view["memory"]["throughput_ratio"] == pytest.approx(kept_gate["throughput"]["ratio"])
    assert view["memory"]["throughput_ratio"] > 1.05
    assert view["nccl"]["throughput_ratio"] is None and view["nccl"]["decision"] == "keep"


def test_records_of_the_run_win_and_add_unjournaled_layers(kept_gate, rollback_gate):
    records = [
        {"layer": "bios", "decision": "keep", "gate": None},
        {"layer": "driver", "decision": "none", "gate": None},
        {"layer": "kernel", "decision": "keep", "gate": kept_gate},
        {"layer": "memory", "decision": "keep", "gate": None},  # unchanged this run: journal ratios stay
    ]
    view = metrics.layer_view(journal(kept_gate, rollback_gate), records)
    assert view["bios"] == {
        "state": None,
        "settings": None,
        "decision": "keep",
        "throughput_ratio": None,
        "tail_ratio": None,
    }
    assert view["driver"]["decision"] is None
    assert view["kernel"]["decision"] == "keep"
    assert view["kernel"]["throughput_ratio"] == pytest.approx(kept_gate["throughput"]["ratio"])
    assert view["memory"]["throughput_ratio"] == pytest.approx(kept_gate["throughput"]["ratio"])


def test_render_series(kept_gate, rollback_gate):
    text = metrics.render(metrics.layer_view(journal(kept_gate, rollback_gate)), "tune", True, NOW)
    s = samples_of(text)
    assert s[("stacktune_layer_state", (("layer", "kernel"), ("state", "rolled_back")))] == "1"
    assert s[("stacktune_layer_state", (("layer", "kernel"), ("state", "kept")))] == "0"
    assert sum(1 for (name, labels), v in s.items() if name == "stacktune_layer_state" and v == "1") == 3
    assert s[("stacktune_layer_decision", (("decision", "rollback"), ("layer", "kernel")))] == "1"
    assert s[("stacktune_layer_decision", (("decision", "keep"), ("layer", "kernel")))] == "0"
    assert s[("stacktune_layer_settings", (("layer", "memory"),))] == "2"
    assert float(s[("stacktune_gate_tail_ratio", (("layer", "kernel"),))]) == pytest.approx(
        rollback_gate["tail"]["ratio"]
    )
    assert ("stacktune_gate_tail_ratio", (("layer", "nccl"),)) not in s
    assert s[("stacktune_last_run_timestamp_seconds", (("playbook", "tune"),))] == "1764500000.250"
    assert s[("stacktune_last_run_success", (("playbook", "tune"),))] == "1"
    assert not any(name.startswith("stacktune_drift") for name, _l in s)


def test_exposition_format(kept_gate, rollback_gate):
    """HELP and TYPE once per family, before its samples; snake_case names; base units."""
    text = metrics.render(metrics.layer_view(journal(kept_gate, rollback_gate)), "drift", False, NOW, drift_settings=3)
    lines = text.splitlines()
    assert text.endswith("\n")
    seen = []
    for i, line in enumerate(lines):
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert lines[i + 1] == "# TYPE %s gauge" % name
            assert name not in seen
            seen.append(name)
        elif not line.startswith("#"):
            name = re.match(r"^([a-z_]+)[{ ]", line).group(1)
            assert name == seen[-1], "sample %s outside its family" % line
    assert all(re.match(r"^stacktune_[a-z_]+$", n) for n in seen)
    assert seen == [n for n in metrics.FAMILY_NAMES if n in seen]
    assert "stacktune_drift_settings 3" in lines
    assert 'stacktune_last_run_success{playbook="drift"} 0' in lines


def test_other_playbooks_and_drift_are_carried_over():
    drift = metrics.render({}, "drift", True, 1000.0, drift_settings=0, drift_corrected=3)
    tune = metrics.render({}, "tune", False, 2000.0, previous_text=drift)
    s = samples_of(tune)
    assert s[("stacktune_last_run_timestamp_seconds", (("playbook", "drift"),))] == "1000.000"
    assert s[("stacktune_last_run_timestamp_seconds", (("playbook", "tune"),))] == "2000.000"
    assert s[("stacktune_last_run_success", (("playbook", "tune"),))] == "0"
    assert s[("stacktune_drift_settings", ())] == "0"
    assert s[("stacktune_drift_corrected_settings", ())] == "3"
    # the next drift run replaces its own numbers and keeps tune's
    again = samples_of(
        metrics.render({}, "drift", False, 3000.0, previous_text=tune, drift_settings=2, drift_corrected=0)
    )
    assert again[("stacktune_drift_settings", ())] == "2"
    assert again[("stacktune_last_run_timestamp_seconds", (("playbook", "tune"),))] == "2000.000"
    assert again[("stacktune_last_run_timestamp_seconds", (("playbook", "drift"),))] == "3000.000"


def test_only_timestamps_moving_is_no_change(kept_gate, rollback_gate):
    layers = metrics.layer_view(journal(kept_gate, rollback_gate))
    first = metrics.render(layers, "tune", True, NOW)
    second = metrics.render(layers, "tune", True, NOW + 3600, previous_text=first)
    assert first != second
    assert not metrics.content_changed(first, second)
    assert metrics.content_changed(None, first)
    failed = metrics.render(layers, "tune", False, NOW + 7200, previous_text=second)
    assert metrics.content_changed(second, failed)
    layers["kernel"]["state"] = "restored"
    assert metrics.content_changed(second, metrics.render(layers, "tune", True, NOW + 7200, previous_text=second))


def test_label_values_are_escaped_and_parsed_back():
    line = metrics.format_sample("m", {"layer": 'a"b\\c\nd'}, "1")
    assert line == 'm{layer="a\\"b\\\\c\\nd"} 1'
    assert metrics.parse(line) == [("m", {"layer": 'a"b\\c\nd'}, "1")]


@pytest.mark.parametrize("value, text", [(True, "1"), (3, "3"), (2.0, "2"), (1.0625, "1.0625"), (float("nan"), "NaN")])
def test_format_value(value, text):
    assert metrics.format_value(value) == text


def test_unknown_state_is_exported_and_bad_playbook_refused():
    text = metrics.render({"x": {"state": "pending", "decision": None, "settings": 0}}, "tune", True, NOW)
    assert 'stacktune_layer_state{layer="x",state="pending"} 1' in text
    with pytest.raises(ValueError, match="playbook name"):
        metrics.render({}, "Tune Run", True, NOW)
