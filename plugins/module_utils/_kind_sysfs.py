# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kind ``sysfs``: a /sys attribute, persisted as a systemd-tmpfiles ``w`` line.

Attributes that print their choices with the active one in brackets
("always [madvise] never") read as the active choice.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

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

_BRACKET = re.compile(r"\[([^\]]+)\]")
TMPFILES = "/etc/tmpfiles.d/stacktune-%s.conf"
TMPFILES_DIRS = ("/etc/tmpfiles.d", "/run/tmpfiles.d", "/usr/local/lib/tmpfiles.d", "/usr/lib/tmpfiles.d")


def active_choice(text):
    """Return the bracketed choice of a sysfs multiple-choice attribute, else the text."""
    match = _BRACKET.search(text or "")
    return match.group(1) if match else norm_ws(text)


def tmpfiles_value(unit_text, path):
    """Value a tmpfiles.d drop-in writes to path (last ``w`` line wins), or None."""
    found = None
    for line in (unit_text or "").splitlines():
        fields = line.split(None, 6)
        if len(fields) == 7 and fields[0] in ("w", "w+") and fields[1] == path:
            found = norm_ws(fields[6])
    return found


def tmpfiles_boot_value(ctx, path, pending=None):
    """What systemd-tmpfiles writes to ``path`` at boot: ``(value, file)`` or None.

    Where several files name the same path, the line of the file whose name sorts first is
    applied and the others are reported as errors (tmpfiles.d(5)).
    """
    for host_path, text in ordered_files(ctx, TMPFILES_DIRS, pending):
        value = None
        for line in text.splitlines():
            fields = line.split(None, 6)
            if len(fields) == 7 and fields[0] in ("w", "w+") and fields[1] == path:
                value = norm_ws(fields[6])
                break
        if value is not None:
            return value, host_path
    return None


def render_tmpfiles(settings, layer):
    """Render a tmpfiles.d drop-in; every setting carries the host path it writes."""
    ordered = sorted(settings, key=lambda s: s["path"])
    return HEADER % layer + "".join("w %s - - - - %s\n" % (s["path"], s["value"]) for s in ordered)


class SysfsKind(Kind):
    name = "sysfs"

    def expand(self, spec, ctx):
        path = str(require(spec, "key", self.name))
        if not path.startswith("/sys/") or "/../" in path + "/" or "\n" in path:
            raise SpecError("sysfs key %r must be an absolute path under /sys/ without '..'" % path)
        if spec.get("value") is None:
            raise SpecError("sysfs %s needs 'value'" % path)
        if not exists(ctx, path):
            raise SpecError("sysfs attribute %s does not exist on this host" % path)
        return [setting(self.name, path, norm_ws(spec["value"]), path=path)]

    def live_path(self, s, ctx):
        return ctx.path(s["key"])

    def parse_live(self, text):
        return active_choice(text)

    def unit(self, s, ctx):
        return {"type": "dropin", "path": TMPFILES % ctx.layer, "kind": "tmpfiles"}

    def render(self, settings, layer):
        return render_tmpfiles(settings, layer)

    def persisted(self, s, unit_text):
        return tmpfiles_value(unit_text, s["path"])

    def boot_value(self, s, ctx, pending=None):
        return tmpfiles_boot_value(ctx, s["path"], pending)
