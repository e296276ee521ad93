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

from ansible_collections.stacktune.gpu.plugins.module_utils import _writers
from ansible_collections.stacktune.gpu.plugins.module_utils._dropins import ordered_files
from ansible_collections.stacktune.gpu.plugins.module_utils._kind_base import (
    HEADER,
    Kind,
    SpecError,
    exists,
    norm_ws,
    require,
    setting,
)

_KEY = re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_\-]+)+$")
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


class SysctlKind(Kind):
    name = "sysctl"

    def expand(self, spec, ctx):
        key = str(require(spec, "key", self.name)).replace("/", ".")
        if not _KEY.match(key):
            raise SpecError("sysctl key %r is not a valid name (e.g. vm.swappiness)" % key)
        if spec.get("value") is None:
            raise SpecError("sysctl %s needs 'value'" % key)
        if not exists(ctx, self._proc(key)):
            raise SpecError("sysctl key %r does not exist on this host (%s missing)" % (key, self._proc(key)))
        return [setting(self.name, key, norm_ws(spec["value"]))]

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
        note = _writers.tuned(ctx)
        return [note] if note else []

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
