# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verify table (stacktune.gpu.verify_table), rendered from what the engine's verify
returns for layers applied on a fake host: kept, drifted, overridden at boot, rewritten by a
running tool, a file's whole text."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter.verify_table import verify_table
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context
from ansible_collections.stacktune.gpu.plugins.plugin_utils._verify_table import COLUMNS, render_layer, show_value

KERNEL = [
    {"kind": "sysctl", "key": "vm.swappiness", "value": "10"},
    {"kind": "sysctl", "key": "vm.max_map_count", "value": "1048576"},
    {"kind": "sysctl", "key": "kernel.numa_balancing", "value": "0"},
    {"kind": "sysctl", "key": "vm.dirty_ratio", "value": "40"},
    {"kind": "sysctl", "key": "vm.dirty_background_ratio", "value": "5"},
]
NCCL = [{"kind": "file", "key": "/etc/nccl.conf", "value": "# Managed by stacktune (layer nccl): x\nNCCL_DEBUG=WARN\n"}]


def write(root, path, text):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)


def engine(root, layer):
    return Engine(Context(layer, root=str(root)), open_journal("/var/lib/stacktune", str(root)))


@pytest.fixture
def kernel_host(fakeroot):
    write(fakeroot, "/proc/sys/vm/dirty_ratio", "20\n")
    write(fakeroot, "/proc/sys/vm/dirty_background_ratio", "10\n")
    engine(fakeroot, "kernel").apply(KERNEL, "run1")
    engine(fakeroot, "kernel").keep("run1", {"decision": "keep", "basis": "gain"})
    return fakeroot


def table(lines):
    """The header and rows of a rendered table, as lists of cells (split on two blanks)."""
    return [re.split(r"\s{2,}", line.strip()) for line in lines[1 : 1 + 1 + len(KERNEL)]]


def test_a_kernel_layer_of_five_sysctls_is_one_title_a_header_and_five_rows(kernel_host):
    lines = render_layer(engine(kernel_host, "kernel").verify())
    assert lines[0] == "kernel [kept (measured: helps)]: 5 settings, 5 ok"
    assert table(lines)[0] == list(COLUMNS)
    assert table(lines)[1:] == [
        ["sysctl:vm.swappiness", "10", "10", "10", "10", "ok", "-"],
        ["sysctl:vm.max_map_count", "1048576", "1048576", "1048576", "1048576", "ok", "-"],
        ["sysctl:kernel.numa_balancing", "0", "0", "0", "0", "ok", "-"],
        ["sysctl:vm.dirty_ratio", "40", "40", "40", "40", "ok", "-"],
        ["sysctl:vm.dirty_background_ratio", "5", "5", "5", "5", "ok", "-"],
    ]
    assert len(lines) == 7  # compact: nothing else to say
    # fixed width: every column starts at the same place on every line
    starts = {line.index(" 10 ") for line in lines[2:3]} | {lines[1].index(" expected ")}
    assert len(starts) == 1
    assert all(line == line.rstrip() for line in lines)


def test_drift_an_override_at_boot_and_a_running_tool_show_in_their_columns(kernel_host):
    write(kernel_host, "/proc/sys/vm/dirty_ratio", "20\n")
    write(kernel_host, "/etc/sysctl.d/99-site.conf", "vm.swappiness = 30\n")
    write(kernel_host, "/etc/tuned/active_profile", "throughput-performance\n")
    write(kernel_host, "/proc/300/comm", "tuned\n")
    lines = render_layer(engine(kernel_host, "kernel").verify())
    assert lines[0] == "kernel [kept (measured: helps)]: 5 settings, 1 drift, 3 ok, 1 overridden"
    rows = {r[0]: r[1:] for r in table(lines)[1:]}
    assert rows["sysctl:vm.swappiness"] == ["10", "10", "10", "30", "overridden", "tuned, /etc/sysctl.d/99-site.conf"]
    assert rows["sysctl:vm.dirty_ratio"] == ["40", "20", "40", "40", "drift", "tuned"]
    assert (
        "  sysctl:vm.swappiness: at the next boot /etc/sysctl.d/99-site.conf sets 30; stacktune's "
        "/etc/sysctl.d/60-stacktune-kernel.conf sets 10" in lines
    )
    assert any(line.startswith("  note: TuneD profile 'throughput-performance' runs") for line in lines)


def test_a_file_shows_its_lines_and_whether_they_are_the_expected_ones(fakeroot):
    engine(fakeroot, "nccl").apply(NCCL, "run1")
    lines = render_layer(engine(fakeroot, "nccl").verify())
    assert re.split(r"\s{2,}", lines[2].strip()) == ["file:/etc/nccl.conf", "2 lines", "same", "same", "-", "ok", "-"]
    write(fakeroot, "/etc/nccl.conf", NCCL[0]["value"] + "NCCL_IB_DISABLE=1\n")
    row = render_layer(engine(fakeroot, "nccl").verify())[2]
    assert re.split(r"\s{2,}", row.strip()) == [
        "file:/etc/nccl.conf",
        "2 lines",
        "3 lines, differs",
        "3 lines, differs",
        "-",
        "drift",
        "-",
    ]


def test_a_layer_that_holds_nothing_is_one_line(fakeroot):
    engine(fakeroot, "nccl").apply(NCCL, "run1")
    engine(fakeroot, "nccl").restore("original", "rollback")
    assert render_layer(engine(fakeroot, "nccl").verify()) == [
        "nccl [restored]: no setting to verify (holds no setting: its plan had nothing to change on this host, or"
        " rollback put it back to its state before stacktune)"
    ]


@pytest.mark.parametrize(
    "value, shown",
    [
        (None, "-"),
        ("10", "10"),
        ("4096\t131072\t6291456", "4096 131072 6291456"),
        (True, "true"),
        ("", '""'),
        ("a\nb\nc\n", "3 lines"),
        ("x" * 30, "x" * 19 + "..."),
    ],
)
def test_values_are_short_cells(value, shown):
    assert show_value(value) == shown


def test_the_filter_refuses_what_is_no_layer_result():
    with pytest.raises(AnsibleFilterError, match="verify_table expects one layer's result"):
        verify_table(["kernel"])


def test_every_journal_state_is_explained_in_the_legend_and_the_docs():
    from ansible_collections.stacktune.gpu.plugins.filter.verify_table import journal_state_legend
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import STATES
    from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.states import MEANINGS

    assert set(STATES) | {"unreadable"} == set(MEANINGS)
    assert journal_state_legend(["kept", "restored", "kept"]) == [
        "kept: " + MEANINGS["kept"],
        "restored: " + MEANINGS["restored"],
    ]
    docs = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "docs", "layers.md")
    with open(docs) as handle:
        text = handle.read()
    for state in MEANINGS:
        assert "| `%s` |" % state in text, state
