"""The settings engine on a real file tree: apply, check mode, idempotence, verify, restore."""

import json
import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError

KERNEL = [
    {"kind": "sysctl", "key": "vm.swappiness", "value": 10},
    {"kind": "sysctl", "key": "net.ipv4.tcp_rmem", "value": "4096 87380 16777216"},
    {"kind": "sysfs", "key": "/sys/kernel/mm/transparent_hugepage/enabled", "value": "never"},
    {"kind": "kernel_arg", "key": "pcie_aspm", "value": "off"},
]
NUMA = [{"kind": "irq_affinity", "device": "0000:3b:00.0", "value": "8-11,12-15"}]
FILES = [
    {"kind": "file", "key": "/etc/nccl.conf", "value": "NCCL_SOCKET_IFNAME=^lo,docker\n"},
    {"kind": "env_var", "path": "/etc/default/irqbalance", "key": "IRQBALANCE_ARGS", "value": "--banirq=41"},
    {"kind": "mount", "key": "/dev/shm", "option": "size", "value": "64G"},
]


def engine(root, layer, check=False):
    ctx = Context(layer, root=str(root), run_command=None)
    return Engine(ctx, open_journal("/var/lib/stacktune", str(root)), check_mode=check)


def read(root, path):
    with open(os.path.join(str(root), path.lstrip("/"))) as handle:
        return handle.read()


def changed_ids(result):
    return sorted(r["id"] for r in result["settings"] if r["changed"])


def test_apply_writes_live_and_persisted(fakeroot):
    result = engine(fakeroot, "kernel").apply(KERNEL, "run1")
    assert read(fakeroot, "/proc/sys/vm/swappiness") == "10\n"
    assert read(fakeroot, "/sys/kernel/mm/transparent_hugepage/enabled") == "never\n"
    dropin = read(fakeroot, "/etc/sysctl.d/60-stacktune-kernel.conf")
    assert "vm.swappiness = 10\n" in dropin
    assert "net.ipv4.tcp_rmem = 4096 87380 16777216\n" in dropin
    assert "w /sys/kernel/mm/transparent_hugepage/enabled - - - - never" in read(
        fakeroot, "/etc/tmpfiles.d/stacktune-kernel.conf"
    )
    assert 'pcie_aspm=off"' in read(fakeroot, "/etc/default/grub.d/60-stacktune-kernel.cfg")
    status = {r["id"]: r["status"] for r in result["settings"]}
    assert status["sysctl:vm.swappiness"] == "changed"
    assert status["kernel_arg:pcie_aspm"] == "pending_reboot"
    assert result["pending_reboot"] == ["kernel_arg:pcie_aspm"]
    assert result["layer_state"] == "applied"


def test_second_apply_changes_nothing(fakeroot):
    engine(fakeroot, "kernel").apply(KERNEL, "run1")
    again = engine(fakeroot, "kernel").apply(KERNEL, "run2")
    assert again["changed"] is False
    assert changed_ids(again) == []


@pytest.mark.parametrize("layer,specs", [("kernel", KERNEL), ("numa_irq", NUMA), ("memory", FILES)])
def test_check_mode_predicts_the_real_run(fakeroot, hash_tree, layer, specs):
    before = hash_tree(fakeroot, exclude=())
    predicted = engine(fakeroot, layer, check=True).apply(specs, "check")
    assert hash_tree(fakeroot, exclude=()) == before, "check mode wrote something"
    real = engine(fakeroot, layer).apply(specs, "real")
    assert changed_ids(predicted) == changed_ids(real)
    assert {r["id"]: r["status"] for r in predicted["settings"]} == {r["id"]: r["status"] for r in real["settings"]}


def test_irq_device_expands_to_its_vectors(fakeroot):
    result = engine(fakeroot, "numa_irq").apply(NUMA, "run1")
    assert sorted(r["key"] for r in result["settings"]) == ["41", "42"]
    assert read(fakeroot, "/proc/irq/41/smp_affinity_list") == "8-15\n"
    assert read(fakeroot, "/proc/irq/40/smp_affinity_list") == "0-15\n"
    assert "w /proc/irq/42/smp_affinity_list - - - - 8-15" in read(fakeroot, "/etc/tmpfiles.d/stacktune-numa_irq.conf")


def test_files_lines_and_mounts(fakeroot):
    result = engine(fakeroot, "memory").apply(FILES, "run1")
    assert read(fakeroot, "/etc/nccl.conf") == "NCCL_SOCKET_IFNAME=^lo,docker\n"
    assert 'IRQBALANCE_ARGS="--banirq=41"' in read(fakeroot, "/etc/default/irqbalance")
    assert 'ENABLED="1"' in read(fakeroot, "/etc/default/irqbalance")
    assert "tmpfs /dev/shm tmpfs defaults,size=64G 0 0" in read(fakeroot, "/etc/fstab")
    shm = [r for r in result["settings"] if r["kind"] == "mount"][0]
    # live remount is not attempted under an alternative root; the fstab line is written
    assert shm["status"] == "unsupported"
    assert shm["reason"].startswith("persisted; live apply not possible here")
    assert shm["persisted"] == "64G"


