# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How stacktune runs a program on a host: a private folder for its source, its own session and
process group, a timeout that kills every process it started, and a parent-death signal.

Every program stacktune runs on a host (the workloads, acceptance, the NCCL transport check)
runs from :func:`private_program` through :func:`run_process`; a program read while it runs
(the one ``diagnose`` watches) is started with :func:`start_in_session`, the block runner with
:func:`start_detached`. The programs themselves do not import this file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import die_with_parent, libc_prctl


@contextlib.contextmanager
def private_program(source, prefix, name="program.py"):
    """A private folder (mode 0700) holding ``source`` as ``name`` (mode 0600).

    Yields ``(folder, path)``; the folder and everything the program left in it are
    removed afterwards. Every program stacktune runs on a host (workloads, acceptance,
    the NCCL transport check) runs from one of these, through :func:`run_process`.
    """
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        os.chmod(folder, 0o700)
        path = os.path.join(folder, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(source)
        yield folder, path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def start_in_session(argv, env=None, cwd=None):
    """Start argv (no shell) in its own session and process group: no standard input, its
    output and errors on pipes, dying with its parent (``die_with_parent``). Returns the Popen
    object; start failures raise OSError. ``env`` None: the caller's environment."""
    prctl = libc_prctl()
    parent = os.getpid()
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
        preexec_fn=lambda: die_with_parent(prctl, parent),  # noqa: PLW1509 - no lock is taken in it
    )


def run_process(argv, env, timeout, cpus=None, cwd=None, tick=None, tick_every=30.0):
    """Run argv (no shell) in its own session; return (rc, stdout, stderr, timed_out).

    On timeout the whole process group (the workload and every worker it started) is
    killed. With ``cpus``, the calling thread's CPU affinity is set for the duration of
    the fork (the child inherits it) and restored afterwards. The child dies with its
    parent (``die_with_parent``). ``tick()`` is called every ``tick_every`` seconds while
    the program runs; when it raises, the process group is killed and the exception
    propagates. Start failures raise OSError.
    """
    saved = None
    try:
        if cpus:
            saved = os.sched_getaffinity(0)
            os.sched_setaffinity(0, cpus)
        proc = start_in_session(argv, env=env, cwd=cwd)
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)
    timed_out = False
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            out, err = proc.communicate(timeout=max(0.0, min(left, tick_every) if tick else left))
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() < deadline and tick is not None:
                try:
                    tick()
                    continue
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate()
                    raise
            timed_out = True
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            break
    return proc.returncode, _decode(out), _decode(err), timed_out


def start_detached(argv, cwd, log_path):
    """Start a program that outlives its caller (the block runner): its own session, no
    standard input, its output to ``log_path``. Returns the Popen object."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )


def _decode(data):
    return (data or b"").decode("utf-8", "replace")


def module_source(module):
    """The source text of an imported module: through its loader, so also when Ansible ships
    module_utils in a zip, else from its file."""
    loader = getattr(module, "__loader__", None)
    if loader is not None and hasattr(loader, "get_source"):
        source = loader.get_source(module.__name__)
        if source:
            return source
    with open(module.__file__) as handle:
        return handle.read()
