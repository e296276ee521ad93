"""Every route to a kept layer carries a trial's verdict or a named reason no trial could measure
it (engine/keeping.py). Walks the role's tasks that keep a layer and the Python calls that do,
and the gate's decisions on a layer it does not measure."""

import ast
import itertools
import os

import pytest
import yaml

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import keeping
from ansible_collections.stacktune.gpu.plugins.module_utils.gate import trial_loop

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from tasks(node.get(key))


def keep_tasks():
    for base, _dirs, files in os.walk(os.path.join(REPO, "roles")):
        for name in files:
            if not name.endswith(".yml") or os.sep + "tasks" not in base:
                continue
            with open(os.path.join(base, name)) as handle:
                doc = yaml.safe_load(handle)
            for task in tasks(doc):
                for module in ("stacktune.gpu.host_settings", "host_settings"):
                    args = task.get(module)
                    if isinstance(args, dict) and args.get("state") == "kept":
                        yield os.path.relpath(os.path.join(base, name), REPO), task


def test_every_keep_task_says_why_the_layer_stays():
    found = list(keep_tasks())
    assert found, "no task keeps a layer: the walk found nothing to check"
    for path, task in found:
        decision = task["stacktune.gpu.host_settings"].get("decision") or {}
        assert decision.get("basis") in keeping.BASES, "%s: %s keeps without a basis" % (path, task.get("name"))
        if decision["basis"] == "unmeasured":
            assert decision.get("unmeasured"), "%s: %s keeps unmeasured without saying why" % (path, task["name"])


def _callee(node):
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def test_the_only_python_keeps_are_the_gates_finish_and_the_modules_call():
    """A keep from Python goes through TrialLoop.finish, which gives every keep its basis, and
    reaches the engine through the host_settings module's one call of Engine.keep."""
    engine_calls, keep_calls = [], []
    for base, _dirs, files in os.walk(os.path.join(REPO, "plugins")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(base, name)
            with open(path) as handle:
                tree = ast.parse(handle.read(), path)
            for fn in ast.walk(tree):
                if not isinstance(fn, ast.FunctionDef):
                    continue
                for node in ast.walk(fn):
                    if not isinstance(node, ast.Call):
                        continue
                    where = (os.path.relpath(path, REPO), fn.name)
                    first = node.args[0] if node.args else None
                    if (
                        _callee(node) in ("engine", "_engine")
                        and isinstance(first, ast.Constant)
                        and first.value == "kept"
                    ):
                        engine_calls.append(where)
                    if _callee(node) == "keep" and isinstance(node.func, ast.Attribute):
                        keep_calls.append(where)
    assert engine_calls == [("plugins/module_utils/gate/trial_loop.py", "finish")]
    assert keep_calls == [("plugins/modules/host_settings.py", "main")]


ROWS = {
    "live": {"id": "sysctl:vm.swappiness", "changed": True, "effect": "now", "seen_running": True},
    "at_start": {"id": "file:/etc/nccl.conf", "changed": True, "effect": "now", "seen_running": False},
    "later": {"id": "file:/etc/security/limits.d/x.conf", "changed": True, "effect": "next_login"},
}


@pytest.mark.parametrize(
    "rows,workloads,not_used,unmeasurable",
    list(
        itertools.product(
            [("live",), ("at_start",), ("later",), ("live", "at_start"), ("at_start", "later"), ("live", "later")],
            [[], ["command"]],
            ["", "the program does not use NCCL collectives (one GPU)"],
            ["keep", "rollback"],
        )
    ),
)
def test_every_keep_the_gate_makes_without_a_trial_names_a_reason_that_holds(rows, workloads, not_used, unmeasurable):
    changes = [ROWS[r] for r in rows]
    args = {
        "layer": "l",
        "workloads": workloads,
        "changes": changes,
        "not_used": not_used,
        "unmeasurable": unmeasurable,
    }
    decision = trial_loop.not_measured(args, workloads, {}, "improve")
    live = "live" in rows
    if decision is None:
        assert workloads, "a layer no workload runs for must be decided"
        return
    if decision["decision"] != "keep":
        assert unmeasurable == "rollback"
        return
    why = decision["unmeasured"]
    assert why in keeping.UNMEASURED
    # a live change is kept unmeasured only where no workload on the host can see it at all
    assert not live or why == "no_workload"
    moved = [ROWS["live"]["id"]] if live else []
    assert keeping.refusal(dict(decision, basis=trial_loop.keep_basis(decision)), moved) is None
