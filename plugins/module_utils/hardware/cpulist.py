# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""CPU list strings as the kernel writes them ("0-3,8-11")."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


# The kernel's NR_CPUS is at most 8192; larger numbers are typos, and would make huge sets.
MAX_CPU = 8191


def parse_cpulist(text):
    """Parse a kernel CPU list into a sorted list of CPU numbers; raise ValueError when malformed."""
    text = (text or "").strip()
    if not text:
        return []
    cpus = set()
    for part in text.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise ValueError("malformed CPU list %r: %r is not N or N-M" % (text, part))
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError("malformed CPU list %r: range %r runs backwards" % (text, part))
        if last > MAX_CPU:
            raise ValueError("malformed CPU list %r: CPU %d is beyond any kernel's limit (%d)" % (text, last, MAX_CPU))
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def format_cpulist(cpus):
    """Format CPU numbers as the shortest kernel CPU list ("0-3,8")."""
    runs = []
    for cpu in sorted({int(c) for c in cpus}):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in runs)


def canonical_cpulist(text):
    """Normalise a CPU list string ("3,0-2" -> "0-3")."""
    return format_cpulist(parse_cpulist(text))
