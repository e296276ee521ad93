# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stacktune.gpu.textfile_metrics as Ansible runs it, on a real journal in a temporary directory."""

from __future__ import absolute_import, division, print_function

import json
import os
import stat

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.module_utils._journal import Journal, new_entry
from ansible_collections.stacktune.gpu.plugins.modules import textfile_metrics


def run_module(capsys, args, check_mode=False, diff=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    if diff:
        args = dict(args, _ansible_diff=True)
    with patch_module_args(args), pytest.raises(SystemExit):
        textfile_metrics.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def host(tmp_path):
    journal = Journal(str(tmp_path / "journal"))
    entry = new_entry("kernel")
    entry.update(
        {
            "state": "kept",
            "settings": [{"id": "sysctl:vm.swappiness", "kind": "sysctl", "key": "vm.swappiness", "value": "10"}],
            "decision": {"decision": "keep", "throughput": {"ratio": 1.041}, "tail": {"ratio": 0.97}},
        }
    )
    journal.save(entry)
    rolled = new_entry("numa_irq")
    rolled.update(
        {
            "state": "rolled_back",
            "decision": {"decision": "rollback", "throughput": {"ratio": 1.01}, "tail": {"ratio": 1.3}},
        }
    )
    journal.save(rolled)
    return {
        "journal_dir": str(tmp_path / "journal"),
        "path": str(tmp_path / "textfile" / "stacktune.prom"),
    }


def test_writes_the_file_atomically_with_mode_0644(capsys, host):
    res = run_module(capsys, dict(host, playbook="tune", success=True))
    assert res["changed"] is True and res["written"] is True
    assert sorted(os.listdir(os.path.dirname(host["path"]))) == ["stacktune.prom"]  # no temporary file left
    assert stat.S_IMODE(os.stat(host["path"]).st_mode) == 0o644
    with open(host["path"]) as handle:
        text = handle.read()
    assert text == res["content"]
    assert 'stacktune_layer_state{layer="kernel",state="kept"} 1' in text
    assert 'stacktune_layer_state{layer="numa_irq",state="rolled_back"} 1' in text
    assert 'stacktune_layer_decision{decision="rollback",layer="numa_irq"} 1' in text
    assert 'stacktune_gate_tail_ratio{layer="numa_irq"} 1.3' in text
    assert 'stacktune_gate_throughput_ratio{layer="kernel"} 1.041' in text
    assert 'stacktune_layer_settings{layer="kernel"} 1' in text
    assert 'stacktune_last_run_success{playbook="tune"} 1' in text
    assert res["series"] == text.count("\nstacktune_") + (1 if text.startswith("stacktune_") else 0)


def test_second_run_rewrites_the_timestamp_but_reports_no_change(capsys, host):
    first = run_module(capsys, dict(host, playbook="tune", success=True))
    second = run_module(capsys, dict(host, playbook="tune", success=True))
    assert second["changed"] is False and second["written"] is True
    stamp = [line for line in second["content"].splitlines() if line.startswith("stacktune_last_run_timestamp_seconds")]
    assert len(stamp) == 1 and float(stamp[0].split()[-1]) > 1.7e9

    def without_stamp(text):
        return [line for line in text.splitlines() if not line.startswith("stacktune_last_run_timestamp_seconds")]

    assert without_stamp(first["content"]) == without_stamp(second["content"])


def test_check_mode_predicts_and_writes_nothing(capsys, host):
    res = run_module(capsys, dict(host, playbook="drift", success=False, drift_settings=3), check_mode=True, diff=True)
    assert res["changed"] is True and res["written"] is False
    assert not os.path.exists(host["path"])
    assert res["diff"]["before"] == "" and "stacktune_drift_settings 3" in res["diff"]["after"]


def test_a_drift_result_is_a_change_and_is_kept_by_later_runs(capsys, host):
    run_module(capsys, dict(host, playbook="tune", success=True))
    drift = run_module(
        capsys, dict(host, playbook="drift", success=False, drift_settings=2, drift_corrected_settings=0)
    )
    assert drift["changed"] is True
    rollback = run_module(capsys, dict(host, playbook="rollback", success=True))
    assert "stacktune_drift_settings 2" in rollback["content"]
    assert 'stacktune_last_run_success{playbook="drift"} 0' in rollback["content"]
    assert 'stacktune_last_run_success{playbook="tune"} 1' in rollback["content"]


def test_a_wrong_mode_is_corrected_and_reported(capsys, host):
    run_module(capsys, dict(host, playbook="tune", success=True))
    os.chmod(host["path"], 0o600)
    res = run_module(capsys, dict(host, playbook="tune", success=True))
    assert res["changed"] is True
    assert stat.S_IMODE(os.stat(host["path"]).st_mode) == 0o644


def test_records_add_layers_the_journal_does_not_hold(capsys, host):
    records = [{"layer": "bios", "decision": "keep", "gate": None, "settings": []}]
    res = run_module(capsys, dict(host, playbook="tune", success=True, records=records))
    assert 'stacktune_layer_decision{decision="keep",layer="bios"} 1' in res["content"]
    assert 'layer="bios",state=' not in res["content"]


def test_missing_journal_means_no_layers(capsys, tmp_path):
    res = run_module(
        capsys,
        {
            "journal_dir": str(tmp_path / "none"),
            "path": str(tmp_path / "m.prom"),
            "playbook": "rollback",
            "success": True,
        },
    )
    assert res["layers"] == {}
    assert "stacktune_layer_state" not in res["content"]


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"mode": "rw-r--r--"}, "Failed to parse mode"),
        ({"drift_settings": -1}, "Failed to validate drift_settings"),
    ],
)
def test_bad_arguments_fail_cleanly(capsys, host, extra, message):
    res = run_module(capsys, dict(host, playbook="drift", success=True, **extra))
    assert res["failed"] is True and res["msg"].startswith(message)


def test_corrupt_journal_fails_with_a_message(capsys, host):
    with open(os.path.join(host["journal_dir"], "layers", "kernel.json"), "w") as handle:
        handle.write("{not json")
    res = run_module(capsys, dict(host, playbook="tune", success=True))
    assert res["failed"] is True
    assert res["msg"].startswith("Failed to read the journal in ")
