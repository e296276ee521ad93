"""Faults every fleet meets, met by the settings engine with the real fault where one can be made
here: a read-only configuration directory (a read-only bind mount, EROFS), a journal whose disk
fills between two writes (an injected ENOSPC: the write-ahead and the final record are too close
together for a real full disk), a drift correction of a layer the gate never judged.

Each case proves the host is left as found or as journaled, with words that match.
"""

import errno
import os
import subprocess

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import Journal, open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError

JOURNAL = "/var/lib/stacktune"
KERNEL = [
    {"kind": "sysctl", "key": "vm.swappiness", "value": "10"},
    {"kind": "sysctl", "key": "kernel.numa_balancing", "value": "0"},
]


def engine(root, layer="kernel"):
    return Engine(Context(layer, root=str(root)), open_journal(JOURNAL, str(root)))


def live(root, name):
    with open(os.path.join(str(root), "proc/sys", name)) as handle:
        return handle.read().strip()


@pytest.fixture
def read_only(tmp_path):
    """Make a directory read-only with a read-only bind mount (root only); undone afterwards."""
    mounted = []

    def make(path):
        os.makedirs(str(path), exist_ok=True)
        if subprocess.run(["mount", "--bind", str(path), str(path)], check=False).returncode:
            pytest.skip("a bind mount needs root")
        mounted.append(str(path))
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)

    yield make
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", path], check=False)


def test_a_failed_persist_puts_the_live_values_back_and_says_so(fakeroot, read_only, hash_tree):
    before = hash_tree(fakeroot)
    read_only(fakeroot / "etc/sysctl.d")
    with pytest.raises(SpecError) as caught:
        engine(fakeroot).apply(KERNEL, "run-a")
    msg = str(caught.value)
    assert "persisting the layer's settings failed" in msg and "Read-only file system" in msg
    assert "every change of this apply was put back" in msg and "the journal says restored" in msg
    assert live(fakeroot, "vm/swappiness") == "60" and live(fakeroot, "kernel/numa_balancing") == "1"
    assert hash_tree(fakeroot) == before
    entry = open_journal(JOURNAL, str(fakeroot)).load("kernel")
    assert entry["state"] == "restored" and entry["settings"] == [] and entry["snapshot"] is None
    assert entry["history"][-1]["action"] == "apply_failed"


def test_a_failed_persist_over_a_kept_layer_goes_back_to_the_kept_settings(fakeroot, read_only, hash_tree):
    eng = engine(fakeroot)
    eng.apply(KERNEL[:1], "run-a")
    eng.keep("run-a", {"decision": "keep", "basis": "gain"})
    kept = hash_tree(fakeroot)
    read_only(fakeroot / "etc/sysctl.d")
    with pytest.raises(SpecError, match="every change of this apply was put back.*the journal says kept"):
        engine(fakeroot).apply(KERNEL, "run-b")
    assert hash_tree(fakeroot) == kept
    entry = open_journal(JOURNAL, str(fakeroot)).load("kernel")
    assert entry["state"] == "kept" and [s["key"] for s in entry["settings"]] == ["vm.swappiness"]


def test_a_full_disk_at_the_final_record_puts_the_host_back_and_names_the_full_disk(fakeroot, monkeypatch, hash_tree):
    before = hash_tree(fakeroot)
    saves = []
    real_save = Journal.save

    def save(self, entry):
        saves.append(entry["state"])
        if len(saves) == 2:  # the write-ahead went through; the final record meets a full disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(self, entry)

    monkeypatch.setattr(Journal, "save", save)
    with pytest.raises(SpecError) as caught:
        engine(fakeroot).apply(KERNEL, "run-a")
    msg = str(caught.value)
    assert "writing the journal's final record failed" in msg and "No space left on device" in msg
    assert "every change of this apply was put back" in msg
    assert hash_tree(fakeroot) == before and live(fakeroot, "vm/swappiness") == "60"
    assert open_journal(JOURNAL, str(fakeroot)).load("kernel")["state"] == "restored"


def test_a_journal_that_cannot_be_written_after_the_put_back_says_so(fakeroot, monkeypatch, read_only, hash_tree):
    before = hash_tree(fakeroot)
    saves = []
    real_save = Journal.save

    def save(self, entry):
        saves.append(entry["state"])
        if len(saves) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(self, entry)

    monkeypatch.setattr(Journal, "save", save)
    read_only(fakeroot / "etc/sysctl.d")
    with pytest.raises(SpecError, match="put back.*journal could not be written .*No space left.*still says applying"):
        engine(fakeroot).apply(KERNEL, "run-a")
    assert hash_tree(fakeroot) == before
    monkeypatch.undo()
    # the next run finds the layer applying and puts it back again: nothing left to do
    assert open_journal(JOURNAL, str(fakeroot)).load("kernel")["state"] == "applying"
    engine(fakeroot).recover("run-b", states=("applying",))
    assert hash_tree(fakeroot) == before


