# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kind ``sysctl``: /proc/sys live, /etc/sysctl.d/60-stacktune-<layer>.conf persisted.

What the next boot applies is read the way systemd-sysctl reads it: ``*.conf`` files of
/etc/sysctl.d, /run/sysctl.d, /usr/local/lib/sysctl.d, /usr/lib/sysctl.d and /lib/sysctl.d;
a file name in an earlier directory masks the same name in the later ones; all files are
applied in the order of their names, a later assignment wins; a leading ``-`` only says
that errors are ignored. /etc/sysctl.conf is read where a sysctl.d entry links to it (the
99-sysctl.conf link systemd's packages ship on Debian and Red Hat), else last, as procps'
``sysctl --system`` reads it on hosts that boot without systemd-sysctl.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import writers
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.dropins import ordered_files
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import read_text
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.parsers import parse_meminfo_kib
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import (
    HEADER,
    Kind,
    SpecError,
    exists,
    norm_ws,
    plain_line,
    plain_value,
    require,
    setting,
)

_KEY = re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_\-]+)+\Z")
SYSCTL_DROPIN = "/etc/sysctl.d/60-stacktune-%s.conf"
SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")


def parse_assignments(text):
    """``[(key, value)]`` of a sysctl.conf text, in order (comments, blanks and junk skipped)."""
    out = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        out.append((key.strip().lstrip("-").strip().replace("/", "."), norm_ws(value)))
    return out


def _links_to(ctx, host_path, target):
    real = ctx.path(host_path)
    if not os.path.islink(real):
        return False
    link = os.readlink(real)
    resolved = link if os.path.isabs(link) else os.path.join(os.path.dirname(host_path), link)
    return os.path.normpath(resolved) == target


# Sysctls whose value is one whole number in a range the kernel enforces (so a value outside
# it is refused here too, where a container cannot write it live to find out).
RANGES = {
    "vm.swappiness": (0, 200),
    "vm.dirty_ratio": (0, 100),
    "vm.dirty_background_ratio": (0, 100),
    "vm.overcommit_memory": (0, 2),
    "vm.overcommit_ratio": (0, None),
    "vm.max_map_count": (0, 2147483647),
    "vm.nr_hugepages": (0, None),
    "vm.zone_reclaim_mode": (0, 7),
    "vm.dirty_expire_centisecs": (0, None),
    "vm.dirty_writeback_centisecs": (0, None),
    "kernel.numa_balancing": (0, 3),
    "kernel.perf_event_paranoid": (-1, 4),
}


def meminfo_kib(ctx, field):
    return parse_meminfo_kib(read_text(ctx.path("/proc/meminfo"))).get(field)


def check_range(key, value, ctx):
    """Refuse a value outside what the kernel takes for the sysctls of RANGES; huge pages
    must also fit in the host's memory."""
    if key not in RANGES:
        return
    low, high = RANGES[key]
    if not re.match(r"^-?\d+$", value):
        raise SpecError("sysctl %s must be a whole number, got %r" % (key, value))
    number = int(value)
    if number < low or high is not None and number > high:
        raise SpecError(
            "sysctl %s must be %s, got %s"
            % (key, ("%d to %d" % (low, high)) if high is not None else ">= %d" % low, number)
        )
    if key == "vm.nr_hugepages":
        total, page = meminfo_kib(ctx, "MemTotal"), meminfo_kib(ctx, "Hugepagesize")
        if total and page and number * page > total:
            raise SpecError(
                "sysctl vm.nr_hugepages %d pages of %d kB is %.1f GiB, more than this host's %.1f GiB of memory"
                % (number, page, number * page / 1048576.0, total / 1048576.0)
            )


class SysctlKind(Kind):
    name = "sysctl"
    # the kernel reads a sysctl where it is used (reclaim, NUMA balancing, the scheduler): the
    # next page fault or wake-up of a running process sees it
    running = True

    def expand(self, spec, ctx):
        key = str(require(spec, "key", self.name)).replace("/", ".")
        if not _KEY.match(key):
            raise SpecError("sysctl key %r is not a valid name (e.g. vm.swappiness)" % key)
        # the line "key = value" of the layer's sysctl.d drop-in
        value = norm_ws(
            plain_line("sysctl %s value" % key, plain_value(spec, "sysctl %s" % key), SYSCTL_DROPIN % ctx.layer)
        )
        if not exists(ctx, self._proc(key)):
            raise SpecError("sysctl key %r does not exist on this host (%s missing)" % (key, self._proc(key)))
        check_range(key, value, ctx)
        return [setting(self.name, key, value)]

    @staticmethod
    def _proc(key):
        return "/proc/sys/" + key.replace(".", "/")

    def live_path(self, s, ctx):
        return ctx.path(self._proc(s["key"]))

    def unit(self, s, ctx):
        return {"type": "dropin", "path": SYSCTL_DROPIN % ctx.layer, "kind": self.name}

    def render(self, settings, layer):
        lines = ["%s = %s\n" % (s["key"], s["value"]) for s in sorted(settings, key=lambda x: x["key"])]
        return HEADER % layer + "".join(lines)

    def persisted(self, s, unit_text):
        found = None
        for key, value in parse_assignments(unit_text):
            if key == s["key"]:
                found = value
        return found

    def other_writers(self, settings, ctx):
        note = writers.tuned(ctx)
        return [{"tool": "tuned", "message": note, "ids": [s["id"] for s in settings]}] if note else []

    def boot_value(self, s, ctx, pending=None):
        found = None
        files = ordered_files(ctx, SYSCTL_DIRS, pending)
        if not any(_links_to(ctx, host_path, "/etc/sysctl.conf") for host_path, _text in files):
            try:
                with open(ctx.path("/etc/sysctl.conf")) as handle:
                    files.append(("/etc/sysctl.conf", handle.read()))
            except (IOError, OSError, UnicodeDecodeError):
                pass
        for host_path, text in files:
            for key, value in parse_assignments(text):
                if key == s["key"]:
                    found = (value, host_path)
        return found
