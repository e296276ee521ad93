"""The cpu and io layers' settings through the engine, on constructed sysfs trees.

The trees are CONSTRUCTED, not recorded: written after what intel_pstate, acpi-cpufreq,
cpuidle and the block layer print on real hosts (the attribute names and formats are the
kernel's; the values are chosen for the tests). Where the kernel ties attributes together
(a scheduler change resets nr_requests; intel_pstate refuses a preference other than
performance under the performance governor) a small fake kernel applies the same rule.
"""

import errno
import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import cpu_io_facts as facts
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.hostprobe import FileReader
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.sysfs import SysfsKind

CPU = "/sys/devices/system/cpu"
POLICIES = (0, 1, 2, 10)  # policy10 sorts after policy2


def write(root, path, text):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)


def read(root, path):
    with open(os.path.join(str(root), path.lstrip("/"))) as handle:
        return handle.read()


def engine(root, layer, check=False):
    return Engine(Context(layer, root=str(root)), open_journal("/var/lib/stacktune", str(root)), check_mode=check)


def idle_states(root, cpus, latencies):
    for cpu in cpus:
        for index, latency in enumerate(latencies):
            base = "%s/cpu%d/cpuidle/state%d" % (CPU, cpu, index)
            write(root, base + "/name", ["POLL", "C1", "C1E", "C6"][index] + "\n")
            write(root, base + "/latency", "%d\n" % latency)
            write(root, base + "/residency", "%d\n" % (latency * 3))
            write(root, base + "/disable", "0\n")


@pytest.fixture
def intel_host(tmp_path):
    """An intel_pstate host (active mode, HWP): powersave + balance_performance, EPB normal."""
    root = tmp_path / "intel"
    for n in POLICIES:
        base = "%s/cpufreq/policy%d" % (CPU, n)
        write(root, base + "/scaling_driver", "intel_pstate\n")
        write(root, base + "/scaling_governor", "powersave\n")
        write(root, base + "/scaling_available_governors", "performance powersave\n")
        write(root, base + "/energy_performance_preference", "balance_performance\n")
        write(
            root,
            base + "/energy_performance_available_preferences",
            "default performance balance_performance balance_power power \n",
        )
        write(root, base + "/affected_cpus", "%d\n" % n)
        write(root, base + "/scaling_cur_freq", "800000\n")
        write(root, base + "/cpuinfo_max_freq", "3800000\n")
        write(root, "%s/cpu%d/power/energy_perf_bias" % (CPU, n), "6\n")
    write(root, CPU + "/intel_pstate/status", "active\n")
    write(root, CPU + "/intel_pstate/min_perf_pct", "21\n")
    write(root, CPU + "/intel_pstate/max_perf_pct", "100\n")
    write(root, CPU + "/cpuidle/current_driver", "intel_idle\n")
    write(root, CPU + "/smt/control", "on\n")
    write(root, CPU + "/smt/active", "1\n")
    write(root, "/sys/firmware/acpi/platform_profile", "balanced\n")
    write(root, "/sys/firmware/acpi/platform_profile_choices", "low-power balanced performance\n")
    idle_states(root, POLICIES, (0, 2, 10, 133))
    return root


@pytest.fixture
def acpi_host(tmp_path):
    """An acpi-cpufreq host: classic governors, no EPP, no intel_pstate, no platform profile."""
    root = tmp_path / "acpi"
    for n in (0, 1):
        base = "%s/cpufreq/policy%d" % (CPU, n)
        write(root, base + "/scaling_driver", "acpi-cpufreq\n")
        write(root, base + "/scaling_governor", "schedutil\n")
        write(
            root,
            base + "/scaling_available_governors",
            "conservative ondemand userspace powersave performance schedutil\n",
        )
    idle_states(root, (0, 1), (0, 1, 41))
    return root