def test_verify_reports_drift_of_live_and_persisted(fakeroot):
    engine(fakeroot, "kernel").apply(KERNEL, "run1")
    # a drift fix re-applies only what a gate kept
    engine(fakeroot, "kernel").keep("run1", {"decision": "keep", "basis": "gain"})
    clean = engine(fakeroot, "kernel").verify()
    assert clean["drift"] == []
    with open(os.path.join(str(fakeroot), "proc/sys/vm/swappiness"), "w") as handle:
        handle.write("60\n")
    dropin = os.path.join(str(fakeroot), "etc/tmpfiles.d/stacktune-kernel.conf")
    os.unlink(dropin)
    drifted = engine(fakeroot, "kernel").verify()
    assert sorted(drifted["drift"]) == ["sysctl:vm.swappiness", "sysfs:/sys/kernel/mm/transparent_hugepage/enabled"]
    fixed = engine(fakeroot, "kernel").apply(None, "fix", from_journal=True)
    assert sorted(changed_ids(fixed)) == sorted(drifted["drift"])
    assert engine(fakeroot, "kernel").verify()["drift"] == []


@pytest.mark.parametrize("layer,specs", [("kernel", KERNEL), ("numa_irq", NUMA), ("memory", FILES)])
def test_restore_original_is_byte_exact(fakeroot, hash_tree, layer, specs):
    pristine = hash_tree(fakeroot)
    engine(fakeroot, layer).apply(specs, "run1")
    assert hash_tree(fakeroot) != pristine
    engine(fakeroot, layer).restore("original", "rollback")
    assert hash_tree(fakeroot) == pristine
    for created in ("etc/sysctl.d", "etc/tmpfiles.d", "etc/default/grub.d", "etc/security/limits.d"):
        assert not os.path.exists(os.path.join(str(fakeroot), created)), "%s left behind" % created
    entry = open_journal("/var/lib/stacktune", str(fakeroot)).load(layer)
    assert entry["state"] == "restored"
    assert entry["settings"] == []


def test_gate_rollback_returns_to_the_previous_kept_state(fakeroot, hash_tree):
    first = [{"kind": "sysctl", "key": "vm.swappiness", "value": "10"}]
    engine(fakeroot, "kernel").apply(first, "run1")
    engine(fakeroot, "kernel").keep("run1", {"decision": "keep", "basis": "gain"})
    kept_state = hash_tree(fakeroot)
    second = first + [{"kind": "sysctl", "key": "vm.max_map_count", "value": "1048576"}]
    engine(fakeroot, "kernel").apply(second, "run2")
    assert read(fakeroot, "/proc/sys/vm/max_map_count") == "1048576\n"
    engine(fakeroot, "kernel").restore("snapshot", "run2", {"decision": "rollback"})
    assert hash_tree(fakeroot) == kept_state
    entry = open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")
    assert entry["state"] == "kept"
    assert [s["id"] for s in entry["settings"]] == ["sysctl:vm.swappiness"]


def test_rolled_back_layer_is_never_reapplied_by_drift_fix(fakeroot, hash_tree):
    pristine = hash_tree(fakeroot)
    engine(fakeroot, "kernel").apply(KERNEL, "run1")
    engine(fakeroot, "kernel").restore("snapshot", "run1", {"decision": "rollback"})
    assert hash_tree(fakeroot) == pristine
    fix = engine(fakeroot, "kernel").apply(None, "drift", from_journal=True)
    assert fix["changed"] is False
    assert hash_tree(fakeroot) == pristine


def test_removed_setting_goes_back_to_original(fakeroot):
    engine(fakeroot, "kernel").apply(KERNEL[:2], "run1")
    engine(fakeroot, "kernel").apply(KERNEL[1:2], "run2")
    assert read(fakeroot, "/proc/sys/vm/swappiness") == "60\n"
    assert "swappiness" not in read(fakeroot, "/etc/sysctl.d/60-stacktune-kernel.conf")


def test_interrupted_apply_can_still_be_restored(fakeroot, hash_tree, monkeypatch):
    pristine = hash_tree(fakeroot)
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds import sysctl as _kind_sysctl

    def boom(self, s, value, ctx):
        raise KeyboardInterrupt("killed between persist and live write")

    monkeypatch.setattr(_kind_sysctl.SysctlKind, "write_live", boom)
    with pytest.raises(KeyboardInterrupt):
        engine(fakeroot, "kernel").apply(KERNEL, "run1")
    monkeypatch.undo()
    journal = open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")
    assert journal["state"] == "applying"
    engine(fakeroot, "kernel").restore("original", "recover")
    assert hash_tree(fakeroot) == pristine


def test_journal_is_private(fakeroot):
    engine(fakeroot, "kernel").apply(KERNEL, "run1")
    base = os.path.join(str(fakeroot), "var/lib/stacktune")
    assert oct(os.stat(base).st_mode & 0o777) == "0o700"
    assert oct(os.stat(os.path.join(base, "layers/kernel.json")).st_mode & 0o777) == "0o600"
    assert oct(os.stat(os.path.join(base, "events.jsonl")).st_mode & 0o777) == "0o600"
    with open(os.path.join(base, "events.jsonl")) as handle:
        events = [json.loads(line) for line in handle]
    assert events[-1]["action"] == "apply"


