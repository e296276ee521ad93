# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""CPU list strings as the kernel writes them ("0-3,8-11")."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# N, N-M, or N-M:U/G (U CPUs of every group of G from N to M), the kernel's list grammar
_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+)/(\d+))?)?$")


# The kernel's NR_CPUS is at most 8192; larger numbers are typos, and would make huge sets.
MAX_CPU = 8191


def parse_cpulist(text):
    """A CPU list as the kernel writes and reads it ("0-3,8-11", "0-1023:2/256") as a sorted
    list of CPU numbers; "" (or only whitespace) is no CPU. The one parser of CPU lists in the
    collection, with one error rule: ValueError naming the list and the part that is wrong."""
    text = str(text or "").strip()
    if not text:
        return []
    cpus = set()
    for part in text.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise ValueError("malformed CPU list %r: %r is not N, N-M or N-M:U/G" % (text, part))
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError("malformed CPU list %r: range %r runs backwards" % (text, part))
        if last > MAX_CPU:
            raise ValueError("malformed CPU list %r: CPU %d is beyond any kernel's limit (%d)" % (text, last, MAX_CPU))
        used, group = (int(match.group(3)), int(match.group(4))) if match.group(3) is not None else (1, 1)
        if used < 1 or group < used:
            raise ValueError("malformed CPU list %r: in %r, U/G needs 1 <= U <= G" % (text, part))
        for start in range(first, last + 1, group):
            cpus.update(range(start, min(start + used, last + 1)))
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
