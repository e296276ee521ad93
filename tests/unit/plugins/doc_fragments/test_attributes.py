# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module attributes written once: no module repeats an attribute of the doc fragment
stacktune.gpu.attributes word for word (it extends the fragment instead), and the modules that
do extend it show the fragment's attributes in ansible-doc next to their own check_mode."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.stacktune.gpu.plugins.doc_fragments.attributes import ModuleDocFragment

from .test_journal import REPO, _documentation, _modules

FRAGMENTS = {
    "stacktune.gpu.attributes": ModuleDocFragment.DOCUMENTATION,
    "stacktune.gpu.attributes.no_diff": ModuleDocFragment.NO_DIFF,
}


def _fragment_attributes():
    found = {}
    for text in FRAGMENTS.values():
        found.update(yaml.safe_load(text)["attributes"])
    return found


@pytest.mark.parametrize("name", _modules())
def test_no_module_repeats_a_shared_attribute(name):
    own = _documentation(name).get("attributes") or {}
    repeated = [key for key, value in _fragment_attributes().items() if own.get(key) == value]
    assert not repeated, "%s repeats %s: extend stacktune.gpu.attributes instead" % (name, repeated)


@pytest.mark.parametrize("name", ["journal_info", "run_lock", "host_settings", "drift_report"])
def test_the_fragment_shows_in_ansible_doc(name):
    doc = _documentation(name)
    fragments = doc.get("extends_documentation_fragment") or []
    assert "stacktune.gpu.attributes" in fragments
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"))
    ansible_doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    out = subprocess.run(
        [ansible_doc, "-t", "module", "--json", "stacktune.gpu.%s" % name],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    ).stdout  # fmt: skip
    shown = json.loads(out)["stacktune.gpu.%s" % name]["doc"]["attributes"]
    assert shown["platform"] == _fragment_attributes()["platform"]
    assert shown["check_mode"] == doc["attributes"]["check_mode"]
    if "stacktune.gpu.attributes.no_diff" in fragments:
        assert shown["diff_mode"] == _fragment_attributes()["diff_mode"]
    else:
        assert shown["diff_mode"] == doc["attributes"]["diff_mode"]
