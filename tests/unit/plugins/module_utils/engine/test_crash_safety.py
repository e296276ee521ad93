"""Crash safety of the settings engine: a process SIGKILLed at every named point.

Each case runs the engine in a child process on a real file tree (kernel interfaces as
plain files, so live writes really happen) with STACKTUNE_TEST_KILL_AT set; the child
kills itself with SIGKILL at that point. The parent then proves that (a) a re-run ends
in exactly the state an uninterrupted run leaves, and (b) a restore to the original
gives back the pre-stacktune tree byte for byte (modes included).
"""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context

COLLECTIONS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "collections")

# every kind that has a live part or a unit here: sysctl, sysfs, irq, boot arg, file, env_var
SETTINGS = {
    "kernel": [
        {"kind": "sysctl", "key": "vm.swappiness", "value": "10"},
        {"kind": "sysctl", "key": "kernel.numa_balancing", "value": "0"},
        {"kind": "sysfs", "key": "/sys/kernel/mm/transparent_hugepage/enabled", "value": "never"},
        {"kind": "kernel_arg", "key": "pcie_aspm", "value": "off"},
    ],
    "numa_irq": [
        {"kind": "irq_affinity", "device": "0000:3b:00.0", "value": "8-11"},
        {"kind": "env_var", "path": "/etc/default/irqbalance", "key": "IRQBALANCE_ARGS", "value": "--banirq=41"},
    ],
    "nccl": [{"kind": "file", "key": "/etc/nccl.conf", "value": "NCCL_SOCKET_IFNAME=^lo,docker\n"}],
}
APPLY_POINTS = [
    "after_journal_write_ahead",
    "mid_unit_write",
    "after_units_written",
    "after_live_written",
    "before_journal_final",
]
RESTORE_POINTS = ["after_units_restored", "before_restore_journal"]

CHILD = """
import json, sys
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context
root, layer, action, run_id = sys.argv[1:5]
engine = Engine(Context(layer, root=root), open_journal("/var/lib/stacktune", root))
if action == "apply":
    engine.apply(json.loads(sys.argv[5]), run_id)
else:
    engine.restore(action, run_id)
print("not killed")
"""


def engine(root, layer):
    return Engine(Context(layer, root=str(root)), open_journal("/var/lib/stacktune", str(root)))


def run_child(root, layer, action, run_id, kill_at):
    env = dict(os.environ, STACKTUNE_TEST_KILL_AT=kill_at, PYTHONPATH=os.path.abspath(COLLECTIONS))
    argv = [sys.executable, "-c", CHILD, str(root), layer, action, run_id]
    if action == "apply":
        argv.append(json.dumps(SETTINGS[layer]))
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)


def journal_state(root, layer):
    return open_journal("/var/lib/stacktune", str(root)).load(layer)


def stray_temp_files(root):
    return [
        os.path.join(base, name) for base, _dirs, files in os.walk(str(root)) for name in files if ".stacktune-" in name
    ]


def tuned_reference(fakeroot, tmp_path, hash_tree):
    reference = tmp_path / "reference"
    shutil.copytree(str(fakeroot), str(reference))
    for layer, settings in SETTINGS.items():
        engine(reference, layer).apply(settings, "run1")
    return hash_tree(reference)


@pytest.mark.parametrize("layer", sorted(SETTINGS))
@pytest.mark.parametrize("point", APPLY_POINTS)
def test_killed_apply_reruns_to_the_same_state_and_rolls_back(fakeroot, tmp_path, hash_tree, point, layer):
    pristine = hash_tree(fakeroot)
    tuned = tuned_reference(fakeroot, tmp_path, hash_tree)
    for other, settings in SETTINGS.items():
        if other != layer:
            engine(fakeroot, other).apply(settings, "run1")

    child = run_child(fakeroot, layer, "apply", "run1", point + "@" + layer)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
    assert journal_state(fakeroot, layer)["state"] == "applying"

    again = engine(fakeroot, layer).apply(SETTINGS[layer], "run2")
    # the re-run reports the layer changed, so the gate measures it as in an uninterrupted run
    assert again["changed"] and again["layer_state"] == "applied"
    assert hash_tree(fakeroot) == tuned
    assert stray_temp_files(fakeroot) == []

    for other in SETTINGS:
        engine(fakeroot, other).restore("original", "rollback")
    assert hash_tree(fakeroot) == pristine
    assert stray_temp_files(fakeroot) == []


