# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Other tools and files on the host that rewrite what stacktune manages.

One home for the detection: the kinds name the writers of their own settings in verify
(``Kind.other_writers``), and preflight lists them all before a run (``host_writers``).
Every function reads through a ``Context`` (``ctx.path`` maps host paths under its root).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import read_text

IRQBALANCE_CONFIGS = ("/etc/default/irqbalance", "/etc/sysconfig/irqbalance")
# Per boot mechanism: its directories, the prefix of stacktune's drop-ins, whether a later
# (True) or an earlier file wins, and what a file must contain to compete with stacktune's.
DROPIN_ORDER = (
    (
        "sysctl.d",
        ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d"),
        "60-stacktune-",
        True,
        # the sysctl families stacktune's layers set (kernel profiles, memory hugepages, network buffers)
        re.compile(
            r"^\s*-?(vm[./][\w./]+|kernel[./]numa_balancing|kernel[./]sched\w*|net[./]core[./][\w./]+|net[./]ipv4[./]tcp\w*)\s*=",
            re.M,
        ),
    ),
    ("grub.d", ("/etc/default/grub.d",), "60-stacktune-", True, re.compile(r"^\s*GRUB_CMDLINE_LINUX", re.M)),
    (
        "tmpfiles.d",
        ("/etc/tmpfiles.d", "/usr/lib/tmpfiles.d"),
        "stacktune-",
        False,
        re.compile(r"^\s*w\+?\s+/(sys|proc/irq)/", re.M),
    ),
)


