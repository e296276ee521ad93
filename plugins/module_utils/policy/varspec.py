# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Strict checks of role variables against a role's argument spec (meta/argument_specs.yml).

Ansible's own role argument validation converts where it can (``7`` passes as a list of
one string) but leaves the variable as the caller wrote it, so a role would then fail deep
inside a task with a message that names nothing. These checks refuse what the spec does
not describe, before anything on the host changes, and every message names the variable,
the expected form and what was given.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from collections.abc import Mapping

from ansible_collections.stacktune.gpu.plugins.module_utils.layers import registry
from ansible_collections.stacktune.gpu.plugins.module_utils.layers.candidates import (
    CandidateError,
    expand_candidates,
    is_candidates,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.policy.values import (
    component_error,
    control_problem,
    inside,
    line_error,
)

MISSING = object()
BOOL_WORDS = ("yes", "no", "true", "false", "on", "off", "y", "n", "1", "0")
_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
TYPE_WORDS = {
    "str": "a string",
    "path": "a path",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "list": "a list",
    "dict": "a mapping",
    "raw": "any value",
}

# Forms and ranges the argument-spec format cannot carry (ansible-lint's schema allows no
# extra keys in an option): the collection's here, each layer's in its module
# (layers/<layer>.py RULES, gathered by layers/registry.py) and joined below. Keyed by variable
# name, or by ``*suffix`` for every variable whose name ends so; an exact name wins. check_vars
# applies them wherever a role's spec declares the variable.
RULES = {
    # a role's journal directory follows stacktune_journal_dir unless it is set itself
    "*_journal_dir": {"absolute": True, "follows": "stacktune_journal_dir"},
    # empty writes no acceptance record
    "acceptance_journal_dir": {"absolute": True, "empty_ok": True, "follows": "stacktune_journal_dir"},
    # node_exporter's textfile directory, or auto (found on the host: reporting/node_exporter.py); the
    # roles' metrics_dir and acceptance_metrics_dir follow stacktune_metrics_dir
    "metrics_dir": {"absolute": True, "words_ok": ("auto",), "follows": "stacktune_metrics_dir"},
    "acceptance_metrics_dir": {"absolute": True, "words_ok": ("auto",), "follows": "stacktune_metrics_dir"},
    # the file_dataloader workload's directory (null: the io layer is not measurable)
    "stacktune_bench_data_dir": {"absolute": True},
    "stacktune_bench_steps": {"min": 10},
    "stacktune_bench_steps_by_workload": {"values_min": 10},
    "stacktune_bench_warmup": {"min": 0},
    "stacktune_bench_timeout": {"min": 1},
    "stacktune_lock_wait": {"min": 0},
    # the diagnosis's profile, warm-up and wait for the first step line (seconds)
    "stacktune_diagnose_seconds": {"min": 2, "max": 300},
    "stacktune_diagnose_warmup": {"min": 0, "max": 600},
    "stacktune_diagnose_timeout": {"min": 1, "max": 3600},
    # a lease must outlast the time between two renewals (engine calls, block ticks)
    "stacktune_lock_ttl": {"min": 60},
    # the root the layer role's engine works under
    "layer_root": {"absolute": True},
    # Values written into a line of a file that a shell sources or a program reads line by line:
    # every text in them (a string, a list's items, a mapping's keys and values) must stay one
    # plain value on that line (policy/values.py, the rule the engine's kinds apply too); the
    # layers' own variables have theirs in their modules
    "driver_nvidia_version": {"line": "the package manager's hold list"},
    "driver_expected_cuda": {"line": "the package manager's hold list"},
    "driver_package_patterns": {"line": "the package manager's hold list"},
    # layer names and references: journal records and drop-ins are named after them
    "stacktune_layers": {"line": "the journal's and the drop-ins' names"},
    "stacktune_rollback_layers": {"line": "the journal's names"},
    # Values that become one component of a path
    "layer_name": {"component": "the journal (layers/<name>.json) and the drop-ins' names"},
    "layer_run_id": {"component": "the journal's records"},
    "stacktune_run_id": {"component": "the reports", "under": "stacktune_report_dir"},
    "inventory_hostname": {"component": "the reports (<host>.json, .md, .png)"},
}


def joined(own, layers):
    """The collection's rules and the layers' in one mapping; a variable with a rule in both is
    an error."""
    twice = sorted(set(own) & set(layers))
    if twice:
        raise ValueError("rules declared both here and in a layer's module: %s" % ", ".join(twice))
    return dict(own, **layers)


RULES = joined(RULES, registry.RULES)

# The variables that take one value or candidates of it, and how one value is checked.
SEARCHABLE = registry.SEARCHABLE

# Names every check_vars call checks by their rule when they are defined, whatever the role:
# the run id and the host's name, which name the run's report files.
RUN_NAMES = ("stacktune_run_id", "inventory_hostname")


def rule_for(name):
    """The :data:`RULES` entry of a variable (an exact name first, then a ``*suffix``), or {}."""
    if name in RULES:
        return RULES[name]
    for pattern, rule in RULES.items():
        if pattern.startswith("*") and name.endswith(pattern[1:]):
            return rule
    return {}


def texts(name, value):
    """``[(label, text)]`` of every text in a value: itself, a list's items (``name[0]``), a
    mapping's keys (``name key 'k'``) and values (``name.k``); booleans and null hold none."""
    if value is None or isinstance(value, bool):
        return []
    if isinstance(value, Mapping):
        out = []
        for key, item in value.items():
            out.extend(texts("%s key" % name, key))
            out.extend(texts("%s.%s" % (name, key), item))
        return out
    if isinstance(value, (list, tuple)):
        out = []
        for index, item in enumerate(value):
            out.extend(texts("%s[%d]" % (name, index), item))
        return out
    return [(name, str(value))]


def _check_rule(name, rule, value, errors, values=None):
    if rule.get("line"):
        found = [line_error(label, text, rule["line"]) for label, text in texts(name, value)]
        errors.extend(message for message in found if message)
        return
    if rule.get("component"):
        message = component_error(name, value, rule["component"])
        base = (values or {}).get(rule.get("under"))
        if message is None and isinstance(base, str) and base:
            try:
                inside(base, str(value))
            except ValueError as exc:
                message = "%s must name a directory inside %s (%s); %s" % (name, rule["under"], base, exc)
        if message:
            errors.append(message)
        return
    given = "got %s" % _shown(value)
    if rule.get("follows") and rule["follows"] != name:
        given += " (by default it is %s)" % rule["follows"]
    if rule.get("absolute"):
        text = str(value)
        if text == "" and rule.get("empty_ok"):
            return
        if text in rule.get("words_ok", ()):
            return
        parts = text.split("/")
        problem = control_problem(text)
        if problem:
            errors.append("%s must be a path on one line, %s %s" % (name, _shown(value), problem))
            return
        if not text.startswith("/") or ".." in parts:
            words = "".join(" or %s" % word for word in rule.get("words_ok", ()))
            errors.append("%s must be an absolute path without '..'%s, %s" % (name, words, given))
            return
        if rule.get("endswith") and not text.endswith(rule["endswith"]):
            errors.append("%s must end in %s, %s" % (name, rule["endswith"], given))
            return
    if "values_min" in rule and isinstance(value, Mapping):
        for key, item in sorted(value.items()):
            _check_rule("%s.%s" % (name, key), {"min": rule["values_min"]}, item, errors)
        return
    for bound, word in (("min", "at least"), ("max", "at most")):
        if bound not in rule:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            return
        if (number < rule[bound]) if bound == "min" else (number > rule[bound]):
            errors.append("%s must be %s %s, %s" % (name, word, rule[bound], given))


def _shown(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _scalar_ok(kind, value):
    if kind == "raw":
        return True
    if isinstance(value, bool):
        return kind == "bool"
    if kind in ("str", "path"):
        return isinstance(value, (str, int, float))
    if kind == "int":
        return isinstance(value, int) or (isinstance(value, str) and bool(_INT.match(value.strip())))
    if kind == "float":
        return isinstance(value, (int, float)) or (isinstance(value, str) and bool(_FLOAT.match(value.strip())))
    if kind == "bool":
        return (isinstance(value, str) and value.strip().lower() in BOOL_WORDS) or (
            isinstance(value, int) and value in (0, 1)
        )
    return True


def _expected(spec):
    kind = spec.get("type", "str")
    text = TYPE_WORDS.get(kind, kind)
    if kind == "list":
        element = spec.get("elements")
        if element:
            text = "a list of %s" % {"dict": "mappings", "int": "whole numbers", "float": "numbers"}.get(
                element, "strings" if element in ("str", "path") else element
            )
    if spec.get("choices"):
        text += " (one of %s)" % ", ".join(str(c) for c in spec["choices"])
    return text


def _check_one(name, spec, value, errors):
    kind = spec.get("type", "str")
    if value is None:
        if spec.get("required"):
            errors.append("%s is required; got null (expected %s)" % (name, _expected(spec)))
        elif kind in ("list", "dict") and spec.get("default") is not None:
            errors.append("%s must be %s, got null" % (name, _expected(spec)))
        return
    given = "got %s (%s)" % (_shown(value), _type_name(value))
    if kind == "list":
        if not isinstance(value, (list, tuple)):
            hint = ""
            if isinstance(value, str):
                hint = ". On the command line give lists as JSON: -e '{\"%s\": [...]}'" % name
            errors.append("%s must be %s, %s%s" % (name, _expected(spec), given, hint))
            return
        element = spec.get("elements")
        for index, item in enumerate(value):
            label = "%s[%d]" % (name, index)
            if element == "dict":
                if not isinstance(item, Mapping):
                    errors.append("%s must be a mapping, got %s (%s)" % (label, _shown(item), _type_name(item)))
                elif spec.get("options"):
                    _check_mapping(label, spec["options"], item, errors)
            elif element:
                _check_one(label, {"type": element, "choices": spec.get("choices")}, item, errors)
        return
    if kind == "dict":
        if not isinstance(value, Mapping):
            hint = ""
            if isinstance(value, str):
                hint = ". On the command line give mappings as JSON: -e '{\"%s\": {...}}'" % name
            errors.append("%s must be a mapping, %s%s" % (name, given, hint))
        elif spec.get("options"):
            _check_mapping(name, spec["options"], value, errors)
        return
    if isinstance(value, (Mapping, list, tuple)) and kind != "raw" or not _scalar_ok(kind, value):
        errors.append("%s must be %s, %s" % (name, _expected(spec), given))
        return
    choices = spec.get("choices")
    if choices and value not in choices and str(value) not in [str(c) for c in choices]:
        errors.append("%s must be one of %s, %s" % (name, ", ".join(str(c) for c in choices), given))


def _check_searchable(name, value, errors):
    """A variable that takes one value or candidates of it (layers/candidates.py; the variables
    are the layers' SEARCHABLE): each candidate is checked as the one value is, and the message
    names the bad one."""
    words, check_one = SEARCHABLE[name]
    try:
        if is_candidates(value):
            expand_candidates(name, value, check_one)
        else:
            check_one(value)
    except CandidateError as exc:
        errors.append("%s (a candidate is %s)" % (exc, words))
    except ValueError:
        errors.append(
            "%s must be %s, or candidates of it (a list or {from, to, step}), got %s (%s)"
            % (name, words, _shown(value), _type_name(value))
        )


def _check_mapping(label, options, value, errors):
    unknown = sorted(str(k) for k in value if k not in options)
    if unknown:
        errors.append("%s has unknown key(s) %s; known: %s" % (label, ", ".join(unknown), ", ".join(sorted(options))))
    for key, spec in options.items():
        if key in value:
            _check_one("%s.%s" % (label, key), spec or {}, value[key], errors)
        elif (spec or {}).get("required"):
            errors.append("%s needs the key %s (%s)" % (label, key, _expected(spec)))


def check(options, values):
    """Messages for every variable whose value the spec does not describe (empty when all are fine).

    ``options``: the ``options`` of an argument spec entry point; ``values``: variable name
    to value, :data:`MISSING` where the variable is not defined.
    """
    errors = []
    for name in sorted(options):
        spec = options[name] or {}
        value = values.get(name, MISSING)
        if value is MISSING:
            if spec.get("required"):
                errors.append("%s is required (%s)" % (name, _expected(spec)))
            continue
        before = len(errors)
        if name in SEARCHABLE and value is not None:
            # the rule of the text first (a line of a file: no escapes), then each candidate
            if rule_for(name):
                _check_rule(name, rule_for(name), value, errors, values)
            if len(errors) == before:
                _check_searchable(name, value, errors)
            continue
        _check_one(name, spec, value, errors)
        if len(errors) == before and value is not None and rule_for(name):
            _check_rule(name, rule_for(name), value, errors, values)
    return errors


def check_run_names(values):
    """Messages for the :data:`RUN_NAMES` in ``values`` that their rule refuses (empty when fine).

    ``values`` may hold the directories a rule's ``under`` names (``stacktune_report_dir``).
    """
    errors = []
    for name in RUN_NAMES:
        value = values.get(name, MISSING)
        if value is not MISSING and value is not None:
            _check_rule(name, RULES[name], value, errors, values)
    return errors


# ---------------------------------------------------------------- misspelled variables

# Variables the collection reads that no role's argument spec declares: play keywords of
# tune.yml (given with -e), the fleet-wide preflight values, and the run's own outputs.
UNDECLARED = (
    "stacktune_hosts",
    "stacktune_serial",
    "stacktune_rollout_serial",
    "stacktune_canary_percent",
    "stacktune_canary_stop_on_rollback",
    "stacktune_max_fail_percentage",
    "stacktune_run_id",
    "stacktune_results",
    "stacktune_expected_gpu_count",
    "stacktune_psu_capacity_watts",
    "stacktune_metrics_dir",
    "stacktune_platform_watts",
)


# Variables the collection no longer reads, with what replaced them. Set anywhere, they are
# refused (a run would otherwise ignore them and write somewhere else than asked).
RENAMED = {
    "metrics_textfile_path": "stacktune_metrics_dir (the directory; the file in it is stacktune.prom)",
    "acceptance_metrics_path": (
        "stacktune_metrics_dir (the directory; the file in it is stacktune_acceptance.prom), "
        "or acceptance_metrics_enabled: false to write none"
    ),
    "stacktune_diagnose_skip": (
        "stacktune_diagnose_size_trials (the diagnosis sizes the trials and never skips one; "
        "stacktune_diagnose_keep_harmless: false puts back a layer that does not measurably help)"
    ),
}


def renamed(names):
    """A message for every name in ``names`` that :data:`RENAMED` lists."""
    return [
        "%s is no longer a variable of stacktune.gpu; use %s" % (name, RENAMED[name])
        for name in sorted(names)
        if name in RENAMED
    ]


def edit_distance(a, b, most=2):
    """Levenshtein distance of two names, or ``most + 1`` as soon as it exceeds ``most``."""
    if abs(len(a) - len(b)) > most:
        return most + 1
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        if min(current) > most:
            return most + 1
        previous = current
    return previous[-1]


def misspelled(names, known, most=2, shortest=8):
    """``[(name, closest known name)]`` for every name that is not known but within ``most``
    edits of a known one (``stacktune_layer`` for ``stacktune_layers``, ``kernel_sysctls`` for
    ``kernel_sysctl``). Names of Ansible and private names (``ansible_*``, ``_*``) and names of
    other roles that look nothing like these (``kernel_settings_sysctl``) are never reported."""
    known = set(known)
    out = []
    for name in sorted(names):
        if name in known or name in RENAMED or name.startswith(("_", "ansible_")) or len(name) < shortest:
            continue
        best = min(known, key=lambda k: (edit_distance(name, k, most), k)) if known else None
        if best is not None and edit_distance(name, best, most) <= most:
            out.append((name, best))
    return out
