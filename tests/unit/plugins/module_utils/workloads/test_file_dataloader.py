# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The file_dataloader workload (workloads/host/files.py), run for real on temporary directories:
its results, that it leaves nothing behind (also after a SIGKILL of its process group, at the
next start), that it refuses what it cannot use before it writes anything, and that it never
touches a file it did not create."""

from __future__ import absolute_import, division, print_function

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import files
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.base import WorkloadError
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.source import write_program

SMALL = {"size": 8, "workers": 2, "steps": 30, "warmup": 3, "files": 48}


def run(data_dir, **over):
    return files.wl_file_dataloader(dict(SMALL, data_dir=str(data_dir), **over))


def tree(top):
    """Every path under ``top`` (symlinks not followed) with its content, or its link target."""
    out = {}
    for base, dirs, names in os.walk(str(top)):
        for name in dirs + names:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, str(top))
            if os.path.islink(path):
                out[rel] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    out[rel] = handle.read()
            else:
                out[rel] = "dir"
    return out


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data"
    path.mkdir()
    return path


def test_a_block_reads_every_file_batch_and_leaves_nothing(data):
    out = run(data)
    assert len(out["samples_ms"]) == 30 and all(v > 0 for v in out["samples_ms"])
    assert out["work_unit"] == "B"
    sizes = files.file_sizes(48)
    assert 8 * min(sizes) <= out["work_per_step"] <= 8 * max(sizes)
    info = out["info"]
    assert info["files"] == 48 and info["batch_files"] == 8 and info["workers"] == 2
    assert info["dataset_bytes"] == sum(sizes)
    assert info["private_dir"].startswith(files.FILE_PREFIX)
    assert info["stale_removed"] == [] and info["left_behind"] == []
    assert out["conditions"]["nvml"] == "not used"
    assert os.listdir(str(data)) == []


def test_the_data_set_is_bounded_and_the_same_every_block():
    sizes = files.file_sizes()
    assert sizes == files.file_sizes()
    assert len(sizes) == files.FILE_COUNT == 512
    assert min(sizes) >= 64 * 1024 and max(sizes) <= 256 * 1024
    assert round(sum(sizes) / 1048576.0, 1) == 81.2  # as the docs say
    assert files.FILE_COUNT * files.FILE_MAX_KIB * 1024 == 128 << 20


def test_each_epoch_reads_every_file_once_in_a_shuffled_order():
    orders = {}
    epoch = [i for seq in range(6) for i in files.batch_files(seq, 8, 48, orders)]
    assert sorted(epoch) == list(range(48)) and epoch != list(range(48))
    again = [i for seq in range(6) for i in files.batch_files(seq, 8, 48, {})]
    assert again == epoch
    assert files.batch_files(6, 8, 48, {}) != epoch[:8]  # the next epoch, another order


def test_the_workloads_own_names():
    assert files.is_sample_name("sample-00012.bin") and files.is_sample_name("sample-123456.bin")
    for name in ("sample-12.bin", "sample-0001x.bin", "notes.txt", "sample-00012.bin.bak", files.FILE_MARKER):
        assert not files.is_sample_name(name)


def test_foreign_files_in_the_data_dir_are_never_touched(data, tmp_path):
    (data / "keep.txt").write_text("the user's")
    (data / "train").mkdir()
    (data / "train" / "sample-00001.bin").write_bytes(b"a user's sample")
    # a directory with the workload's prefix but not its lock file: a user's
    mine = data / (files.FILE_PREFIX + "user")
    mine.mkdir()
    (mine / "sample-00000.bin").write_bytes(b"not the workload's")
    # a symlink with the prefix, to a directory that looks like a left-behind one: not followed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / files.FILE_MARKER).write_text("{}")
    (elsewhere / "sample-00000.bin").write_bytes(b"behind a link")
    os.symlink(str(elsewhere), str(data / (files.FILE_PREFIX + "link")))
    # a file with the prefix
    (data / (files.FILE_PREFIX + "file")).write_text("a file")
    before, outside = tree(data), tree(elsewhere)
    out = run(data)
    assert tree(data) == before and tree(elsewhere) == outside
    assert out["info"]["stale_removed"] == [] and out["info"]["stale_kept"] == []


def test_a_left_behind_directory_with_a_users_file_in_it_keeps_that_file(data):
    stale = data / (files.FILE_PREFIX + "0123456789ab")
    stale.mkdir(mode=0o700)
    (stale / files.FILE_MARKER).write_text("{}")
    (stale / "sample-00000.bin").write_bytes(b"x" * 10)
    (stale / "notes.txt").write_text("someone put this here")
    out = run(data)
    assert sorted(os.listdir(str(stale))) == [files.FILE_MARKER, "notes.txt"]
    assert (stale / "notes.txt").read_text() == "someone put this here"
    assert out["info"]["stale_removed"] == []
    assert "notes.txt" in out["info"]["stale_kept"][0]


def test_a_running_blocks_directory_is_not_swept_and_a_dead_ones_is(data):
    base = files.open_data_dir(str(data))
    try:
        name, dir_fd, marker = files.make_private_dir(base)
        assert os.stat(str(data / name)).st_mode & 0o777 == 0o700
        files.write_dataset(dir_fd, files.file_sizes(4))
        assert files.sweep_stale(base) == ([], [])  # its lock is held: a running block's
        assert len(os.listdir(str(data / name))) == 5
        os.close(marker)  # the block is gone: the kernel drops its lock
        os.close(dir_fd)
        assert files.sweep_stale(base) == ([name], [])
        assert os.listdir(str(data)) == []
    finally:
        os.close(base)


def _private_dirs(data):
    return [n for n in os.listdir(str(data)) if n.startswith(files.FILE_PREFIX)]


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_block_killed_with_its_process_group_is_cleaned_up_by_the_next(data, tmp_path):
    program = write_program(str(tmp_path))
    args = {"workload": "file_dataloader", "steps": 10**7, "warmup": 0, "size": 8, "workers": 2}
    args["data_dir"] = str(data)
    proc = subprocess.Popen(
        [sys.executable, program, json.dumps(args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            found = _private_dirs(data)
            if found and len(os.listdir(str(data / found[0]))) > files.FILE_COUNT:
                break
            time.sleep(0.05)
        time.sleep(0.5)  # reading batches by now
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # as the block runner and the bench timeout kill a block
        proc.wait(10)
    left = _private_dirs(data)
    assert len(left) == 1
    deadline = time.time() + 10  # every process of the group gone, and with the last its lock
    while time.time() < deadline and _group_alive(proc.pid):
        time.sleep(0.05)
    out = run(data)
    assert out["info"]["stale_removed"] == left
    assert os.listdir(str(data)) == []


def test_a_broken_read_fails_loudly_and_still_cleans_up(data, monkeypatch):
    written = files.write_dataset

    def wrong(dir_fd, sizes):
        crcs = written(dir_fd, sizes)
        crcs[5] ^= 1  # what a read returning other bytes than were written looks like
        return crcs

    monkeypatch.setattr(files, "write_dataset", wrong)
    with pytest.raises(WorkloadError, match="sample-00005.bin read back other bytes"):
        run(data, steps=60)
    assert os.listdir(str(data)) == []


@contextlib.contextmanager
def private_dir(data):
    """A block's sub-directory in ``data``: (base fd, name, its fd); afterwards removed, leaving ``data`` empty."""
    base = files.open_data_dir(str(data))
    name, dir_fd, marker = files.make_private_dir(base)
    try:
        yield base, name, dir_fd
    finally:
        assert files.clear_private_dir(base, name, dir_fd) == []
        os.close(marker)
        os.close(dir_fd)
        os.close(base)
    assert os.listdir(str(data)) == []


