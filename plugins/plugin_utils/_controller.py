# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side helpers of the action and callback plugins: who runs stacktune from where,
whether that controller process still lives, and the exact command a user types next."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import getpass
import os
import shlex
import socket

from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import (
    boot_id,
    pid_gone,
    pid_namespace,
    process_start,
)

# The collection's root (this file is plugins/plugin_utils/_controller.py).
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
LOCAL_INVENTORY = os.path.join("inventories", "local", "hosts.yml")
MAKE_TARGETS = ("tune", "verify", "drift", "rollback", "calibrate")
PLAYBOOKS = {"tune": "tune.yml"}  # the others are playbooks/<entry>.yml


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def controller_identity(pid=None):
    """The controller process a run's lease names: this host, its boot, the user and the
    ansible-playbook process (the parent of the worker that runs an action plugin)."""
    pid = os.getppid() if pid is None else pid
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "user": user,
        "pid": pid,
        "pid_start": process_start(pid),
        # a block runner on this machine tells a gone controller only within one pid namespace
        "pid_ns": pid_namespace(),
    }


def is_gone(controller, here=None):
    """True when a lease's controller process is known to be gone: it ran on this controller
    host (same host name) and that boot ended, or its pid no longer runs the same process.
    False when it still runs, or when it ran elsewhere (nothing here can tell)."""
    here = here or controller_identity()
    if not isinstance(controller, dict) or not controller.get("host") or controller.get("host") != here["host"]:
        return False
    if controller.get("boot_id") and here.get("boot_id") and controller["boot_id"] != here["boot_id"]:
        return True
    return pid_gone(controller)


def _checkout():
    return os.path.exists(os.path.join(COLLECTION_ROOT, "Makefile"))


def command(entry, task_vars, extra=None):
    """The command that runs an entry point again for this host, as the user would type it.

    From a checkout on its embedded inventory: ``make <entry> ARGS="..."``; otherwise
    ``ansible-playbook -i <inventory> <playbook> --limit <host> ...`` (the playbook by FQCN
    once the collection is installed).
    """
    extra = list(extra or [])
    inventory = task_vars.get("inventory_file") or ""
    host = task_vars.get("inventory_hostname") or "all"
    local = os.path.join(COLLECTION_ROOT, LOCAL_INVENTORY)
    if _checkout() and entry in MAKE_TARGETS and inventory and os.path.realpath(inventory) == local:
        return "make %s%s" % (entry, (' ARGS="%s"' % " ".join(extra)) if extra else "")
    if _checkout():
        playbook = os.path.join(COLLECTION_ROOT, PLAYBOOKS.get(entry, os.path.join("playbooks", entry + ".yml")))
        if playbook.startswith(os.path.realpath(os.getcwd()) + os.sep):
            playbook = os.path.relpath(playbook, os.path.realpath(os.getcwd()))
    else:
        playbook = "stacktune.gpu.%s" % entry
    argv = ["ansible-playbook"]
    if inventory:
        argv += ["-i", inventory]
    argv += [playbook, "--limit", host] + extra
    return " ".join(shlex.quote(a) for a in argv)
