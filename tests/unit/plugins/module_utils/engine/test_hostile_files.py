# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The settings engine on a messy or hostile host: links where files should be, shared files
with duplicate lines or no final newline. Each case is refused before anything changes (and
nothing is read into the journal or a result), or goes back byte for byte."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import UnsafePath
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError

SECRET = "root:$6$saltsalt$NotARealHashButSecret:19000:0:99999:7:::\n"
NCCL = [{"kind": "file", "key": "/etc/nccl.conf", "value": "NCCL_SOCKET_IFNAME=^lo\n"}]
SHM = [{"kind": "mount", "key": "/dev/shm", "option": "size", "value": "64G"}]
IRQ = [{"kind": "env_var", "path": "/etc/default/irqbalance", "key": "IRQBALANCE_ARGS", "value": "--banirq=41"}]
SYSCTL = [{"kind": "sysctl", "key": "vm.swappiness", "value": "10"}]


def engine(root, layer, check=False):
    return Engine(Context(layer, root=str(root)), open_journal("/var/lib/stacktune", str(root)), check_mode=check)


def host(root, path):
    return os.path.join(str(root), path.lstrip("/"))


def put(root, path, text):
    full = host(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)
    return full


def everything(root):
    """Every byte under root (journal included): a refused call must leave it as it was."""
    out = {}
    for base, dirs, files in os.walk(str(root)):
        dirs.sort()
        for name in sorted(files) + sorted(d for d in dirs if os.path.islink(os.path.join(base, d))):
            full = os.path.join(base, name)
            if os.path.islink(full):
                out[full] = "-> " + os.readlink(full)
            else:
                with open(full, "rb") as handle:
                    out[full] = handle.read()
    return out


@pytest.mark.parametrize("check", [False, True])
def test_a_managed_file_that_is_a_link_to_a_secret_is_refused_unread(fakeroot, check):
    put(fakeroot, "/etc/shadow", SECRET)
    os.symlink(host(fakeroot, "/etc/shadow"), host(fakeroot, "/etc/nccl.conf"))
    before = everything(fakeroot)
    with pytest.raises(UnsafePath, match=r"/etc/nccl.conf is a symbolic link \(to .*/etc/shadow\)"):
        engine(fakeroot, "nccl", check=check).apply(NCCL, "run1")
    assert everything(fakeroot) == before
    assert not os.path.exists(host(fakeroot, "/var/lib/stacktune/layers/nccl.json"))


def test_a_linked_fstab_is_refused_and_stays_a_link(fakeroot):
    put(fakeroot, "/srv/fstab.real", "# real fstab\n")
    os.remove(host(fakeroot, "/etc/fstab"))
    os.symlink(host(fakeroot, "/srv/fstab.real"), host(fakeroot, "/etc/fstab"))
    before = everything(fakeroot)
    with pytest.raises(UnsafePath, match="/etc/fstab is a symbolic link"):
        engine(fakeroot, "memory").apply(SHM, "run1")
    assert everything(fakeroot) == before


def test_a_linked_parent_directory_is_refused(fakeroot):
    os.makedirs(host(fakeroot, "/srv/elsewhere"))
    os.symlink(host(fakeroot, "/srv/elsewhere"), host(fakeroot, "/etc/sysctl.d"))
    before = everything(fakeroot)
    with pytest.raises(
        UnsafePath, match="/etc/sysctl.d is a symbolic link .* on the way to /etc/sysctl.d/60-stacktune"
    ):
        engine(fakeroot, "kernel").apply(SYSCTL, "run1")
    assert everything(fakeroot) == before
    assert os.listdir(host(fakeroot, "/srv/elsewhere")) == []


def test_something_that_is_no_regular_file_is_refused(fakeroot):
    os.makedirs(host(fakeroot, "/etc/nccl.conf"))
    os.mkfifo(host(fakeroot, "/etc/nccl.conf/x"))
    with pytest.raises(UnsafePath, match="/etc/nccl.conf is not a regular file"):
        engine(fakeroot, "nccl").apply(NCCL, "run1")


