# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which drop-in files a host's boot machinery reads, in order (systemd's conf.d rule).

systemd-sysctl and systemd-tmpfiles read ``*.conf`` files from a list of directories; a
file name in an earlier directory masks the same name in the later ones (a link to
/dev/null masks it away), and the files are applied in the order of their names, whatever
directory they come from. The kinds decide what the order means (sysctl: a later
assignment wins; tmpfiles: the earliest line for a path wins).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os


def ordered_files(ctx, directories, pending=None, suffix=".conf"):
    """``[(host path, text)]`` of the drop-ins read at boot, in order.

    ``pending``: ``{host path: text}`` of files about to be written, taken as present with
    that text (check mode predicts with them in place).
    """
    pending = pending or {}
    chosen = {}
    for directory in directories:
        try:
            names = list(os.listdir(ctx.path(directory)))
        except OSError:
            names = []
        names += [p.rsplit("/", 1)[1] for p in pending if p.rsplit("/", 1)[0] == directory]
        for name in names:
            if name.endswith(suffix) and name not in chosen:
                chosen[name] = directory + "/" + name
    out = []
    for name in sorted(chosen):
        host_path = chosen[name]
        if host_path in pending:
            out.append((host_path, pending[host_path]))
            continue
        real = ctx.path(host_path)
        if os.path.islink(real):
            target = os.readlink(real)
            if target == "/dev/null":
                continue
            if os.path.isabs(target):
                real = ctx.path(target)
        try:
            with open(real) as handle:
                out.append((host_path, handle.read()))
        except (IOError, OSError, UnicodeDecodeError):
            continue
    return out
