# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kinds whose live state IS a file: ``file`` (whole content) and ``env_var`` (KEY=value line).

``file`` owns a whole file such as /etc/nccl.conf or /etc/security/limits.d/...;
``env_var`` owns one KEY="value" line of a shell-style defaults file such as
/etc/default/irqbalance, keeping the rest of the file as it is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import bootlimits
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import env_file_value
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import (
    Kind,
    SpecError,
    plain_line,
    plain_name,
    plain_value,
    require,
    setting,
)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_SAFE_PATH = re.compile(r"^/(etc|usr/local/etc|opt)/[A-Za-z0-9_.@+/\-]+\Z")


# Files and directories that decide who may log in, become root, run at boot or on a
# schedule, or what every program loads: no layer has a reason to own them, and a wrong
# variable there would hand a host over. The ones other kinds own line by line are here too:
# the file kinds must never take them whole.
PROTECTED = (
    "/etc/passwd",
    "/etc/shadow",
    "/etc/group",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d/",
    "/etc/ssh/",
    "/etc/pam.d/",
    "/etc/security/",
    "/etc/crontab",
    "/etc/cron.",
    "/etc/anacrontab",
    "/etc/systemd/",
    "/etc/init.d/",
    "/etc/rc",
    "/etc/profile",
    "/etc/bash.bashrc",
    "/etc/environment",
    "/etc/ld.so.",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/fstab",
    "/etc/modules",
    "/etc/apt/",
    "/etc/yum.repos.d/",
    "/etc/polkit-1/",
    "/etc/default/grub",
)
# ...except these, which layers of this collection own
ALLOWED_UNDER_PROTECTED = ("/etc/security/limits.d/60-stacktune-",)


def protected(path):
    """The entry of PROTECTED that covers path (a prefix: /etc/passwd- and /etc/rc2.d too), or None."""
    if any(path.startswith(ok) for ok in ALLOWED_UNDER_PROTECTED):
        return None
    for entry in PROTECTED:
        if path.startswith(entry):
            return entry
    return None


def check_path(path, kind):
    if not _SAFE_PATH.match(path) or "/../" in path + "/" or path.endswith("/"):
        raise SpecError(
            "%s path %r is not allowed: stacktune manages files under /etc, /usr/local/etc or /opt only" % (kind, path)
        )
    entry = protected(path)
    if entry is not None:
        raise SpecError(
            "%s path %r is not allowed: %s is a system file (accounts, privileges, logins, boot, schedules, "
            "name service or packages) that no stacktune layer manages" % (kind, path, entry.rstrip("/."))
        )


class FileKind(Kind):
    name = "file"
    unit_is_live = True

    def expand(self, spec, ctx):
        path = str(require(spec, "key", self.name))
        check_path(path, self.name)
        content = spec.get("value")
        if content is None:
            raise SpecError("file %s needs 'value' (the content)" % path)
        content = str(content)
        # a whole file: its lines end in newlines, and no line holds what another reader takes
        # for a line's end (a carriage return, U+2028 ...): each value stays on its line
        plain_name("file %s content" % path, content.replace("\n", ""))
        if content and not content.endswith("\n"):
            content += "\n"
        mode = str(spec.get("mode", "0644"))
        if not re.match(r"^0?[0-7]{3}$", mode):
            raise SpecError("file %s mode must be octal like 0644, got %r" % (path, mode))
        return [setting(self.name, path, content, mode="%04o" % int(mode, 8))]

    def same(self, a, b):
        return a == b

    def unit(self, s, ctx):
        return {"type": "file", "path": s["key"], "mode": s["mode"], "kind": self.name}

    def persisted(self, s, unit_text):
        return unit_text

    @staticmethod
    def _in_limits_dir(s):
        return s["key"].rsplit("/", 1)[0] in bootlimits.LIMITS_DIRS

    def takes_effect(self, s):
        # pam_limits reads limits.d when a login session starts (ssh, su, sudo, cron): processes
        # already running, and those they fork, keep the limits they had
        return "next_login" if self._in_limits_dir(s) else "now"

    def boot_value(self, s, ctx, pending=None):
        # a limits.d file competes with limits.conf and the other limits.d files at each login
        if self._in_limits_dir(s) and s["key"].endswith(".conf"):
            return bootlimits.boot_value(ctx, s["key"], s["value"], pending)
        return None


class EnvVarKind(Kind):
    name = "env_var"
    unit_is_live = True

    def expand(self, spec, ctx):
        path = str(require(spec, "path", self.name))
        check_path(path, self.name)
        name = str(require(spec, "key", self.name))
        if not _ENV_NAME.match(name):
            raise SpecError("env_var key %r is not a shell variable name" % name)
        # the line NAME="value" of a file that shells source
        value = plain_line("env_var %s value" % name, plain_value(spec, "env_var %s" % name, required=False), path)
        return [setting(self.name, "%s:%s" % (path, name), value, path=path, name=name)]

    def same(self, a, b):
        return a == b

    def unit(self, s, ctx):
        return {"type": "line", "path": s["path"], "match": s["name"], "kind": self.name}

    @staticmethod
    def matches(line, match):
        return line.lstrip().startswith(match + "=")

    def render_line(self, settings, current):
        s = settings[-1]
        return '%s="%s"' % (s["name"], s["value"])

    def persisted(self, s, unit_text):
        if unit_text is None:
            return None
        return env_file_value(unit_text.split("=", 1)[1])
