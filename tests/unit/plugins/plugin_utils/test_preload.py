"""Loading the collection's controller plugins once per run (plugins/plugin_utils/_preload.py).

Run in a fresh interpreter with Ansible's own collection loader and plugin loaders, as the
controller has them when a playbook starts: after ``preload()`` every filter and test file of
the collection and its action plugins are imported, so the task workers forked afterwards
inherit them instead of importing them again.
"""

import json
import os
import subprocess
import sys

from ansible_collections.stacktune.gpu.plugins.plugin_utils import _preload

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

SCRIPT = r"""
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
prefix = "ansible_collections.stacktune.gpu.plugins."
before = sorted(m for m in sys.modules if m.startswith(prefix))
from ansible_collections.stacktune.gpu.plugins.plugin_utils._preload import preload
loaded = preload()
after = sorted(m for m in sys.modules if m.startswith(prefix))
print(json.dumps({"before": before, "loaded": loaded, "after": after, "again": preload()}))
"""


def plugin_files(kind):
    folder = os.path.join(REPO, "plugins", kind)
    return sorted(name[:-3] for name in os.listdir(folder) if name.endswith(".py") and name != "__init__.py")


def test_preload_imports_every_filter_test_and_action_plugin():
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"))
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, os.path.join(REPO, "collections")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd="/",
    )
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout.strip().splitlines()[-1])
    assert not [m for m in data["before"] if ".filter." in m or ".action." in m]
    after = set(data["after"])
    for kind in ("filter", "test", "action"):
        for name in plugin_files(kind):
            assert "ansible_collections.stacktune.gpu.plugins.%s.%s" % (kind, name) in after, (kind, name)
    # and what they import: the gate's code behind the perf_gate filter
    assert any(m.startswith("ansible_collections.stacktune.gpu.plugins.module_utils.gate.") for m in after)
    assert data["loaded"] == ["stacktune.gpu.layer_name", "stacktune.gpu.cpulist"] + [
        "stacktune.gpu." + name for name in _preload.ACTIONS
    ]
    assert data["again"] == data["loaded"]
