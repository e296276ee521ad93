# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tune through ansible-runner's streaming path, the one AWX/AAP execution nodes use.

``ansible-runner transmit`` packs the job (the project, the inventory, the variables) into a
stream, ``ansible-runner worker`` runs it in a directory of its own (on an execution node: the
node's), and ``ansible-runner process`` turns the worker's stream back into the job's artifacts
and events on the controller. Here all three run on this machine, in check mode against
localhost (nothing on the host changes): the job must succeed, its events must carry the plan
and each layer's outcome, the report must be written where the variables say, and the host must
be as it was.
"""

from __future__ import absolute_import, division, print_function

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def _runner():
    found = shutil.which("ansible-runner", path=BIN + os.pathsep + os.environ.get("PATH", ""))
    if not found:
        pytest.skip("ansible-runner is not installed (requirements-test.txt)")
    return found


def _read(path):
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return handle.read()


def test_the_tune_runs_through_transmit_worker_process(tmp_path):
    runner = _runner()
    job, work = tmp_path / "job", tmp_path / "worker"
    for sub in ("project", "inventory", "env"):
        (job / sub).mkdir(parents=True)
    work.mkdir()
    # the project is what an execution node receives: the playbooks; the collection comes from
    # the node's own environment (an execution environment image; here this checkout)
    shutil.copy(os.path.join(REPO, "tune.yml"), str(job / "project"))
    shutil.copytree(os.path.join(REPO, "playbooks"), str(job / "project" / "playbooks"))
    (job / "inventory" / "hosts").write_text(
        "localhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable
    )
    (job / "env" / "envvars").write_text(
        json.dumps(
            {
                "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
                "ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, "collections"),
                "ANSIBLE_ROLES_PATH": os.path.join(REPO, "roles"),
                "PATH": BIN + os.pathsep + os.environ.get("PATH", ""),
            }
        )
    )
    reports = tmp_path / "reports"
    (job / "env" / "extravars").write_text(
        json.dumps({"stacktune_layers": ["bios", "nccl"], "stacktune_report_dir": str(reports)})
    )
    nccl_before = _read("/etc/nccl.conf")
    pipeline = "%s transmit %s -p tune.yml --cmdline=--check | %s worker --private-data-dir=%s | %s process %s" % (
        runner,
        job,
        runner,
        work,
        runner,
        job,
    )
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", pipeline], check=False, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    artifacts = str(job / "artifacts")  # what `process` rebuilt from the worker's stream
    assert _read(os.path.join(artifacts, "status")).strip() == "successful"
    events = []
    for path in sorted(glob.glob(os.path.join(artifacts, "job_events", "*.json"))):
        with open(path) as handle:
            events.append(json.load(handle))
    said = "\n".join(e.get("stdout") or "" for e in events)
    assert "bios: nothing to change (check mode: nothing changed or measured)" in said
    assert "nccl: would change 1 setting(s) (check mode: nothing changed or measured)" in said or (
        "nccl: nothing to change (check mode: nothing changed or measured)" in said
    )
    assert any(e.get("event") == "playbook_on_stats" for e in events)
    assert glob.glob(str(reports / "*" / "localhost.md")) and glob.glob(str(reports / "*" / "localhost.json"))
    assert _read("/etc/nccl.conf") == nccl_before