@pytest.mark.parametrize("point", APPLY_POINTS)
def test_rollback_straight_from_a_killed_apply(fakeroot, hash_tree, point):
    pristine = hash_tree(fakeroot)
    child = run_child(fakeroot, "kernel", "apply", "run1", point)
    assert child.returncode == -signal.SIGKILL
    result = engine(fakeroot, "kernel").restore("original", "rollback")
    assert result["layer_state"] == "restored"
    assert hash_tree(fakeroot) == pristine
    assert stray_temp_files(fakeroot) == []


@pytest.mark.parametrize("to", ["original", "snapshot"])
@pytest.mark.parametrize(
    "point,layer",
    [(p, layer) for p in RESTORE_POINTS for layer in ("kernel", "numa_irq")] + [("mid_unit_write", "numa_irq")],
)
def test_killed_restore_is_simply_run_again(fakeroot, hash_tree, point, layer, to):
    """Rollback (to the original) and the gate's restore (to the snapshot), killed halfway."""
    pristine = hash_tree(fakeroot)
    for each, settings in SETTINGS.items():
        engine(fakeroot, each).apply(settings, "run1")
    child = run_child(fakeroot, layer, to, "rollback", point)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
    engine(fakeroot, layer).restore(to, "rollback")
    second = engine(fakeroot, layer).restore(to, "rollback")
    assert not second["changed"]
    for each in SETTINGS:
        engine(fakeroot, each).restore("original", "rollback")
    assert hash_tree(fakeroot) == pristine


def test_a_layer_left_applied_by_a_killed_run_is_recovered_before_the_next_run(fakeroot, hash_tree):
    """Killed while measuring: the layer is applied but was never judged by the gate."""
    pristine = hash_tree(fakeroot)
    engine(fakeroot, "kernel").apply(SETTINGS["kernel"], "run1")
    # the same run is not "interrupted": nothing to recover
    assert not engine(fakeroot, "kernel").recover("run1")["changed"]
    recovered = engine(fakeroot, "kernel").recover("run2")
    assert recovered["changed"] and recovered["layer_state"] == "new"
    assert hash_tree(fakeroot) == pristine
    # the next run applies afresh (and is measured), and nothing was marked rejected
    again = engine(fakeroot, "kernel").apply(SETTINGS["kernel"], "run2")
    assert again["changed"] and journal_state(fakeroot, "kernel").get("rejected") is None


def test_recovery_keeps_what_an_earlier_run_kept(fakeroot, tmp_path, hash_tree):
    engine(fakeroot, "kernel").apply(SETTINGS["kernel"][:1], "run1")
    engine(fakeroot, "kernel").keep("run1", {"decision": "keep", "basis": "gain"})
    kept = hash_tree(fakeroot)
    engine(fakeroot, "kernel").apply(SETTINGS["kernel"], "run2")
    engine(fakeroot, "kernel").recover("run3")
    entry = journal_state(fakeroot, "kernel")
    assert entry["state"] == "kept"
    assert [s["id"] for s in entry["settings"]] == ["sysctl:vm.swappiness"]
    assert hash_tree(fakeroot) == kept


def test_check_mode_predicts_the_recovery_of_an_interrupted_apply(fakeroot):
    child = run_child(fakeroot, "kernel", "apply", "run1", "before_journal_final")
    assert child.returncode == -signal.SIGKILL
    predicted = Engine(
        Context("kernel", root=str(fakeroot)),
        open_journal("/var/lib/stacktune", str(fakeroot)),
        check_mode=True,
    ).apply(SETTINGS["kernel"], "run2")
    real = engine(fakeroot, "kernel").apply(SETTINGS["kernel"], "run2")
    assert sorted(r["id"] for r in predicted["settings"] if r["changed"]) == sorted(
        r["id"] for r in real["settings"] if r["changed"]
    )
    assert real["changed"]


def test_stray_temporary_file_is_swept_by_the_next_write(fakeroot):
    child = run_child(fakeroot, "nccl", "apply", "run1", "mid_unit_write")
    assert child.returncode == -signal.SIGKILL
    assert len(stray_temp_files(fakeroot)) == 1
    engine(fakeroot, "nccl").apply(SETTINGS["nccl"], "run2")
    assert stray_temp_files(fakeroot) == []


def test_hook_is_inert_without_its_variable(fakeroot, monkeypatch):
    monkeypatch.delenv("STACKTUNE_TEST_KILL_AT", raising=False)
    assert engine(fakeroot, "kernel").apply(SETTINGS["kernel"], "run1")["layer_state"] == "applied"
    monkeypatch.setenv("STACKTUNE_TEST_KILL_AT", "after_units_written@nccl")
    assert engine(fakeroot, "kernel").apply(SETTINGS["kernel"], "run2")["layer_state"] == "applied"
