# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The grubby_arg kind on a constructed RHEL 9 tree (extensions/molecule/grubby_tree/files/
make-tree.sh) with the grubby stand-in of the same folder as the tree's usr/sbin/grubby.

No RHEL host is reached: the stand-in does what grubby-bls does to BLS entries,
/etc/kernel/cmdline and GRUB_CMDLINE_LINUX, and every assertion reads the files it left."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import UnsafePath
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import UntrustedJournal, open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.grubby import grubby_edit

FILES = os.path.join(os.path.dirname(__file__), "../../../../../../extensions/molecule/grubby_tree/files")
MID = "3f1b2c4d5e6f47808192a3b4c5d6e7f8"
NEW = "/boot/loader/entries/%s-5.14.0-427.13.1.el9_4.x86_64.conf" % MID
OLD = "/boot/loader/entries/%s-5.14.0-362.24.1.el9_3.x86_64.conf" % MID
RESCUE = "/boot/loader/entries/%s-0-rescue.conf" % MID
ENTRIES = (NEW, OLD, RESCUE)
ARGS = [
    {"kind": "grubby_arg", "key": "iommu", "value": "pt", "var": "kernel_cmdline_args"},
    {"kind": "grubby_arg", "key": "numa_balancing", "value": "disable", "var": "kernel_cmdline_args"},
    {"kind": "grubby_arg", "key": "intel_iommu", "value": "on", "var": "kernel_cmdline_args"},
]


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "rhel"
    subprocess.check_call(["sh", os.path.join(FILES, "make-tree.sh"), str(root)])
    return root


class Runner:
    """The module's run_command: argv lists, every call recorded."""

    def __init__(self):
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr


def engine(root, check=False, runner=None, layer="kernel"):
    ctx = Context(layer, root=str(root), run_command=runner or Runner())
    return Engine(ctx, open_journal("/var/lib/stacktune", str(root)), check_mode=check)


def host(root, path):
    return os.path.join(str(root), path.lstrip("/"))


def read(root, path):
    with open(host(root, path)) as handle:
        return handle.read()


def options(root, path):
    return [line for line in read(root, path).splitlines() if line.startswith("options ")][0].split()[1:]


def everything(root):
    """Every file under root but the journal, with its bytes, mode and owner."""
    out = {}
    for base, dirs, files in os.walk(str(root)):
        dirs[:] = sorted(d for d in dirs if os.path.join(base, d) != host(root, "/var/lib/stacktune"))
        for name in sorted(files):
            full = os.path.join(base, name)
            st = os.lstat(full)
            with open(full, "rb") as handle:
                out[full] = (handle.read(), oct(st.st_mode), st.st_uid, st.st_gid)
    return out


def by_id(result):
    return {r["id"]: r for r in result["settings"]}


def test_apply_runs_grubby_for_the_arguments_that_differ_and_persists_them_everywhere(tree):
    runner = Runner()
    result = engine(tree, runner=runner).apply(ARGS, "run1")
    rows = by_id(result)
    assert [c[1:] for c in runner.calls] == [["--update-kernel=ALL", "--args=iommu=pt numa_balancing=disable"]]
    assert runner.calls[0][0] == host(tree, "/usr/sbin/grubby")
    for sid in ("grubby_arg:iommu", "grubby_arg:numa_balancing"):
        assert rows[sid]["status"] == "pending_reboot" and rows[sid]["changed"]
        assert rows[sid]["effect"] == "next_boot"
        assert rows[sid]["persisted_in"] == "/boot/loader/entries"
    assert rows["grubby_arg:iommu"]["live"] is None and rows["grubby_arg:iommu"]["persisted_before"] is None
    assert rows["grubby_arg:numa_balancing"]["live"] == "enable"
    assert rows["grubby_arg:numa_balancing"]["persisted_before"] == "enable"
    # the engine counts every setting of a unit it rewrote as written; grubby left this one as it was
    assert rows["grubby_arg:intel_iommu"]["status"] == "changed"
    # the default entry (grubenv's saved_entry) is what the next boot reads
    assert rows["grubby_arg:iommu"]["at_boot"] == "pt" and rows["grubby_arg:iommu"]["at_boot_from"] == NEW
    for path in ENTRIES:
        words = options(tree, path)
        assert words[-2:] == ["iommu=pt", "numa_balancing=disable"]
        assert "numa_balancing=enable" not in words and words.count("intel_iommu=on") == 1
    assert options(tree, NEW)[-3] == "$tuned_params"  # grubby appends after TuneD's variable
    assert read(tree, "/etc/kernel/cmdline").split()[-2:] == ["iommu=pt", "numa_balancing=disable"]
    grub = [line for line in read(tree, "/etc/default/grub").splitlines() if line.startswith("GRUB_CMDLINE_LINUX=")]
    assert grub == [
        'GRUB_CMDLINE_LINUX="crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M resume=/dev/mapper/rl-swap '
        'rd.lvm.lv=rl/root rd.lvm.lv=rl/swap rhgb quiet intel_iommu=on iommu=pt numa_balancing=disable"'
    ]
    assert read(tree, "/proc/cmdline").split()[-1] == "skew_tick=1"  # the running kernel's is untouched


