# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Facts the cpu and io layers choose their settings from, read through a facts reader.

``cpu_power(fs)``: the cpufreq driver, each policy's governor, available governors and
frequencies, the energy-performance preference, intel_pstate's limits, the ACPI platform
profile, the idle states of CPU 0 with their exit latencies, and SMT.

``block(fs)``: every mounted filesystem on a block device (from /proc/self/mountinfo),
the disk it lies on and the disks under it (device-mapper and md members), with each
disk's queue settings. A filesystem without a block device (overlay, tmpfs, nfs) has
``disk: null``.

``fs`` is a ``hostprobe.FileReader`` or ``topology.ReplayReader``: nothing here touches
the host, so a recording replays to the same facts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath
import re

CPU = "/sys/devices/system/cpu"
_POLICY = re.compile(r"^policy(\d+)$")
_STATE = re.compile(r"^state(\d+)$")
_DEV = re.compile(r"^(\d+):(\d+)$")
# filesystems never on a block device of their own
_NO_BLOCK = ("overlay", "tmpfs", "devtmpfs", "proc", "sysfs", "cgroup", "cgroup2", "nfs", "nfs4", "fuse", "squashfs")


def _str(text):
    if text is None:
        return None
    value = text.strip()
    return value or None


def _int(text):
    value = _str(text)
    if value is None or not re.match(r"^-?\d+$", value):
        return None
    return int(value)


def _words(text):
    return (text or "").replace("[", " ").replace("]", " ").split()


def _active(text):
    match = re.search(r"\[([^\]]+)\]", text or "")
    if match:
        return match.group(1).strip()
    return _str(text)


def _numbered(names, pattern):
    found = []
    for name in names or []:
        match = pattern.match(name)
        if match:
            found.append((int(match.group(1)), name))
    return [name for _n, name in sorted(found)]


def cpu_power(fs):
    """The cpu facts (``ansible_facts.stacktune.cpu``); ``reason`` says what is missing."""
    policies = []
    for name in _numbered(fs.listdir(CPU + "/cpufreq"), _POLICY):
        base = "%s/cpufreq/%s" % (CPU, name)
        policies.append(
            {
                "policy": name,
                "cpus": _str(fs.read(base + "/affected_cpus")),
                "driver": _str(fs.read(base + "/scaling_driver")),
                "governor": _str(fs.read(base + "/scaling_governor")),
                "governors": _words(fs.read(base + "/scaling_available_governors")),
                "cur_khz": _int(fs.read(base + "/scaling_cur_freq")),
                "min_khz": _int(fs.read(base + "/scaling_min_freq")),
                "max_khz": _int(fs.read(base + "/scaling_max_freq")),
                "hw_min_khz": _int(fs.read(base + "/cpuinfo_min_freq")),
                "hw_max_khz": _int(fs.read(base + "/cpuinfo_max_freq")),
                "epp": _str(fs.read(base + "/energy_performance_preference")),
                "epp_choices": _words(fs.read(base + "/energy_performance_available_preferences")),
            }
        )
    states = []
    idle = CPU + "/cpu0/cpuidle"
    for name in _numbered(fs.listdir(idle), _STATE):
        base = "%s/%s" % (idle, name)
        states.append(
            {
                "state": name,
                "name": _str(fs.read(base + "/name")),
                "latency_us": _int(fs.read(base + "/latency")),
                "residency_us": _int(fs.read(base + "/residency")),
                "disabled": _int(fs.read(base + "/disable")) == 1,
            }
        )
    pstate = CPU + "/intel_pstate"
    driver = policies[0]["driver"] if policies else None
    reasons = []
    if not policies:
        reasons.append("no cpufreq policy under %s/cpufreq (frequency scaling not exposed: a VM or container)" % CPU)
    if not states:
        reasons.append("no cpuidle states under %s (idle states not exposed)" % idle)
    smt_active = _int(fs.read(CPU + "/smt/active"))
    return {
        "driver": driver,
        "idle_driver": _str(fs.read(CPU + "/cpuidle/current_driver")),
        "policies": policies,
        "intel_pstate": {
            "status": _str(fs.read(pstate + "/status")),
            "min_perf_pct": _int(fs.read(pstate + "/min_perf_pct")),
            "max_perf_pct": _int(fs.read(pstate + "/max_perf_pct")),
            "no_turbo": _int(fs.read(pstate + "/no_turbo")),
        },
        "amd_pstate_status": _str(fs.read(CPU + "/amd_pstate/status")),
        "energy_perf_bias": _int(fs.read(CPU + "/cpu0/power/energy_perf_bias")),
        "platform_profile": _str(fs.read("/sys/firmware/acpi/platform_profile")),
        "platform_profile_choices": _words(fs.read("/sys/firmware/acpi/platform_profile_choices")),
        "idle_states": states,
        "smt": {
            "control": _str(fs.read(CPU + "/smt/control")),
            "active": None if smt_active is None else smt_active == 1,
        },
        "reason": "; ".join(reasons) or None,
    }


