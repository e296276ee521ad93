# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every sentence of a report against the record it was rendered from.

fixtures/report/runs/*.json are the JSON records of real runs of tune.yml (each file's
``recorded`` says which run: the default tune on a 2-core VM, where the kernel layer was rolled
back on two workloads of which one stopped early; a search; check mode; a run that measured
nothing). Each is rendered the way roles/stacktune/tasks/report.yml renders it, and each number
the words say is checked against the JSON: the signs and sizes of the changes, the blocks per arm
per workload, "stopped early", the counts of settings changed and put back; and the notation:
no table cell over 300 characters, no exponent, no ``+-``.
"""

from __future__ import absolute_import, division, print_function

import glob
import json
import os
import re

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.report import markdown as diagnosis_markdown
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting import report

RUNS = sorted(
    glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "report", "runs", "*.json"))
)
NAMES = {"throughput": "throughput", "p50": "median step", "tail": "tail"}


def _load(path):
    with open(path) as handle:
        record = json.load(handle)
    return record, report.record_markdown(record, diagnosis_markdown(record.get("diagnosis") or {}, record["layers"]))


def _gates(record):
    return [(r, r.get("gate") or {}) for r in record["layers"]]


def _per_workload(gate):
    per = gate.get("workloads") or {}
    if per:
        return per
    return {gate["workload"]: gate} if gate.get("workload") else {}


def _stopped_early(gate, workload):
    """Whether the record says the trial stopped early on ``workload``: the workload's own
    ``futility``, or the decision's (a dict per workload, or a text when one workload ran)."""
    per = (gate.get("workloads") or {}).get(workload) or {}
    top = gate.get("futility")
    return bool(per.get("futility") or (top.get(workload) if isinstance(top, dict) else top))


def _section(text, layer):
    """The layer's own section of the report (from its heading to the next layer's)."""
    start = text.find("\n## %s\n" % layer)
    if start < 0:
        return ""
    end = text.find("\n## ", start + 4)
    return text[start : end if end > 0 else len(text)]


def _row(text, layer):
    for line in text.splitlines():
        if line.startswith("| %s | " % layer):
            return [c.strip() for c in line.strip("|").split("|")]
    raise AssertionError("no row for %s" % layer)


def test_recorded_runs_are_there():
    names = [os.path.basename(p) for p in RUNS]
    assert len(names) >= 3, names


@pytest.mark.parametrize("path", RUNS, ids=[os.path.basename(p) for p in RUNS])
def test_the_notation_is_one(path):
    _record, text = _load(path)
    assert "+-" not in text
    assert not re.search(r"\d[eE][+-]\d", text), re.search(r".{30}\d[eE][+-]\d.{10}", text).group(0)
    for line in text.splitlines():
        if line.startswith("|"):
            for cell in line.strip("|").split(" | "):
                assert len(cell.strip()) <= 300, cell[:120]
    assert "\n## Layers\n" in text[: text.find("\n## ", 1) + 12], "the layers' table comes first"


@pytest.mark.parametrize("path", RUNS, ids=[os.path.basename(p) for p in RUNS])
def test_the_counts_are_the_records(path):
    record, text = _load(path)
    for r, _gate in _gates(record):
        changed = [s for s in r.get("settings") or [] if s.get("changed")]
        cells = _row(text, r["layer"])
        assert cells[2].split(" ")[0] == str(len(changed)), (r["layer"], cells[2])
        if r.get("decision") == "rollback" and not record.get("check_mode") and report.restored_ids(r):
            values, files = report.put_back(r)
            words = re.search(
                r"(?:The gate rolled this layer back:|The search kept the host's own value: the candidates tried,)"
                r" (.*?); `now`",
                _section(text, r["layer"]),
            ).group(1)
            said_values = re.search(r"(\d+) setting\(s\)", words)
            said_files = re.search(r"(\d+) persisting files?", words)
            assert (int(said_values.group(1)) if said_values else 0) == len(values)
            assert (int(said_files.group(1)) if said_files else 0) == len(files)
            # every row the table marks as put back is one the restore put back, or persisted only
            section = _section(text, r["layer"])
            marked = [line for line in section.splitlines() if line.startswith("| ") and "put back" in line]
            assert len(marked) == len(changed)


@pytest.mark.parametrize("path", RUNS, ids=[os.path.basename(p) for p in RUNS])
def test_the_signs_and_blocks_are_the_records(path):
    record, text = _load(path)
    for r, gate in _gates(record):
        if not gate or gate.get("measurable") is False or gate.get("method") == "search":
            continue
        said = [line for line in text.splitlines() if line.startswith(("| %s |" % r["layer"], "Verdict:"))]
        verdict = report.verdict_line(r)
        # the one-line verdict: each change is the decision's own, with its sign
        for name, sign, value in re.findall(r"(throughput|median step|tail) ([+-])(\d+\.\d)% ±", verdict):
            dim = {v: k for k, v in NAMES.items()}[name]
            ratio = gate[dim]["ratio"]
            assert float(sign + value) == round((ratio - 1.0) * 100.0, 1), (r["layer"], name, ratio)
        per = _per_workload(gate)
        for w, blocks, _unit, early in re.findall(
            r"([a-z][a-z0-9_]*), (\d+) (blocks|windows of one running process) per arm(, stopped early)?", verdict
        ):
            res = per[w]
            counts = res.get("blocks") or {"with": res.get("blocks_after"), "without": res.get("blocks_before")}
            assert int(blocks) == counts["with"] == counts["without"], (w, blocks, counts)
            assert bool(early) == _stopped_early(gate, w), (w, early)
        for w in per:
            if _stopped_early(gate, w):
                assert re.search(r"\b%s, \d+ [\w ]+ per arm, stopped early" % w, verdict), (w, verdict)
        assert said, r["layer"]
        # a gain the budget could not show is worded as the change it is
        section = _section(text, r["layer"])
        for value in re.findall(r"the median step (\d+\.\d)% shorter", section):
            assert any(
                round((1.0 - (res.get("p50") or {}).get("ratio", 1.0)) * 100.0, 1) == float(value)
                for res in per.values()
            ), value
        assert not re.search(r"a gain of this size \(the median step \+", section)


@pytest.mark.parametrize("path", RUNS, ids=[os.path.basename(p) for p in RUNS])
def test_the_run_s_closing_lines_agree_with_the_report(path):
    record, text = _load(path)
    lines = report.outcome_lines(record["layers"], record.get("check_mode"), True, "r.md", [])
    for r, gate in _gates(record):
        line = next(x for x in lines if x.startswith(r["layer"] + ":"))
        if "ROLLED BACK" in line:
            values, files = report.put_back(r)
            assert ("%d setting(s)" % len(values)) in line if values else "setting(s)" not in line
        if gate and not record.get("check_mode") and gate.get("method") not in ("search",):
            assert report.verdict_line(r) in line