def test_check_mode_predicts_a_retry_of_rejected_settings_as_the_run_does_it(fakeroot, hash_tree):
    eng = engine(fakeroot)
    eng.apply(KERNEL, "run-a")
    eng.restore("snapshot", "run-a", {"decision": "rollback"})
    pristine = hash_tree(fakeroot)

    def retried(check_mode):
        journal = open_journal(JOURNAL, str(fakeroot))
        return Engine(Context("kernel", root=str(fakeroot)), journal, check_mode=check_mode, retry_rejected=True)

    plan = retried(True).apply(KERNEL, "run-b")
    assert hash_tree(fakeroot) == pristine
    real = retried(False).apply(KERNEL, "run-b")
    assert plan["changed"] is real["changed"] is True
    assert [(r["id"], r["status"]) for r in plan["settings"]] == [(r["id"], r["status"]) for r in real["settings"]]
    assert not any("not re-applied" in n for n in plan["notes"])


def test_the_plan_task_passes_what_the_apply_task_passes():
    """roles/layer: the plan (check mode) is the apply's module call, retry_rejected included."""
    import yaml

    tasks = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "roles", "layer", "tasks")
    with open(os.path.join(tasks, "plan.yml")) as handle:
        plan = yaml.safe_load(handle)[0]
    with open(os.path.join(tasks, "apply.yml")) as handle:
        apply = yaml.safe_load(handle)[0]
    assert plan["check_mode"] is True
    assert plan["stacktune.gpu.host_settings"] == apply["stacktune.gpu.host_settings"]


def test_a_drift_correction_puts_an_undecided_layer_back_never_re_applies_it(fakeroot, hash_tree):
    """A run died mid-measure (its journal's disk full): the layer is applied, undecided."""
    pristine = hash_tree(fakeroot)
    engine(fakeroot).apply(KERNEL, "run-a")
    with open(os.path.join(str(fakeroot), "proc/sys/vm/swappiness"), "w") as handle:
        handle.write("30\n")  # and something moved it since: drift
    predicted = Engine(Context("kernel", root=str(fakeroot)), open_journal(JOURNAL, str(fakeroot)), check_mode=True)
    plan = predicted.apply(None, "drift-1", from_journal=True)
    assert plan["action"] == "recovered" and plan["changed"]
    fixed = engine(fakeroot).apply(None, "drift-1", from_journal=True)
    assert fixed["action"] == "recovered" and "never judged by a gate" in " ".join(fixed["notes"])
    assert hash_tree(fakeroot) == pristine and live(fakeroot, "vm/swappiness") == "60"
    assert open_journal(JOURNAL, str(fakeroot)).load("kernel")["state"] == "new"


def test_a_drift_correction_re_applies_a_kept_layer(fakeroot, hash_tree):
    eng = engine(fakeroot)
    eng.apply(KERNEL, "run-a")
    eng.keep("run-a", {"decision": "keep", "basis": "gain"})
    kept = hash_tree(fakeroot)
    with open(os.path.join(str(fakeroot), "proc/sys/vm/swappiness"), "w") as handle:
        handle.write("30\n")
    engine(fakeroot).apply(None, "drift-1", from_journal=True)
    assert hash_tree(fakeroot) == kept
    assert open_journal(JOURNAL, str(fakeroot)).load("kernel")["state"] == "kept"


@pytest.mark.parametrize("blocked", ["etc/sysctl.d", "etc/tmpfiles.d"])
def test_a_restore_that_cannot_write_a_file_changes_nothing_and_says_so(fakeroot, read_only, hash_tree, blocked):
    """Whichever of the layer's two files cannot be written, the other is left (or put back)
    as the journal has it and no live value moves: a rollback run again once it is writable ends it."""
    pristine = hash_tree(fakeroot)
    settings = KERNEL + [{"kind": "sysfs", "key": "/sys/kernel/mm/transparent_hugepage/enabled", "value": "never"}]
    engine(fakeroot).apply(settings, "run-a")
    engine(fakeroot).keep("run-a", {"decision": "keep", "basis": "gain"})
    applied = hash_tree(fakeroot)
    read_only(fakeroot / blocked)
    with pytest.raises(SpecError) as caught:
        engine(fakeroot).restore("original", "rollback-1")
    msg = str(caught.value)
    assert "could not put back /%s/" % blocked in msg and "Read-only file system" in msg
    assert "nothing was changed: the host is as the journal says (layer kernel kept)" in msg
    assert hash_tree(fakeroot) == applied and live(fakeroot, "vm/swappiness") == "10"
    assert open_journal(JOURNAL, str(fakeroot)).load("kernel")["state"] == "kept"
    subprocess.run(["umount", "-l", str(fakeroot / blocked)], check=True)
    engine(fakeroot).restore("original", "rollback-2")
    assert hash_tree(fakeroot) == pristine


def test_a_switch_off_whose_journal_write_fails_says_what_the_host_holds(fakeroot, monkeypatch, hash_tree):
    pristine = hash_tree(fakeroot)
    engine(fakeroot).apply(KERNEL, "run-a")

    def full(self, entry):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Journal, "save", full)
    with pytest.raises(
        SpecError, match="layer kernel is off on the host .*No space left on device.*still says applied"
    ):
        engine(fakeroot).suspend("run-a")
    monkeypatch.undo()
    assert hash_tree(fakeroot) == pristine
    assert open_journal(JOURNAL, str(fakeroot)).load("kernel")["state"] == "applied"
    # the journal says applied: a drift fix puts it back (a no-op here), never re-applies it
    engine(fakeroot).apply(None, "drift-1", from_journal=True)
    assert hash_tree(fakeroot) == pristine
