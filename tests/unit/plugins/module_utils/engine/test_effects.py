"""When a newly started process sees a change (the rows' ``effect``), and the gate's use of it.

The engine runs on a real file tree (``fakeroot``); the gate's part is pure logic. A layer
whose every change is seen only at the next login or boot cannot be seen by a block, so the
gate does not measure it (``changes_seen_later``).
"""

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.wording import changes_seen_later, unseen_reason

MEMLOCK = "* soft memlock unlimited\n* hard memlock unlimited\n"
LIMITS = {"kind": "file", "key": "/etc/security/limits.d/60-stacktune-memlock.conf", "value": MEMLOCK}
SWAPPINESS = {"kind": "sysctl", "key": "vm.swappiness", "value": "10"}
ASPM_ARG = {"kind": "kernel_arg", "key": "pcie_aspm", "value": "off"}
NCCL_CONF = {"kind": "file", "key": "/etc/nccl.conf", "value": "NCCL_SOCKET_IFNAME=^lo\n"}
# the fake tree cannot remount: /dev/shm's size is persisted in fstab only ("unsupported")
SHM = {"kind": "mount", "key": "/dev/shm", "option": "size", "value": "64G"}


def engine(root, layer, check=False):
    return Engine(
        Context(layer, root=str(root), run_command=None),
        open_journal("/var/lib/stacktune", str(root)),
        check_mode=check,
    )


def effects(result):
    return {r["id"]: r.get("effect") for r in result["settings"]}


@pytest.mark.parametrize(
    "specs, want",
    [
        ([SWAPPINESS], {"sysctl:vm.swappiness": "now"}),
        ([NCCL_CONF], {"file:/etc/nccl.conf": "now"}),
        ([LIMITS], {"file:/etc/security/limits.d/60-stacktune-memlock.conf": "next_login"}),
        ([ASPM_ARG], {"kernel_arg:pcie_aspm": "next_boot"}),
        ([SHM], {"mount:/dev/shm:size": "next_boot"}),
        # the layer's policy knows better than the kind: a file its reader takes at login
        ([dict(NCCL_CONF, takes_effect="next_login")], {"file:/etc/nccl.conf": "next_login"}),
    ],
)
def test_each_written_row_says_when_a_new_process_sees_it(fakeroot, specs, want):
    predicted = engine(fakeroot, "layer", check=True).apply(specs, "check")
    real = engine(fakeroot, "layer").apply(specs, "run1")
    assert effects(real) == want
    assert effects(predicted) == want, "check mode predicts the real run's effects"
    again = engine(fakeroot, "layer").apply(specs, "run2")
    assert effects(again) == dict.fromkeys(want), "nothing written: no effect"


def test_a_live_value_already_right_is_only_persisted(fakeroot):
    (fakeroot / "proc/sys/vm/swappiness").write_text("10\n")
    row = engine(fakeroot, "kernel").apply([SWAPPINESS], "run1")["settings"][0]
    assert row["changed"] is True  # the drop-in was written
    assert row["effect"] == "next_boot"


def test_takes_effect_is_checked_and_named(fakeroot, hash_tree):
    before = hash_tree(fakeroot)
    bad = dict(NCCL_CONF, takes_effect="tomorrow", var="nccl_conf_path")
    with pytest.raises(SpecError, match=r"nccl_conf_path: settings\[0\]\.takes_effect must be one of now, next_login"):
        engine(fakeroot, "nccl").apply([bad], "run1")
    assert hash_tree(fakeroot) == before


def rows(*pairs):
    return [{"id": sid, "changed": True, "effect": effect} for sid, effect in pairs]


@pytest.mark.parametrize(
    "changes, later",
    [
        # the memory layer on the one-H200 host: /dev/shm already large, only memlock written
        (
            rows(("file:/etc/security/limits.d/60-stacktune-memlock.conf", "next_login")),
            [("file:/etc/security/limits.d/60-stacktune-memlock.conf", "next_login")],
        ),
        (
            rows(("kernel_arg:pcie_aspm", "next_boot"), ("sysctl:vm.swappiness", "next_boot")),
            [("kernel_arg:pcie_aspm", "next_boot"), ("sysctl:vm.swappiness", "next_boot")],
        ),
        # one change seen now is enough to measure the layer
        (rows(("kernel_arg:pcie_aspm", "next_boot"), ("sysctl:vm.swappiness", "now")), None),
        # rows without an effect (written by another flow) and an empty list: measured
        ([{"id": "x", "changed": True}], None),
        ([], None),
        (None, None),
        # rows not written do not count
        ([{"id": "x", "changed": False, "effect": None}], None),
    ],
)
def test_a_layer_is_measured_only_when_a_change_is_seen_now(changes, later):
    assert changes_seen_later(changes) == later


def test_the_reason_names_every_change_and_when():
    words = unseen_reason(
        [("file:/etc/security/limits.d/60-stacktune-memlock.conf", "next_login"), ("kernel_arg:x", "next_boot")]
    )
    assert "file:/etc/security/limits.d/60-stacktune-memlock.conf at the next login" in words
    assert "kernel_arg:x at the next boot" in words
    assert words.startswith("nothing a block started now can see changed")
