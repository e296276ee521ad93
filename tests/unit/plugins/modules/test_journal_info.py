# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stacktune.gpu.journal_info naming the stacktune files no journal owns, as rollback asks it
after restoring: a file the journal still owns (check mode, or a partial rollback) is never
named; a file left with stacktune's header after its record was restored, or whose journal was
deleted, is."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal, unowned_files
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context
from ansible_collections.stacktune.gpu.plugins.modules import journal_info

JOURNAL = "/var/lib/stacktune"
NCCL = [{"kind": "file", "key": "/etc/nccl.conf", "value": "# Managed by stacktune (layer nccl): x\nNCCL_DEBUG=WARN\n"}]
MEMLOCK = [
    {
        "kind": "file",
        "key": "/etc/security/limits.d/60-stacktune-memlock.conf",
        "value": "# Managed by stacktune (layer memory): memlock\n* hard memlock unlimited\n",
    }
]
KERNEL = [{"kind": "sysctl", "key": "vm.swappiness", "value": "10"}]


def engine(root, layer, check=False):
    return Engine(Context(layer, root=str(root)), open_journal(JOURNAL, str(root)), check_mode=check)


def run_module(capsys, root, check_mode=False, **args):
    args = dict(args, root=str(root), journal_dir=JOURNAL)
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        journal_info.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def tuned(fakeroot):
    """A host with the nccl, memory and kernel layers applied (kernel writes a sysctl drop-in)."""
    engine(fakeroot, "nccl").apply(NCCL, "run1")
    engine(fakeroot, "memory").apply(MEMLOCK, "run1")
    engine(fakeroot, "kernel").apply(KERNEL, "run1")
    return fakeroot


def test_owned_paths_are_every_unit_a_record_would_put_back(tuned):
    assert open_journal(JOURNAL, str(tuned)).owned_paths() == [
        "/etc/nccl.conf",
        "/etc/security/limits.d/60-stacktune-memlock.conf",
        "/etc/sysctl.d/60-stacktune-kernel.conf",
    ]


def test_check_mode_rollback_names_no_journaled_file(capsys, tuned):
    """The rollback the issue saw: in check mode nothing is restored, so the files still carry the
    header; the journal still owns them, so none is an orphan."""
    for layer in ("kernel", "memory", "nccl"):
        engine(tuned, layer, check=True).restore("original", "rollback-check")
    res = run_module(capsys, tuned, check_mode=True, unowned_in=["/etc"])
    assert res["unowned"] == []
    assert res["changed"] is False


def test_after_a_real_rollback_nothing_is_left_to_name(capsys, tuned):
    for layer in ("kernel", "memory", "nccl"):
        engine(tuned, layer).restore("original", "rollback")
    assert not os.path.exists(os.path.join(str(tuned), "etc/nccl.conf"))
    assert run_module(capsys, tuned, unowned_in=["/etc"])["unowned"] == []


def test_a_partial_rollback_names_nothing_the_other_layers_still_own(capsys, tuned):
    engine(tuned, "nccl").restore("original", "rollback")
    assert run_module(capsys, tuned, unowned_in=["/etc"])["unowned"] == []


def test_a_deleted_journal_leaves_its_files_named(capsys, tuned):
    shutil.rmtree(os.path.join(str(tuned), JOURNAL.lstrip("/"), "layers"))
    res = run_module(capsys, tuned, unowned_in=["/etc"])
    assert res["unowned"] == [
        "/etc/nccl.conf",
        "/etc/security/limits.d/60-stacktune-memlock.conf",
        "/etc/sysctl.d/60-stacktune-kernel.conf",
    ]


def test_a_restored_record_owns_nothing_so_a_header_file_left_is_named(capsys, tuned):
    """A record restored to its original owns no file: a file that still carries the header (its
    original had one, from a journal deleted before) is named."""
    engine(tuned, "nccl").restore("original", "rollback")
    path = os.path.join(str(tuned), "etc/nccl.conf")
    with open(path, "w") as handle:
        handle.write("# Managed by stacktune (layer nccl). x\nNCCL_DEBUG=WARN\n")
    assert run_module(capsys, tuned, unowned_in=["/etc"])["unowned"] == ["/etc/nccl.conf"]


def test_without_unowned_in_nothing_is_searched(capsys, tuned):
    assert "unowned" not in run_module(capsys, tuned)


