# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The diagnose module end to end on real programs of this host: never changed, check mode the
same, a bad program a failure naming the variable (or, with on_error=report, a diagnosis that
says why)."""

from __future__ import absolute_import, division, print_function

import json
import sys

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.modules import diagnose

SPIN = (
    "import time\nwhile True:\n    t = time.perf_counter()\n    sum(range(100000))\n"
    "    print((time.perf_counter() - t) * 1000, flush=True)\n"
)


def run_module(capsys, check_mode=False, **args):
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        diagnose.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.one_core
@pytest.mark.parametrize("check_mode", [False, True])
def test_a_spinning_program(capsys, tmp_path, check_mode):
    prog = tmp_path / "spin.py"
    prog.write_text(SPIN)
    out = run_module(capsys, check_mode, command=[sys.executable, str(prog)], seconds=2, warmup_s=0.5, nvml=False)
    assert out["changed"] is False and "failed" not in out
    assert out["diagnosis"]["verdict"] == "cpu_main", out["diagnosis"]["line"]


def test_a_silent_program_fails_naming_the_variable(capsys, tmp_path):
    prog = tmp_path / "silent.py"
    prog.write_text("import time\ntime.sleep(60)\n")
    names = {"command": "stacktune_bench_live_command", "first_step_timeout": "stacktune_diagnose_timeout"}
    out = run_module(capsys, command=[sys.executable, str(prog)], first_step_timeout=1, names=names)
    assert out["failed"] is True
    assert out["msg"].startswith(
        "Failed to diagnose the program: stacktune_bench_live_command: the program printed no step line in 1 s "
        "(stacktune_diagnose_timeout)"
    )
    out = run_module(capsys, command=[sys.executable, str(prog)], first_step_timeout=1, names=names, on_error="report")
    assert "failed" not in out and out["changed"] is False
    assert out["diagnosis"]["line"].startswith("diagnosis: not made: stacktune_bench_live_command: the program printed")


def test_options_out_of_range_fail(capsys):
    for on_error in ("fail", "report"):
        out = run_module(
            capsys,
            workload="cpu_train_step",
            seconds=1,
            names={"seconds": "stacktune_diagnose_seconds"},
            on_error=on_error,
        )
        assert out["failed"] is True and "stacktune_diagnose_seconds must be a number from 2.0 to 300.0" in out["msg"]
