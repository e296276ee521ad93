# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kind ``kernel_arg``: a kernel boot argument.

Live is /proc/cmdline (it changes only at boot, so a persisted change is reported
``pending_reboot``); persistence is a GRUB drop-in,
/etc/default/grub.d/60-stacktune-<layer>.cfg, after which the bootloader configuration
is regenerated with update-grub (or grub-mkconfig / grub2-mkconfig) when present.
RHEL-family hosts (grubby, BLS boot entries) never read that drop-in: there the kind
reports the arguments unsupported instead of writing a file that does nothing (the
``grubby_arg`` kind, kinds/grubby.py, is the one for them).
A bare flag such as ``nosoftlockup`` has the value "" (empty string).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shlex

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.dropins import ordered_files
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import env_file_value, read_text
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import (
    HEADER,
    Kind,
    SpecError,
    Unsupported,
    plain_line,
    plain_value,
    setting,
)

GRUB_DROPIN = "/etc/default/grub.d/60-stacktune-%s.cfg"

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")
_VALUE = re.compile(r"^[A-Za-z0-9_.,:=+/\-]*\Z")
VAR = "GRUB_CMDLINE_LINUX_DEFAULT"
BOOTLOADER_UPDATERS = (
    ["update-grub"],
    ["grub-mkconfig", "-o", "/boot/grub/grub.cfg"],
    ["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"],
)


def cmdline_args(text):
    """Map argument name -> value ("" for bare flags) of a kernel command line; last one wins."""
    out = {}
    for token in (text or "").split():
        name, sep, value = token.partition("=")
        out[name] = value if sep else ""
    return out


_ASSIGN = re.compile(r"^\s*(?:export\s+)?(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)=(.*)$")
_VARREF = re.compile(r"\$\{(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)\}|\$(GRUB_CMDLINE_LINUX(?:_DEFAULT)?)\b")


def grub_assignments(text, env):
    """Apply the GRUB_CMDLINE_LINUX[_DEFAULT] assignments of one sourced file to ``env``.

    Reads what grub-mkconfig's shell would: plain, double-quoted or single-quoted values, with
    ``$VAR``/``${VAR}`` of these two variables expanded outside single quotes. Returns False
    when a line is beyond this reader (command substitution, other variables, conditionals
    around an assignment): then the boot value is not known.
    """
    depth = 0
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if re.match(r"^(if|case|for|while)\b", line):
            depth += 1
        elif re.match(r"^(fi|esac|done)\b", line):
            depth = max(0, depth - 1)
        match = _ASSIGN.match(line)
        if not match:
            continue
        if depth or "$(" in line or "`" in line:
            return False
        name, rhs = match.group(1), match.group(2)
        if rhs.startswith("'"):
            try:
                words = shlex.split(rhs)
            except ValueError:
                return False
        else:
            if re.search(r"\$(?!\{?GRUB_CMDLINE_LINUX)", rhs):
                return False
            expanded = _VARREF.sub(lambda m: env.get(m.group(1) or m.group(2), ""), rhs)
            try:
                words = shlex.split(expanded, comments=True)
            except ValueError:
                return False
        env[name] = " ".join(" ".join(words).split())
    return True


def format_arg(name, value):
    return name if value == "" else "%s=%s" % (name, value)


# Distributions whose GRUB ignores /etc/default/grub.d (boot entries are BLS files kept by grubby).
GRUBBY_FAMILY = ("rhel", "fedora", "centos")


def _grubby_family(ctx):
    if os.path.exists(ctx.path("/etc/redhat-release")):
        return True
    ids = []
    for line in (read_text(ctx.path("/etc/os-release")) or "").splitlines():
        key, _sep, value = line.partition("=")
        if key in ("ID", "ID_LIKE"):
            ids.extend(env_file_value(value).lower().split())
    return any(name in GRUBBY_FAMILY for name in ids)


