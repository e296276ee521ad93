# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Action plugin ``stacktune.gpu.check_vars``: check a role's variables against its argument spec.

Runs on the controller and touches no host. Documentation is in
``plugins/modules/check_vars.py``; the rules are in ``module_utils/policy/varspec.py``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible_collections.stacktune.gpu.plugins.module_utils.policy.varspec import (
    MISSING,
    RULES,
    RUN_NAMES,
    UNDECLARED,
    check,
    check_run_names,
    misspelled,
    renamed,
)

# the collection's roles (this file is plugins/action/check_vars.py)
ROLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__)))), "roles")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("entry_point", "role_path", "skip", "typos"))

    def _spec_file(self):
        role_path = self._task.args.get("role_path")
        if not role_path:
            role = getattr(self._task, "_role", None)
            role_path = getattr(role, "_role_path", None)
        if not role_path:
            return None
        return os.path.join(role_path, "meta", "argument_specs.yml")

    def _value(self, name, task_vars):
        if name not in task_vars:
            return MISSING
        try:
            return self._templar.template(task_vars[name])
        except AnsibleError as exc:
            return _Unresolved(str(exc).splitlines()[0])

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        entry_point = self._task.args.get("entry_point") or "main"
        skip = set(self._task.args.get("skip") or [])
        path = self._spec_file()
        if not path or not os.path.isfile(path):
            result.update(failed=True, msg="check_vars: no meta/argument_specs.yml found (give role_path)")
            return result
        specs = (self._loader.load_from_file(path) or {}).get("argument_specs") or {}
        if entry_point not in specs:
            result.update(failed=True, msg="check_vars: %s has no entry point %r" % (path, entry_point))
            return result
        options = {k: v for k, v in (specs[entry_point].get("options") or {}).items() if k not in skip}
        values, errors = {}, []
        for name in options:
            value = self._value(name, task_vars)
            if isinstance(value, _Unresolved):
                errors.append("%s cannot be resolved: %s" % (name, value.message))
                continue
            values[name] = value
        errors.extend(check(options, values))
        # the run id and the host's name name the run's files, whichever role this is
        errors.extend(check_run_names(self._run_names(task_vars, errors)))
        errors.extend(renamed(task_vars))
        if self._task.args.get("typos") and not self._templar.template(
            task_vars.get("stacktune_allow_unknown_vars", False)
        ):
            errors.extend(self._typos(task_vars))
        result["checked"] = sorted(options)
        result["changed"] = False
        if errors:
            result["failed"] = True
            result["errors"] = errors
            result["msg"] = "; ".join(errors)
        else:
            result["msg"] = "%d variables match the argument spec" % len(options)
        return result

    def _run_names(self, task_vars, errors):
        """The :data:`RUN_NAMES` as the run has them, with the directories their rules name."""
        out = {}
        for name in RUN_NAMES + tuple(RULES[n]["under"] for n in RUN_NAMES if RULES[n].get("under")):
            value = self._value(name, task_vars)
            if isinstance(value, _Unresolved):
                if name in RUN_NAMES:
                    errors.append("%s cannot be resolved: %s" % (name, value.message))
                continue
            out[name] = value
        return out

    def _known(self):
        """Every variable any role of the collection declares, in any entry point."""
        names = set(UNDECLARED)
        for role in sorted(os.listdir(ROLES)):
            path = os.path.join(ROLES, role, "meta", "argument_specs.yml")
            if not os.path.isfile(path):
                continue
            for entry in ((self._loader.load_from_file(path) or {}).get("argument_specs") or {}).values():
                names.update((entry or {}).get("options") or {})
        return names

    def _typos(self, task_vars):
        """A variable that is no variable of the collection but close to one is a typo."""
        return [
            "%s is not a variable of stacktune.gpu (did you mean %s?); as written it would be ignored and the run "
            "would use the default. If it belongs to another role, set stacktune_allow_unknown_vars: true"
            % (name, best)
            for name, best in misspelled(set(task_vars), self._known())
        ]


class _Unresolved(object):
    def __init__(self, message):
        self.message = message
