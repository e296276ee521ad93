# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kind ``sysfs``: a /sys attribute, persisted as a systemd-tmpfiles ``w`` line.

Attributes that print their choices with the active one in brackets
("always [madvise] never") read as the active choice.

A setting may name many attributes at once and say what the host may lack:

- ``key`` may hold ``*`` and ``?`` wildcards in its path components
  (``/sys/devices/system/cpu/cpufreq/policy*/scaling_governor``): it expands on the host
  to one setting per attribute found, in natural order (policy2 before policy10). The
  journal keeps the expanded settings, so verify, drift and restore act on exactly the
  attributes the apply found.
- ``missing: unsupported`` (default ``fail``) reports an attribute the host does not
  expose (no cpufreq in a VM, no ACPI platform profile) as ``unsupported`` with ``reason``
  instead of failing the run.
- ``choices_from``: the name of an attribute in the same directory that lists the values
  the kernel takes (``scaling_available_governors``; the attribute itself for
  ``[none] mq-deadline``). A value not listed there fails before anything changes, naming
  the values the host offers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.dropins import ordered_files
from ansible_collections.stacktune.gpu.plugins.module_utils.engine import writers
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import read_text
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import (
    HEADER,
    Kind,
    SpecError,
    Unsupported,
    exists,
    norm_ws,
    plain_line,
    plain_name,
    require,
    setting,
)

_BRACKET = re.compile(r"\[([^\]]+)\]")
_WILDCARD = re.compile(r"[*?]")
_NATURAL = re.compile(r"([0-9]+)")
_ATTRIBUTE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
MISSING = ("fail", "unsupported")
# Attributes whose write resets others: a queue's scheduler resets its nr_requests, and
# intel_pstate/amd-pstate take no energy_performance_preference but "performance" while
# the governor is performance (switching it back restores the preference saved before).
# They are written first, live (apply and restore) and at boot.
WRITE_FIRST = ("scaling_governor", "scheduler")
# what other tools (TuneD, power-profiles-daemon, cpupower, udev rules) also set
CPU_IO_PREFIXES = ("/sys/devices/system/cpu/", "/sys/firmware/acpi/platform_profile", "/sys/block/")
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


def write_rank(path):
    """0 for an attribute whose write changes others in its directory, else 1."""
    return 0 if path.rsplit("/", 1)[-1] in WRITE_FIRST else 1


def render_tmpfiles(settings, layer):
    """Render a tmpfiles.d drop-in; every setting carries the host path it writes.

    Lines are in path order, except that the attributes of WRITE_FIRST come before the
    others, so that systemd-tmpfiles (which writes in file order) leaves the others as set.
    """
    ordered = sorted(settings, key=lambda s: (write_rank(s["path"]), s["path"]))
    return HEADER % layer + "".join("w %s - - - - %s\n" % (s["path"], s["value"]) for s in ordered)


def natural_key(path):
    """Sort key that orders the numbers in a path by value (policy2 before policy10)."""
    return [int(part) if part.isdigit() else part for part in _NATURAL.split(path)]


def choice_words(text):
    """The values a sysfs choice list offers ("[none] mq-deadline kyber" -> none, mq-deadline, kyber)."""
    return (text or "").replace("[", " ").replace("]", " ").split()


def expand_paths(ctx, pattern):
    """Host paths of the attributes a key names: itself, or every match of its wildcards."""
    if not _WILDCARD.search(pattern):
        return [pattern] if exists(ctx, pattern) else []
    rooted_pattern = ctx.path(pattern)
    prefix = rooted_pattern[: len(rooted_pattern) - len(pattern)] if ctx.alternate_root else ""
    found = [p[len(prefix) :] if prefix else p for p in glob.glob(rooted_pattern) if os.path.isfile(p)]
    return sorted(found, key=natural_key)


class TmpfilesUnit:
    """Persistence as systemd-tmpfiles ``w`` lines in the layer's drop-in (:data:`TMPFILES`):
    the unit, render, persisted and boot_value of every kind whose setting carries the host
    ``path`` it writes (sysfs attributes, IRQ affinities)."""

    def unit(self, s, ctx):
        return {"type": "dropin", "path": TMPFILES % ctx.layer, "kind": "tmpfiles"}

    def render(self, settings, layer):
        return render_tmpfiles(settings, layer)

    def persisted(self, s, unit_text):
        return tmpfiles_value(unit_text, s["path"])

    def boot_value(self, s, ctx, pending=None):
        return tmpfiles_boot_value(ctx, s["path"], pending)


class SysfsKind(TmpfilesUnit, Kind):
    name = "sysfs"
    # cpufreq governor and EPP, THP, a queue's scheduler: the kernel acts on them at once
    running = True

    def expand(self, spec, ctx):
        path = str(require(spec, "key", self.name))
        if not path.startswith("/sys/") or "/../" in path + "/" or "[" in path or path.split() != [path]:
            raise SpecError(
                "sysfs key %r must be an absolute path under /sys/ without '..' or blanks (wildcards: * ?)" % path
            )
        plain_name("sysfs key", path)
        if spec.get("value") is None:
            raise SpecError("sysfs %s needs 'value'" % path)
        # the value ends a line "w <path> - - - - <value>" of the layer's tmpfiles.d drop-in
        plain_line("sysfs %s value" % path, spec["value"], TMPFILES % ctx.layer)
        if "%" in str(spec["value"]) + path:
            raise SpecError(
                "sysfs %s: %r holds %%, which systemd-tmpfiles would expand as a specifier at boot"
                % (path, spec["value"])
            )
        missing = spec.get("missing") or "fail"
        if missing not in MISSING:
            raise SpecError("sysfs %s: missing must be one of %s, got %r" % (path, ", ".join(MISSING), missing))
        choices_from = spec.get("choices_from")
        if choices_from is not None and not _ATTRIBUTE.match(str(choices_from)):
            raise SpecError("sysfs %s: choices_from must name an attribute in the same directory" % path)
        value = norm_ws(spec["value"])
        paths = expand_paths(ctx, path)
        if not paths:
            what = "no attribute matches %s" % path if _WILDCARD.search(path) else "%s does not exist" % path
            if missing == "unsupported":
                reason = spec.get("reason")
                raise Unsupported("%s: %s" % (reason, what) if reason else "%s on this host" % what)
            if _WILDCARD.search(path):
                raise SpecError("sysfs: %s on this host" % what)
            raise SpecError("sysfs attribute %s does not exist on this host" % path)
        out = []
        for found in paths:
            if choices_from is not None:
                self._check_choice(ctx, found, str(choices_from), value)
            out.append(setting(self.name, found, value, path=found))
        return out

    @staticmethod
    def _check_choice(ctx, path, attribute, value):
        source = os.path.join(os.path.dirname(path), attribute)
        text = read_text(ctx.path(source))
        if text is None:
            return  # the host does not list its choices; the kernel judges the write
        offered = choice_words(text)
        if value not in offered:
            raise SpecError(
                "%r is not a value %s takes on this host (%s lists: %s)"
                % (value, path, source, ", ".join(offered) or "nothing")
            )

    def live_path(self, s, ctx):
        return ctx.path(s["key"])

    def parse_live(self, text):
        return active_choice(text)

    def write_rank(self, s):
        return write_rank(s["path"])

    def other_writers(self, settings, ctx):
        if any(s["path"].startswith(CPU_IO_PREFIXES) or "/queue/" in s["path"] for s in settings):
            return writers.cpu_io_writers(ctx)
        return []