def test_check_mode_predicts_the_real_run_and_writes_nothing(tree):
    before = everything(tree)
    runner = Runner()
    check = engine(tree, check=True, runner=runner).apply(ARGS, "run1")
    assert everything(tree) == before and runner.calls == []
    real = engine(tree).apply(ARGS, "run1")
    # (at_boot of a check run is what the host has now, for every kind; the status is the prediction)
    keys = ("id", "status", "changed", "expected", "persisted_in", "effect", "reason")
    assert [{k: r.get(k) for k in keys} for r in check["settings"]] == [
        {k: r.get(k) for k in keys} for r in real["settings"]
    ]
    assert [r["persisted"] for r in check["settings"]] == [r["persisted_before"] for r in real["settings"]]
    assert check["counts"] == real["counts"] == {"pending_reboot": 2, "changed": 1}


def test_a_second_run_changes_nothing_and_runs_no_grubby(tree):
    engine(tree).apply(ARGS, "run1")
    after = everything(tree)
    runner = Runner()
    again = engine(tree, runner=runner).apply(ARGS, "run2")
    assert not again["changed"] and runner.calls == []
    assert everything(tree) == after
    assert [r["status"] for r in again["settings"]] == ["pending_reboot", "pending_reboot", "ok"]
    check = engine(tree, check=True).apply(ARGS, "run3")
    assert not check["changed"]


def test_verify_reads_the_entries_and_finds_drift_and_an_override(tree):
    engine(tree).apply(ARGS, "run1")
    clean = engine(tree).verify()
    assert clean["drift"] == [] and clean["overridden"] == []
    assert sorted(clean["pending_reboot"]) == ["grubby_arg:iommu", "grubby_arg:numa_balancing"]
    # an entry edited by hand: the targets disagree
    text = read(tree, OLD).replace("iommu=pt", "iommu=off")
    with open(host(tree, OLD), "w") as handle:
        handle.write(text)
    drift = by_id(engine(tree).verify())["grubby_arg:iommu"]
    assert drift["status"] == "drift"
    assert drift["persisted"].startswith("differs between the boot entries (")
    assert "%s: iommu=off" % OLD.rsplit("/", 1)[1] in drift["persisted"]
    with open(host(tree, OLD), "w") as handle:
        handle.write(text.replace("iommu=off", "iommu=pt"))
    # a grubenv variable after stacktune's argument in the default entry sets another value
    with open(host(tree, NEW)) as handle:
        entry = handle.read()
    with open(host(tree, NEW), "w") as handle:
        handle.write(entry.replace("numa_balancing=disable\n", "numa_balancing=disable $site_args\n"))
    env = read(tree, "/boot/grub2/grubenv").replace(
        "tuned_params=skew_tick=1\n", "tuned_params=\nsite_args=iommu=off\n"
    )
    with open(host(tree, "/boot/grub2/grubenv"), "w") as handle:
        handle.write(env)
    over = by_id(engine(tree).verify())["grubby_arg:iommu"]
    assert over["status"] == "overridden" and over["at_boot"] == "off" and over["at_boot_from"] == NEW
    assert "at the next boot %s sets off; stacktune's /boot/loader/entries sets pt" % NEW in over["reason"]


