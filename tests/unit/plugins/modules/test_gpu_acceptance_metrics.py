# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stacktune.gpu.gpu_acceptance's metrics file, as Ansible runs the module on a host without GPUs."""

from __future__ import absolute_import, division, print_function

import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.modules import gpu_acceptance


def run_module(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        gpu_acceptance.main()
    return json.loads(capsys.readouterr().out)


def test_a_host_that_cannot_be_tested_gets_its_reject_in_the_metrics_dir(
    capsys, tmp_path, prometheus_families, promtool_check
):
    directory = tmp_path / "textfile"
    res = run_module(
        capsys,
        {"python": str(tmp_path / "no-python"), "metrics_dir": str(directory), "journal_dir": str(tmp_path / "j")},
    )
    assert res["failed"] is True and res["msg"].startswith("no GPU to accept")
    path = directory / "stacktune_acceptance.prom"
    assert res["metrics_path"] == str(path)
    assert res["metrics_dir"] == {"path": str(directory), "source": "configured", "detail": "given"}
    text = path.read_text()
    families = prometheus_families(text)
    verdict = {s.labels["verdict"]: s.value for s in families["stacktune_acceptance_verdict"].samples}
    assert verdict == {"pass": 0, "warn": 0, "reject": 1}
    assert families["stacktune_acceptance_exit_code"].samples[0].value == 2
    promtool_check(text)


def test_a_symlinked_metrics_dir_is_refused_before_the_program_runs(capsys, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(str(real), str(tmp_path / "link"))
    res = run_module(
        capsys,
        {
            "python": str(tmp_path / "no-python"),
            "metrics_dir": str(tmp_path / "link"),
            "journal_dir": str(tmp_path / "j"),
        },
    )
    assert res["failed"] is True
    assert res["msg"].startswith("Failed to use the metrics directory: stacktune_metrics_dir (configured): ")
    assert "is a symbolic link" in res["msg"]
    assert os.listdir(str(real)) == [] and not (tmp_path / "j").exists()


def test_without_metrics_dir_no_metrics_are_written(capsys, tmp_path):
    res = run_module(capsys, {"python": str(tmp_path / "no-python")})
    assert res["failed"] is True and res["metrics_path"] is None and "metrics_dir" not in res
