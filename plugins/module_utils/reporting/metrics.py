# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus text exposition of stacktune's state, for node_exporter's textfile collector.

One file per host holds every series: the state and last gate decision of each layer
(from the on-host journal, and from the records of the current tune run), the gate's
ratios, drift found by the last drift run, and per playbook the time and result of its
last run. Each run rewrites the file; series a run does not know about (another
playbook's last run, the drift counts outside a drift run) are carried over from the
previous file. Pure functions only: the module reads the journal and writes the file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.keeping import BASES

# The file's name in node_exporter's textfile directory (stacktune_metrics_dir).
FILE_NAME = "stacktune.prom"

# Journal states of a layer (see engine/journal.py); exposed as a state set, 1 for the current one.
LAYER_STATES = ("new", "applying", "applied", "kept", "rolled_back", "restored")
DECISIONS = ("keep", "rollback", "inconclusive")

# The diagnosis's verdicts, in the order its rules are tried (diagnose/verdict.py reads them from here).
DIAGNOSIS = "stacktune_diagnosis_verdict"
DIAGNOSIS_VERDICTS = (
    "gpu_power_cap",
    "gpu_clocks_thermal",
    "gpu_compute",
    "host_memory",
    "input_storage",
    "input_loader",
    "cpu_main",
    "communication",
    "unclear",
)

KEPT_BASIS = "stacktune_layer_kept_basis"
TIMESTAMP = "stacktune_last_run_timestamp_seconds"
SUCCESS = "stacktune_last_run_success"
DRIFT = "stacktune_drift_settings"
DRIFT_CORRECTED = "stacktune_drift_corrected_settings"

# (name, type, help), in the order they are written.
FAMILIES = (
    ("stacktune_layer_state", "gauge", "Journal state of each layer: 1 for the current state, 0 for the others."),
    (
        "stacktune_layer_decision",
        "gauge",
        "Last gate decision of each layer: 1 for the decision taken, 0 for the others.",
    ),
    (
        KEPT_BASIS,
        "gauge",
        "Why each kept layer stays: 1 for its basis (gain: measured, helps; no_harm: measured, no harm; "
        "unmeasured: no trial in its run could measure it), 0 for the others.",
    ),
    ("stacktune_layer_settings", "gauge", "Number of settings the layer owns in the journal."),
    (
        "stacktune_gate_throughput_ratio",
        "gauge",
        "Throughput after / before of the layer's last gate measurement (above 1 is faster).",
    ),
    (
        "stacktune_gate_tail_ratio",
        "gauge",
        "Tail step time (p99 by default) after / before of the layer's last gate measurement (below 1 is better).",
    ),
    (
        DIAGNOSIS,
        "gauge",
        "Where the last tune's diagnosis found the measured program bound: 1 for its verdict, 0 for the others.",
    ),
    (DRIFT, "gauge", "Settings found drifted and left uncorrected by the last drift run."),
    (DRIFT_CORRECTED, "gauge", "Drifted settings the last drift run re-applied from the journal."),
    (TIMESTAMP, "gauge", "Unix time of the end of the last run of each stacktune playbook."),
    (SUCCESS, "gauge", "1 when the last run of the playbook succeeded on this host, else 0."),
)
FAMILY_NAMES = tuple(name for name, _type, _help in FAMILIES)
# Families whose samples only the named playbook's run knows; other runs carry them over.
CARRIED = (DRIFT, DRIFT_CORRECTED)
PER_PLAYBOOK = (TIMESTAMP, SUCCESS)
# Families left out when deciding whether the content changed.
VOLATILE = (TIMESTAMP,)

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def escape_label(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unescape(value):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def format_value(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def format_sample(name, labels, value):
    if labels:
        inner = ",".join('%s="%s"' % (k, escape_label(v)) for k, v in sorted(labels.items()))
        return "%s{%s} %s" % (name, inner, value)
    return "%s %s" % (name, value)


def parse(text):
    """Samples of a text exposition: a list of (name, labels dict, value text). Comments skipped."""
    samples = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = {}
        if match.group(3):
            for label in _LABEL.finditer(match.group(3)):
                labels[label.group(1)] = _unescape(label.group(2))
        samples.append((match.group(1), labels, match.group(4)))
    return samples


def _number(value):
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _gate_ratios(gate):
    if not isinstance(gate, dict):
        return None, None
    throughput = gate.get("throughput") if isinstance(gate.get("throughput"), dict) else {}
    tail = gate.get("tail") if isinstance(gate.get("tail"), dict) else {}
    return _number(throughput.get("ratio")), _number(tail.get("ratio"))


def layer_view(journal_entries, records=None):
    """Per layer: state, decision and gate ratios.

    ``journal_entries``: the journal's layer entries (state, settings, decision). ``records``:
    the current tune run's per-layer records ({layer, decision, gate}); their decision and
    gate numbers win over the journal's for the layers they name, so layers the engine does
    not journal (audit-only layers) get their decision too.
    """
    layers = {}
    for entry in journal_entries or []:
        if not isinstance(entry, dict) or not entry.get("layer"):
            continue
        decision = entry.get("decision") if isinstance(entry.get("decision"), dict) else {}
        throughput, tail = _gate_ratios(decision)
        layers[entry["layer"]] = {
            "state": entry.get("state"),
            "settings": len(entry.get("settings") or []),
            "decision": decision.get("decision"),
            "basis": decision.get("basis") if entry.get("state") == "kept" else None,
            "throughput_ratio": throughput,
            "tail_ratio": tail,
        }
    for record in records or []:
        if not isinstance(record, dict) or not record.get("layer"):
            continue
        view = layers.setdefault(
            record["layer"],
            {"state": None, "settings": None, "decision": None, "throughput_ratio": None, "tail_ratio": None},
        )
        if record.get("decision") in DECISIONS:
            view["decision"] = record["decision"]
        if isinstance(record.get("diagnosis"), dict) and record["diagnosis"].get("verdict") in DIAGNOSIS_VERDICTS:
            view["diagnosis"] = record["diagnosis"]["verdict"]
        throughput, tail = _gate_ratios(record.get("gate"))
        if throughput is not None or tail is not None:
            view["throughput_ratio"], view["tail_ratio"] = throughput, tail
    return layers


def render(layers, playbook, success, now, previous_text=None, drift_settings=None, drift_corrected=None):
    """The whole file: HELP and TYPE lines, then the samples of each family with any.

    ``now`` is the Unix time written as this playbook's last run. Samples of other
    playbooks' last runs, and drift counts when this run gives none, come from
    ``previous_text`` (the file as it was).
    """
    if not NAME.match(playbook or ""):
        raise ValueError("playbook name %r must be lower-case letters, digits and underscores" % (playbook,))
    samples = {name: [] for name in FAMILY_NAMES}
    for layer in sorted(layers):
        view = layers[layer]
        state = view.get("state")
        if state:
            for candidate in LAYER_STATES + ((state,) if state not in LAYER_STATES else ()):
                samples["stacktune_layer_state"].append(({"layer": layer, "state": candidate}, int(candidate == state)))
        if view.get("decision") in DECISIONS:
            for candidate in DECISIONS:
                samples["stacktune_layer_decision"].append(
                    ({"layer": layer, "decision": candidate}, int(candidate == view["decision"]))
                )
        if view.get("basis") in BASES:
            for candidate in BASES:
                samples[KEPT_BASIS].append(({"layer": layer, "basis": candidate}, int(candidate == view["basis"])))
        if view.get("settings") is not None:
            samples["stacktune_layer_settings"].append(({"layer": layer}, view["settings"]))
        if view.get("throughput_ratio") is not None:
            samples["stacktune_gate_throughput_ratio"].append(({"layer": layer}, view["throughput_ratio"]))
        if view.get("tail_ratio") is not None:
            samples["stacktune_gate_tail_ratio"].append(({"layer": layer}, view["tail_ratio"]))
    # the run's diagnosis (every layer record carries the same verdict); other runs carry it over
    diagnosed = sorted({v["diagnosis"] for v in layers.values() if v.get("diagnosis")})
    if diagnosed:
        for candidate in DIAGNOSIS_VERDICTS:
            samples[DIAGNOSIS].append(({"verdict": candidate}, int(candidate == diagnosed[0])))
    else:
        samples[DIAGNOSIS] += [(labels, value) for name, labels, value in parse(previous_text) if name == DIAGNOSIS]
    given = {DRIFT: drift_settings, DRIFT_CORRECTED: drift_corrected}
    for name, value in given.items():
        if value is not None:
            samples[name].append(({}, int(value)))
    for name, labels, value in parse(previous_text):
        if name in CARRIED and given[name] is None and not labels:
            samples[name].append(({}, value))
        elif name in PER_PLAYBOOK and labels.get("playbook") not in (None, playbook):
            samples[name].append(({"playbook": labels["playbook"]}, value))
    samples[TIMESTAMP].append(({"playbook": playbook}, "%.3f" % now))
    samples[SUCCESS].append(({"playbook": playbook}, int(bool(success))))
    lines = []
    for name, kind, help_text in FAMILIES:
        if not samples[name]:
            continue
        lines.append("# HELP %s %s" % (name, help_text))
        lines.append("# TYPE %s %s" % (name, kind))
        for labels, value in sorted(samples[name], key=lambda s: sorted(s[0].items())):
            lines.append(format_sample(name, labels, value if isinstance(value, str) else format_value(value)))
    return "\n".join(lines) + "\n"


def significant(text):
    """What a change is judged on: every sample except the run timestamps, values as numbers."""
    out = set()
    for name, labels, value in parse(text):
        if name in VOLATILE:
            continue
        number = _number(value)
        out.add((name, tuple(sorted(labels.items())), number if number is not None else value))
    return out


def content_changed(before, after):
    """Whether the metrics differ in anything but the last-run timestamps."""
    if before is None:
        return True
    return significant(before) != significant(after)