def test_a_short_file_is_a_broken_read(data):
    with private_dir(data) as (_base, name, dir_fd):
        files.write_dataset(dir_fd, [65536])
        os.truncate(os.path.join(str(data), name, "sample-00000.bin"), 1000)
        with pytest.raises(WorkloadError, match="read back 1000 bytes, 65536 were written"):
            files.read_sample(dir_fd, 0, 65536)


@pytest.mark.parametrize(
    "make, word",
    [
        (lambda d: "relative/data", "is not an absolute path"),
        (lambda d: str(d) + "/../data", "without '..'"),
        (lambda d: str(d / "missing"), "does not exist"),
        (lambda d: (d / "file").write_text("x") and str(d / "file"), "is not a directory"),
        (lambda d: os.symlink(str(d), str(d.parent / "link")) or str(d.parent / "link"), "is a symlink"),
        (lambda d: None, "needs data_dir"),
    ],
)
def test_a_data_dir_it_cannot_use_is_refused_before_anything_is_written(data, make, word):
    path = make(data)
    before = tree(data.parent)
    with pytest.raises(WorkloadError, match=word) as exc:
        files.wl_file_dataloader(dict(SMALL, data_dir=path))
    assert "stacktune_bench_data_dir" in str(exc.value)
    assert tree(data.parent) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to any directory")