def test_restore_to_original_is_byte_exact(tree):
    before = everything(tree)
    engine(tree).apply(ARGS, "run1")
    assert everything(tree) != before
    result = engine(tree).restore("original", "run2")
    assert result["changed"] and result["layer_state"] == "restored"
    assert [r["id"] for r in result["settings"] if r["kind"] == "unit"] == ["boot_entries:/boot/loader/entries"]
    assert {r["id"]: r["status"] for r in result["settings"] if r["kind"] != "unit"} == {
        "grubby_arg:iommu": "ok",  # the running kernel never had it
        "grubby_arg:numa_balancing": "ok",
        "grubby_arg:intel_iommu": "ok",
    }
    assert everything(tree) == before
    assert engine(tree).verify()["settings"] == []
    assert not engine(tree).restore("original", "run3")["changed"]


def test_a_gate_rollback_returns_to_the_kept_arguments(tree):
    engine(tree).apply(ARGS[:1], "run1")
    engine(tree).keep("run1", {"decision": "keep", "basis": "gain"})
    kept = everything(tree)
    engine(tree).apply(ARGS, "run2")
    assert options(tree, NEW)[-1] == "numa_balancing=disable"
    engine(tree).restore("snapshot", "run2", decision={"decision": "rollback"})
    assert everything(tree) == kept
    assert options(tree, RESCUE)[-2:] == ["numa_balancing=enable", "iommu=pt"]


def test_an_argument_given_up_goes_back_to_its_value_before_stacktune(tree):
    before = everything(tree)
    engine(tree).apply(ARGS, "run1")
    runner = Runner()
    check = engine(tree, check=True).apply(ARGS[:1], "run2")
    result = engine(tree, runner=runner).apply(ARGS[:1], "run2")
    assert [c[1:] for c in runner.calls] == [["--update-kernel=ALL", "--args=numa_balancing=enable"]]
    assert check["changed"] and result["changed"]
    for path in ENTRIES + ("/etc/kernel/cmdline",):
        words = read(tree, path).split()
        assert "numa_balancing=enable" in words and "numa_balancing=disable" not in words and "iommu=pt" in words
    engine(tree).restore("original", "run3")
    assert everything(tree) == before


def test_an_argument_the_host_did_not_have_is_removed_when_given_up(tree):
    before = everything(tree)
    engine(tree).apply(ARGS, "run1")
    runner = Runner()
    engine(tree, runner=runner).apply(ARGS[1:], "run2")
    assert [c[1:] for c in runner.calls] == [["--update-kernel=ALL", "--remove-args=iommu"]]
    assert all("iommu" not in (t.partition("=")[0] for t in options(tree, p)) for p in ENTRIES)
    engine(tree).restore("original", "run3")
    assert everything(tree) == before


@pytest.mark.parametrize(
    "value, needle",
    [
        ("pt quiet", "spaces, quotes, newlines"),
        ('"pt"', "spaces, quotes, newlines"),
        ("pt\ninit=/bin/sh", "spaces, quotes, newlines"),
        ("$(reboot)", "spaces, quotes, newlines"),
        (True, "is a boolean"),
    ],
)
def test_a_value_beyond_a_plain_word_is_refused_naming_the_variable(tree, value, needle):
    before = everything(tree)
    spec = [{"kind": "grubby_arg", "key": "iommu", "value": value, "var": "kernel_cmdline_args"}]
    with pytest.raises(SpecError, match=r"^kernel_cmdline_args: settings\[0\] \(grubby_arg iommu\): .*%s" % needle):
        engine(tree).apply(spec, "run1")
    assert everything(tree) == before