@pytest.mark.parametrize(
    "spec,needle",
    [
        ({"kind": "sysctl", "key": "vm.no_such_knob", "value": 1}, "does not exist on this host"),
        ({"kind": "sysctl", "key": "vm swappiness", "value": 1}, "not a valid name"),
        ({"kind": "sysctl", "key": "vm.swappiness"}, "needs a value"),
        ({"kind": "sysfs", "key": "/etc/passwd", "value": "x"}, "under /sys/"),
        ({"kind": "sysfs", "key": "/sys/../etc/passwd", "value": "x"}, "under /sys/"),
        ({"kind": "irq_affinity", "key": "42", "value": "3-1"}, "runs backwards"),
        ({"kind": "irq_affinity", "key": "42", "value": "a,b"}, "malformed CPU list"),
        ({"kind": "irq_affinity", "device": "3b:00.0", "value": "0"}, "not a PCI address"),
        ({"kind": "irq_affinity", "key": "999", "value": "0"}, "IRQ 999 does not exist"),
        ({"kind": "mount", "key": "/dev/shm", "option": "size", "value": "-8G"}, "is not a size"),
        ({"kind": "mount", "key": "/dev/shm", "option": "uid", "value": "0"}, "is not one of"),
        ({"kind": "kernel_arg", "key": "pcie_aspm", "value": "off; reboot"}, "not allowed"),
        ({"kind": "file", "key": "/root/.ssh/authorized_keys", "value": "x"}, "is not allowed"),
        ({"kind": "file", "key": "/etc/../root/x", "value": "x"}, "is not allowed"),
        ({"kind": "env_var", "path": "/etc/default/irqbalance", "key": "A B", "value": "1"}, "not a shell variable"),
        ({"kind": "nosuch", "key": "x", "value": 1}, "is not one of"),
        ({"kind": "sysctl", "key": "vm.max_map_count", "value": "1048576", "at_least": "yes"}, "must be true or false"),
        ({"kind": "sysctl", "key": "net.ipv4.tcp_rmem", "value": "4096 87380", "at_least": True}, "integer value"),
    ],
)
def test_bad_settings_fail_before_any_change(fakeroot, hash_tree, spec, needle):
    before = hash_tree(fakeroot, exclude=())
    with pytest.raises(SpecError) as err:
        engine(fakeroot, "kernel").apply([KERNEL[0], spec], "run1")
    assert needle in str(err.value)
    assert "settings[1]" in str(err.value)
    assert hash_tree(fakeroot, exclude=()) == before


MINIMUM = [
    {"kind": "sysctl", "key": "vm.swappiness", "value": "10"},
    {"kind": "sysctl", "key": "vm.max_map_count", "value": "1048576", "at_least": True},
]


def test_a_minimum_is_applied_once_and_then_held(fakeroot, hash_tree):
    """The host's 65530 is below the minimum: applied; the next runs compare with the journaled 65530."""
    pristine = hash_tree(fakeroot)
    first = engine(fakeroot, "kernel").apply(MINIMUM, "run1")
    assert changed_ids(first) == ["sysctl:vm.max_map_count", "sysctl:vm.swappiness"]
    assert read(fakeroot, "/proc/sys/vm/max_map_count") == "1048576\n"
    assert "vm.max_map_count = 1048576\n" in read(fakeroot, "/etc/sysctl.d/60-stacktune-kernel.conf")
    engine(fakeroot, "kernel").keep("run1", {"decision": "keep", "basis": "gain"})
    applied = hash_tree(fakeroot)
    predicted = engine(fakeroot, "kernel", check=True).apply(MINIMUM, "run2")
    again = engine(fakeroot, "kernel").apply(MINIMUM, "run2")
    assert predicted["changed"] is False and again["changed"] is False
    assert changed_ids(again) == []
    assert hash_tree(fakeroot) == applied
    entry = open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")
    assert "at_least" not in json.dumps(entry)
    assert engine(fakeroot, "kernel").verify(MINIMUM)["counts"] == {"ok": 2}
    engine(fakeroot, "kernel").restore("original", "undo")
    assert hash_tree(fakeroot) == pristine


def test_a_host_above_a_minimum_keeps_its_value(fakeroot):
    with open(os.path.join(str(fakeroot), "proc/sys/vm/max_map_count"), "w") as handle:
        handle.write("8250343\n")
    for run in ("run1", "run2"):
        result = engine(fakeroot, "kernel").apply(MINIMUM, run)
        assert [r["id"] for r in result["settings"]] == ["sysctl:vm.swappiness"]
        assert any("own 8250343 is at or above the minimum 1048576" in n for n in result["notes"])
    assert read(fakeroot, "/proc/sys/vm/max_map_count") == "8250343\n"
    assert "max_map_count" not in read(fakeroot, "/etc/sysctl.d/60-stacktune-kernel.conf")


def test_a_setting_belongs_to_one_layer(fakeroot):
    engine(fakeroot, "kernel").apply(KERNEL[:1], "run1")
    with pytest.raises(SpecError, match="already managed by layer kernel"):
        engine(fakeroot, "memory").apply(KERNEL[:1], "run1")