def cpu_specs(governor="performance", epp="performance", idle_state="state3"):
    """What roles/cpu/tasks/settings.yml builds for its defaults plus an idle limit."""
    return [
        {
            "kind": "sysfs",
            "key": CPU + "/cpufreq/policy*/scaling_governor",
            "value": governor,
            "choices_from": "scaling_available_governors",
            "missing": "unsupported",
            "reason": "no cpufreq policy",
            "var": "cpu_governor",
        },
        {
            "kind": "sysfs",
            "key": CPU + "/cpufreq/policy*/energy_performance_preference",
            "value": epp,
            "choices_from": "energy_performance_available_preferences",
            "missing": "unsupported",
            "reason": "no energy_performance_preference",
            "var": "cpu_epp",
        },
        {
            "kind": "sysfs",
            "key": CPU + "/intel_pstate/min_perf_pct",
            "value": "100",
            "missing": "unsupported",
            "reason": "only intel_pstate has min_perf_pct",
            "var": "cpu_min_perf_pct",
        },
        {
            "kind": "sysfs",
            "key": CPU + "/cpu*/power/energy_perf_bias",
            "value": "0",
            "missing": "unsupported",
            "reason": "no energy_perf_bias",
            "var": "cpu_energy_perf_bias",
        },
        {
            "kind": "sysfs",
            "key": "/sys/firmware/acpi/platform_profile",
            "value": "performance",
            "choices_from": "platform_profile_choices",
            "missing": "unsupported",
            "reason": "no ACPI platform profile",
            "var": "cpu_platform_profile",
        },
        {
            "kind": "sysfs",
            "key": CPU + "/cpu*/cpuidle/%s/disable" % idle_state,
            "value": "1",
            "missing": "unsupported",
            "reason": "no cpuidle states",
            "var": "cpu_idle_max_latency_us",
        },
    ]


def by_id(result):
    return {r["id"]: r for r in result["settings"]}


def test_intel_pstate_host_applies_every_policy_and_cpu(intel_host):
    result = engine(intel_host, "cpu").apply(cpu_specs(), "run1")
    rows = by_id(result)
    for n in POLICIES:
        assert read(intel_host, "%s/cpufreq/policy%d/scaling_governor" % (CPU, n)) == "performance\n"
        assert read(intel_host, "%s/cpufreq/policy%d/energy_performance_preference" % (CPU, n)) == "performance\n"
        assert read(intel_host, "%s/cpu%d/power/energy_perf_bias" % (CPU, n)) == "0\n"
        assert read(intel_host, "%s/cpu%d/cpuidle/state3/disable" % (CPU, n)) == "1\n"
        assert read(intel_host, "%s/cpu%d/cpuidle/state2/disable" % (CPU, n)) == "0\n"
    assert read(intel_host, CPU + "/intel_pstate/min_perf_pct") == "100\n"
    assert read(intel_host, "/sys/firmware/acpi/platform_profile") == "performance\n"
    # 4 policies x 2 + 1 + 4 CPUs x 2 + 1
    assert len(rows) == 18
    assert {r["status"] for r in rows.values()} == {"changed"}
    # what the next boot applies is stacktune's drop-in, for every setting
    assert all(r["at_boot"] == r["expected"] for r in rows.values())
    assert all(r["at_boot_from"] == "/etc/tmpfiles.d/stacktune-cpu.conf" for r in rows.values())


def test_tmpfiles_write_the_governor_before_the_preference(intel_host):
    result = engine(intel_host, "cpu").apply(cpu_specs(), "run1")
    lines = read(intel_host, "/etc/tmpfiles.d/stacktune-cpu.conf").splitlines()[1:]
    paths = [line.split()[1] for line in lines]
    governors = [i for i, p in enumerate(paths) if p.endswith("/scaling_governor")]
    others = [i for i, p in enumerate(paths) if not p.endswith("/scaling_governor")]
    assert max(governors) < min(others)
    assert "w %s/cpufreq/policy10/energy_performance_preference - - - - performance" % CPU in lines
    # a wildcard expands in natural order (policy2 before policy10)
    assert [r["key"].split("/")[-2] for r in result["settings"] if r["key"].endswith("/scaling_governor")] == [
        "policy0",
        "policy1",
        "policy2",
        "policy10",
    ]


def test_second_apply_and_check_mode(intel_host, hash_tree):
    before = hash_tree(intel_host, exclude=())
    predicted = engine(intel_host, "cpu", check=True).apply(cpu_specs(), "check")
    assert hash_tree(intel_host, exclude=()) == before
    real = engine(intel_host, "cpu").apply(cpu_specs(), "run1")
    assert {r["id"]: r["status"] for r in predicted["settings"]} == {r["id"]: r["status"] for r in real["settings"]}
    again = engine(intel_host, "cpu").apply(cpu_specs(), "run2")
    assert again["changed"] is False


def test_restore_original_is_exact(intel_host, hash_tree):
    pristine = hash_tree(intel_host)
    engine(intel_host, "cpu").apply(cpu_specs(), "run1")
    assert hash_tree(intel_host) != pristine
    restored = engine(intel_host, "cpu").restore("original", "rollback")
    assert hash_tree(intel_host) == pristine
    assert not os.path.exists(os.path.join(str(intel_host), "etc/tmpfiles.d"))
    assert "unsupported" not in restored["counts"]