@pytest.mark.parametrize("check", [False, True])
def test_a_linked_boot_entry_is_refused_unread(tree, check):
    with open(host(tree, "/etc/shadow"), "w") as handle:
        handle.write("root:$6$secret:19000:0:99999:7:::\n")
    os.remove(host(tree, OLD))
    os.symlink(host(tree, "/etc/shadow"), host(tree, OLD))
    before = everything(tree)
    runner = Runner()
    with pytest.raises(UnsafePath, match="is a symbolic link"):
        engine(tree, check=check, runner=runner).apply(ARGS, "run1")
    assert everything(tree) == before and runner.calls == []
    assert not os.path.exists(host(tree, "/var/lib/stacktune/layers/kernel.json"))


def test_a_linked_entries_directory_is_refused(tree):
    os.rename(host(tree, "/boot/loader/entries"), host(tree, "/boot/loader/real"))
    os.symlink(host(tree, "/boot/loader/real"), host(tree, "/boot/loader/entries"))
    before = everything(tree)
    with pytest.raises(UnsafePath, match="/boot/loader/entries is a symbolic link"):
        engine(tree).apply(ARGS, "run1")
    assert everything(tree) == before


def test_a_file_another_user_owns_is_refused(tree, monkeypatch):
    if os.geteuid() == 0:
        os.chown(host(tree, "/etc/kernel/cmdline"), 4321, 4321)
        owner = 4321
    else:  # every file is this user's: this user is then someone else
        owner = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    before = everything(tree)
    with pytest.raises(
        SpecError, match=r"/etc/kernel/cmdline is owned by uid %d" % owner if owner == 4321 else "owned by uid"
    ):
        engine(tree).apply(ARGS, "run1")
    assert everything(tree) == before


def test_an_argument_an_entry_carries_twice_is_refused_naming_it(tree):
    text = read(tree, RESCUE).replace("numa_balancing=enable", "numa_balancing=enable numa_balancing=disable")
    with open(host(tree, RESCUE), "w") as handle:
        handle.write(text)
    before = everything(tree)
    with pytest.raises(SpecError, match="%s carries boot argument numa_balancing more than once" % RESCUE):
        engine(tree).apply(ARGS, "run1")
    assert everything(tree) == before


def test_an_entry_without_an_options_line_is_refused(tree):
    text = "\n".join(line for line in read(tree, OLD).splitlines() if not line.startswith("options")) + "\n"
    with open(host(tree, OLD), "w") as handle:
        handle.write(text)
    with pytest.raises(SpecError, match="boot entry %s has no options line" % OLD):
        engine(tree).apply(ARGS, "run1")


def test_entries_that_take_kernelopts_from_grubenv_are_unsupported(tree):
    for path in ENTRIES:
        text = "\n".join(
            "options $kernelopts" if line.startswith("options") else line for line in read(tree, path).splitlines()
        )
        with open(host(tree, path), "w") as handle:
            handle.write(text + "\n")
    before = everything(tree)
    runner = Runner()
    result = engine(tree, runner=runner).apply(ARGS[:1], "run1")
    row = result["settings"][0]
    assert row["status"] == "unsupported" and "$kernelopts" in row["reason"] and not result["changed"]
    assert everything(tree) == before and runner.calls == []


def test_a_grubby_that_does_something_else_is_undone_and_named(tree):
    with open(host(tree, "/usr/sbin/grubby"), "w") as handle:
        handle.write("#!/bin/sh\nsed -i 's/^options .*/options broken/' %s\n" % host(tree, NEW))
    before = everything(tree)
    with pytest.raises(RuntimeError, match="the boot entries were put back as they were"):
        engine(tree).apply(ARGS, "run1")
    assert everything(tree) == before
    # the journal was written ahead: the next run puts the layer back and applies afresh
    with open(host(tree, "/usr/sbin/grubby"), "w") as handle, open(os.path.join(FILES, "grubby")) as real:
        handle.write(real.read())
    assert engine(tree).apply(ARGS, "run2")["counts"] == {"pending_reboot": 2, "changed": 1}


def test_no_grubby_on_the_host_reports_unsupported(tree):
    os.remove(host(tree, "/usr/sbin/grubby"))
    result = engine(tree).apply(ARGS[:1], "run1")
    assert result["settings"][0]["status"] == "unsupported"
    assert "grubby is not installed" in result["settings"][0]["reason"]


