# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stacktune.gpu.drift_report: the report-only drift check in one module run. It verifies what
journal_info verifies, checks the lock the same way, and writes the metrics textfile_metrics
writes for a drift run; on a real file tree (``fakeroot``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import RunLock
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.metrics import parse
from ansible_collections.stacktune.gpu.plugins.modules import drift_report, journal_info

JOURNAL = "/var/lib/stacktune"
KERNEL = [{"kind": "sysctl", "key": "vm.swappiness", "value": "10"}]
NCCL = [{"kind": "file", "key": "/etc/nccl.conf", "value": "NCCL_SOCKET_IFNAME=^lo\n"}]


def run(capsys, module, root, check_mode=False, **args):
    args = dict(args, root=str(root), journal_dir=JOURNAL)
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def kept(fakeroot):
    for layer, specs in (("kernel", KERNEL), ("nccl", NCCL)):
        eng = Engine(Context(layer, root=str(fakeroot)), open_journal(JOURNAL, str(fakeroot)))
        eng.apply(specs, "run1")
        Engine(Context(layer, root=str(fakeroot)), open_journal(JOURNAL, str(fakeroot))).keep(
            "run1", {"decision": "keep", "basis": "gain"}
        )
    return fakeroot


def series(text):
    return {(name, tuple(sorted(labels.items()))): float(value) for name, labels, value in parse(text)}


def test_the_report_verifies_as_journal_info_does_and_records_the_drift(capsys, kept, tmp_path):
    (kept / "proc/sys/vm/swappiness").write_text("33\n")
    metrics = tmp_path / "textfile"
    listed = run(capsys, journal_info, kept, verify=True)
    report = run(capsys, drift_report, kept, metrics_directory=str(metrics))
    assert report["verified"] == listed["verified"]
    assert report["layers"] == listed["layers"]
    assert report["drift"] == ["sysctl:vm.swappiness"]
    assert report["changed"] is True and report["metrics"]["written"] is True
    assert report["metrics"]["path"] == str(metrics / "stacktune.prom")
    got = series((metrics / "stacktune.prom").read_text())
    assert got[("stacktune_drift_settings", ())] == 1
    assert got[("stacktune_drift_corrected_settings", ())] == 0
    assert got[("stacktune_last_run_success", (("playbook", "drift"),))] == 0
    assert got[("stacktune_layer_state", (("layer", "kernel"), ("state", "kept")))] == 1
    # nothing but the metrics file was written: the drifted value is left for drift_fix
    assert (kept / "proc/sys/vm/swappiness").read_text() == "33\n"


def test_no_drift_is_a_successful_run_and_a_second_report_changes_nothing(capsys, kept, tmp_path):
    metrics = tmp_path / "textfile"
    first = run(capsys, drift_report, kept, metrics_directory=str(metrics))
    assert first["drift"] == [] and first["changed"] is True
    got = series((metrics / "stacktune.prom").read_text())
    assert got[("stacktune_last_run_success", (("playbook", "drift"),))] == 1
    assert got[("stacktune_drift_settings", ())] == 0
    again = run(capsys, drift_report, kept, metrics_directory=str(metrics))
    assert again["changed"] is False  # only the timestamp moved


def test_check_mode_and_metrics_off_write_nothing(capsys, kept, tmp_path):
    metrics = tmp_path / "textfile"
    checked = run(capsys, drift_report, kept, check_mode=True, metrics_directory=str(metrics))
    assert checked["metrics"]["written"] is False and not (metrics / "stacktune.prom").exists()
    off = run(capsys, drift_report, kept, metrics=False, metrics_directory=str(metrics))
    assert "metrics" not in off and off["changed"] is False and not (metrics / "stacktune.prom").exists()


def test_a_bad_directory_is_refused_before_anything_is_read(capsys, kept, tmp_path):
    link = tmp_path / "link"
    os.symlink(str(tmp_path), str(link))
    out = run(capsys, drift_report, kept, metrics_directory=str(link))
    assert out["failed"] is True and out["msg"].startswith("Failed to use the metrics directory")
    assert "verified" not in out


def test_another_run_holding_the_host_is_named(capsys, kept, tmp_path):
    RunLock(str(kept)).take("tune-1", "alice@ctl", 600, entry="tune")
    out = run(capsys, drift_report, kept, check_lock_for="drift-1", metrics_directory=str(tmp_path / "m"))
    assert out["failed"] is True and "Failed to check the run lock" in out["msg"]
    assert out["lock_holder"]["run_id"] == "tune-1"
    assert not (tmp_path / "m" / "stacktune.prom").exists()