@pytest.mark.parametrize(
    "path, named",
    [
        ("/etc/x.conf", True),
        ("/etc/a/x.cfg", True),
        ("/etc/a/b/x.conf", True),
        ("/etc/a/b/c/x.conf", False),  # deeper than the three levels searched
        ("/etc/default/irqbalance", True),
        ("/etc/a/x.txt", False),  # a name stacktune never writes
    ],
)
def test_the_search_covers_three_levels_of_the_names_stacktune_writes(tmp_path, path, named):
    full = os.path.join(str(tmp_path), path.lstrip("/"))
    os.makedirs(os.path.dirname(full))
    with open(full, "w") as handle:
        handle.write("# Managed by stacktune (layer x). y\n")
    assert unowned_files(["/etc"], [], root=str(tmp_path)) == ([path] if named else [])


def test_links_and_files_without_the_header_are_not_named(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "plain.conf").write_text("# someone else's\n")
    (etc / "later.conf").write_text("a = 1\n# Managed by stacktune (layer x). y\n")
    (etc / "binary.conf").write_bytes(b"\xff\xfe\x00# Managed by stacktune (layer")
    target = tmp_path / "target.conf"
    target.write_text("# Managed by stacktune (layer x). y\n")
    os.symlink(str(target), str(etc / "link.conf"))
    assert unowned_files(["/etc"], [], root=str(tmp_path)) == ["/etc/later.conf"]


def test_a_missing_directory_is_no_error(tmp_path):
    assert unowned_files(["/etc"], [], root=str(tmp_path)) == []


def test_a_read_only_run_checks_the_lock_in_the_same_call(fakeroot, capsys):
    """Verify and a drift report check the run lock in the listing's module run: one module run per host."""
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import RunLock

    engine(fakeroot, "nccl").apply(NCCL, "run1")
    free = run_module(capsys, fakeroot, verify=True, check_lock_for="drift-1")
    assert not free.get("failed") and free["lock_holder"] is None and [v["layer"] for v in free["verified"]] == ["nccl"]

    RunLock(str(fakeroot)).take("tune-7", "alice@ctl", 600, entry="tune")
    held = run_module(capsys, fakeroot, verify=True, check_lock_for="drift-2")
    assert held["failed"] and held["msg"].startswith("Failed to check the run lock:")
    assert "tune-7" in held["msg"] and held["lock_holder"]["run_id"] == "tune-7"
    assert "verified" not in held  # nothing was read for a host another run is tuning

    broken = run_module(capsys, fakeroot, verify=True, check_lock_for="drift-3", break_lock=True)
    assert not broken.get("failed") and broken["lock_holder"]["run_id"] == "tune-7"
    assert RunLock(str(fakeroot)).holder()["run_id"] == "tune-7"  # a read-only run never takes or breaks it


# The host's last acceptance record comes with the listing, so a tune run reads no journal file.
ACCEPTANCE = {
    "verdict": "reject",
    "level": "standard",
    "time": "2026-12-01T10:00:00Z",
    "summary": "gpu3 NCCL",
    "gpu_count": 8,
}


def _write_acceptance(root, text, mode=0o600):
    path = os.path.join(str(root), JOURNAL.lstrip("/"), "acceptance.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    os.chmod(path, mode)
    return path


def test_the_acceptance_record_comes_with_the_listing(capsys, tuned):
    _write_acceptance(tuned, json.dumps(ACCEPTANCE))
    res = run_module(capsys, tuned)
    assert res["acceptance"] == ACCEPTANCE
    assert "acceptance_error" not in res
    assert [row["layer"] for row in res["layers"]] == ["kernel", "memory", "nccl"]


def test_a_host_without_acceptance_has_an_empty_record(capsys, fakeroot):
    res = run_module(capsys, fakeroot)
    assert res["acceptance"] == {}
    assert "acceptance_error" not in res
    assert res["layers"] == []


@pytest.mark.parametrize(
    "text, mode, why",
    [
        ("{not json", 0o600, "is not JSON"),
        ("[1, 2]", 0o600, "holds no JSON object"),
        (json.dumps(ACCEPTANCE), 0o666, "writable"),
    ],
)
def test_an_acceptance_record_that_cannot_be_used_is_named_not_used(capsys, fakeroot, text, mode, why):
    _write_acceptance(fakeroot, text, mode)
    res = run_module(capsys, fakeroot)
    assert res["acceptance"] == {}
    assert why in res["acceptance_error"]
    assert "failed" not in res


def test_a_linked_acceptance_record_is_not_followed(capsys, fakeroot, tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(ACCEPTANCE))
    path = _write_acceptance(fakeroot, "{}")
    os.remove(path)
    os.symlink(str(target), path)
    res = run_module(capsys, fakeroot)
    assert res["acceptance"] == {}
    assert "symbolic link" in res["acceptance_error"]
