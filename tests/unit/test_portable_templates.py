# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""No template whose whole result can be null: it gives a different value before ansible-core 2.19.

A YAML value that is one Jinja expression, such as ``"{{ x | default(none) }}"`` or
``"{{ a if c else none }}"``, is null on ansible-core 2.19 and later, but the empty string on
2.16, 2.17 and 2.18 (their templating turns a null result into ''), which an int or float
argument spec then refuses and a report writes as "". The collection supports 2.16 to 2.20,
so a null is kept inside a larger expression (a dict or list built in one template, a filter's
argument), a module option is left out with ``omit``, or a variable is handed over whole
(``"{{ x }}"``, which every version passes through unchanged).

The check parses every such value with Jinja's own parser and refuses one whose result can be
the ``none`` literal: the literal itself, either branch of a conditional, the fallback of
``default``, or a side of ``or``/``and``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml
from jinja2 import Environment, nodes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# where the collection's and its scenarios' task, vars and defaults files are
TOPS = ("roles", "playbooks", "tune.yml", os.path.join("extensions", "molecule"))
ENV = Environment()


def can_be_none(node):
    """Whether the expression ``node`` can evaluate to the none literal."""
    if isinstance(node, nodes.Const):
        return node.value is None
    if isinstance(node, nodes.Name):
        return node.name in ("none", "None")
    if isinstance(node, nodes.CondExpr):
        # a conditional without else gives an undefined value
        return node.expr2 is None or can_be_none(node.expr1) or can_be_none(node.expr2)
    if isinstance(node, nodes.Filter) and node.name in ("default", "d"):
        return can_be_none(node.node) or bool(node.args) and can_be_none(node.args[0])
    if isinstance(node, (nodes.Or, nodes.And)):
        return can_be_none(node.left) or can_be_none(node.right)
    return False


def whole_template_none(text):
    """True when ``text`` is one ``{{ ... }}`` expression whose result can be the none literal."""
    stripped = text.strip()
    if not (stripped.startswith("{{") and stripped.endswith("}}")):
        return False
    body = ENV.parse(stripped).body
    return (
        len(body) == 1
        and isinstance(body[0], nodes.Output)
        and len(body[0].nodes) == 1
        and can_be_none(body[0].nodes[0])
    )


def _strings(value, where):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, "%s.%s" % (where, key) if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, "%s[%d]" % (where, index))
    elif isinstance(value, str):
        yield where, value


def _yaml_files():
    for top in TOPS:
        path = os.path.join(REPO, top)
        if os.path.isfile(path):
            yield path
        for base, _dirs, files in os.walk(path):
            for name in sorted(files):
                if name.endswith((".yml", ".yaml")):
                    yield os.path.join(base, name)


YAML_FILES = sorted(_yaml_files())


def test_the_files_are_there():
    names = [os.path.relpath(p, REPO) for p in YAML_FILES]
    assert len(names) > 100
    for needed in (
        "tune.yml",
        "playbooks/tune.yml",
        "roles/preflight/defaults/main.yml",
        "roles/stacktune/vars/main.yml",
        "roles/acceptance/tasks/report.yml",
        "extensions/molecule/gate/verify.yml",
    ):
        assert needed in names, needed


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: os.path.relpath(p, REPO))
def test_no_template_result_is_a_bare_null(path):
    with open(path) as handle:
        data = yaml.safe_load(handle)
    found = [
        "%s: %s" % (where, " ".join(text.split())) for where, text in _strings(data, "") if whole_template_none(text)
    ]
    assert not found, "%s: a whole template that can be null renders '' before ansible-core 2.19:\n%s" % (
        os.path.relpath(path, REPO),
        "\n".join(found),
    )


@pytest.mark.parametrize(
    "text",
    [
        "{{ none }}",
        "{{ None }}",
        "{{ x | default(none) }}",
        "{{ x | d(none) }}",
        "{{ x | default(none, true) }}",
        "{{ y | default(x | default(none), true) }}",
        "{{ a if c else none }}",
        "{{ none if c else a }}",
        "{{ a if c }}",
        "{{ a or none }}",
        "  {{ a if c\n     else none }}\n",
    ],
)
def test_the_check_finds_a_null_result(text):
    assert whole_template_none(text)


@pytest.mark.parametrize(
    "text",
    [
        "{{ x }}",
        "{{ x | default(omit) }}",
        "{{ x if x is not none else omit }}",
        "{{ {'a': x | default(none)} }}",
        "{{ [a if c else none] }}",
        "{{ f(acceptance=(a if c else none)) }}",
        "{{ x | default('') }}",
        "{{ a }}{{ none }}",
        "x is none",
        "prefix {{ none }}",
    ],
)
def test_the_check_lets_portable_templates_through(text):
    assert not whole_template_none(text)
