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

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import Journal, new_entry
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
        "directory": str(tmp_path / "textfile"),
    }


def prom(host):
    return os.path.join(host["directory"], "stacktune.prom")


def test_writes_the_file_atomically_with_mode_0644(capsys, host):
    res = run_module(capsys, dict(host, playbook="tune", success=True))
    assert res["changed"] is True and res["written"] is True
    assert (res["path"], res["directory_source"]) == (prom(host), "configured")
    assert sorted(os.listdir(host["directory"])) == ["stacktune.prom"]  # no temporary file left
    assert stat.S_IMODE(os.stat(prom(host)).st_mode) == 0o644
    with open(prom(host)) as handle:
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
    assert not os.path.exists(prom(host))
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
    os.chmod(prom(host), 0o600)
    res = run_module(capsys, dict(host, playbook="tune", success=True))
    assert res["changed"] is True
    assert stat.S_IMODE(os.stat(prom(host)).st_mode) == 0o644


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
            "directory": str(tmp_path / "m"),
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


def test_the_written_file_parses_and_passes_promtool(capsys, host, prometheus_families, promtool_check):
    run_module(capsys, dict(host, playbook="tune", success=True))
    run_module(capsys, dict(host, playbook="drift", success=False, drift_settings=2, drift_corrected_settings=1))
    with open(prom(host)) as handle:
        text = handle.read()
    families = prometheus_families(text)
    assert sorted(families) == sorted(
        [
            "stacktune_layer_state",
            "stacktune_layer_decision",
            "stacktune_layer_settings",
            "stacktune_gate_throughput_ratio",
            "stacktune_gate_tail_ratio",
            "stacktune_drift_settings",
            "stacktune_drift_corrected_settings",
            "stacktune_last_run_timestamp_seconds",
            "stacktune_last_run_success",
        ]
    )
    assert all(f.type == "gauge" and f.documentation for f in families.values())
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert values[("stacktune_gate_tail_ratio", (("layer", "numa_irq"),))] == 1.3
    assert values[("stacktune_drift_settings", ())] == 2
    assert values[("stacktune_last_run_success", (("playbook", "drift"),))] == 0
    assert values[("stacktune_last_run_success", (("playbook", "tune"),))] == 1
    promtool_check(text)


def test_validate_only_names_the_directory_and_writes_nothing(capsys, host):
    res = run_module(capsys, {"directory": host["directory"], "validate_only": True})
    assert res["changed"] is False and res["written"] is False
    assert (res["directory"], res["directory_source"], res["path"]) == (host["directory"], "configured", prom(host))
    assert not os.path.exists(host["directory"])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda tmp: "relative/dir", "must be an absolute path without '..' or auto, got 'relative/dir'"),
        (lambda tmp: str(tmp) + "/a/../b", "must be an absolute path"),
        (lambda tmp: os.symlink(str(tmp), str(tmp / "link")) or str(tmp / "link"), "is a symbolic link (to "),
        (lambda tmp: (tmp / "file").write_text("x") and str(tmp / "file"), "exists and is not a directory"),
    ],
    ids=["relative", "dotdot", "symlink", "not-a-directory"],
)
def test_a_directory_that_cannot_take_the_file_is_refused_naming_the_variable(capsys, host, tmp_path, make, message):
    directory = make(tmp_path)
    before = sorted(os.listdir(str(tmp_path)))
    res = run_module(capsys, dict(host, directory=directory, playbook="tune", success=True))
    assert res["failed"] is True
    assert res["msg"].startswith("Failed to use the metrics directory: stacktune_metrics_dir (configured)")
    assert message in res["msg"]
    assert sorted(os.listdir(str(tmp_path))) == before


def test_a_metrics_file_that_is_a_symbolic_link_is_refused(capsys, host, tmp_path):
    os.makedirs(host["directory"])
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    os.symlink(str(target), prom(host))
    res = run_module(capsys, dict(host, playbook="tune", success=True))
    assert res["failed"] is True and "stacktune.prom is a symbolic link" in res["msg"]
    assert target.read_text() == "keep\n" and os.path.islink(prom(host))
