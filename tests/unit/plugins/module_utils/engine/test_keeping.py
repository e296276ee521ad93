"""The one rule every keep passes through (engine/keeping.py): a change a running program sees
stays on a host only after a trial said keep; a keep without a trial names why none could
measure it, and one that cannot hold is refused with the layer put back first. On a real file
tree (the fakeroot fixture)."""

import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import keeping
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError

LIVE = [{"kind": "sysctl", "key": "vm.swappiness", "value": 10}]
LATER = [{"kind": "file", "key": "/etc/security/limits.d/60-stacktune-memlock.conf", "value": "* soft memlock -1\n"}]
AT_START = [{"kind": "file", "key": "/etc/nccl.conf", "value": "NCCL_SOCKET_IFNAME=^lo\n"}]


def engine(root, layer):
    return Engine(Context(layer, root=str(root), run_command=None), open_journal("/var/lib/stacktune", str(root)))


def read(root, path):
    with open(os.path.join(str(root), path.lstrip("/"))) as handle:
        return handle.read()


@pytest.mark.parametrize(
    "decision",
    [
        {"decision": "keep", "basis": "gain"},
        {"decision": "keep", "basis": "no_harm"},
        {"decision": "keep", "basis": "unmeasured", "unmeasured": "gate_off"},
        {"decision": "keep", "basis": "unmeasured", "unmeasured": "no_workload"},
    ],
)
def test_a_live_change_is_kept_after_a_trial_or_by_the_users_choice(fakeroot, decision):
    engine(fakeroot, "kernel").apply(LIVE, "run1")
    result = engine(fakeroot, "kernel").keep("run1", decision)
    assert result["layer_state"] == "kept" and read(fakeroot, "/proc/sys/vm/swappiness") == "10\n"
    assert result["kept_as"] == keeping.words(decision)


@pytest.mark.parametrize(
    "decision,words",
    [
        (None, "a keep must say why the layer stays"),
        ({"decision": "keep"}, "a keep must say why the layer stays"),
        ({"decision": "keep", "basis": "unmeasured"}, "a keep without a trial must name why"),
        ({"decision": "keep", "basis": "unmeasured", "unmeasured": "seen_later"}, "sysctl:vm.swappiness"),
        ({"decision": "keep", "basis": "unmeasured", "unmeasured": "not_used"}, "no trial measured it"),
        ({"decision": "keep", "basis": "unmeasured", "unmeasured": "nothing_changed"}, "cannot hold"),
    ],
)
def test_a_live_change_kept_without_a_trial_is_refused_and_put_back(fakeroot, decision, words):
    before = read(fakeroot, "/proc/sys/vm/swappiness")
    engine(fakeroot, "kernel").apply(LIVE, "run1")
    with pytest.raises(SpecError) as err:
        engine(fakeroot, "kernel").keep("run1", decision)
    assert words in str(err.value) and str(err.value).endswith("It was put back to its snapshot")
    # restore first: the live value and the drop-in are gone before the refusal is said
    assert read(fakeroot, "/proc/sys/vm/swappiness") == before
    assert not os.path.exists(os.path.join(str(fakeroot), "etc/sysctl.d/60-stacktune-kernel.conf"))
    assert engine(fakeroot, "kernel").load("kernel")["state"] in ("rolled_back", "restored")


@pytest.mark.parametrize(
    "specs,why",
    [(LATER, "seen_later"), (AT_START, "not_used"), (AT_START, "no_workload"), (LATER, "nothing_changed")],
)
def test_a_change_no_running_program_sees_may_be_kept_unmeasured(fakeroot, specs, why):
    engine(fakeroot, "memory").apply(specs, "run1")
    decision = {"decision": "keep", "basis": "unmeasured", "unmeasured": why}
    result = engine(fakeroot, "memory").keep("run1", decision)
    assert result["layer_state"] == "kept"
    assert result["kept_as"].startswith("kept (not measured: ")


def test_a_layer_kept_before_keeps_its_decision_without_a_new_one(fakeroot):
    # a second run that changed nothing leaves a kept layer kept: no new keep to check
    engine(fakeroot, "kernel").apply(LIVE, "run1")
    engine(fakeroot, "kernel").keep("run1", {"decision": "keep", "basis": "gain"})
    engine(fakeroot, "kernel").apply(LIVE, "run2")
    again = engine(fakeroot, "kernel").keep("run2", None)
    assert again["layer_state"] == "kept" and again["kept_as"] == "kept (measured: helps)"


def test_the_words_of_each_basis():
    assert keeping.words({"basis": "gain"}) == "kept (measured: helps)"
    assert keeping.words({"basis": "no_harm"}) == "kept (measured: no harm)"
    assert keeping.words({"basis": "unmeasured", "unmeasured": "seen_later"}) == (
        "kept (not measured: every change takes effect at the next login or boot)"
    )
    assert keeping.words(None) == "kept"
