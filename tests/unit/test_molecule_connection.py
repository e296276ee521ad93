# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The molecule scenarios' connection (tests/molecule/plugins/connection/podman.py) enters a
container that podman runs with runc through `runc exec` by its id, kept per name and checked
against runc's state directory, and anything else through `podman exec`. Stand-in podman and runc
programs on PATH record the calls; the scenarios run the real ones."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys
import tempfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(REPO, "tests", "molecule", "plugins", "connection")


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A bin directory with podman and runc stand-ins, runc's state directory, the id cache."""
    pytest.importorskip("ansible_collections.containers.podman")
    from ansible.playbook.play_context import PlayContext
    from ansible.plugins.loader import connection_loader

    # as ANSIBLE_CONNECTION_PLUGINS gives it to the scenarios
    connection_loader.add_directory(PLUGINS)

    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls"
    runtime = tmp_path / "runtime"
    runtime.write_text("runc")
    (bindir / "podman").write_text(
        "#!/bin/sh\nprintf 'podman %%s\\n' \"$*\" >> %s\n"
        'if [ "$1" = inspect ]; then echo "$(cat %s/id-$4) $(cat %s)"; exit 0; fi\n'
        "cat; exit 3\n" % (log, tmp_path, runtime)
    )
    (bindir / "runc").write_text("#!/bin/sh\nprintf 'runc %%s\\n' \"$*\" >> %s\ncat; exit 7\n" % log)
    for name in ("podman", "runc"):
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", "%s%s%s" % (bindir, os.pathsep, os.environ["PATH"]))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # gettempdir() keeps its first answer
    state = tmp_path / "runc-state"
    state.mkdir()
    plugin = connection_loader.get("podman", class_only=True)
    assert os.path.dirname(sys.modules[plugin.__module__].__file__) == PLUGINS
    monkeypatch.setattr(sys.modules[plugin.__module__], "RUNC_ROOT", str(state))

    def container(name, ident, pid=None):
        """runc's state for it as runc writes it: its init process (a live one unless pid says
        otherwise) and that process's start time from /proc/PID/stat."""
        (tmp_path / ("id-" + name)).write_text(ident)
        (state / ident).mkdir()
        pid = os.getpid() if pid is None else pid
        with open("/proc/%d/stat" % os.getpid()) as handle:
            start = int(handle.read().rsplit(")", 1)[1].split()[19])
        recorded = {"id": ident, "init_process_pid": pid, "init_process_start": start}
        (state / ident / "state.json").write_text(json.dumps(recorded))

    def connect(name, **more):
        context = PlayContext()
        context.remote_addr = name
        conn = connection_loader.get("podman", context, None)
        conn.set_options(var_options=dict(more, ansible_host=name, inventory_hostname=name))
        conn._container_id = name
        return conn

    def calls():
        return log.read_text().splitlines() if log.exists() else []

    return {"container": container, "connect": connect, "calls": calls, "runtime": runtime, "state": state}


def test_a_runc_container_is_entered_with_runc_exec_by_its_id(world):
    world["container"]("box", "a" * 64)
    rc, out, _err = world["connect"]("box").exec_command("/bin/sh -c '/usr/bin/python3 && sleep 0'", in_data=b"data")
    assert (rc, out) == (7, b"data")
    assert world["calls"]() == [
        "podman inspect --format {{.Id}} {{.OCIRuntime}} box",
        "runc --root %s exec %s /bin/sh -c /usr/bin/python3 && sleep 0" % (world["state"], "a" * 64),
    ]
    # the next call finds the id in its file: no podman at all
    world["connect"]("box").exec_command("true", in_data=b"")
    assert world["calls"]()[2:] == ["runc --root %s exec %s true" % (world["state"], "a" * 64)]


def test_a_container_made_again_under_its_name_is_inspected_again(world):
    world["container"]("box", "a" * 64)
    world["connect"]("box").exec_command("true", in_data=b"")
    os.remove(os.path.join(str(world["state"]), "a" * 64, "state.json"))
    world["container"]("box", "b" * 64)
    world["connect"]("box").exec_command("true", in_data=b"")
    assert world["calls"]()[-2:] == [
        "podman inspect --format {{.Id}} {{.OCIRuntime}} box",
        "runc --root %s exec %s true" % (world["state"], "b" * 64),
    ]


def test_a_container_whose_processes_were_killed_is_never_entered_with_runc(world):
    """runc's state directory outlives a container whose processes were killed from outside
    podman; runc exec fails on it. A cached id of such a container is looked up again, and a
    container podman names whose init process is gone goes through podman exec."""
    dead = 2**22 + 1  # above pid_max's default: no process has it
    world["container"]("box", "a" * 64)
    world["connect"]("box").exec_command("true", in_data=b"")
    state = os.path.join(str(world["state"]), "a" * 64, "state.json")
    with open(state) as handle:
        recorded = json.load(handle)
    with open(state, "w") as handle:
        json.dump(dict(recorded, init_process_pid=dead), handle)
    world["container"]("box", "b" * 64)
    world["connect"]("box").exec_command("true", in_data=b"")
    assert world["calls"]()[-2:] == [
        "podman inspect --format {{.Id}} {{.OCIRuntime}} box",
        "runc --root %s exec %s true" % (world["state"], "b" * 64),
    ]
    # the same pid, another start time: a pid used again by another process
    with open(os.path.join(str(world["state"]), "b" * 64, "state.json"), "w") as handle:
        json.dump(dict(recorded, id="b" * 64, init_process_start=recorded["init_process_start"] + 1), handle)
    world["connect"]("box").exec_command("true", in_data=b"")
    assert [call.split()[0:2] for call in world["calls"]()[-2:]] == [["podman", "inspect"], ["podman", "exec"]]


def test_another_runtime_goes_through_podman_exec(world):
    world["container"]("box", "a" * 64)
    world["runtime"].write_text("crun")
    rc, out, _err = world["connect"]("box").exec_command("/bin/sh -c true", in_data=b"data")
    assert (rc, out) == (3, b"data")
    assert [call.split()[0:2] for call in world["calls"]()] == [["podman", "inspect"], ["podman", "exec"]]


def test_a_remote_user_goes_through_podman_exec(world):
    world["container"]("box", "a" * 64)
    world["connect"]("box", ansible_user="nobody").exec_command("/bin/sh -c true", in_data=b"data")
    assert world["calls"]() == ["podman exec -i --user nobody box /bin/sh -c true"]
