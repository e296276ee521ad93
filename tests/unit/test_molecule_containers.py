# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The molecule scenarios' containers (tests/molecule/containers.py, the create and destroy
playbooks of .config/molecule/config.yml): each platform becomes the podman run that molecule's
podman driver would have made of the keys the scenarios use, and destroy removes them all in
one call. A stand-in podman on PATH records the calls; the scenarios run the real one."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "tests", "molecule", "containers.py")
# the platform keys containers.py turns into podman arguments; molecule.yml's groups are inventory
HANDLED = {"name", "image", "command", "privileged", "extra_opts", "pre_build_image", "groups"}


def _run(tmp_path, action, platforms, fail=False):
    log = tmp_path / "calls"
    fake = tmp_path / "podman"
    fake.write_text("#!/bin/sh\nprintf '%%s\\n' \"$*\" >> %s\n%s\n" % (log, "exit 125" if fail else "exit 0"))
    fake.chmod(0o755)
    env = dict(os.environ, MOLECULE_PODMAN_EXECUTABLE=str(fake))
    run = subprocess.run(
        [sys.executable, SCRIPT, action, json.dumps(platforms)], check=False, env=env, capture_output=True, text=True
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return run, calls


def test_create_runs_one_podman_run_per_platform(tmp_path):
    platforms = [
        {"name": "a", "image": "localhost/img:tag", "pre_build_image": True, "command": "/bin/sleep infinity"},
        {"name": "b", "image": "localhost/img:tag", "command": "/bin/sleep infinity", "privileged": True},
        {
            "name": "c",
            "image": "localhost/img:tag",
            "command": "/bin/sleep infinity",
            "extra_opts": ["--tmpfs", "/etc/sysctl.d:ro,size=64k"],
        },
    ]
    run, calls = _run(tmp_path, "create", platforms)
    assert run.returncode == 0, run.stderr
    assert calls == [
        "run -d --name a --hostname a --label owner=molecule localhost/img:tag /bin/sleep infinity",
        "run -d --name b --hostname b --label owner=molecule --privileged localhost/img:tag /bin/sleep infinity",
        "run -d --name c --hostname c --label owner=molecule --tmpfs /etc/sysctl.d:ro,size=64k "
        "localhost/img:tag /bin/sleep infinity",
    ]
    assert run.stdout.split() == ["started", "a", "started", "b", "started", "c"]


def test_destroy_removes_every_platform_in_one_call(tmp_path):
    run, calls = _run(tmp_path, "destroy", [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}])
    assert run.returncode == 0, run.stderr
    assert calls == ["rm -f -t 0 --ignore a b"]


def test_a_podman_failure_fails_the_step(tmp_path):
    run, calls = _run(
        tmp_path, "create", [{"name": "a", "image": "i", "command": "x"}, {"name": "b", "image": "i"}], fail=True
    )
    assert run.returncode != 0
    assert len(calls) == 1, "the second container was started after the first failed"


def test_a_bad_call_says_how_to_call(tmp_path):
    run, calls = _run(tmp_path, "start", [])
    assert run.returncode == 2 and "usage" in run.stderr and not calls


def test_every_scenario_uses_only_the_keys_it_handles_and_the_shared_playbooks():
    with open(os.path.join(REPO, ".config", "molecule", "config.yml")) as handle:
        playbooks = yaml.safe_load(handle)["provisioner"]["playbooks"]
    assert set(playbooks) == {"create", "destroy"}
    for step, path in playbooks.items():
        local = path.replace("${MOLECULE_PROJECT_DIRECTORY}", REPO)
        with open(local) as handle:
            text = handle.read()
        assert "tests/molecule/containers.py" in text and step in text, path
    root = os.path.join(REPO, "extensions", "molecule")
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "molecule.yml")
        if not os.path.isfile(path):
            continue
        with open(path) as handle:
            config = yaml.safe_load(handle)
        assert "playbooks" not in config.get("provisioner", {}), "%s has create/destroy playbooks of its own" % name
        for platform in config["platforms"]:
            extra = set(platform) - HANDLED
            assert not extra, "%s: platform %s has %s, which containers.py does not pass to podman" % (
                name,
                platform["name"],
                sorted(extra),
            )
