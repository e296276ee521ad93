# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The workload program's file workload: a DataLoader that reads many small files from the disk
holding the training data (``file_dataloader``), the one built-in workload the io layer's
settings (readahead, I/O scheduler, nr_requests, writeback) show in. Part of the assembled
program (``base.py``).

In the data directory it is given (the bench module's ``data_dir``, the role's
``stacktune_bench_data_dir``) it makes a private sub-directory (mode 0700, a unique name
starting with :data:`FILE_PREFIX`, holding the lock file :data:`FILE_MARKER`), writes
:data:`FILE_COUNT` files of 64-256 KiB into it, flushes them and drops them from the page
cache, reads them back in shuffled batches through worker processes (dropping each file from
the cache again after reading it, so every read goes to the device), and removes the
sub-directory at the end. Nothing outside it is ever written or removed, and no symlink is
followed: every path is opened relative to a directory descriptor with ``O_NOFOLLOW``.

A block killed with SIGKILL (the bench module's timeout, the block runner's kill of the
block's process group) leaves its sub-directory behind; the next block removes it. A
sub-directory counts as left behind only when it has the workload's name prefix, is a real
directory of this user holding the lock file, and no running block holds that lock (an
``flock`` the kernel drops with the last process of the block, also on NFS); of it only the
files this workload names (:data:`FILE_NAME`) and the lock file are removed, so a directory
with anything else in it stays.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import fcntl
import json
import os
import random
import signal
import socket
import stat
import time
import zlib

from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import die_with_parent
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.base import (
    CPU,
    Monitor,
    Workload,
    WorkloadError,
    ms_since,
    timed_loop,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.cpu import (
    mp_context,
    stop_workers,
    wait_ready,
)


# ---------------------------------------------------------------------------------------
# File workload (standard library only).

FILE_PREFIX = "stacktune-file-dataloader-"


FILE_MARKER = ".stacktune-file-dataloader.lock"


FILE_NAME = "sample-%05d.bin"


# The data set: FILE_COUNT files of FILE_MIN_KIB to FILE_MAX_KIB KiB (4 KiB steps, the same
# sizes every block: FILE_SEED), as a small-image data set has them; 81.2 MiB in all, never
# more than 128 MiB. A block refuses to start unless the filesystem keeps FILE_RESERVE_BYTES
# free beyond it.
FILE_COUNT = 512


FILE_MIN_KIB = 64


FILE_MAX_KIB = 256


FILE_SEED = 26


FILE_RESERVE_BYTES = 1 << 30


FILE_POOL_BYTES = 4 << 20


DATA_DIR_NAME = "data_dir (stacktune_bench_data_dir)"


# Where the kernel keeps no lock for flock (some FUSE filesystems): a block then runs unlocked,
# and another block cannot lock its lock file either, so it leaves the directory alone.
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL)


NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def file_sizes(count=FILE_COUNT, seed=FILE_SEED):
    """The sizes in bytes of the data set's files, the same for every block."""
    rng = random.Random(seed)
    return [rng.randrange(FILE_MIN_KIB, FILE_MAX_KIB + 1, 4) * 1024 for _file in range(count)]


def is_sample_name(name):
    """Whether ``name`` is one of the names this workload gives its files."""
    digits = name[len("sample-") : -len(".bin")]
    return name.startswith("sample-") and name.endswith(".bin") and len(digits) >= 5 and digits.isdigit()


def _bad_dir(path, why):
    return WorkloadError(
        "file_dataloader: %s %s %s; set it to a writable directory (not a symlink) on the disk that holds "
        "the training data" % (DATA_DIR_NAME, path, why)
    )


def open_data_dir(path):
    """A descriptor of the data directory ``path``, after checking that the workload may use it.

    Refuses (WorkloadError naming the variable) a relative path, one with ``..``, a path that is
    missing, a symlink or not a directory, and a directory this user cannot write.
    """
    if not path:
        raise WorkloadError(
            "file_dataloader needs %s: a directory on the disk that holds the training data, where it "
            "writes and removes its own files" % DATA_DIR_NAME
        )
    path = str(path)
    if not os.path.isabs(path) or ".." in path.split("/"):
        raise _bad_dir(path, "is not an absolute path without '..'")
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        raise _bad_dir(path, "does not exist") from None
    except OSError as exc:
        raise _bad_dir(path, "cannot be read (%s)" % (exc.strerror or exc)) from None
    if stat.S_ISLNK(before.st_mode):
        raise _bad_dir(path, "is a symlink (to %s); give the directory itself" % os.readlink(path))
    if not stat.S_ISDIR(before.st_mode):
        raise _bad_dir(path, "is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        try:
            read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        raise _bad_dir(
            path, "is on a read-only filesystem" if read_only else "is not writable by uid %d" % os.geteuid()
        )
    try:
        fd = os.open(path, NOFOLLOW_DIR)
    except OSError as exc:
        raise _bad_dir(path, "cannot be opened (%s)" % (exc.strerror or exc)) from None
    now = os.fstat(fd)
    if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise _bad_dir(path, "changed while it was checked")
    return fd


def _lock(fd):
    """Take the block's lock on its lock file: True, False (held by a running block) or None (no locks here)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        if exc.errno in NO_LOCKS:
            return None
        raise


def clear_private_dir(base_fd, name, dir_fd):
    """Remove from the sub-directory ``name`` (open as ``dir_fd``) this workload's files, then its
    lock file and the directory itself; return the names of what it did not create (left there,
    and then the lock file and the directory stay too)."""
    uid = os.geteuid()
    foreign = []
    for entry in sorted(os.listdir(dir_fd)):
        if entry == FILE_MARKER:
            continue
        try:
            st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if is_sample_name(entry) and stat.S_ISREG(st.st_mode) and st.st_uid == uid:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry, dir_fd=dir_fd)
        else:
            foreign.append(entry)
    if foreign:
        return foreign
    for remove in (lambda: os.unlink(FILE_MARKER, dir_fd=dir_fd), lambda: os.rmdir(name, dir_fd=base_fd)):
        try:
            remove()
        except FileNotFoundError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            return ["(something was added meanwhile)"]
    return []


def _sweep_one(base_fd, name, uid):
    """Remove one left-behind sub-directory if it is one: a message when it is this workload's but
    stays, None when it is removed or not this workload's."""
    try:
        dir_fd = os.open(name, NOFOLLOW_DIR, dir_fd=base_fd)
    except OSError:
        return None  # a symlink, not a directory, gone: not this workload's
    try:
        if os.fstat(dir_fd).st_uid != uid:
            return None
        try:
            marker = os.open(FILE_MARKER, os.O_RDWR | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError:
            return None  # no lock file: not this workload's
        try:
            st = os.fstat(marker)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or not _lock(marker):
                return None  # a running block's (or one on a filesystem without locks)
            foreign = clear_private_dir(base_fd, name, dir_fd)
        finally:
            os.close(marker)
    finally:
        os.close(dir_fd)
    if foreign:
        return "%s: left in place, it holds files this workload did not create (%s)" % (name, ", ".join(foreign[:5]))
    return None


def sweep_stale(base_fd):
    """Remove the sub-directories blocks killed earlier left in the data directory.

    Returns ``(removed, kept)``: the names removed, and a message for each of this workload's
    sub-directories that stays because it holds something else.
    """
    uid = os.geteuid()
    removed, kept = [], []
    for name in sorted(os.listdir(base_fd)):
        if not name.startswith(FILE_PREFIX):
            continue
        why = _sweep_one(base_fd, name, uid)
        if why:
            kept.append(why)
        else:
            try:
                os.stat(name, dir_fd=base_fd, follow_symlinks=False)
            except FileNotFoundError:
                removed.append(name)
    return removed, kept


def make_private_dir(base_fd):
    """Create this block's sub-directory (0700, unique name) and its lock file, locked.

    Returns ``(name, dir_fd, marker_fd)``.
    """
    for _attempt in range(100):
        name = FILE_PREFIX + os.urandom(6).hex()
        try:
            os.mkdir(name, 0o700, dir_fd=base_fd)
        except FileExistsError:
            continue
        dir_fd = os.open(name, NOFOLLOW_DIR, dir_fd=base_fd)
        os.fchmod(dir_fd, 0o700)
        marker = os.open(FILE_MARKER, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        _lock(marker)
        note = {"workload": "file_dataloader", "host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        os.write(marker, (json.dumps(note) + "\n").encode("utf-8"))
        return name, dir_fd, marker
    raise WorkloadError("file_dataloader: found no free name for its sub-directory")


def _human(nbytes):
    return "%.1f MiB" % (nbytes / 1048576.0) if nbytes < 1 << 30 else "%.1f GiB" % (nbytes / 1073741824.0)


def check_space(base_fd, path, sizes, reserve):
    """Refuse (WorkloadError) a filesystem without room for the data set plus ``reserve`` bytes."""
    st = os.fstatvfs(base_fd)
    free = st.f_bavail * st.f_frsize
    need = sum(sizes) + len(sizes) * 4096 + reserve
    if free < need:
        raise WorkloadError(
            "file_dataloader: the filesystem of %s %s has %s free; the workload's %d files take %s and it "
            "keeps %s free, so it needs %s: free some space there or set %s to a directory on a filesystem "
            "with more room"
            % (
                DATA_DIR_NAME,
                path,
                _human(free),
                len(sizes),
                _human(sum(sizes)),
                _human(reserve),
                _human(need),
                DATA_DIR_NAME,
            )
        )
    if st.f_files and st.f_favail < len(sizes) + 2:
        raise WorkloadError(
            "file_dataloader: the filesystem of %s %s has %d free inodes, the workload needs %d"
            % (DATA_DIR_NAME, path, st.f_favail, len(sizes) + 2)
        )


def write_dataset(dir_fd, sizes):
    """Write the files, flush them to the device and drop them from the page cache; return their CRC-32s."""
    pool = os.urandom(FILE_POOL_BYTES)
    rng = random.Random(FILE_SEED)
    crcs = []
    for index, size in enumerate(sizes):
        start = rng.randrange(0, len(pool) - size + 1)
        data = memoryview(pool)[start : start + size]
        fd = os.open(FILE_NAME % index, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        try:
            done = 0
            while done < size:
                done += os.write(fd, data[done:])
        finally:
            os.close(fd)
        crcs.append(zlib.crc32(data))
    for index in range(len(sizes)):  # after all writes: the kernel has begun writing them back
        fd = os.open(FILE_NAME % index, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return crcs


def read_sample(dir_fd, index, size):
    """One file's bytes, read from the device (then dropped from the page cache again)."""
    fd = os.open(FILE_NAME % index, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        chunks, got = [], 0
        while got < size:
            chunk = os.read(fd, size - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        extra = os.read(fd, 1)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) != size or extra:
        raise WorkloadError(
            "%s read back %s bytes, %d were written" % (FILE_NAME % index, "more" if extra else len(data), size)
        )
    return data


def batch_files(seq, batch, count, orders):
    """The file numbers of batch ``seq``: each epoch reads every file once in a shuffled order
    (seeded per epoch, the same in every block); ``orders`` caches the epochs' orders."""
    out = []
    for position in range(seq * batch, (seq + 1) * batch):
        epoch, pos = divmod(position, count)
        order = orders.get(epoch)
        if order is None:
            order = list(range(count))
            random.Random(FILE_SEED * 1000003 + epoch).shuffle(order)
            orders.clear()
            orders[epoch] = order
        out.append(order[pos])
    return out


def _file_loader_worker(worker, workers, total, batch, dir_fd, sizes, crcs, free_q, ready_q):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()
    orders = {}
    for seq in range(worker, total, workers):
        free_q.get()
        nbytes, check = 0, 0
        try:
            for index in batch_files(seq, batch, len(sizes), orders):
                data = read_sample(dir_fd, index, sizes[index])
                if zlib.crc32(data) != crcs[index]:
                    raise WorkloadError("%s read back other bytes than were written" % (FILE_NAME % index))
                nbytes += len(data)
                check = (check + crcs[index]) & 0xFFFFFFFF
        except (OSError, WorkloadError) as exc:
            ready_q.put((seq, None, str(exc)))
            return
        ready_q.put((seq, nbytes, check))


def block_device(st_dev):
    """The kernel's name of the block device a filesystem is on (``nvme0n1p2``), or None (tmpfs, overlay, NFS)."""
    try:
        return os.path.basename(os.readlink("/sys/dev/block/%d:%d" % (os.major(st_dev), os.minor(st_dev))))
    except OSError:
        return None


def _stopped(signum, _frame):
    raise WorkloadError("file_dataloader stopped by signal %d" % signum)


def wl_file_dataloader(p):
    batch, workers, path = p["size"], p["workers"], p.get("data_dir")
    if workers < 1:
        raise WorkloadError("file_dataloader needs at least 1 worker process")
    sizes = file_sizes(int(p.get("files") or FILE_COUNT))
    if batch > len(sizes):
        raise WorkloadError("file_dataloader: a batch of %d files is more than its %d files" % (batch, len(sizes)))
    ctx = mp_context()
    if ctx.get_start_method() != "fork":
        raise WorkloadError("file_dataloader needs the fork start method (Linux)")
    base_fd = open_data_dir(path)
    own, procs = None, []
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        stale, kept = sweep_stale(base_fd)
        check_space(base_fd, path, sizes, int(p.get("reserve_bytes", FILE_RESERVE_BYTES)))
        own = make_private_dir(base_fd)
        name, dir_fd, _marker = own
        t0 = time.perf_counter()
        crcs = write_dataset(dir_fd, sizes)
        write_s = time.perf_counter() - t0
        total = p["warmup"] + p["steps"]
        free_q, ready_q = ctx.Queue(), ctx.Queue()
        for _slot in range(2 * workers):  # prefetch factor 2, as torch's DataLoader
            free_q.put(1)
        for w in range(workers):
            args = (w, workers, total, batch, dir_fd, sizes, crcs, free_q, ready_q)
            proc = ctx.Process(target=_file_loader_worker, args=args)
            proc.daemon = True
            proc.start()
            procs.append(proc)
        orders, seen, step_bytes = {}, set(), []

        def step():
            t0 = time.perf_counter()
            seq, nbytes, check = wait_ready(ready_q, procs, "file_dataloader")
            free_q.put(1)
            elapsed = ms_since(t0)
            if nbytes is None:
                raise WorkloadError("file_dataloader: %s" % check)
            files = batch_files(seq, batch, len(sizes), orders)
            want = (sum(sizes[i] for i in files), sum(crcs[i] for i in files) & 0xFFFFFFFF)
            if (nbytes, check) != want or seq in seen:
                raise WorkloadError("file_dataloader: batch %d arrived wrong (files, bytes or checksums)" % seq)
            seen.add(seq)
            step_bytes.append(nbytes)
            return elapsed

        monitor = Monitor()
        samples = timed_loop(step, p["steps"], p["warmup"], monitor)
        for proc in procs:
            proc.join(timeout=10)
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop_workers(procs)
        left = None
        if own is not None:
            try:
                left = clear_private_dir(base_fd, own[0], own[1])
            except OSError as exc:
                left = ["(could not remove it: %s)" % exc]
            os.close(own[2])
            os.close(own[1])
        device = block_device(os.fstat(base_fd).st_dev)
        os.close(base_fd)
    measured = step_bytes[-len(samples) :]
    return {
        "samples_ms": samples,
        "work_per_step": float(sum(measured)) / len(measured),
        "work_unit": "B",
        "info": {
            "data_dir": path,
            "block_device": device,
            "private_dir": name,
            "files": len(sizes),
            "file_bytes_min": min(sizes),
            "file_bytes_max": max(sizes),
            "dataset_bytes": sum(sizes),
            "batch_files": batch,
            "workers": workers,
            "write_s": round(write_s, 3),
            "page_cache": "dropped (posix_fadvise DONTNEED) after every write and every read",
            "stale_removed": stale,
            "stale_kept": kept,
            "left_behind": left or [],
            "start_method": ctx.get_start_method(),
        },
        "conditions": monitor.result(),
    }


# The file workload's row (``base.Workload`` says what the fields are; registry.py gathers the
# tables). It does not run live: it writes and sizes its files per block.
FILE_TABLE = (
    Workload(
        "file_dataloader",
        wl_file_dataloader,
        CPU,
        32,
        "batch size (files of 64-256 KiB)",
        data_dir=True,
        min_workers=1,
    ),
)
