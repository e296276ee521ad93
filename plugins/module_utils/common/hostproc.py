# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A process on this host: which one it is, and that it dies with the process that started it.

A process is told from a later one that reuses its pid by its start time, the boot id and the
pid namespace (:func:`process_start`, :func:`controller_gone`: the lease's controller, the
block runner's and the watchdog's test whether the run still holds the host); and every
program stacktune starts, and every worker a workload starts, calls :func:`die_with_parent`
first. Standard library only: this file is also the first part of the workload program
(``workloads/source.py``), which the host runs as one file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time
import signal


def read_first_line(path):
    """The first line of a file, stripped, or None when it cannot be read."""
    try:
        with open(path) as handle:
            return handle.readline().strip()
    except (IOError, OSError):
        return None


def process_start(pid):
    """The start time of a process (clock ticks since boot), or None when it does not exist.

    With the boot id and the pid namespace, it tells a live process from a new one that
    reuses its pid.
    """
    stat = read_first_line("/proc/%d/stat" % int(pid))
    if stat is None:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def pid_namespace():
    """This process's pid namespace (``pid:[4026531836]``), or None: pids mean the same only
    inside one namespace."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def boot_id():
    return read_first_line("/proc/sys/kernel/random/boot_id") or None


def boot_clock():
    """Seconds since boot, counting suspend, never stepped (CLOCK_BOOTTIME)."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return time.monotonic()


def lease_expired(holder, wall=None, boot=None, this_boot=None):
    """Whether a lease record (``run.lock``'s holder) has expired: on the boot clock while the host
    runs the boot that wrote it (a wall-clock step neither ends nor extends it), on wall time
    across a reboot. ``wall``, ``boot`` and ``this_boot`` stand in for the clocks in tests."""
    this_boot = this_boot() if this_boot else boot_id()
    if holder.get("boot_id") and holder.get("boot_id") == this_boot and "expires_boot" in holder:
        return float(holder["expires_boot"]) <= (boot or boot_clock)()
    return float(holder.get("expires_ts", 0)) <= (wall or time.time)()


def controller_gone(controller):
    """True when a lease's controller process (``host``, ``boot_id``, ``pid_ns``, ``pid``,
    ``pid_start``) is known to be gone from here: same boot and pid namespace, and its pid no
    longer runs the process that started. False when it runs, or when nothing here can tell
    (another machine, another namespace, a lease that does not say)."""
    if not isinstance(controller, dict):
        return False
    if not controller.get("boot_id") or controller.get("boot_id") != boot_id():
        return False
    if not controller.get("pid_ns") or controller.get("pid_ns") != pid_namespace():
        return False
    return pid_gone(controller)


def pid_gone(controller):
    """Whether the ``pid`` of a process record (``pid``, ``pid_start``) no longer runs that
    process here; the caller has made sure the pid means here what it meant there."""
    try:
        pid = int(controller.get("pid"))
    except (TypeError, ValueError):
        return False
    start = process_start(pid)
    return start is None or (controller.get("pid_start") is not None and start != controller["pid_start"])


def pid_stopped(controller):
    """Whether the ``pid`` of a process record is stopped (SIGSTOP, a frozen process group): it
    runs nothing, renews nothing, until it is continued."""
    try:
        pid = int(controller.get("pid"))
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] in ("T", "t")
    except (TypeError, ValueError, IndexError, OSError):
        return False


PR_SET_PDEATHSIG = 1


def libc_prctl():
    """libc's prctl, or None where there is none (resolved before any fork)."""
    try:
        import ctypes  # pylint: disable=import-outside-toplevel

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, ImportError):
        return None


def die_with_parent(prctl=None, parent=None):
    """Have the kernel SIGKILL this process when the process that started it dies (Linux).

    Every program stacktune starts (through :func:`run_process`) and every worker process a
    workload starts calls it first, so a killed bench module or workload leaves no process
    behind. ``parent``: the pid the caller expects as parent; if it is already gone, exit.
    """
    prctl = prctl or libc_prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)