@pytest.fixture
def epp_rule(monkeypatch):
    """intel_pstate's rule: no preference but performance while the governor is performance."""
    real = SysfsKind.write_live

    def write_live(self, s, value, ctx):
        if s["path"].endswith("/energy_performance_preference") and value != "performance":
            governor = os.path.join(os.path.dirname(ctx.path(s["path"])), "scaling_governor")
            with open(governor) as handle:
                if handle.read().strip() == "performance":
                    raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        real(self, s, value, ctx)

    monkeypatch.setattr(SysfsKind, "write_live", write_live)


def test_restore_puts_the_governor_back_before_the_preference(intel_host, hash_tree, epp_rule):
    pristine = hash_tree(intel_host)
    engine(intel_host, "cpu").apply(cpu_specs(), "run1")
    restored = engine(intel_host, "cpu").restore("original", "rollback")
    assert "unsupported" not in restored["counts"], restored["settings"]
    # written in order (governor first), not saved by the second try after a refusal
    assert not [r for r in restored["settings"] if r["reason"] == "put back after the values it depends on"]
    assert hash_tree(intel_host) == pristine
    assert read(intel_host, CPU + "/cpufreq/policy0/energy_performance_preference") == "balance_performance\n"


def test_suspend_and_reapply_follow_the_same_order(intel_host, epp_rule):
    engine(intel_host, "cpu").apply(cpu_specs(), "run1")
    off = engine(intel_host, "cpu").suspend("run1")
    assert "unsupported" not in off["counts"]
    assert read(intel_host, CPU + "/cpufreq/policy2/scaling_governor") == "powersave\n"
    assert read(intel_host, CPU + "/cpufreq/policy2/energy_performance_preference") == "balance_performance\n"
    on = engine(intel_host, "cpu").reapply("run1")
    assert read(intel_host, CPU + "/cpufreq/policy2/energy_performance_preference") == "performance\n"
    assert on["layer_state"] == "applied"


def test_acpi_cpufreq_host_reports_what_it_lacks(acpi_host):
    result = engine(acpi_host, "cpu").apply(cpu_specs(idle_state="state2"), "run1")
    rows = by_id(result)
    assert read(acpi_host, CPU + "/cpufreq/policy1/scaling_governor") == "performance\n"
    assert read(acpi_host, CPU + "/cpu1/cpuidle/state2/disable") == "1\n"
    for key, why in (
        (CPU + "/cpufreq/policy*/energy_performance_preference", "no energy_performance_preference"),
        (CPU + "/intel_pstate/min_perf_pct", "only intel_pstate has min_perf_pct"),
        (CPU + "/cpu*/power/energy_perf_bias", "no energy_perf_bias"),
        ("/sys/firmware/acpi/platform_profile", "no ACPI platform profile"),
    ):
        row = rows["sysfs:%s" % key]
        assert row["status"] == "unsupported"
        assert row["reason"].startswith(why)
        # the same row shape as every other setting: the report and verify's table read live and persisted
        assert row["live"] is None and row["persisted"] is None
    assert result["layer_state"] == "applied"


def test_a_host_without_cpufreq_or_cpuidle_changes_nothing(tmp_path, hash_tree):
    root = tmp_path / "vm"
    write(root, CPU + "/online", "0-1\n")
    pristine = hash_tree(root, exclude=())
    result = engine(root, "cpu").apply(cpu_specs(), "run1")
    assert set(result["counts"]) == {"unsupported"}
    assert result["changed"] is False
    assert hash_tree(root, exclude=("var/lib/stacktune",)) == pristine


def test_a_governor_the_host_does_not_offer_fails_naming_the_variable(acpi_host, hash_tree):
    pristine = hash_tree(acpi_host, exclude=())
    with pytest.raises(SpecError) as err:
        engine(acpi_host, "cpu").apply(cpu_specs(governor="turbo"), "run1")
    message = str(err.value)
    assert message.startswith("cpu_governor: ")
    assert "'turbo' is not a value" in message
    assert "performance, schedutil" in message
    assert hash_tree(acpi_host, exclude=()) == pristine


@pytest.mark.parametrize(
    "spec,words",
    [
        ({"kind": "sysfs", "key": CPU + "/cpufreq/policy[0]/scaling_governor", "value": "x"}, "wildcards"),
        ({"kind": "sysfs", "key": CPU + "/nothing*/here", "value": "1"}, "no attribute matches"),
        ({"kind": "sysfs", "key": CPU + "/intel_pstate/min_perf_pct", "value": "1", "missing": "maybe"}, "missing"),
    ],
)
def test_bad_sysfs_specs_fail(acpi_host, spec, words):
    with pytest.raises(SpecError) as err:
        engine(acpi_host, "cpu").apply([spec], "run1")
    assert words in str(err.value)