def test_read_only_live_values_are_persisted_and_reported(fakeroot):
    path = os.path.join(str(fakeroot), "proc/sys/vm/swappiness")
    os.chmod(path, 0o444)
    if os.access(path, os.W_OK):
        pytest.skip("running as root: file modes do not stop writes; covered by the molecule scenario")
    result = engine(fakeroot, "kernel").apply(KERNEL[:1], "run1")
    row = result["settings"][0]
    assert row["status"] == "unsupported"
    assert "persisted" in row["reason"]


def test_settings_the_gate_rejected_are_not_retried_by_default(fakeroot, hash_tree):
    pristine = hash_tree(fakeroot)
    engine(fakeroot, "kernel").apply(KERNEL[:2], "run1")
    engine(fakeroot, "kernel").restore("snapshot", "run1", {"decision": "rollback"})
    again = engine(fakeroot, "kernel").apply(KERNEL[:2], "run2")
    assert again["changed"] is False
    assert "rolled these settings back in run run1" in again["notes"][0]
    assert hash_tree(fakeroot) == pristine
    retry = Engine(
        Context("kernel", root=str(fakeroot)),
        open_journal("/var/lib/stacktune", str(fakeroot)),
        retry_rejected=True,
    ).apply(KERNEL[:2], "run3")
    assert retry["changed"] is True


def test_a_run_that_changes_nothing_leaves_a_kept_layer_kept(fakeroot):
    engine(fakeroot, "kernel").apply(KERNEL[:2], "run1")
    engine(fakeroot, "kernel").keep("run1", {"decision": "keep", "basis": "gain"})
    again = engine(fakeroot, "kernel").apply(KERNEL[:2], "run2")
    assert again["changed"] is False
    assert again["layer_state"] == "kept"
    entry = open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")
    assert entry["decision"] == {"decision": "keep", "basis": "gain"}


def test_remount_keeps_the_mount_flags(fakeroot, monkeypatch):
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds import mount as _kind_mount

    calls = []
    monkeypatch.setattr(_kind_mount.MountKind, "live_writable", lambda self, s, ctx: (True, None))
    ctx = Context("memory", root=str(fakeroot), run_command=lambda argv: calls.append(argv) or (0, "", ""))
    Engine(ctx, open_journal("/var/lib/stacktune", str(fakeroot))).apply(FILES[2:], "run1")
    assert calls == [["mount", "-o", "remount,rw,nosuid,nodev,size=64G,inode64", "/dev/shm"]]


@pytest.mark.parametrize(
    "path,text",
    [
        ("etc/os-release", 'NAME="Rocky Linux"\nID="rocky"\nID_LIKE="rhel centos fedora"\n'),
        ("etc/os-release", 'NAME="Fedora Linux"\nID=fedora\n'),
        ("etc/os-release", "NAME='AlmaLinux'\nID='almalinux'\nID_LIKE='rhel centos fedora'\n"),
        ("etc/redhat-release", "Red Hat Enterprise Linux release 9.4 (Plow)\n"),
    ],
)
def test_boot_arguments_are_refused_where_grub_drop_ins_are_not_read(fakeroot, hash_tree, path, text):
    with open(os.path.join(str(fakeroot), path), "w") as handle:
        handle.write(text)
    before = hash_tree(fakeroot)
    result = engine(fakeroot, "kernel").apply(KERNEL[3:], "run1")
    row = result["settings"][0]
    assert row["status"] == "unsupported"
    assert "grubby" in row["reason"]
    assert hash_tree(fakeroot) == before
    assert not os.path.exists(os.path.join(str(fakeroot), "etc/default/grub.d/60-stacktune-kernel.cfg"))


def test_gate_toggles_a_layer_off_and_on_through_the_engine(fakeroot, hash_tree):
    """The gate's A B B A schedule: suspend, re-apply, repeat; then keep or roll back."""
    pristine = hash_tree(fakeroot)
    engine(fakeroot, "kernel").apply(KERNEL[:3], "run1")
    applied = hash_tree(fakeroot)
    for _round in range(2):
        off = engine(fakeroot, "kernel").suspend("run1")
        assert off["layer_state"] == "suspended"
        assert hash_tree(fakeroot) == pristine
        entry = open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")
        # switched off, the layer keeps its settings and its snapshot, and nothing is rejected
        assert entry["state"] == "suspended" and entry["settings"] and entry["snapshot"]
        assert "rejected" not in entry
        again = engine(fakeroot, "kernel").reapply("run1")
        assert again["layer_state"] == "applied"
        assert hash_tree(fakeroot) == applied
    engine(fakeroot, "kernel").restore("snapshot", "run1", {"decision": "rollback"})
    assert hash_tree(fakeroot) == pristine
    entry = open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")
    assert entry["state"] == "rolled_back" and entry["rejected_by"] == "run1"
    actions = [e["action"] for e in entry["history"]]
    assert actions.count("suspend") == 2 and actions.count("restore_snapshot") == 1