class BootArgLive:
    """The live side of a boot argument kind (kernel_arg, grubby_arg): read from /proc/cmdline,
    never written live (the argument takes effect at the next boot), compared as text."""

    reboot = True

    def live_path(self, s, ctx):
        return ctx.path("/proc/cmdline")

    def read_live(self, s, ctx):
        text = read_text(self.live_path(s, ctx))
        if text is None:
            raise Unsupported("/proc/cmdline cannot be read")
        return cmdline_args(text).get(s["key"])

    def live_writable(self, s, ctx):
        return False, "boot arguments take effect at the next boot"

    def same(self, a, b):
        return a == b


class KernelArgKind(BootArgLive, Kind):
    name = "kernel_arg"

    def expand(self, spec, ctx):
        name = str(spec.get("key") or "")
        # both go into the line GRUB_CMDLINE_LINUX_DEFAULT="..." of a drop-in grub-mkconfig sources
        plain_line("kernel_arg key", name, GRUB_DROPIN % ctx.layer)
        if not _NAME.match(name):
            raise SpecError("kernel_arg key %r is not a valid boot argument name" % name)
        value = plain_line(
            "kernel_arg %s value" % name,
            plain_value(spec, "kernel_arg %s" % name, required=False),
            GRUB_DROPIN % ctx.layer,
        )
        if not _VALUE.match(value):
            raise SpecError(
                "kernel_arg %s value %r has characters not allowed on a kernel command line" % (name, value)
            )
        return [setting(self.name, name, value)]

    def unit(self, s, ctx):
        if _grubby_family(ctx):
            raise Unsupported(
                "this is a RHEL-family host: its boot entries come from grubby (BLS), which never reads "
                "/etc/default/grub.d, so this kind does not persist boot arguments here; the grubby_arg kind "
                "does (grubby --update-kernel=ALL --args=...), and the kernel role uses it on such hosts"
            )
        if not os.path.exists(ctx.path("/etc/default/grub")):
            raise Unsupported(
                "no GRUB configuration (/etc/default/grub) on this host: boot arguments cannot be persisted"
            )
        return {"type": "dropin", "path": GRUB_DROPIN % ctx.layer, "kind": self.name}

    def render(self, settings, layer):
        args = " ".join(format_arg(s["key"], s["value"]) for s in sorted(settings, key=lambda x: x["key"]))
        return HEADER % layer + '%s="${%s} %s"\n' % (VAR, VAR, args)

    def boot_value(self, s, ctx, pending=None):
        """The argument on the command line grub-mkconfig builds: /etc/default/grub, then grub.d/*.cfg in order."""
        if _grubby_family(ctx) or not os.path.exists(ctx.path("/etc/default/grub")):
            return None
        files = [("/etc/default/grub", read_text(ctx.path("/etc/default/grub")))]
        files += ordered_files(ctx, ("/etc/default/grub.d",), pending, suffix=".cfg")
        env = {"GRUB_CMDLINE_LINUX": "", "GRUB_CMDLINE_LINUX_DEFAULT": ""}
        found, source = None, None
        for host_path, text in files:
            if not grub_assignments(text, env):
                return None
            value = cmdline_args(env["GRUB_CMDLINE_LINUX"] + " " + env["GRUB_CMDLINE_LINUX_DEFAULT"]).get(s["key"])
            if value != found:
                found, source = value, host_path
        return (found, source) if source is not None else None

    def persisted(self, s, unit_text):
        for line in (unit_text or "").splitlines():
            if line.startswith(VAR + "="):
                try:
                    words = shlex.split(line.split("=", 1)[1])
                except ValueError:
                    return None
                return cmdline_args(" ".join(words).replace("${%s}" % VAR, "")).get(s["key"])
        return None

    def after_persist(self, ctx, changed_units):
        if ctx.alternate_root or ctx.run_command is None:
            return ["bootloader configuration not regenerated (alternative root)"]
        for argv in BOOTLOADER_UPDATERS:
            rc, out, err = ctx.run_command(argv)
            if rc == 0:
                return ["regenerated the bootloader configuration with %s" % argv[0]]
            if rc != 127 and "No such file" not in (err or ""):
                raise RuntimeError("%s failed (rc=%s): %s" % (" ".join(argv), rc, (err or out).strip()[-400:]))
        return ["no update-grub/grub-mkconfig on this host: regenerate the bootloader configuration by hand"]