def test_cpu_facts_of_the_intel_host(intel_host):
    cpu = facts.cpu_power(FileReader(root=str(intel_host), record=False))
    assert cpu["driver"] == "intel_pstate"
    assert [p["policy"] for p in cpu["policies"]] == ["policy0", "policy1", "policy2", "policy10"]
    assert cpu["policies"][0]["governors"] == ["performance", "powersave"]
    assert cpu["policies"][0]["epp"] == "balance_performance"
    assert cpu["policies"][0]["cur_khz"] == 800000
    assert cpu["intel_pstate"]["min_perf_pct"] == 21
    assert cpu["energy_perf_bias"] == 6
    assert cpu["platform_profile_choices"] == ["low-power", "balanced", "performance"]
    assert [(s["name"], s["latency_us"]) for s in cpu["idle_states"]] == [
        ("POLL", 0),
        ("C1", 2),
        ("C1E", 10),
        ("C6", 133),
    ]
    assert cpu["smt"] == {"control": "on", "active": True}
    assert cpu["reason"] is None


def test_cpu_facts_say_why_when_nothing_is_exposed(tmp_path):
    cpu = facts.cpu_power(FileReader(root=str(tmp_path), record=False))
    assert cpu["policies"] == [] and cpu["idle_states"] == []
    assert "no cpufreq policy" in cpu["reason"] and "no cpuidle states" in cpu["reason"]


# ---------------------------------------------------------------------- block queues


@pytest.fixture
def disks(tmp_path):
    """/ on an NVMe partition, /data on dm-0 over a SATA partition and a second SATA disk,
    /dev/shm on tmpfs."""
    root = tmp_path / "disks"
    mountinfo = (
        "22 1 259:2 / / rw,relatime - ext4 /dev/nvme0n1p2 rw\n"
        "30 22 253:0 / /data rw,relatime - xfs /dev/mapper/vg-data rw\n"
        "31 22 0:27 / /dev/shm rw - tmpfs tmpfs rw,size=8388608k\n"
    )
    write(root, "/proc/self/mountinfo", mountinfo)
    devices = {
        "nvme0n1": ("[none] mq-deadline\n", "128\n", "1023\n", "0\n"),
        "sda": ("none [bfq] mq-deadline kyber\n", "128\n", "64\n", "1\n"),
        "sdb": ("none [bfq] mq-deadline kyber\n", "8192\n", "64\n", "1\n"),
        "dm-0": ("none\n", "128\n", "128\n", "0\n"),
    }
    for name, (scheduler, read_ahead, nr_requests, rotational) in devices.items():
        queue = "/sys/devices/virtual/block/%s/queue" % name
        write(root, queue + "/scheduler", scheduler)
        write(root, queue + "/read_ahead_kb", read_ahead)
        write(root, queue + "/nr_requests", nr_requests)
        write(root, queue + "/rotational", rotational)
    os.makedirs(os.path.join(str(root), "sys/block"))
    os.makedirs(os.path.join(str(root), "sys/dev/block"))
    os.makedirs(os.path.join(str(root), "sys/class/block"))
    for name in devices:
        os.symlink("../devices/virtual/block/%s" % name, os.path.join(str(root), "sys/block", name))
    write(root, "/sys/devices/virtual/block/nvme0n1/nvme0n1p2/partition", "2\n")
    write(root, "/sys/devices/virtual/block/sda/sda1/partition", "1\n")
    os.symlink("../../devices/virtual/block/nvme0n1/nvme0n1p2", os.path.join(str(root), "sys/dev/block/259:2"))
    os.symlink("../../devices/virtual/block/dm-0", os.path.join(str(root), "sys/dev/block/253:0"))
    os.symlink("../../devices/virtual/block/sda/sda1", os.path.join(str(root), "sys/class/block/sda1"))
    os.symlink("../../devices/virtual/block/sdb", os.path.join(str(root), "sys/class/block/sdb"))
    os.makedirs(os.path.join(str(root), "sys/devices/virtual/block/dm-0/slaves/sda1"))
    os.makedirs(os.path.join(str(root), "sys/devices/virtual/block/dm-0/slaves/sdb"))
    return root


