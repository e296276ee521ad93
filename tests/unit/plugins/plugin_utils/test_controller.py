# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Who holds a host from where, whether that controller process lives, the command to type next,
and the guard that turns a signal or a dead controller into a clean stop of the gate."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.stacktune.gpu.plugins.plugin_utils import _controller
from ansible_collections.stacktune.gpu.plugins.plugin_utils._interrupt import Guard, Interrupted


def test_a_live_controller_is_not_gone_and_a_finished_one_is():
    here = _controller.controller_identity(pid=os.getpid())
    assert here["pid_start"] is not None and here["host"]
    assert not _controller.is_gone(dict(here), here)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = _controller.controller_identity(pid=child.pid)
    dead["pid_start"] = here["pid_start"]  # what its lease recorded while it ran
    assert _controller.is_gone(dead, here)


def test_a_reused_pid_or_another_boot_is_gone_and_another_host_cannot_tell():
    here = _controller.controller_identity(pid=os.getpid())
    assert _controller.is_gone(dict(here, pid_start=here["pid_start"] + 1), here)  # same pid, another process
    if here["boot_id"]:
        assert _controller.is_gone(dict(here, boot_id="another-boot"), here)
    assert not _controller.is_gone(dict(here, host="other-controller", pid=999999), here)
    assert not _controller.is_gone(None, here)


def test_the_command_is_make_on_the_embedded_inventory_and_ansible_playbook_elsewhere(tmp_path):
    local = os.path.join(_controller.COLLECTION_ROOT, "inventories", "local", "hosts.yml")
    assert (
        _controller.command(
            "rollback",
            {"inventory_file": local, "inventory_hostname": "localhost"},
            [
                "-e",
                "stacktune_lock_break=true",
            ],
        )
        == 'make rollback ARGS="-e stacktune_lock_break=true"'
    )
    inventory = str(tmp_path / "fleet.ini")
    out = _controller.command("rollback", {"inventory_file": inventory, "inventory_hostname": "gpu-07"})
    assert out.startswith("ansible-playbook -i %s " % inventory)
    assert out.endswith("playbooks/rollback.yml --limit gpu-07")
    assert (
        _controller.command("tune", {"inventory_file": inventory, "inventory_hostname": "gpu-07"})
        .split()[3]
        .endswith("tune.yml")
    )


def test_the_guard_raises_on_a_signal_and_holds_it_during_a_critical_part():
    # what the test runner was started with: Python's default handler in a terminal, SIG_IGN in
    # a job a shell started in the background
    before = signal.getsignal(signal.SIGINT)
    with Guard() as guard:
        with pytest.raises(Interrupted) as exc:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert exc.value.why == "SIGTERM" and not exc.value.held
    with Guard() as guard:
        with pytest.raises(Interrupted) as exc, guard.critical():
            os.kill(os.getpid(), signal.SIGINT)
            done = True  # the critical part runs to its end
        assert done and exc.value.why == "SIGINT" and exc.value.held
        os.kill(os.getpid(), signal.SIGINT)  # a second signal during the clean-up is ignored
    assert signal.getsignal(signal.SIGINT) is before  # the guard puts back the handler it found


def test_the_guard_sees_its_controller_die():
    # a guard whose "controller" is a pid that is not this process's parent behaves as an orphan's
    with Guard(parent=os.getppid() + 100000), pytest.raises(Interrupted) as exc:
        time.sleep(3)
    assert exc.value.orphaned and "is gone" in exc.value.why


def test_a_signal_between_measurements_says_what_the_hosts_taken_are_left_in(tmp_path):
    # a real process: the controller's handlers with the callback's context, then SIGINT to itself
    prog = tmp_path / "controller.py"
    prog.write_text(
        "import os, signal, sys, time\n"
        "from ansible_collections.stacktune.gpu.plugins.plugin_utils import _interrupt\n"
        "_interrupt.install_controller_handlers(lambda: ('Run the program and say where it is bound', {'gpu01'}))\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(5)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode != 0  # it stopped the way the previous handler does (KeyboardInterrupt)
    assert 'stacktune: stopped by SIGINT during "Run the program and say where it is bound"' in done.stdout
    assert "no layer was being measured. Taken by this run: gpu01." in done.stdout
    assert "watchdog ends the run there" in done.stdout and "make rollback" in done.stdout
