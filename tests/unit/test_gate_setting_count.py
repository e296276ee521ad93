"""Adding a gate setting touches four files by hand, and nothing else is needed but the doc
fragment written again by tools/gate_doc_fragment.py: proven on a copy.

In a copy of the collection (tmp_path/ansible_collections/stacktune/gpu) a dummy setting is
added the way docs/architecture.md says, touching only NEW_SETTING_FILES: its row in the
table (gate/settings.py), its use where the gate judges (gate/blocks.py), and the role's
variable (defaults/main.yml, meta/argument_specs.yml); then `tools/gate_doc_fragment.py --write`
writes the doc fragment from the table (GENERATED). A fresh Python importing that copy then
finds it everywhere the table reaches: the perf_gate filter takes it by name, check_settings
validates it, the doc fragment and the role's spec agree with the table, the role's lookup
hands it on, and ansible-doc shows it for the filter and for gate_layer's gate option.
"""

import filecmp
import json
import os
import shutil
import subprocess
import sys
import textwrap

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NEW_SETTING_FILES = [
    "plugins/module_utils/gate/settings.py",
    "plugins/module_utils/gate/blocks.py",
    "roles/stacktune/defaults/main.yml",
    "roles/stacktune/meta/argument_specs.yml",
]
# written by a command from the table, not by hand
GENERATED = ["plugins/doc_fragments/gate_settings.py"]
COPIED = [
    "tools/gate_doc_fragment.py",
    "galaxy.yml",
    "meta",
    "plugins",
    "roles/stacktune",
    "tests/unit/test_gate_settings_home.py",
    "tests/unit/plugins/doc_fragments/test_gate_settings.py",
]
# the dummy setting, one edit per file: (file, anchor, text put after the anchor)
EDITS = [
    (
        "plugins/module_utils/gate/settings.py",
        "SETTINGS = {\n",
        '    "dummy_factor": Setting("float", 1.5, 1.0, 10.0, False, False, "A dummy setting of the count test."),\n',
    ),
    (
        "plugins/module_utils/gate/blocks.py",
        '    s = gate_settings(settings, "judge_blocks")\n',
        '    DUMMY_SEEN.append(s["dummy_factor"])\n',
    ),
    ("plugins/module_utils/gate/blocks.py", "__metaclass__ = type\n", "DUMMY_SEEN = []\n"),
    (
        "roles/stacktune/defaults/main.yml",
        "stacktune_gate_stall_tolerance: 0.005\n",
        "stacktune_gate_dummy_factor: 1.5\n",
    ),
    (
        "roles/stacktune/meta/argument_specs.yml",
        "      stacktune_gate_stall_tolerance:\n",
        None,  # the new option goes before this one
    ),
]
SPEC_OPTION = (
    "      stacktune_gate_dummy_factor:\n        type: float\n        default: 1.5\n        description: A dummy.\n"
)

CHECK = textwrap.dedent(
    r"""
    import importlib.util, json, os, sys
    root = sys.argv[1]
    copy = os.path.join(root, "ansible_collections", "stacktune", "gpu")
    from ansible.errors import AnsibleFilterError
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate import blocks, settings
    assert settings.__file__.startswith(copy), settings.__file__
    from ansible_collections.stacktune.gpu.plugins.filter.perf_gate import gate_settings_check, perf_gate
    from ansible_collections.stacktune.gpu.plugins.lookup.gate_settings import variable_names

    def load(path):
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], os.path.join(copy, path))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    # the filter takes it by name, and the place that uses it gets it
    data = [[10.0 + 0.01 * (i % 7) for i in range(50)] for _b in range(4)]
    perf_gate(data, data, dummy_factor=2.5)
    assert blocks.DUMMY_SEEN == [2.5], blocks.DUMMY_SEEN
    perf_gate(data, data)
    assert blocks.DUMMY_SEEN[-1] == 1.5, blocks.DUMMY_SEEN
    try:
        perf_gate(data, data, dummy_factor=50)
        raise AssertionError("perf_gate took dummy_factor=50")
    except AnsibleFilterError as exc:
        assert "dummy_factor must be in [1, 10], got 50" in str(exc), exc
    # check_settings validates it, naming the role's variable
    assert settings.check_settings({}).settings["dummy_factor"] == 1.5
    assert settings.check_settings({"dummy_factor": "2"}).settings["dummy_factor"] == 2.0
    message = gate_settings_check({"dummy_factor": 0.5})
    assert message == "stacktune_gate_dummy_factor must be in [1, 10], got 0.5", message
    # the doc fragment and the role's defaults and argument spec agree with the table
    fragment = load("tests/unit/plugins/doc_fragments/test_gate_settings.py")
    assert fragment.fragment_mismatches() == [], fragment.fragment_mismatches()
    home = load("tests/unit/test_gate_settings_home.py")
    assert home.role_setting_mismatches(home.DEFAULTS, home.SPEC) == []
    assert home.SPEC["stacktune_gate_dummy_factor"]["default"] == 1.5
    # the role hands it on
    assert variable_names()["dummy_factor"] == "stacktune_gate_dummy_factor"
    print("dummy ok")
    """
)


def _copy(root):
    copy = os.path.join(root, "ansible_collections", "stacktune", "gpu")
    for path in COPIED:
        src, dst = os.path.join(REPO, path), os.path.join(copy, path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.isdir(src):
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    return copy


def _add_the_dummy(copy):
    for path, anchor, text in EDITS:
        with open(os.path.join(copy, path)) as handle:
            content = handle.read()
        assert content.count(anchor) >= 1, (path, anchor)
        at = content.index(anchor)
        if text is None:
            content = content[:at] + SPEC_OPTION + content[at:]
        else:
            at += len(anchor)
            content = content[:at] + text + content[at:]
        with open(os.path.join(copy, path), "w") as handle:
            handle.write(content)


def _changed(copy):
    changed = []
    for path in COPIED:
        src = os.path.join(REPO, path)
        files = [path] if os.path.isfile(src) else []
        for base, dirs, names in os.walk(src):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            files += [os.path.relpath(os.path.join(base, n), REPO) for n in names if not n.endswith(".pyc")]
        changed += [f for f in files if not filecmp.cmp(os.path.join(REPO, f), os.path.join(copy, f), shallow=False)]
    return sorted(changed)


def test_a_new_gate_setting_touches_four_files(tmp_path):
    copy = _copy(str(tmp_path))
    _add_the_dummy(copy)
    assert _changed(copy) == sorted(NEW_SETTING_FILES)
    stale = subprocess.run(
        [sys.executable, os.path.join(copy, "tools", "gate_doc_fragment.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert stale.returncode == 1, stale.stdout + stale.stderr
    subprocess.run([sys.executable, os.path.join(copy, "tools", "gate_doc_fragment.py"), "--write"], check=True)
    assert _changed(copy) == sorted(NEW_SETTING_FILES + GENERATED)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, str(tmp_path)],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and "dummy ok" in proc.stdout, proc.stdout + proc.stderr
    ansible_doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    if not os.path.exists(ansible_doc):
        return
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(tmp_path), ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"))
    for kind, name in (("filter", "stacktune.gpu.perf_gate"), ("module", "stacktune.gpu.gate_layer")):
        proc = subprocess.run(
            [ansible_doc, "--json", "-t", kind, name],
            cwd=str(tmp_path),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = json.loads(proc.stdout)[name]["doc"]
        assert doc["filename"].startswith(str(tmp_path)), doc["filename"]
        options = doc["options"] if kind == "filter" else doc["options"]["gate"]["suboptions"]
        assert options["dummy_factor"]["default"] == 1.5, options.get("dummy_factor")