@pytest.mark.parametrize("arm", ["with", "without"])
def test_an_interrupted_measurement_puts_the_layer_back_without_a_verdict(fakeroot, hash_tree, arm):
    """Ctrl-C while the gate measures: back to the snapshot, recorded as interrupted, measured again next run."""
    pristine = hash_tree(fakeroot)
    engine(fakeroot, "kernel").apply(KERNEL[:3], "run1")
    if arm == "without":
        engine(fakeroot, "kernel").suspend("run1")
    out = engine(fakeroot, "kernel").interrupt("run1", "SIGINT during a block %s the layer" % arm)
    assert out["changed"] and out["action"] == "interrupted"
    assert hash_tree(fakeroot) == pristine
    entry = open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")
    assert entry["state"] == "new" and entry["settings"] == [] and entry["snapshot"] is None
    assert entry["interrupted"]["reason"] == "SIGINT during a block %s the layer" % arm
    assert entry.get("decision") is None and "rejected" not in entry
    # the next run applies (and so measures) the layer again, and the interruption is history
    again = engine(fakeroot, "kernel").apply(KERNEL[:3], "run2")
    assert again["changed"] and again["layer_state"] == "applied"
    assert "interrupted" not in open_journal("/var/lib/stacktune", str(fakeroot)).load("kernel")


def test_interrupting_a_decided_layer_changes_nothing(fakeroot, hash_tree):
    engine(fakeroot, "kernel").apply(KERNEL[:3], "run1")
    engine(fakeroot, "kernel").keep("run1", {"decision": "keep", "basis": "gain"})
    kept = hash_tree(fakeroot)
    out = engine(fakeroot, "kernel").interrupt("run1", "SIGTERM")
    assert not out["changed"] and "kept: nothing to put back" in out["notes"][0]
    assert hash_tree(fakeroot) == kept


def test_a_layer_left_switched_off_by_a_dead_run_is_recovered(fakeroot, hash_tree):
    pristine = hash_tree(fakeroot)
    engine(fakeroot, "kernel").apply(KERNEL[:3], "dead")
    engine(fakeroot, "kernel").suspend("dead")
    predicted = engine(fakeroot, "kernel", check=True).apply(KERNEL[:3], "next")
    out = engine(fakeroot, "kernel").recover("next")
    assert out["changed"]
    assert hash_tree(fakeroot) == pristine
    real = engine(fakeroot, "kernel").apply(KERNEL[:3], "next")
    # check mode before the recovery predicted what the real apply after it changed
    assert [r["changed"] for r in predicted["settings"]] == [r["changed"] for r in real["settings"]]
    assert any(r["changed"] for r in real["settings"])


def test_reapply_after_a_kept_layer_returns_to_the_kept_state(fakeroot, hash_tree):
    first = [{"kind": "sysctl", "key": "vm.swappiness", "value": "10"}]
    engine(fakeroot, "kernel").apply(first, "run1")
    engine(fakeroot, "kernel").keep("run1", {"decision": "keep", "basis": "gain"})
    kept = hash_tree(fakeroot)
    second = first + [{"kind": "sysctl", "key": "vm.max_map_count", "value": "1048576"}]
    engine(fakeroot, "kernel").apply(second, "run2")
    engine(fakeroot, "kernel").suspend("run2")
    assert hash_tree(fakeroot) == kept
    engine(fakeroot, "kernel").reapply("run2")
    assert read(fakeroot, "/proc/sys/vm/max_map_count") == "1048576\n"
    engine(fakeroot, "kernel").restore("snapshot", "run2", {"decision": "rollback"})
    assert hash_tree(fakeroot) == kept


def test_reapply_without_a_toggled_layer_is_refused(fakeroot):
    with pytest.raises(SpecError, match="not switched off for a measurement"):
        engine(fakeroot, "kernel").reapply("run1")


# ---------------------------------------------------------------- what the next boot applies


def write(root, path, text):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)


def test_sysctl_conf_linked_from_sysctl_d_overrides_stacktune(fakeroot):
    """Debian/Ubuntu: /etc/sysctl.d/99-sysctl.conf -> ../sysctl.conf, read after 60-stacktune-*."""
    write(fakeroot, "/etc/sysctl.conf", "# site settings\nvm.swappiness = 60\n")
    os.makedirs(os.path.join(str(fakeroot), "etc/sysctl.d"), exist_ok=True)
    os.symlink("../sysctl.conf", os.path.join(str(fakeroot), "etc/sysctl.d/99-sysctl.conf"))
    applied = engine(fakeroot, "kernel").apply(KERNEL[:1], "run1")
    row = applied["settings"][0]
    assert row["status"] == "overridden"
    assert row["changed"] is True
    assert row["at_boot"] == "60"
    assert row["at_boot_from"] == "/etc/sysctl.d/99-sysctl.conf"
    assert "at the next boot /etc/sysctl.d/99-sysctl.conf sets 60; stacktune's" in row["reason"]
    verified = engine(fakeroot, "kernel").verify()
    assert verified["overridden"] == ["sysctl:vm.swappiness"]
    assert verified["drift"] == []