def test_a_record_that_would_restore_a_file_outside_the_boot_entries_is_untrusted(tree):
    engine(tree).apply(ARGS, "run1")
    path = host(tree, "/var/lib/stacktune/layers/kernel.json")
    with open(path) as handle:
        record = json.load(handle)
    unit = record["original"]["units"]["boot_entries:/boot/loader/entries"]
    unit["files"]["/etc/shadow"] = dict(unit["files"]["/etc/kernel/cmdline"])
    with open(path, "w") as handle:
        json.dump(record, handle)
    with pytest.raises(UntrustedJournal, match="would restore /boot/loader/entries"):
        engine(tree).restore("original", "run2")


def test_a_kernel_installed_after_the_apply_is_left_and_named_on_restore(tree):
    before = everything(tree)
    engine(tree).apply(ARGS, "run1")
    newer = NEW.replace("427.13.1.el9_4", "503.11.1.el9_5")
    with open(host(tree, NEW)) as src, open(host(tree, newer), "w") as dst:
        dst.write(src.read().replace("427.13.1.el9_4", "503.11.1.el9_5"))
    result = engine(tree).restore("original", "run2")
    assert any(newer in note and "left as it is" in note for note in result["notes"])
    after = everything(tree)
    assert {p: v for p, v in after.items() if p != host(tree, newer)} == before


@pytest.mark.parametrize(
    "words, remove, add, want",
    [
        ("ro quiet iommu=off rhgb", [], ["iommu=pt"], "ro quiet rhgb iommu=pt"),
        ("ro quiet", [], ["nosoftlockup"], "ro quiet nosoftlockup"),
        ("ro quiet nosoftlockup", ["nosoftlockup"], [], "ro quiet"),
        ("ro intel_iommu=on iommu=pt", ["iommu"], [], "ro intel_iommu=on"),
        ("ro intel_iommu=on", [], ["iommu=pt"], "ro intel_iommu=on iommu=pt"),
        ("ro  a=1   b", ["a"], ["c=x=y"], "ro b c=x=y"),
    ],
)
def test_the_prediction_edits_a_command_line_as_the_stand_in_does(tmp_path, words, remove, add, want):
    entries = tmp_path / "entries"
    entries.mkdir()
    (entries / "x.conf").write_text("title x\nlinux /vmlinuz-x\noptions %s\n" % words)
    argv = [os.path.join(FILES, "grubby"), "-b", str(entries), "--update-kernel=ALL", "--no-etc-grub-update"]
    argv += (["--args=%s" % " ".join(add)] if add else []) + (["--remove-args=%s" % " ".join(remove)] if remove else [])
    subprocess.check_call(argv)
    assert (entries / "x.conf").read_text().splitlines()[-1] == "options " + want
    assert grubby_edit(words, remove, add) == want


def test_verify_checks_the_entries_against_grubby_info(tree):
    engine(tree).apply(ARGS, "run1")
    runner = Runner()
    agreed = engine(tree, runner=runner).verify()
    assert [c[1:] for c in runner.calls] == [["--info=ALL"]]
    assert all(r["other_writers"] == [] for r in agreed["settings"]) and agreed["notes"] == []
    # a grubby that reads other entries (another BLS directory) is named for what it shows otherwise
    fake = host(tree, "/usr/sbin/grubby")
    with open(fake, "w") as handle:
        handle.write(
            "#!/bin/sh\necho index=0\necho 'id=\"%s\"'\necho 'args=\"ro iommu=off\"'\n" % NEW.rsplit("/", 1)[1][:-5]
        )
    seen = engine(tree).verify()
    rows = by_id(seen)
    assert rows["grubby_arg:iommu"]["other_writers"] == ["grubby"]
    assert rows["grubby_arg:numa_balancing"]["other_writers"] == ["grubby"]  # entries it does not list
    note = "grubby --info=ALL shows (not listed) for grubby_arg:iommu in entry %s-0-rescue, the entry's file pt"
    assert any(note % MID in n for n in seen["notes"])