def test_a_link_placed_after_tuning_is_not_written_through_on_rollback(fakeroot):
    engine(fakeroot, "nccl").apply(NCCL, "run1")
    put(fakeroot, "/etc/shadow", SECRET)
    os.remove(host(fakeroot, "/etc/nccl.conf"))
    os.symlink(host(fakeroot, "/etc/shadow"), host(fakeroot, "/etc/nccl.conf"))
    with pytest.raises(UnsafePath):
        engine(fakeroot, "nccl").restore("original", "rollback")
    with open(host(fakeroot, "/etc/shadow")) as handle:
        assert handle.read() == SECRET
    assert SECRET.strip() not in json.dumps(open_journal("/var/lib/stacktune", str(fakeroot)).load("nccl"))


@pytest.mark.parametrize(
    "path,text,settings,layer",
    [
        (
            "/etc/fstab",
            "UUID=abcd / ext4 defaults 0 1\ntmpfs /dev/shm tmpfs size=8G 0 0\nnas:/d /mnt nfs ro 0 0\n"
            "tmpfs /dev/shm tmpfs size=16G 0 0\n",
            SHM,
            "memory",
        ),
        (
            "/etc/default/irqbalance",
            'ENABLED="1"\nIRQBALANCE_ARGS="--foo"\n# later\nIRQBALANCE_ARGS="--bar"\n',
            IRQ,
            "numa_irq",
        ),
    ],
)
def test_duplicate_lines_are_refused_naming_them_and_kept(fakeroot, path, text, settings, layer):
    put(fakeroot, path, text)
    before = everything(fakeroot)
    with pytest.raises(SpecError, match=r"%s has 2 lines for .* \(lines 2, 4\).*remove the others" % path):
        engine(fakeroot, layer, check=True).apply(settings, "run1")
    with pytest.raises(SpecError, match="has 2 lines"):
        engine(fakeroot, layer).apply(settings, "run1")
    assert everything(fakeroot) == before


@pytest.mark.parametrize(
    "path,text,settings,layer",
    [
        ("/etc/fstab", "# /etc/fstab\nUUID=abcd / ext4 errors=remount-ro 0 1", SHM, "memory"),
        ("/etc/default/irqbalance", '#Configuration\r\nENABLED="1"', IRQ, "numa_irq"),
        ("/etc/default/irqbalance", 'IRQBALANCE_ARGS="--old"\nENABLED="1"', IRQ, "numa_irq"),
    ],
)
def test_a_shared_file_goes_back_byte_for_byte_final_newline_or_not(fakeroot, path, text, settings, layer):
    put(fakeroot, path, text)
    with open(host(fakeroot, path), "rb") as handle:
        original = handle.read()
    engine(fakeroot, layer).apply(settings, "run1")
    with open(host(fakeroot, path), "rb") as handle:
        tuned = handle.read()
    assert tuned != original and not tuned.endswith(b"\n") and original.splitlines()[-1] in tuned
    engine(fakeroot, layer).restore("original", "rollback")
    with open(host(fakeroot, path), "rb") as handle:
        assert handle.read() == original


# ---------------------------------------------------------------- values the kernel refuses


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"kind": "sysctl", "key": "vm.swappiness", "value": False}, "False is a boolean, not a value for the kernel"),
        ({"kind": "sysctl", "key": "vm.swappiness", "value": ""}, "sysctl vm.swappiness needs a value"),
        ({"kind": "sysctl", "key": "vm.swappiness", "value": "250"}, "sysctl vm.swappiness must be 0 to 200, got 250"),
        ({"kind": "sysctl", "key": "vm.swappiness", "value": "ten"}, "must be a whole number"),
        ({"kind": "kernel_arg", "key": "pcie_aspm", "value": False}, "kernel_arg pcie_aspm: False is a boolean"),
        ({"kind": "mount", "key": "/dev/shm", "option": "size", "value": "64"}, "has no unit: that is 64 bytes"),
        ({"kind": "mount", "key": "/dev/shm", "option": "size", "value": True}, "True is a boolean"),
        ({"kind": "file", "key": "/etc/passwd", "value": "x\n"}, "/etc/passwd is a system file"),
        ({"kind": "file", "key": "/etc/sudoers.d/90-x", "value": "x\n"}, "/etc/sudoers is a system file"),
        ({"kind": "env_var", "path": "/etc/ssh/sshd_config", "key": "A", "value": "1"}, "/etc/ssh is a system file"),
    ],
)
def test_values_and_paths_the_host_would_refuse_or_regret_are_refused_first(fakeroot, spec, message):
    before = everything(fakeroot)
    for check in (True, False):
        with pytest.raises(SpecError, match=message):
            engine(fakeroot, "kernel", check=check).apply([dict(spec, var="some_var")], "run1")
    assert everything(fakeroot) == before