def test_check_mode_predicts_the_override(fakeroot):
    write(fakeroot, "/etc/sysctl.d/99-zz-other.conf", "vm.swappiness=60\n")
    write(fakeroot, "/etc/sysctl.d/10-early.conf", "vm.swappiness = 1\nnet.ipv4.tcp_rmem = 1 2 3\n")
    predicted = engine(fakeroot, "kernel", check=True).apply(KERNEL[:2], "run1")
    status = {r["id"]: r["status"] for r in predicted["settings"]}
    # 10-early sorts before stacktune's 60- drop-in: stacktune wins; 99-zz-other sorts after
    assert status == {"sysctl:vm.swappiness": "overridden", "sysctl:net.ipv4.tcp_rmem": "changed"}
    real = engine(fakeroot, "kernel").apply(KERNEL[:2], "run1")
    assert {r["id"]: r["status"] for r in real["settings"]} == status


@pytest.mark.parametrize(
    "files,links,want",
    [
        # a same-named file in /etc masks the one in /usr/lib; order is by file name
        (
            {"/usr/lib/sysctl.d/99-vendor.conf": "vm.swappiness = 5\n", "/etc/sysctl.d/99-vendor.conf": "# empty\n"},
            {},
            None,
        ),
        ({"/usr/lib/sysctl.d/99-vendor.conf": "vm.swappiness = 5\n"}, {}, ("5", "/usr/lib/sysctl.d/99-vendor.conf")),
        ({"/run/sysctl.d/70-run.conf": "-vm.swappiness=7\n"}, {}, ("7", "/run/sysctl.d/70-run.conf")),
        (
            {"/usr/lib/sysctl.d/99-vendor.conf": "vm.swappiness = 5\n"},
            {"/etc/sysctl.d/99-vendor.conf": "/dev/null"},
            None,
        ),
        ({"/etc/sysctl.d/50-a.conf": "vm/swappiness = 3\n"}, {}, None),
        # no 99-sysctl.conf link: procps' sysctl --system reads /etc/sysctl.conf last
        ({"/etc/sysctl.conf": "vm.swappiness = 60\n"}, {}, ("60", "/etc/sysctl.conf")),
    ],
)
def test_boot_value_follows_systemd_sysctl_order(fakeroot, files, links, want):
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.sysctl import SysctlKind

    for path, text in files.items():
        write(fakeroot, path, text)
    for path, target in links.items():
        full = os.path.join(str(fakeroot), path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        os.symlink(target, full)
    engine(fakeroot, "kernel").apply(KERNEL[:1], "run1")
    got = SysctlKind().boot_value({"key": "vm.swappiness"}, Context("kernel", root=str(fakeroot)))
    assert got == (want or ("10", "/etc/sysctl.d/60-stacktune-kernel.conf"))


def test_tmpfiles_earliest_file_wins_for_sysfs_and_irq(fakeroot):
    """tmpfiles.d: for one path, the line of the file whose name sorts first is applied."""
    write(fakeroot, "/etc/tmpfiles.d/00-vendor.conf", "w /sys/kernel/mm/transparent_hugepage/enabled - - - - always\n")
    write(fakeroot, "/usr/lib/tmpfiles.d/zz-late.conf", "w /proc/irq/41/smp_affinity_list - - - - 0-15\n")
    write(fakeroot, "/usr/lib/tmpfiles.d/10-early.conf", "w /proc/irq/42/smp_affinity_list - - - - 0-3\n")
    kernel = engine(fakeroot, "kernel").apply(KERNEL[2:3], "run1")
    row = kernel["settings"][0]
    assert row["status"] == "overridden"
    assert (row["at_boot"], row["at_boot_from"]) == ("always", "/etc/tmpfiles.d/00-vendor.conf")
    numa = engine(fakeroot, "numa_irq").apply(NUMA, "run1")
    status = {r["id"]: r["status"] for r in numa["settings"]}
    # stacktune-numa_irq.conf sorts before zz-late.conf (stacktune wins) and after 10-early.conf
    assert status["irq_affinity:41"] == "changed"
    assert status["irq_affinity:42"] == "overridden"


APPEND_FORCE = 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT pcie_aspm=force"'


@pytest.mark.parametrize(
    "files,status,at_boot",
    [
        ({}, "pending_reboot", ("off", "/etc/default/grub.d/60-stacktune-kernel.cfg")),
        # a later drop-in replaces the whole default command line: the argument is dropped
        ({"/etc/default/grub.d/99-cloud.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0"\n'}, "overridden", None),
        (
            {"/etc/default/grub.d/99-x.cfg": APPEND_FORCE},
            "overridden",
            ("force", "/etc/default/grub.d/99-x.cfg"),
        ),
        # GRUB_CMDLINE_LINUX comes first on the command line: stacktune's later value wins
        (
            {"/etc/default/grub": 'GRUB_CMDLINE_LINUX="pcie_aspm=on"\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'},
            "pending_reboot",
            ("off", "/etc/default/grub.d/60-stacktune-kernel.cfg"),
        ),
        # beyond the reader (command substitution): no claim about the next boot
        ({"/etc/default/grub.d/99-y.cfg": 'GRUB_CMDLINE_LINUX_DEFAULT="$(cat /etc/extra)"\n'}, "pending_reboot", None),
    ],
)
def test_kernel_args_as_grub_mkconfig_builds_the_command_line(fakeroot, files, status, at_boot):
    for path, text in files.items():
        write(fakeroot, path, text)
    predicted = engine(fakeroot, "kernel", check=True).apply(KERNEL[3:], "run1")
    row = engine(fakeroot, "kernel").apply(KERNEL[3:], "run1")["settings"][0]
    assert predicted["settings"][0]["status"] == row["status"] == status
    if status == "overridden" and at_boot is None:
        assert row["at_boot"] is None
        assert "sets nothing (the setting is dropped)" in row["reason"]
    elif at_boot is not None:
        assert (row["at_boot"], row["at_boot_from"]) == at_boot


# ---------------------------------------------------------------- other writers


@pytest.mark.parametrize(
    "main_conf,expect",
    [
        (None, "re-reads the sysctl.d files (reapply_sysctl = 1), so stacktune's drop-in wins"),
        ("[main]\nreapply_sysctl = 0\n", "its profile's sysctls override stacktune's for every key both set"),
    ],
)
def test_verify_names_an_active_tuned_profile(fakeroot, main_conf, expect):
    write(fakeroot, "/etc/tuned/active_profile", "throughput-performance\n")
    write(fakeroot, "/proc/100/comm", "tuned\n")
    if main_conf:
        write(fakeroot, "/etc/tuned/tuned-main.conf", main_conf)
    engine(fakeroot, "kernel").apply(KERNEL[:1], "run1")
    notes = engine(fakeroot, "kernel").verify()["notes"]
    assert any(n.startswith("TuneD profile 'throughput-performance' runs: ") and expect in n for n in notes), notes


def test_verify_says_whether_irqbalance_may_move_pinned_irqs(fakeroot):
    write(fakeroot, "/proc/200/comm", "irqbalance\n")
    engine(fakeroot, "numa_irq").apply(NUMA, "run1")
    notes = engine(fakeroot, "numa_irq").verify()["notes"]
    assert any("irqbalance runs and is not told to leave IRQ(s) 41, 42 alone" in n for n in notes), notes
    write(fakeroot, "/etc/default/irqbalance", 'IRQBALANCE_ARGS="--banirq=41 --banirq=42"\n')
    notes = engine(fakeroot, "numa_irq").verify()["notes"]
    assert "irqbalance runs; every IRQ stacktune pins is banned from it (--banirq)" in notes


def test_no_other_writer_no_note(fakeroot):
    engine(fakeroot, "kernel").apply(KERNEL[:1], "run1")
    assert engine(fakeroot, "kernel").verify()["notes"] == []


MEMLOCK = (
    "# Managed by stacktune (layer memory)\n"
    "*    soft    memlock    unlimited\n*    hard    memlock    unlimited\n"
    "root soft    memlock    unlimited\nroot hard    memlock    unlimited\n"
)
LIMITS_FILE = [{"kind": "file", "key": "/etc/security/limits.d/60-stacktune-memlock.conf", "value": MEMLOCK}]


@pytest.mark.parametrize(
    "files,status,at_boot",
    [
        ({}, "changed", (MEMLOCK, "/etc/security/limits.d/60-stacktune-memlock.conf")),
        # limits.conf is read first: stacktune's limits.d file wins over it
        ({"/etc/security/limits.conf": "* hard memlock 64\n"}, "changed", None),
        # a later limits.d file with the same rank wins
        (
            {"/etc/security/limits.d/90-site.conf": "*  hard  memlock  65536\n"},
            "overridden",
            ("* hard memlock 65536", "/etc/security/limits.d/90-site.conf"),
        ),
        # '-' sets soft and hard at once
        (
            {"/etc/security/limits.d/95-x.conf": "root - memlock 8192\n"},
            "overridden",
            ("root soft memlock 8192", "/etc/security/limits.d/95-x.conf"),
        ),
        # a wildcard entry does not apply to root; an earlier file cannot override
        ({"/etc/security/limits.d/95-y.conf": "# site\n"}, "changed", None),
        ({"/etc/security/limits.d/10-early.conf": "* hard memlock 64\n"}, "changed", None),
        # a matching "<domain> -" line: pam_limits sets no limit at all for that account
        (
            {"/etc/security/limits.d/99-nolimits.conf": "root -\n"},
            "overridden",
            ("no limit (a 'root -' line)", "/etc/security/limits.d/99-nolimits.conf"),
        ),
    ],
)
def test_memlock_limits_follow_pam_limits_order(fakeroot, files, status, at_boot):
    for path, text in files.items():
        write(fakeroot, path, text)
    predicted = engine(fakeroot, "memory", check=True).apply(LIMITS_FILE, "run1")
    row = engine(fakeroot, "memory").apply(LIMITS_FILE, "run1")["settings"][0]
    assert predicted["settings"][0]["status"] == row["status"] == status
    if at_boot is not None:
        assert (row["at_boot"], row["at_boot_from"]) == at_boot
    if status == "overridden":
        assert "stacktune's /etc/security/limits.d/60-stacktune-memlock.conf sets " in row["reason"]
        assert engine(fakeroot, "memory").verify()["overridden"] == [row["id"]]


SHM = [{"kind": "mount", "key": "/dev/shm", "option": "size", "value": "64G"}]


@pytest.mark.parametrize(
    "files,links,status,at_boot",
    [
        ({}, {}, "unsupported", ("64G", "/etc/fstab")),
        # a mount unit in /etc/systemd/system outranks the one systemd generates from fstab
        (
            {"/etc/systemd/system/dev-shm.mount": "[Unit]\nDescription=shm\n[Mount]\nWhat=tmpfs\nOptions=size=8G\n"},
            {},
            "overridden",
            ("8G", "/etc/systemd/system/dev-shm.mount"),
        ),
        # a drop-in's Options= replaces the options of the generated unit
        (
            {"/etc/systemd/system/dev-shm.mount.d/50-size.conf": "[Mount]\nOptions=mode=1777,size=16G\n"},
            {},
            "overridden",
            ("16G", "/etc/systemd/system/dev-shm.mount.d/50-size.conf"),
        ),
        # a unit below the generator (vendor dir) does not win; its drop-ins do not exist here
        ({"/usr/lib/systemd/system/dev-shm.mount": "[Mount]\nOptions=size=1G\n"}, {}, "unsupported", None),
        # masked: the next boot does not mount it from fstab at all
        (
            {},
            {"/etc/systemd/system/dev-shm.mount": "/dev/null"},
            "overridden",
            (None, "/etc/systemd/system/dev-shm.mount (masked)"),
        ),
    ],
)
def test_shm_size_follows_systemd_mount_units(fakeroot, files, links, status, at_boot):
    for path, text in files.items():
        write(fakeroot, path, text)
    for path, target in links.items():
        full = os.path.join(str(fakeroot), path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        os.symlink(target, full)
    predicted = engine(fakeroot, "memory", check=True).apply(SHM, "run1")
    row = engine(fakeroot, "memory").apply(SHM, "run1")["settings"][0]
    assert predicted["settings"][0]["status"] == row["status"] == status
    if at_boot is not None:
        assert (row["at_boot"], row["at_boot_from"]) == at_boot
    assert engine(fakeroot, "memory").apply(SHM, "run1")["settings"][0]["changed"] is False


@pytest.mark.parametrize(
    "path,name",
    [
        ("/dev/shm", "dev-shm.mount"),
        ("/", "-.mount"),
        ("/mnt/my-data", "mnt-my\\x2ddata.mount"),
        ("/srv/.x", "srv-.x.mount"),
    ],
)
def test_mount_unit_names_escape_like_systemd(path, name):
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.mount import unit_name

    assert unit_name(path) == name


def test_journal_summary_lists_each_layer_with_what_it_holds(fakeroot):
    journal = open_journal("/var/lib/stacktune", str(fakeroot))
    assert journal.summary() == []
    engine(fakeroot, "kernel").apply(KERNEL, "run1")
    engine(fakeroot, "memory").apply(FILES, "run1")
    engine(fakeroot, "memory").keep("run1", {"decision": "keep", "basis": "gain"})
    engine(fakeroot, "kernel").restore("snapshot", "run1", {"decision": "rollback"})
    rows = {row["layer"]: row for row in journal.summary()}
    assert sorted(rows) == ["kernel", "memory"]
    assert rows["memory"]["state"] == "kept"
    assert rows["memory"]["settings"] == len(FILES)
    assert rows["memory"]["decision"] == "keep"
    assert rows["kernel"]["settings"] == 0
    assert rows["kernel"]["decision"] == "rollback"
    assert rows["kernel"]["run_id"] == "run1"
    assert rows["kernel"]["updated"].endswith("Z")


def test_a_drift_correction_leaves_a_kept_layer_kept(fakeroot, hash_tree):
    """drift.yml with stacktune_drift_fix re-applies from the journal: the layer stays kept, so the
    next run does not take it for one a stopped run left unjudged (and put back the drifted state)."""
    engine(fakeroot, "nccl").apply(FILES[:1], "run1")
    engine(fakeroot, "nccl").keep("run1", {"decision": "keep", "basis": "gain"})
    kept = hash_tree(fakeroot)
    with open(os.path.join(str(fakeroot), "etc/nccl.conf"), "a") as handle:
        handle.write("NCCL_DEBUG=INFO\n")
    fixed = engine(fakeroot, "nccl").apply(None, "drift-1", from_journal=True)
    assert fixed["changed"] and fixed["layer_state"] == "kept"
    assert hash_tree(fakeroot) == kept
    assert not engine(fakeroot, "nccl").recover("tune-2")["changed"]
    assert hash_tree(fakeroot) == kept


def test_verify_names_the_other_writer_on_each_setting_it_may_rewrite(fakeroot):
    write(fakeroot, "/proc/200/comm", "irqbalance\n")
    write(fakeroot, "/etc/default/irqbalance", 'IRQBALANCE_ARGS="--banirq=41"\n')
    engine(fakeroot, "numa_irq").apply(NUMA, "run1")
    rows = {r["key"]: r["other_writers"] for r in engine(fakeroot, "numa_irq").verify()["settings"]}
    assert rows == {"41": [], "42": ["irqbalance"]}


def test_verify_rows_name_no_other_writer_when_none_runs(fakeroot):
    engine(fakeroot, "kernel").apply(KERNEL[:1], "run1")
    assert [r["other_writers"] for r in engine(fakeroot, "kernel").verify()["settings"]] == [[]]
