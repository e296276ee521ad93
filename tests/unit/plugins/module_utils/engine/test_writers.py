"""Other writers of what stacktune manages (module_utils/engine/writers.py) on a constructed host tree."""

import os

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.preflight import run_preflight
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.writers import host_writers, later_dropins


def write(root, path, text):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)


def test_a_quiet_host_has_no_other_writer(fakeroot):
    write(fakeroot, "/etc/sysctl.d/60-stacktune-kernel.conf", "vm.swappiness = 10\n")
    write(fakeroot, "/etc/sysctl.d/99-sysctl.conf", "# everything commented out\n#vm.swappiness = 60\n")
    write(fakeroot, "/usr/lib/tmpfiles.d/home.conf", "q /home 0755 - - -\n")
    assert host_writers(Context("preflight", root=str(fakeroot))) == []


def test_every_writer_is_named(fakeroot):
    write(fakeroot, "/etc/tuned/active_profile", "throughput-performance\n")
    write(fakeroot, "/proc/100/comm", "tuned\n")
    write(fakeroot, "/proc/101/comm", "irqbalance\n")
    write(fakeroot, "/proc/102/comm", "nvidia-persiste\n")
    write(fakeroot, "/etc/sysctl.d/60-stacktune-kernel.conf", "vm.swappiness = 10\n")
    write(fakeroot, "/etc/sysctl.d/10-early.conf", "vm.swappiness = 1\n")
    write(fakeroot, "/etc/sysctl.d/99-cloud.conf", "vm.swappiness = 60\n")
    write(fakeroot, "/etc/default/grub.d/90-cloud.cfg", 'GRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0"\n')
    write(fakeroot, "/etc/tmpfiles.d/00-thp.conf", "w /sys/kernel/mm/transparent_hugepage/enabled - - - - always\n")
    found = host_writers(Context("preflight", root=str(fakeroot)))
    tools = ["tuned", "irqbalance", "nvidia-persistenced", "cpu-io", "drop-ins", "drop-ins", "drop-ins"]
    assert [w["tool"] for w in found] == tools
    messages = [w["message"] for w in found]
    assert messages[3].startswith("TuneD: its [cpu] plugin sets the governor")
    assert messages[4].startswith("sysctl.d: 99-cloud.conf sorts after stacktune's drop-ins")
    assert "10-early.conf" not in messages[4]
    assert messages[5].startswith("grub.d: 90-cloud.cfg sorts after")
    assert messages[6].startswith("tmpfiles.d: 00-thp.conf sorts before")


def test_a_masked_vendor_file_does_not_count(fakeroot):
    write(fakeroot, "/usr/lib/sysctl.d/99-vendor.conf", "vm.swappiness = 5\n")
    write(fakeroot, "/etc/sysctl.d/99-vendor.conf", "# masked by an empty file of the same name\n")
    assert later_dropins(Context("preflight", root=str(fakeroot))) == []


def test_preflight_lists_writers_as_info_and_passes(fakeroot):
    write(fakeroot, "/etc/sysctl.d/99-cloud.conf", "vm.swappiness = 60\n")
    writers = host_writers(Context("preflight", root=str(fakeroot)))
    result = run_preflight({"schema_version": 1, "gpus": [], "gpu_count": 0}, other_writers=writers)
    check = [c for c in result["checks"] if c["name"] == "other_writers"][0]
    assert check["status"] == "pass"
    assert check["why"].startswith("1 other writer(s): sysctl.d: 99-cloud.conf sorts after")
    finding = [f for f in result["findings"] if f["id"] == "other_writer_drop_ins"][0]
    assert finding["severity"] == "info"
    assert "99-cloud.conf" in finding["message"]


def test_cpu_and_io_writers_are_named(fakeroot):
    write(fakeroot, "/proc/103/comm", "power-profiles-\n")
    write(fakeroot, "/etc/systemd/system/multi-user.target.wants/cpupower.service", "[Unit]\n")
    write(fakeroot, "/usr/lib/udev/rules.d/60-ioschedulers.rules", 'ACTION=="add", ATTR{queue/scheduler}="bfq"\n')
    write(fakeroot, "/usr/lib/udev/rules.d/50-other.rules", 'ATTR{queue/rotational}=="0", TAG+="ssd"\n')
    found = [w for w in host_writers(Context("preflight", root=str(fakeroot))) if w["tool"] == "cpu-io"]
    messages = [w["message"] for w in found]
    assert len(messages) == 3
    assert messages[0].startswith("power-profiles-daemon runs")
    assert "cpupower.service" in messages[1]
    assert "60-ioschedulers.rules" in messages[2] and "50-other.rules" not in messages[2]


def test_a_udev_rule_masked_in_etc_does_not_count(fakeroot):
    write(fakeroot, "/usr/lib/udev/rules.d/60-ioschedulers.rules", 'ATTR{queue/scheduler}="bfq"\n')
    write(fakeroot, "/etc/udev/rules.d/60-ioschedulers.rules", "# masked\n")
    assert [w for w in host_writers(Context("preflight", root=str(fakeroot))) if w["tool"] == "cpu-io"] == []