def running(ctx, *names):
    """Names of the given processes (as /proc/<pid>/comm shows them, 15 characters) that run now."""
    found = set()
    try:
        pids = [p for p in os.listdir(ctx.path("/proc")) if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        comm = (read_text(ctx.path("/proc/%s/comm" % pid)) or "").strip()
        if comm in names:
            found.add(comm)
    return found


def tuned(ctx):
    """A sentence on the active TuneD profile and what it does to sysctls, or None."""
    profile = (read_text(ctx.path("/etc/tuned/active_profile")) or "").strip()
    if not profile:
        return None
    main = read_text(ctx.path("/etc/tuned/tuned-main.conf")) or ""
    reapply = re.search(r"^\s*reapply_sysctl\s*=\s*(\S+)", main, re.M)
    reapply = reapply is None or reapply.group(1).lower() in ("1", "true", "yes")
    state = "runs" if running(ctx, "tuned") else "is set active (not running now)"
    if reapply:
        effect = (
            "it applies its profile's sysctls, then re-reads the sysctl.d files (reapply_sysctl = 1), so "
            "stacktune's drop-in wins for keys both set"
        )
    else:
        effect = "reapply_sysctl = 0: its profile's sysctls override stacktune's for every key both set"
    return "TuneD profile %r %s: %s" % (profile, state, effect)


def irqbalance_config(ctx):
    """The text of the irqbalance defaults files (both locations, concatenated)."""
    return "".join(read_text(ctx.path(path)) or "" for path in IRQBALANCE_CONFIGS)


def unbanned_irqs(ctx, irqs):
    """The IRQs of ``irqs`` that irqbalance's configuration does not ban (--banirq), sorted."""
    text = irqbalance_config(ctx)
    return sorted((k for k in irqs if "--banirq=%s" % k not in text), key=lambda k: int(k) if str(k).isdigit() else 0)


def irqbalance(ctx, irqs=None):
    """A sentence on a running irqbalance and the IRQs it may move (of ``irqs``), or None."""
    if not running(ctx, "irqbalance"):
        return None
    if irqs is None:
        return (
            "irqbalance runs: it moves interrupts between CPUs; the numa_irq layer bans the IRQs it pins "
            "(--banirq) and restarts it"
        )
    unbanned = unbanned_irqs(ctx, irqs)
    if not unbanned:
        return "irqbalance runs; every IRQ stacktune pins is banned from it (--banirq)"
    return (
        "irqbalance runs and is not told to leave IRQ(s) %s alone (no --banirq): it can move them off the "
        "CPUs stacktune pinned them to until it is restarted with the numa_irq layer's configuration"
        % ", ".join(str(k) for k in unbanned)
    )


def persistenced(ctx):
    """A sentence on a running nvidia-persistenced, or None."""
    if not running(ctx, "nvidia-persiste"):  # /proc/<pid>/comm keeps 15 characters
        return None
    return (
        "nvidia-persistenced runs: it keeps the GPUs initialised itself, and when it is stopped or restarted "
        "persistence mode follows the daemon's options, not stacktune's setting"
    )


def later_dropins(ctx):
    """Sentences naming the drop-ins that outrank stacktune's by their place in the order."""
    out = []
    for label, directories, prefix, later_wins, competes in DROPIN_ORDER:
        names = {}
        for directory in reversed(directories):  # an earlier directory masks a later one
            try:
                listed = os.listdir(ctx.path(directory))
            except OSError:
                continue
            for name in listed:
                if name.endswith((".conf", ".cfg")):
                    names[name] = directory + "/" + name
        mine = sorted(n for n in names if n.startswith(prefix))
        others = sorted(
            n
            for n, path in names.items()
            if not n.startswith(prefix) and competes.search(read_text(ctx.path(path)) or "")
        )
        anchor = prefix + "~" if not mine else mine[-1 if later_wins else 0]
        winners = [n for n in others if (n > anchor if later_wins else n < anchor)]
        if winners:
            out.append(
                "%s: %s sort%s %s stacktune's drop-ins and win%s for every key they share with them "
                "(stacktune reports such a setting 'overridden')"
                % (
                    label,
                    ", ".join(winners),
                    "s" if len(winners) == 1 else "",
                    "after" if later_wins else "before",
                    "s" if len(winners) == 1 else "",
                )
            )
    return out


UDEV_RULES_DIRS = ("/etc/udev/rules.d", "/run/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d")
# udev rules that set what the io layer sets (ATTR{queue/scheduler}="none") or run a tool for it
_UDEV_QUEUE = re.compile(
    r"ATTRS?\{(queue/(scheduler|read_ahead_kb|nr_requests)|bdi/read_ahead_kb)\}\s*=[^=]|blockdev\s+--setra", re.M
)
CPUPOWER_UNITS = (
    "/etc/systemd/system/multi-user.target.wants/cpupower.service",
    "/etc/systemd/system/multi-user.target.wants/cpufrequtils.service",
    "/etc/default/cpufrequtils",
)


def cpu_io_writers(ctx):
    """Sentences on the tools that set CPU frequency, energy and block queue attributes."""
    out = []
    if read_text(ctx.path("/etc/tuned/active_profile")):
        out.append(
            "TuneD: its [cpu] plugin sets the governor, energy_perf_bias and min_perf_pct, its [acpi] plugin the "
            "platform profile and its [disk] plugin readahead and the scheduler, each time it applies its profile: "
            "where its profile has them, they undo the cpu and io layers' values"
        )
    if running(ctx, "power-profiles-"):  # /proc/<pid>/comm keeps 15 characters
        out.append(
            "power-profiles-daemon runs: it sets the ACPI platform profile and the energy_performance_preference "
            "when its profile changes (or at start), over the cpu layer's values"
        )
    found = [p for p in CPUPOWER_UNITS if os.path.exists(ctx.path(p))]
    if found:
        out.append(
            "cpupower/cpufrequtils is set to run at boot (%s): it sets the governor after systemd-tmpfiles, over the "
            "cpu layer's persisted value" % ", ".join(found)
        )
    rules = {}
    for directory in reversed(UDEV_RULES_DIRS):  # a file in /etc masks the same name in /usr/lib
        try:
            listed = os.listdir(ctx.path(directory))
        except OSError:
            continue
        for name in listed:
            if name.endswith(".rules"):
                rules[name] = directory + "/" + name
    queue = sorted(p for n, p in rules.items() if _UDEV_QUEUE.search(read_text(ctx.path(p)) or ""))
    if queue:
        out.append(
            "udev rules set block queue attributes (%s): they apply whenever a disk appears, at boot after "
            "systemd-tmpfiles, over the io layer's values" % ", ".join(queue)
        )
    return out


def host_writers(ctx):
    """``[{"tool", "message"}]``: every other writer found on the host, for preflight."""
    out = []
    for tool, message in (
        ("tuned", tuned(ctx)),
        ("irqbalance", irqbalance(ctx)),
        ("nvidia-persistenced", persistenced(ctx)),
    ):
        if message:
            out.append({"tool": tool, "message": message})
    out.extend({"tool": "cpu-io", "message": m} for m in cpu_io_writers(ctx))
    out.extend({"tool": "drop-ins", "message": m} for m in later_dropins(ctx))
    return out
