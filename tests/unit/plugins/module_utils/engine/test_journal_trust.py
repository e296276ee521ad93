# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A journal only root can write: what another user could have written, or what is no
stacktune record, is refused before it is read, naming the file - and nothing is restored
from it. (The tests run as root, as the modules do; the foreign owner is uid 65534.)"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json
import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import UntrustedJournal, open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context

SYSCTL = [{"kind": "sysctl", "key": "vm.swappiness", "value": "10"}]
JOURNAL = "/var/lib/stacktune"
GRANT = "nobody ALL=(ALL) NOPASSWD: ALL\n"


def engine(root, layer="kernel", journal_dir=JOURNAL):
    return Engine(Context(layer, root=str(root)), open_journal(journal_dir, str(root)))


def journal_file(root, layer="kernel", journal_dir=JOURNAL):
    return os.path.join(str(root), journal_dir.lstrip("/"), "layers", "%s.json" % layer)


def planted_record(root):
    """A record that would make a restore write a sudoers grant (what a foreign writer would plant)."""
    engine(root).apply(SYSCTL, "run1")
    path = journal_file(root)
    with open(path) as handle:
        entry = json.load(handle)
    unit = {
        "type": "file",
        "kind": "file",
        "path": "/etc/sudoers.d/stacktune",
        "exists": True,
        "content_b64": base64.b64encode(GRANT.encode()).decode(),
        "mode": "0440",
        "uid": 0,
        "gid": 0,
    }
    entry["original"]["units"]["file:/etc/sudoers.d/stacktune"] = unit
    return path, entry


def write_json(path, data):
    with open(path, "w") as handle:
        json.dump(data, handle)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_foreign_owned_record_in_a_world_writable_journal_is_refused_and_nothing_is_granted(fakeroot):
    path, entry = planted_record(fakeroot)
    write_json(path, entry)
    os.chown(path, 65534, 65534)
    directory = os.path.dirname(os.path.dirname(path))
    os.chmod(directory, 0o777)
    with pytest.raises(
        UntrustedJournal, match="journal directory .*var/lib/stacktune is writable by its group or by others"
    ):
        engine(fakeroot).restore("original", "rollback")
    assert not os.path.exists(os.path.join(str(fakeroot), "etc/sudoers.d/stacktune"))
    assert oct(os.stat(directory).st_mode & 0o777) == "0o777"  # not chmod'ed behind the user's back
    os.chmod(directory, 0o700)
    with pytest.raises(UntrustedJournal, match="kernel.json belongs to uid 65534"):
        engine(fakeroot).restore("original", "rollback")
    assert not os.path.exists(os.path.join(str(fakeroot), "etc/sudoers.d/stacktune"))


def test_a_record_that_would_write_outside_its_layer_is_refused(fakeroot):
    path, entry = planted_record(fakeroot)
    write_json(path, entry)
    os.chmod(path, 0o600)
    with pytest.raises(UntrustedJournal, match="would restore /etc/sudoers.d/stacktune .* not where layer kernel"):
        engine(fakeroot).restore("original", "rollback")
    assert not os.path.exists(os.path.join(str(fakeroot), "etc/sudoers.d/stacktune"))


@pytest.mark.parametrize(
    "content,why",
    [
        ({}, "it holds an empty object"),
        (None, "it holds null"),
        ([1, 2], "it holds a list"),
        ({"schema": 2, "layer": "kernel"}, "schema 2, written by a newer stacktune"),
        ({"schema": 1, "layer": "memory", "state": "kept"}, "it is the record of layer 'memory'"),
        ("{not json", "is corrupt"),
    ],
)
def test_what_is_no_stacktune_record_is_refused_naming_the_file(fakeroot, content, why):
    engine(fakeroot).apply(SYSCTL, "run1")
    path = journal_file(fakeroot)
    with open(path, "w") as handle:
        handle.write(content if isinstance(content, str) else json.dumps(content))
    for call in (lambda: engine(fakeroot).apply(SYSCTL, "run2"), lambda: engine(fakeroot).restore("original", "rb")):
        with pytest.raises(UntrustedJournal) as exc:
            call()
        assert path in str(exc.value) and why in str(exc.value)


def test_a_shared_directory_is_refused_as_journal_and_left_as_it_is(fakeroot):
    shared = os.path.join(str(fakeroot), "tmp")
    os.makedirs(shared)
    os.chmod(shared, 0o1777)
    before = os.listdir(shared)
    with pytest.raises(UntrustedJournal, match="a shared directory such as /tmp is no place for it"):
        engine(fakeroot, journal_dir="/tmp").apply(SYSCTL, "run1")
    assert oct(os.stat(shared).st_mode & 0o7777) == "0o1777" and os.listdir(shared) == before
    assert not os.path.exists(os.path.join(str(fakeroot), "etc/sysctl.d/60-stacktune-kernel.conf"))


def test_one_unreadable_record_does_not_hide_the_others(fakeroot):
    engine(fakeroot, "kernel").apply(SYSCTL, "run1")
    engine(fakeroot, "nccl").apply([{"kind": "file", "key": "/etc/nccl.conf", "value": "NCCL_DEBUG=WARN\n"}], "run1")
    with open(journal_file(fakeroot, "kernel"), "w") as handle:
        handle.write("null")
    rows = {r["layer"]: r for r in open_journal(JOURNAL, str(fakeroot)).summary()}
    assert rows["kernel"]["state"] == "unreadable" and "it holds null" in rows["kernel"]["error"]
    assert rows["nccl"]["state"] == "applied"
    # the healthy layer is rolled back all the same
    engine(fakeroot, "nccl").restore("original", "rollback")
    assert not os.path.exists(os.path.join(str(fakeroot), "etc/nccl.conf"))
