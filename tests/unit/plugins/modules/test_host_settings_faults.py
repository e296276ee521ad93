"""host_settings under faults: the module's words for a wall-clock step its renewal saw and for
an apply whose persist fails (a read-only bind mount), on a constructed root."""

from __future__ import absolute_import, division, print_function

import json
import os
import subprocess

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import RunLock
from ansible_collections.stacktune.gpu.plugins.modules import host_settings

SETTINGS = [{"kind": "sysctl", "key": "vm.swappiness", "value": "10"}]


def run_module(capsys, root, **args):
    args = dict({"root": str(root), "journal_dir": "/var/lib/stacktune", "layer": "kernel"}, **args)
    with patch_module_args(args), pytest.raises(SystemExit):
        host_settings.main()
    return json.loads(capsys.readouterr().out)


def test_a_renewal_that_sees_the_wall_clock_jump_says_so(capsys, fakeroot):
    lock = RunLock(str(fakeroot))
    lock.take("run-a", "alice@ctl", 600)
    raw, past = lock._read()  # pylint: disable=protected-access
    # the record as a wall clock stepped 2 h forward since the last renewal leaves it
    lock._write(dict(raw, renewed_ts=raw["renewed_ts"] - 7200), past)  # pylint: disable=protected-access
    out = run_module(capsys, fakeroot, settings=SETTINGS, run_id="run-a")
    assert not out.get("failed"), out
    assert any("the wall clock jumped +7200s since run run-a last renewed its lease" in n for n in out["notes"])
    assert lock.holder()["clock_step"]["seconds"] == 7200


def test_a_failed_persist_fails_the_module_saying_the_host_was_put_back(capsys, fakeroot, hash_tree):
    before = hash_tree(fakeroot)
    target = os.path.join(str(fakeroot), "etc/sysctl.d")
    os.makedirs(target)
    if subprocess.run(["mount", "--bind", target, target], check=False).returncode:
        pytest.skip("a bind mount needs root")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)
        out = run_module(capsys, fakeroot, settings=SETTINGS, run_id="run-a")
    finally:
        subprocess.run(["umount", "-l", target], check=False)
    assert out["failed"]
    assert out["msg"].startswith("Failed to apply layer kernel: persisting the layer's settings failed: [Errno 30]")
    assert "every change of this apply was put back" in out["msg"] and "the journal says restored" in out["msg"]
    assert hash_tree(fakeroot) == before
    assert open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")["state"] == "restored"