def test_a_data_dir_it_cannot_write_is_refused(data):
    data.chmod(0o500)
    try:
        with pytest.raises(WorkloadError, match="is not writable") as exc:
            run(data)
        assert "stacktune_bench_data_dir" in str(exc.value)
    finally:
        data.chmod(0o700)
    assert os.listdir(str(data)) == []


def test_a_data_dir_this_user_may_not_write_is_refused(data, monkeypatch):
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # what access(2) says there, as any user
    with pytest.raises(WorkloadError, match="is not writable by uid %d" % os.geteuid()):
        run(data)
    monkeypatch.undo()
    assert os.listdir(str(data)) == []


def test_a_data_dir_on_a_read_only_filesystem_is_refused_as_such(data, monkeypatch):
    real = os.statvfs

    def read_only(path):
        st = real(path)
        return os.statvfs_result(tuple(st)[:8] + (st.f_flag | os.ST_RDONLY,) + tuple(st)[9:])

    monkeypatch.setattr(os, "access", lambda path, mode: False)
    monkeypatch.setattr(os, "statvfs", read_only)
    with pytest.raises(WorkloadError, match="is on a read-only filesystem"):
        run(data)
    monkeypatch.undo()
    assert os.listdir(str(data)) == []


def test_too_little_free_space_is_refused_before_anything_is_written(data):
    (data / "keep.txt").write_text("x")
    with pytest.raises(WorkloadError, match="free some space there or set data_dir") as exc:
        run(data, reserve_bytes=1 << 60)
    assert "48 files take" in str(exc.value) and "stacktune_bench_data_dir" in str(exc.value)
    assert os.listdir(str(data)) == ["keep.txt"]


def test_the_default_data_set_needs_its_size_and_the_reserve(data, monkeypatch):
    real = os.fstatvfs

    def small(fd):
        st = real(fd)
        room = (sum(files.file_sizes()) + files.FILE_RESERVE_BYTES) // st.f_frsize  # a little short
        return os.statvfs_result((st.f_bsize, st.f_frsize, st.f_blocks, room, room) + tuple(st)[5:])

    monkeypatch.setattr(os, "fstatvfs", small)
    base = files.open_data_dir(str(data))
    try:
        with pytest.raises(WorkloadError, match="512 files take 81.2 MiB and it keeps 1.0 GiB free"):
            files.check_space(base, str(data), files.file_sizes(), files.FILE_RESERVE_BYTES)
    finally:
        os.close(base)


def test_its_private_directory_is_made_private_whatever_the_umask(data):
    old = os.umask(0o277)
    try:
        with private_dir(data) as (_base, name, _dir_fd):
            os.umask(old)
            assert os.stat(str(data / name)).st_mode & 0o777 == 0o700
            with open(str(data / name / files.FILE_MARKER)) as handle:
                note = json.load(handle)
            assert note["workload"] == "file_dataloader" and note["pid"] == os.getpid()
    finally:
        os.umask(old)


def test_a_filesystem_that_is_not_a_block_device_has_no_device_name():
    assert files.block_device(os.makedev(0, 4242)) is None
    st = os.stat(tempfile.gettempdir())
    name = files.block_device(st.st_dev)
    assert name is None or "/" not in name