def test_huge_pages_must_fit_in_memory(fakeroot):
    put(fakeroot, "/proc/meminfo", "MemTotal:       24576000 kB\nHugepagesize:       2048 kB\n")
    put(fakeroot, "/proc/sys/vm/nr_hugepages", "0\n")
    spec = {"kind": "sysctl", "key": "vm.nr_hugepages", "value": "100000000"}
    with pytest.raises(SpecError, match=r"100000000 pages of 2048 kB is 195312.5 GiB, more than this host's 23.4 GiB"):
        engine(fakeroot, "memory").apply([spec], "run1")
    engine(fakeroot, "memory").apply([dict(spec, value="1024")], "run1")


def test_a_live_write_the_kernel_refuses_is_not_persisted_and_undoes_the_others(fakeroot, monkeypatch):
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds import sysctl as _kind_sysctl

    real = _kind_sysctl.SysctlKind.write_live

    def kernel(self, s, value, ctx):
        if s["key"] == "vm.max_map_count" and value == "1048576":
            raise OSError(22, "Invalid argument")
        return real(self, s, value, ctx)

    monkeypatch.setattr(_kind_sysctl.SysctlKind, "write_live", kernel)
    before = everything(fakeroot)
    specs = [
        {"kind": "sysctl", "key": "vm.swappiness", "value": "10", "var": "kernel_sysctl"},
        {"kind": "sysctl", "key": "vm.max_map_count", "value": "1048576", "var": "kernel_sysctl"},
    ]
    with pytest.raises(
        SpecError,
        match=r"kernel_sysctl: the kernel refused vm.max_map_count = 1048576: .*Invalid argument; nothing was",
    ):
        engine(fakeroot, "kernel").apply(specs, "run1")
    after = everything(fakeroot)
    # swappiness, written first, is back; no drop-in; the journal as it was (none)
    assert {k: v for k, v in after.items() if "var/lib/stacktune" not in k} == before
    assert not os.path.exists(host(fakeroot, "/var/lib/stacktune/layers/kernel.json"))


# ---------------------------------------------------------------- every failure names its object


def test_a_kept_setting_that_can_no_longer_be_read_is_drift(fakeroot):
    engine(fakeroot, "kernel").apply(SYSCTL, "run1")
    engine(fakeroot, "kernel").keep("run1", {"decision": "keep", "basis": "gain"})
    os.remove(host(fakeroot, "/proc/sys/vm/swappiness"))
    out = engine(fakeroot, "kernel").verify()
    row = out["settings"][0]
    assert row["status"] == "drift" and out["drift"] == ["sysctl:vm.swappiness"]
    assert row["reason"].startswith("kept by stacktune, but now ") and "/proc/sys/vm/swappiness" in row["reason"]


def test_a_full_filesystem_names_the_file(fakeroot, monkeypatch):
    from ansible_collections.stacktune.gpu.plugins.module_utils.engine import fileops as _fileops

    def full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_fileops.os, "fsync", full)
    # the write-ahead journal is the first file written
    with pytest.raises(OSError, match="cannot write .*/var/lib/stacktune/layers/nccl.json: No space left on device"):
        engine(fakeroot, "nccl").apply(NCCL, "run1")
    assert not os.path.exists(host(fakeroot, "/etc/nccl.conf"))
