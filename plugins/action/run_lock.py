# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin ``stacktune.gpu.run_lock``: the controller's half of the host lock.

It records which controller process holds the lease (host, boot, user, the pid of
ansible-playbook), takes over a lease whose controller process on this same controller is
gone (a killed run), and ends every refusal with the exact command to run. The lock itself
is the module's (documentation in ``plugins/modules/run_lock.py``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import LOCK_BREAK_HINT
from ansible_collections.stacktune.gpu.plugins.plugin_utils._controller import (
    command,
    controller_identity,
    is_gone,
)

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        here = controller_identity()
        if args.get("state", "locked") == "locked":
            args.setdefault("controller", here)
            if not args.get("owner"):
                args["owner"] = "%s@%s" % (here["user"], here["host"])
        state = args.get("state", "locked")
        wait = args.get("wait") or 0
        first = dict(args, wait=0) if state == "locked" else args
        res = self._execute_module(module_name="stacktune.gpu.run_lock", module_args=first, task_vars=task_vars)
        holder = res.get("holder") or {}
        refused = res.get("failed") and not res.get("lease_lost") and holder
        if refused and is_gone(holder.get("controller"), here):
            # the run that holds the host was started from this controller and its process is gone
            again = dict(args, wait=0, takeover=holder["run_id"]) if state == "locked" else dict(args, force=True)
            res = self._execute_module(module_name="stacktune.gpu.run_lock", module_args=again, task_vars=task_vars)
            if not res.get("failed"):
                res.setdefault("notes", []).insert(
                    0,
                    "%s the host's lock from run %s: its controller process (pid %s on %s) is gone"
                    % (
                        "took over" if state == "locked" else "ignored",
                        holder["run_id"],
                        (holder.get("controller") or {}).get("pid"),
                        here["host"],
                    ),
                )
        elif refused and wait and state == "locked":
            res = self._execute_module(module_name="stacktune.gpu.run_lock", module_args=args, task_vars=task_vars)
        for note in res.get("notes") or []:
            display.display("    %s: %s" % (task_vars.get("inventory_hostname", "?"), note))
        if res.get("failed") and holder and not res.get("lease_lost"):
            entry = args.get("entry") or "tune"
            hint = command(entry, task_vars, ["-e", "stacktune_lock_break=true"])
            res["msg"] = res.get("msg", "").replace(LOCK_BREAK_HINT, "run: %s" % hint)
        result.update(res)
        return result