def test_paths_resolve_to_their_disks_and_members(disks):
    block = facts.block(FileReader(root=str(disks), record=False))
    assert sorted(block["disks"]) == ["dm-0", "nvme0n1", "sda", "sdb"]
    assert block["disks"]["nvme0n1"]["nvme"] is True
    assert block["disks"]["sda"]["scheduler"] == "bfq"
    targets = facts.io_targets(block, ["/", "/home/me", "/data/imagenet", "/dev/shm"])
    assert [(t["disk"], t["members"], t["paths"]) for t in targets] == [
        ("nvme0n1", ["nvme0n1"], ["/", "/home/me"]),
        ("dm-0", ["sda", "sdb"], ["/data/imagenet"]),
        (None, [], ["/dev/shm"]),
    ]
    assert "on no block device" in targets[2]["reason"]


def io_specs():
    """What roles/io/tasks/settings.yml builds for the disks fixture (auto scheduler, nr_requests 32)."""
    out = []
    for disk in ("nvme0n1", "dm-0"):
        out.append(
            {"kind": "sysfs", "key": "/sys/block/%s/queue/read_ahead_kb" % disk, "value": "4096", "at_least": True}
        )
    out.append(
        {
            "kind": "sysfs",
            "key": "/sys/dev/block/0:27/queue/read_ahead_kb",
            "value": "0",
            "missing": "unsupported",
            "reason": "/dev/shm is on no block device",
        }
    )
    for disk, scheduler in (("nvme0n1", "none"), ("sda", "mq-deadline"), ("sdb", "mq-deadline")):
        base = "/sys/block/%s/queue/" % disk
        out.append({"kind": "sysfs", "key": base + "scheduler", "value": scheduler, "choices_from": "scheduler"})
        out.append({"kind": "sysfs", "key": base + "nr_requests", "value": "32", "var": "io_nr_requests"})
    return out


@pytest.fixture
def scheduler_resets_nr_requests(monkeypatch):
    """The block layer's rule: a new scheduler starts with its own default queue depth."""
    real = SysfsKind.write_live

    def write_live(self, s, value, ctx):
        real(self, s, value, ctx)
        if s["path"].endswith("/queue/scheduler"):
            with open(os.path.join(os.path.dirname(ctx.path(s["path"])), "nr_requests"), "w") as handle:
                handle.write("256\n")

    monkeypatch.setattr(SysfsKind, "write_live", write_live)


def test_nvme_and_sata_queues_apply_persist_and_restore(disks, hash_tree, scheduler_resets_nr_requests):
    pristine = hash_tree(disks)
    result = engine(disks, "io").apply(io_specs(), "run1")
    rows = by_id(result)
    assert read(disks, "/sys/block/sda/queue/scheduler") == "mq-deadline\n"
    assert read(disks, "/sys/block/sda/queue/nr_requests") == "32\n"
    assert read(disks, "/sys/block/nvme0n1/queue/nr_requests") == "32\n"
    assert read(disks, "/sys/block/nvme0n1/queue/read_ahead_kb") == "4096\n"
    assert rows["sysfs:/sys/block/nvme0n1/queue/scheduler"]["live_before"] == "none"
    assert rows["sysfs:/sys/dev/block/0:27/queue/read_ahead_kb"]["status"] == "unsupported"
    assert {r["status"] for r in rows.values()} == {"changed", "unsupported"}
    lines = [line.split()[1] for line in read(disks, "/etc/tmpfiles.d/stacktune-io.conf").splitlines()[1:]]
    for disk in ("nvme0n1", "sda", "sdb"):
        assert lines.index("/sys/block/%s/queue/scheduler" % disk) < lines.index(
            "/sys/block/%s/queue/nr_requests" % disk
        )
    assert engine(disks, "io").apply(io_specs(), "run2")["changed"] is False
    engine(disks, "io").restore("original", "rollback")
    assert hash_tree(disks) == pristine
    assert read(disks, "/sys/block/sda/queue/nr_requests") == "64\n"


def test_read_ahead_is_a_minimum(disks):
    specs = [{"kind": "sysfs", "key": "/sys/block/sdb/queue/read_ahead_kb", "value": "4096", "at_least": True}]
    e = engine(disks, "io")
    result = e.apply(specs, "run1")
    assert result["settings"] == []
    assert any("at or above the minimum" in note for note in result["notes"])
    assert read(disks, "/sys/block/sdb/queue/read_ahead_kb") == "8192\n"


def test_check_mode_predicts_the_io_run(disks, hash_tree):
    before = hash_tree(disks, exclude=())
    predicted = engine(disks, "io", check=True).apply(io_specs(), "check")
    assert hash_tree(disks, exclude=()) == before
    real = engine(disks, "io").apply(io_specs(), "real")
    assert {r["id"]: r["status"] for r in predicted["settings"]} == {r["id"]: r["status"] for r in real["settings"]}
