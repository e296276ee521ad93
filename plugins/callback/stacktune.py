# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: stacktune
type: stdout
short_description: A tuning run you can follow - phases, changes, decisions and where the report is
version_added: 0.2.0
author: stacktune maintainers (@stacktune)
description:
  - "Prints, with a timestamp: each play, what the roles say (their C(debug) messages: the
    plan per layer, the preflight checks, every gate decision with its reason), every task
    that changed something, every failure with its message, and the measurement blocks as
    the gate runs them. Tasks that were skipped or changed nothing are counted, not printed."
  - "At the end: per host the counts, then the report files and the next commands that the
    run published (C(set_stats) data C(stacktune_reports), C(stacktune_next))."
  - Selected by the repository's C(ansible.cfg); C(ANSIBLE_STDOUT_CALLBACK=default) brings
    back Ansible's default output. Works unchanged in AWX/AAP job output.
  - With C(-v) or more, every task is printed as the default callback prints it.
  - "A play that asks for it (the tune play's C(stacktune_fleet_summary)) over more hosts than
    O(fleet_hosts) prints no host's messages or changes as they
    come (each host's report keeps them): its failures, one line per host, then at the end one
    summary: hosts per outcome, per layer how many hosts kept it, rolled it back or had nothing to
    change, and the failed hosts with the first line of their reason."
  - "On SIGINT (Ctrl-C, an AWX cancel), SIGTERM (a timeout, a scheduler) or SIGHUP it passes
    the signal to Ansible's workers, waits (two minutes at most) for the gate to put the layer
    it measures back to its snapshot and free the host, prints per host what it was left in
    and the one command that undoes the rest, and then stops as Ansible does."
requirements:
  - Set as the stdout callback (C(stdout_callback = stacktune.gpu.stacktune) in ansible.cfg).
options:
  fleet_hosts:
    description: A play over more hosts than this prints a fleet summary instead of every host's lines.
    type: int
    default: 8
    ini:
      - section: stacktune
        key: fleet_hosts
    env:
      - name: STACKTUNE_FLEET_HOSTS
extends_documentation_fragment:
  - default_callback
"""

import json
import threading
import time

from ansible import context
from ansible.plugins.callback.default import CallbackModule as DefaultCallback
from ansible_collections.stacktune.gpu.plugins.plugin_utils._interrupt import install_controller_handlers
from ansible_collections.stacktune.gpu.plugins.plugin_utils._preload import preload


def _get(result, name):
    """The task, host or result dict of a task result (ansible-core 2.17 to 2.19 names)."""
    value = getattr(type(result), name, None)
    if value is not None:
        return getattr(result, name)
    return getattr(result, "_" + name)


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "stacktune.gpu.stacktune"

    def __init__(self):
        super().__init__()
        self._quiet_counts = {"ok": 0, "skipped": 0}
        self._started = time.time()
        self._taken = set()  # hosts this run holds (run_lock took them and has not given them back)
        self._last_task_name = None
        self._fleet = False  # the play is over more hosts than fleet_hosts: a summary at the end
        self._failed = {}  # host: the first line of why it failed (fleet mode)

    # ------------------------------------------------------------------ helpers
    def _verbose(self):
        return self._display.verbosity > 0

    def _say(self, text, color=None, host=None):
        stamp = time.strftime("%H:%M:%S")
        prefix = "%s %s| " % (stamp, ("%s " % host) if host else "")
        lines = str(text).splitlines() or [""]
        self._display.display(prefix + lines[0], color=color)
        for line in lines[1:]:
            self._display.display(" " * len(prefix) + line, color=color)

    @staticmethod
    def _messages(res, var=None):
        msg = res.get("msg")
        if isinstance(msg, (list, tuple)):
            return [str(m) for m in msg]
        if msg is None and var and var in res:
            # debug: var=NAME returns {NAME: value}
            text = json.dumps(res[var], indent=2, sort_keys=True, default=str)
            return ("%s: %s" % (var, text)).splitlines()
        if msg is None:
            return []
        return [str(msg)]

    def _fleet_hosts(self):
        try:
            return int(self.get_option("fleet_hosts"))
        except (KeyError, TypeError, ValueError):
            return 8

    @staticmethod
    def _play_hosts(play):
        """How many hosts the play runs on (0 when the inventory cannot say)."""
        try:
            # all the play's hosts, not the serial batch the inventory is restricted to now
            return len(play.get_variable_manager()._inventory.get_hosts(play.hosts, ignore_restrictions=True))
        except Exception:  # pylint: disable=broad-exception-caught  # a count only decides the output's form
            return 0

    # ------------------------------------------------------------------ plays and tasks
    def v2_playbook_on_start(self, playbook):
        super().v2_playbook_on_start(playbook)
        # once here rather than in every task's worker process (plugin_utils/_preload.py)
        preload()
        # Ctrl-C, a scheduler's SIGTERM, a closed terminal: wait for the gate to put the layer it
        # measures back, then say what each host was left in (plugin_utils/_interrupt.py)
        if threading.current_thread() is threading.main_thread():
            install_controller_handlers(lambda: (self._last_task_name, set(self._taken)))

    def _track_lock(self, result):
        task = _get(result, "task")
        if not str(task.action).endswith("run_lock"):
            return
        host = _get(result, "host").get_name()
        res = _get(result, "result")
        if "watchdog_pid" in res:  # taken, with the host's watchdog (tune, rollback, drift fix, calibrate)
            self._taken.add(host)
        elif res.get("holder") is None:  # given back
            self._taken.discard(host)

    def v2_playbook_on_play_start(self, play):
        if self._verbose():
            super().v2_playbook_on_play_start(play)
            return
        name = play.get_name().strip()
        self._play = play
        hosts = self._play_hosts(play)
        self._fleet = (
            hosts > self._fleet_hosts() and (getattr(play, "vars", None) or {}).get("stacktune_fleet_summary") is True
        )
        self._say(
            "PLAY %s%s" % (name, " (%d hosts: a summary at the end)" % hosts if self._fleet else ""),
            color="bright blue",
        )

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._last_task_name = task.get_name().strip()
        if self._verbose():
            super().v2_playbook_on_task_start(task, is_conditional)
            return
        self._last_task_name = task.get_name().strip()

    def v2_playbook_on_handler_task_start(self, task):
        self._last_task_name = task.get_name().strip()
        if self._verbose():
            super().v2_playbook_on_handler_task_start(task)
            return
        self._last_task_name = task.get_name().strip()

    def v2_runner_on_start(self, host, task):
        if self._verbose():
            super().v2_runner_on_start(host, task)
            return

    def v2_playbook_on_include(self, included_file):
        if self._verbose():
            super().v2_playbook_on_include(included_file)
            return

    def v2_playbook_on_no_hosts_matched(self):
        self._say(
            "no hosts matched: check the inventory (-i) and the host pattern; from a checkout, "
            "run `make tune` or give -i inventories/local/hosts.yml",
            color="bright red",
        )

    # ------------------------------------------------------------------ results
    def _task_name(self, result):
        task = _get(result, "task")
        return task.get_name().strip() if task is not None else self._last_task_name

    @staticmethod
    def _predicted(result):
        """Whether the task ran in check mode (the run's --check, or its own check_mode: true)."""
        try:
            fields = _get(result, "task_fields") or {}
        except AttributeError:
            fields = {}
        return fields.get("check_mode") is True or context.CLIARGS.get("check") is True

    def _handle(self, result):
        handler = getattr(self, "_handle_warnings_and_exception", None)
        if handler is not None:
            handler(result)
        else:  # ansible-core 2.17/2.18
            self._handle_warnings(_get(result, "result"))

    def v2_runner_on_ok(self, result):
        self._track_lock(result)
        if self._verbose():
            super().v2_runner_on_ok(result)
            return
        task = _get(result, "task")
        res = _get(result, "result")
        host = _get(result, "host").get_name()
        self._handle(result)
        if self._fleet:
            self._quiet_counts["ok"] += 1  # each host's report keeps its messages and changes
            return
        if task.action in ("debug", "ansible.builtin.debug", "ansible.legacy.debug"):
            items = [r for r in res.get("results") or [] if isinstance(r, dict) and not r.get("skipped")]
            var = (task.args or {}).get("var")
            lines = [line for r in items for line in self._messages(r, var)] if items else self._messages(res, var)
            # "next: ..." lines are for Ansible's own output; this callback gives them once, at the recap
            lines = [line for line in lines if not str(line).startswith("next: ")]
            if lines:
                self._say(self._task_name(result), color="cyan", host=host)
                for line in lines:
                    self._display.display("    " + line)
            return
        # in check mode (the run's, or a task's own check_mode: true) a change is a prediction
        verb = "would change" if self._predicted(result) else "changed"
        if res.get("changed") and not res.get("results"):
            self._say("%s: %s" % (verb, self._task_name(result)), color="yellow", host=host)
            return
        if res.get("results"):
            changed = [r for r in res["results"] if isinstance(r, dict) and r.get("changed")]
            if changed:
                self._say(
                    "%s: %s (%d of %d items)" % (verb, self._task_name(result), len(changed), len(res["results"])),
                    color="yellow",
                    host=host,
                )
                return
        self._quiet_counts["ok"] += 1

    def v2_runner_on_skipped(self, result):
        if self._verbose():
            super().v2_runner_on_skipped(result)
            return
        self._quiet_counts["skipped"] += 1

    def v2_runner_item_on_ok(self, result):
        if self._verbose():
            super().v2_runner_item_on_ok(result)
            return

    def v2_runner_item_on_skipped(self, result):
        if self._verbose():
            super().v2_runner_item_on_skipped(result)
            return

    @staticmethod
    def _rescued(task):
        """Whether a failure of ``task`` goes to a rescue: a block around it has one, which says
        what went wrong itself (the stacktune role's rescue ends with the reason, once)."""
        # the objects of a run are copies of the loaded ones: an include's runtime task and the
        # block of its file carry the uuids of the entries their parent lists, so the walk keeps
        # every uuid it passed and asks which section of each block with a rescue holds one
        seen, node = {getattr(task, "_uuid", None)}, getattr(task, "_parent", None)
        while node is not None:
            rescue = getattr(node, "rescue", None)
            if rescue:
                if any(getattr(c, "_uuid", None) in seen for c in getattr(node, "block", None) or []):
                    return True
                others = list(rescue) + list(getattr(node, "always", None) or [])
                if any(getattr(c, "_uuid", None) in seen for c in others):
                    return False
            seen.add(getattr(node, "_uuid", None))
            node = getattr(node, "_parent", None)
        return False

    def v2_playbook_on_no_hosts_remaining(self):
        if self._verbose():
            super().v2_playbook_on_no_hosts_remaining()
        # the recap says which hosts failed; the banner repeated it once per play

    def v2_runner_item_on_failed(self, result):
        if self._verbose():
            super().v2_runner_item_on_failed(result)
            return
        if self._rescued(_get(result, "task")):
            return  # the rescue says why, once
        res = _get(result, "result")
        host = _get(result, "host").get_name()
        item = self._get_item_label(res)
        self._say(
            "FAILED: %s (item %s): %s" % (self._task_name(result), item, res.get("msg", "")), color="red", host=host
        )

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if self._verbose():
            super().v2_runner_on_failed(result, ignore_errors)
            return
        res = _get(result, "result")
        host = _get(result, "host").get_name()
        # warnings only: the failure's words are printed below, once (Ansible's own error display
        # repeated them with the task's origin; -v shows it)
        self._handle_warnings(res)
        if not ignore_errors and self._rescued(_get(result, "task")):
            return  # the rescue says why, once
        label = "failed (ignored)" if ignore_errors else "FAILED"
        msg = res.get("msg") or res.get("stderr") or res.get("module_stderr") or "see -v for details"
        if res.get("results") and not res.get("msg"):
            msg = "; ".join(str(r.get("msg")) for r in res["results"] if isinstance(r, dict) and r.get("failed"))
        if self._fleet:
            if not ignore_errors:
                first = (str(msg).strip().splitlines() or [""])[0]
                self._failed[host] = first if len(first) <= 300 else first[:297] + "..."
                self._say("FAILED: %s" % self._failed[host], color="red", host=host)
            return
        self._say("%s: %s\n%s" % (label, self._task_name(result), msg), color="red", host=host)

    def v2_runner_on_unreachable(self, result):
        if self._verbose():
            super().v2_runner_on_unreachable(result)
            return
        res = _get(result, "result")
        host = _get(result, "host").get_name()
        self._failed[host] = "unreachable: %s" % (str(res.get("msg", "")).strip().splitlines() or [""])[0]
        self._say("UNREACHABLE: %s" % res.get("msg", ""), color="red", host=host)

    def v2_runner_retry(self, result):
        if self._verbose():
            super().v2_runner_retry(result)
            return
        res = _get(result, "result")
        host = _get(result, "host").get_name()
        self._say(
            "retrying %s (%s left)" % (self._task_name(result), res.get("retries", 0) - res.get("attempts", 0)),
            host=host,
        )

    # ------------------------------------------------------------------ end of run
    def _fleet_summary(self, stats, outcomes):
        """The end of a fleet's run: hosts per outcome, per layer the decisions, the failed hosts."""
        # the hosts the tune ran on: those with outcomes, and those that failed before they had any
        hosts = sorted(set(outcomes) | set(self._failed))
        tally = {"failed": 0, "unreachable": 0, "changed": 0, "ok": 0}
        for host in hosts:
            s = stats.summarize(host)
            key = (
                "unreachable"
                if s["unreachable"]
                else "failed"
                if s["failures"]
                else "changed"
                if s["changed"]
                else "ok"
            )
            tally[key] += 1
        self._say(
            "FLEET SUMMARY: %d host(s): %s" % (len(hosts), ", ".join("%d %s" % (n, k) for k, n in tally.items() if n)),
            color="bright blue",
        )
        layers = {}
        for decisions in outcomes.values():
            for layer, decision in (decisions or {}).items():
                counts = layers.setdefault(layer, {})
                counts[decision] = counts.get(decision, 0) + 1
        words = {"keep": "kept", "rollback": "rolled back", "none": "nothing to change"}
        for layer, counts in layers.items():
            self._display.display(
                "  %s: %s"
                % (
                    layer,
                    ", ".join(
                        "%s on %d" % (words.get(d, d), n) for d, n in sorted(counts.items(), key=lambda x: -x[1])
                    ),
                )
            )
        for host in sorted(self._failed):
            self._display.display("  failed: %s: %s" % (host, self._failed[host]), color="red")

    def v2_playbook_on_stats(self, stats):
        self._display.display("")
        elapsed = time.time() - self._started
        custom = getattr(stats, "custom", {}) or {}
        if self._fleet and not self._verbose():
            self._fleet_summary(stats, (custom.get("_run") or {}).get("stacktune_outcomes") or {})
        self._say("RECAP (%d s)" % elapsed, color="bright blue")
        for host in sorted(stats.processed.keys()):
            s = stats.summarize(host)
            color = "red" if s["failures"] or s["unreachable"] else ("yellow" if s["changed"] else "green")
            # the line format of Ansible's own recap, which schedulers and tools parse
            self._display.display(
                "%-26s : ok=%-4d changed=%-4d unreachable=%-4d failed=%-4d skipped=%-4d rescued=%-4d ignored=%-4d"
                % (
                    host,
                    s["ok"],
                    s["changed"],
                    s["unreachable"],
                    s["failures"],
                    s["skipped"],
                    s["rescued"],
                    s["ignored"],
                ),
                color=color,
            )
        reports, nexts = [], []
        for host, data in sorted(custom.items()):
            if not isinstance(data, dict):
                continue
            for path in data.get("stacktune_reports") or []:
                reports.append(("" if host == "_run" else host + ": ") + str(path))
            for line in data.get("stacktune_next") or []:
                if line not in nexts:
                    nexts.append(str(line))
        if reports and self._fleet and not self._verbose() and len(reports) > 1:
            # one line: every host's report lies in the same run directory
            self._display.display("  reports:")
            self._display.display("    %s" % reports[0])
            self._display.display(
                "    ... and %d more host(s), each its <host>.md, .html and .json beside it" % (len(reports) - 1)
            )
        elif reports:
            self._display.display("  reports:")
            for line in reports:
                self._display.display("    " + line)
        if nexts:
            self._display.display("  next:")
            for line in nexts:
                self._display.display("    " + line)
