"""The engine's switch to a candidate of a search (``Engine.switch``), on a real file tree: the
candidate in place, the snapshot of the layer's first apply kept, and a journal that says
"candidate <v> in place for the search" - never that a run stopped before the gate decided."""

import json
import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError


def engine(root, check=False):
    ctx = Context("memory", root=str(root), run_command=None)
    return Engine(ctx, open_journal("/var/lib/stacktune", str(root)), check_mode=check)


def swappiness(value):
    return [{"kind": "sysctl", "key": "vm.swappiness", "value": value}]


def read(root, path):
    with open(os.path.join(str(root), path.lstrip("/"))) as handle:
        return handle.read()


def events(root):
    with open(os.path.join(str(root), "var/lib/stacktune/events.jsonl")) as handle:
        return [json.loads(line) for line in handle]


def record(root):
    return json.loads(read(root, "/var/lib/stacktune/layers/memory.json"))


def test_switch_puts_each_candidate_in_place_and_journals_it(fakeroot, hash_tree):
    before = hash_tree(fakeroot)
    engine(fakeroot).apply(swappiness("30"), "run1")
    engine(fakeroot).switch(swappiness("10"), "run1", 10)
    assert read(fakeroot, "/proc/sys/vm/swappiness") == "10\n"
    assert "vm.swappiness = 10\n" in read(fakeroot, "/etc/sysctl.d/60-stacktune-memory.conf")
    engine(fakeroot).suspend("run1")  # the host's own value, as the search's host arm
    assert read(fakeroot, "/proc/sys/vm/swappiness") == "60\n"
    result = engine(fakeroot).switch(swappiness("1"), "run1", 1)
    assert result["action"] == "switched"
    assert result["layer_state"] == "applied"
    assert "candidate 1 in place for the search" in result["notes"]
    assert read(fakeroot, "/proc/sys/vm/swappiness") == "1\n"
    entry = record(fakeroot)
    assert entry["state"] == "applied"
    assert [s["value"] for s in entry["settings"]] == ["1"]
    switches = [h for h in entry["history"] if h["action"] == "switch"]
    assert [(h["value"], h["note"]) for h in switches] == [
        (10, "candidate 10 in place for the search"),
        (1, "candidate 1 in place for the search"),
    ]
    # nothing reads as an interruption: no recover record, no "stopped before the gate decided"
    assert not any(h["action"] in ("recover", "interrupted") for h in entry["history"])
    assert "interrupted" not in entry
    text = read(fakeroot, "/var/lib/stacktune/events.jsonl")
    assert "stopped before the gate decided" not in text
    assert [e["value"] for e in events(fakeroot) if e["action"] == "switch"] == [10, 1]
    # the snapshot is still the one before the layer's first apply: a rollback restores the host
    engine(fakeroot).restore("snapshot", "run1", {"decision": "rollback"})
    assert hash_tree(fakeroot) == before
    assert read(fakeroot, "/proc/sys/vm/swappiness") == "60\n"
    assert record(fakeroot)["state"] == "rolled_back"
    assert [s["value"] for s in record(fakeroot)["rejected"]] == ["1"]


def test_switch_to_the_candidate_in_place_changes_nothing(fakeroot):
    engine(fakeroot).apply(swappiness("30"), "run1")
    history = len(record(fakeroot)["history"])
    result = engine(fakeroot).switch(swappiness("30"), "run1", 30)
    assert result["changed"] is False
    assert result["notes"][-1] == "candidate 30 is in place already"
    assert len(record(fakeroot)["history"]) == history


def test_switch_in_check_mode_changes_nothing(fakeroot, hash_tree):
    engine(fakeroot).apply(swappiness("30"), "run1")
    before = hash_tree(fakeroot)
    result = engine(fakeroot, check=True).switch(swappiness("10"), "run1", 10)
    assert result["changed"] is True
    assert hash_tree(fakeroot) == before


def test_switch_without_a_layer_applied_in_the_run_is_refused(fakeroot, hash_tree):
    before = hash_tree(fakeroot)
    with pytest.raises(SpecError, match="no settings applied in this run to switch to candidate 10"):
        engine(fakeroot).switch(swappiness("10"), "run1", 10)
    assert hash_tree(fakeroot) == before
    engine(fakeroot).apply(swappiness("30"), "run1")
    engine(fakeroot).keep("run1", {"decision": "keep", "basis": "gain"})
    with pytest.raises(SpecError, match="no settings applied"):
        engine(fakeroot).switch(swappiness("10"), "run1", 10)
    assert read(fakeroot, "/proc/sys/vm/swappiness") == "30\n"


def test_switch_to_a_candidate_without_settings_is_refused(fakeroot):
    engine(fakeroot).apply(swappiness("30"), "run1")
    with pytest.raises(SpecError, match="candidate 10 has no settings"):
        engine(fakeroot).switch([], "run1", 10)
    assert read(fakeroot, "/proc/sys/vm/swappiness") == "30\n"
