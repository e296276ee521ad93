# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One interface to the journal: the doc fragment stacktune.gpu.journal documents exactly the
shared argument spec (module_utils.engine.journal.JOURNAL_OPTIONS), every module that takes
journal_dir, root or run_id documents them through the fragment, and each is in the action
group that entry points give them through (meta/runtime.yml)."""

import ast
import os

import pytest
import yaml

from ansible_collections.stacktune.gpu.plugins.doc_fragments.journal import ModuleDocFragment
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import JOURNAL_OPTIONS, journal_options

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MODULES = os.path.join(REPO, "plugins", "modules")
FRAGMENTS = {
    "stacktune.gpu.journal": ModuleDocFragment.DOCUMENTATION,
    "stacktune.gpu.journal.root": ModuleDocFragment.ROOT,
    "stacktune.gpu.journal.run_id": ModuleDocFragment.RUN_ID,
    "stacktune.gpu.journal.lock_check": ModuleDocFragment.LOCK_CHECK,
}
# gpu_acceptance writes its record only when given a journal directory: its journal_dir has no
# default, so it documents that option itself.
OWN_OPTIONS = {("gpu_acceptance", "journal_dir")}


def _fragment_options():
    options = {}
    for text in FRAGMENTS.values():
        options.update(yaml.safe_load(text)["options"])
    return options


def _documentation(name):
    with open(os.path.join(MODULES, name + ".py")) as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError("%s has no DOCUMENTATION" % name)


def _modules():
    return sorted(f[:-3] for f in os.listdir(MODULES) if f.endswith(".py") and not f.startswith("_"))


def _merged_options(doc):
    options = {}
    for fragment in doc.get("extends_documentation_fragment") or []:
        if fragment.split(".")[:3] != ["stacktune", "gpu", "journal"]:
            continue  # another fragment (the gate's settings): not the journal's
        options.update(yaml.safe_load(FRAGMENTS[fragment])["options"])
    for name, spec in (doc.get("options") or {}).items():
        options[name] = dict(options.get(name, {}), **spec)
    return options


def test_the_fragment_documents_the_shared_argument_spec():
    documented = _fragment_options()
    assert sorted(documented) == sorted(JOURNAL_OPTIONS)
    for name, spec in JOURNAL_OPTIONS.items():
        assert documented[name]["type"] == spec["type"], name
        assert documented[name].get("default") == spec.get("default"), name


@pytest.mark.parametrize("name", _modules())
def test_shared_options_come_from_the_fragment(name):
    doc = _documentation(name)
    for option, spec in (doc.get("options") or {}).items():
        if option in JOURNAL_OPTIONS and (name, option) not in OWN_OPTIONS:
            # a module may only add to the fragment (a default, required), never restate it
            assert "type" not in spec, "%s documents %s by hand; extend the fragment stacktune.gpu.journal" % (
                name,
                option,
            )
            assert option in _merged_options(dict(doc, options={})), "%s: %s without its fragment" % (name, option)


def _groups():
    with open(os.path.join(REPO, "meta", "runtime.yml")) as handle:
        return yaml.safe_load(handle)["action_groups"]


@pytest.mark.parametrize("name", _modules())
def test_every_module_of_the_journal_is_in_its_action_group(name):
    options = _merged_options(_documentation(name))
    groups = _groups()
    assert ("journal_dir" in options) == (name in groups["journal"]), name
    assert ("run_id" in options) == (name in groups["run"]), name


def test_journal_options_are_copies_with_changes():
    spec = journal_options("journal_dir", "run_id", run_id={"default": "manual"})
    assert spec == {
        "journal_dir": {"type": "path", "default": "/var/lib/stacktune"},
        "run_id": {"type": "str", "default": "manual"},
    }
    spec["journal_dir"]["default"] = "/elsewhere"
    assert JOURNAL_OPTIONS["journal_dir"]["default"] == "/var/lib/stacktune"
    assert "default" not in JOURNAL_OPTIONS["run_id"]


def test_journal_options_refuse_an_option_that_is_not_shared():
    with pytest.raises(KeyError, match="no shared journal option lock_timeout"):
        journal_options("lock_timeout")
    with pytest.raises(KeyError, match="no shared journal option state"):
        journal_options("run_id", state={"default": "x"})


def _role_journal_dirs():
    roles = os.path.join(REPO, "roles")
    for role in sorted(os.listdir(roles)):
        path = os.path.join(roles, role, "meta", "argument_specs.yml")
        if not os.path.isfile(path):
            continue
        with open(path) as handle:
            specs = yaml.safe_load(handle)["argument_specs"]
        for entry, spec in specs.items():
            for name, option in ((spec or {}).get("options") or {}).items():
                if name.endswith("journal_dir"):
                    yield role, entry, name, option


def test_every_role_documents_the_modules_journal_directory():
    """A role's journal directory defaults to stacktune_journal_dir, whose default is the modules' own."""
    found = list(_role_journal_dirs())
    assert {row[0] for row in found} >= {"stacktune", "layer", "metrics", "acceptance"}
    for role, entry, name, option in found:
        assert option.get("default") == JOURNAL_OPTIONS["journal_dir"]["default"], (role, entry, name)
        with open(os.path.join(REPO, "roles", role, "defaults", "main.yml")) as handle:
            default = yaml.safe_load(handle)[name]
        assert default in (
            JOURNAL_OPTIONS["journal_dir"]["default"],
            "{{ stacktune_journal_dir | default('%s') }}" % JOURNAL_OPTIONS["journal_dir"]["default"],
        ), (role, name, default)