def parse_mountinfo(text):
    """``[{"mount", "dev", "fstype", "source"}]`` of /proc/self/mountinfo (octal escapes decoded)."""
    out = []
    for line in (text or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 2:
            continue
        mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        out.append({"mount": mount, "dev": fields[2], "fstype": tail[0], "source": tail[1]})
    return out


def _disk_of(fs, sysfs_dir):
    """Name of the whole disk a block device directory belongs to (a partition's parent)."""
    if sysfs_dir is None:
        return None
    if fs.read(sysfs_dir + "/partition") is not None:
        return posixpath.basename(posixpath.dirname(sysfs_dir))
    return posixpath.basename(sysfs_dir)


def _disk(fs, name):
    queue = "/sys/block/%s/queue" % name
    scheduler = fs.read(queue + "/scheduler")
    return {
        "name": name,
        "nvme": name.startswith("nvme"),
        "rotational": _int(fs.read(queue + "/rotational")) == 1,
        "scheduler": _active(scheduler),
        "schedulers": _words(scheduler),
        "read_ahead_kb": _int(fs.read(queue + "/read_ahead_kb")),
        "nr_requests": _int(fs.read(queue + "/nr_requests")),
    }


def _members(fs, name, seen):
    """The disks under a stacked device (dm, md), recursively; the device itself when none."""
    slaves = fs.listdir("/sys/block/%s/slaves" % name) or []
    if not slaves or name in seen:
        return [name]
    seen.add(name)
    out = []
    for slave in slaves:
        disk = _disk_of(fs, fs.realpath("/sys/class/block/%s" % slave))
        for member in _members(fs, disk, seen) if disk else []:
            if member not in out:
                out.append(member)
    return out


def block(fs):
    """The io facts (``ansible_facts.stacktune.block``): mounts with their disks."""
    mounts, disks = [], {}
    for m in parse_mountinfo(fs.read("/proc/self/mountinfo")):
        match = _DEV.match(m["dev"])
        disk = None
        if match and match.group(1) != "0" and m["fstype"] not in _NO_BLOCK:
            disk = _disk_of(fs, fs.realpath("/sys/dev/block/%s" % m["dev"]))
        members = _members(fs, disk, set()) if disk else []
        for name in [disk] + members if disk else []:
            if name not in disks:
                disks[name] = _disk(fs, name)
        mounts.append(dict(m, disk=disk, members=members))
    return {"mounts": mounts, "disks": disks}


def holding(block_facts, path):
    """The mount holding a path: the longest mount point that is a prefix of it, else None."""
    best = None
    norm = posixpath.normpath("/" + str(path).lstrip("/"))
    for m in (block_facts or {}).get("mounts") or []:
        point = m["mount"]
        inside = norm == point or norm.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best["mount"])):
            best = m  # a later mount over the same point hides the earlier one
    return best


def io_targets(block_facts, paths):
    """The disks the io layer tunes for ``paths``, one entry per disk (or per filesystem
    without a block device): ``{"paths", "mount", "dev", "disk", "members", "reason"}``.

    ``disk`` is the disk the filesystem lies on (readahead is set there); ``members`` the
    disks under it (the same disk, or the members of a device-mapper or md device: the
    scheduler and queue depth are set there). ``disk`` is None, with a ``reason``, for a
    path on no block device.
    """
    out, by_key = [], {}
    for path in paths or []:
        m = holding(block_facts, path)
        if m is None:
            key = ("none", str(path))
            target = {"mount": None, "dev": "0:0", "disk": None, "members": [], "reason": "%s is not mounted" % path}
        elif m.get("disk") is None:
            key = ("dev", m["dev"])
            target = {
                "mount": m["mount"],
                "dev": m["dev"],
                "disk": None,
                "members": [],
                "reason": "%s lies on %s (%s %s), which is on no block device"
                % (path, m["mount"], m["fstype"], m["source"]),
            }
        else:
            key = ("disk", m["disk"])
            target = {
                "mount": m["mount"],
                "dev": m["dev"],
                "disk": m["disk"],
                "members": list(m["members"]),
                "reason": None,
            }
        if key in by_key:
            by_key[key]["paths"].append(str(path))
            continue
        target["paths"] = [str(path)]
        by_key[key] = target
        out.append(target)
    return out
