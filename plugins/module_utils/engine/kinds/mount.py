# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kind ``mount``: one option of a mounted tmpfs (e.g. the size of /dev/shm).

Live is /proc/mounts, applied with ``mount -o remount,<option>=<value>`` where the
process may remount (CAP_SYS_ADMIN); persistence is the mount point's line in
/etc/fstab, edited in place (other options kept) or added when absent.

At boot systemd turns the fstab line into a mount unit (systemd-fstab-generator). A unit
file of the same name in /etc/systemd/system outranks the generated one, and ``Options=``
in the unit's drop-ins (``<unit>.d/*.conf``, by file name, later wins) replaces the
options of either: both are what the next boot mounts with instead of the fstab line.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.dropins import ordered_files
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import read_text
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import (
    Kind,
    SpecError,
    Unsupported,
    plain_line,
    plain_value,
    require,
    setting,
)

OPTIONS = ("size", "nr_inodes", "mode")
_SIZE = re.compile(r"^([0-9]+)([kKmMgGtT]?)\Z")
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
CAP_SYS_ADMIN = 21
# unit directories that outrank the fstab generator and survive a reboot, then those below it
UNIT_DIRS_ABOVE = ("/etc/systemd/system",)
UNIT_DIRS = ("/etc/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
_UNIT_SAFE = re.compile(r"[A-Za-z0-9:_.]")


def unit_name(mountpoint):
    """systemd's mount unit name for a path (``systemd-escape --path --suffix=mount``)."""
    path = mountpoint.strip("/")
    if not path:
        return "-.mount"
    out = []
    for i, char in enumerate(path):
        if char == "/":
            out.append("-")
        elif _UNIT_SAFE.match(char) and not (i == 0 and char == "."):
            out.append(char)
        else:
            out.extend("\\x%02x" % b for b in char.encode("utf-8"))
    return "".join(out) + ".mount"


def unit_options(text):
    """The last ``Options=`` of a unit file's [Mount] section: a string, "" when reset, None when absent."""
    found = None
    section = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif section == "[Mount]" and line.partition("=")[0].strip() == "Options":
            found = line.partition("=")[2].strip()
    return found


def size_bytes(text):
    """Bytes of a tmpfs size such as 64G or 8388608k; raise ValueError when malformed."""
    match = _SIZE.match(str(text).strip())
    if not match:
        raise ValueError("%r is not a size like 64G, 512M or 8388608k" % (text,))
    return int(match.group(1)) * _MULT[match.group(2).lower()]


def mount_options(mounts_text, mountpoint):
    """Options of the last mount of mountpoint in /proc/mounts text, or None when not mounted."""
    found = None
    for line in (mounts_text or "").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == mountpoint:
            found = fields[3]
    if found is None:
        return None
    return option_dict(found)


def option_dict(options):
    out = {}
    for item in options.split(","):
        name, sep, value = item.partition("=")
        out[name] = value if sep else ""
    return out


def has_capability(status_text, bit):
    for line in (status_text or "").splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) & (1 << bit))
    return False


class MountKind(Kind):
    name = "mount"
    # a remounted tmpfs size (/dev/shm) holds for the next allocation of a running process
    running = True

    def expand(self, spec, ctx):
        mountpoint = str(require(spec, "key", self.name))
        # the mount point and the option are fields of a line of /etc/fstab (blanks separate them)
        if not mountpoint.startswith("/") or mountpoint.split() != [mountpoint] or "/../" in mountpoint + "/":
            raise SpecError("mount key %r must be an absolute mount point path without blanks" % mountpoint)
        plain_line("mount key", mountpoint, "/etc/fstab")
        option = spec.get("option", "size")
        if option not in OPTIONS:
            raise SpecError("mount option %r is not one of %s" % (option, ", ".join(OPTIONS)))
        value = plain_line(
            "mount %s %s" % (mountpoint, option), plain_value(spec, "mount %s %s" % (mountpoint, option)), "/etc/fstab"
        )
        if value.split() != [value] or "," in value:
            raise SpecError(
                "mount %s %s %r must be one word without commas (an fstab option)" % (mountpoint, option, value)
            )
        if option == "size":
            try:
                if size_bytes(value) <= 0:
                    raise ValueError("size must be positive")
            except ValueError as exc:
                raise SpecError("mount %s size: %s" % (mountpoint, exc)) from None
            if value.isdigit():
                raise SpecError(
                    "mount %s size %s has no unit: that is %s bytes; give the unit (64G, 512M)"
                    % (mountpoint, value, value)
                )
        elif option == "nr_inodes" and not value.isdigit():
            raise SpecError("mount %s nr_inodes must be a whole number, got %r" % (mountpoint, value))
        elif option == "mode" and not re.match(r"^[0-7]{3,4}$", value):
            raise SpecError("mount %s mode must be octal like 1777, got %r" % (mountpoint, value))
        return [setting(self.name, "%s:%s" % (mountpoint, option), value, mountpoint=mountpoint, option=option)]

    def live_path(self, s, ctx):
        return ctx.path("/proc/mounts")

    def read_live(self, s, ctx):
        options = mount_options(read_text(self.live_path(s, ctx)), s["mountpoint"])
        if options is None:
            raise Unsupported("%s is not mounted" % s["mountpoint"])
        return options.get(s["option"])

    def same(self, a, b):
        if a is None or b is None:
            return a is b
        try:
            return size_bytes(a) == size_bytes(b)
        except ValueError:
            return str(a).strip() == str(b).strip()

    def live_writable(self, s, ctx):
        if ctx.alternate_root:
            return False, "alternative root: remount skipped"
        if not has_capability(read_text("/proc/self/status"), CAP_SYS_ADMIN):
            return False, "no CAP_SYS_ADMIN here (unprivileged container): cannot remount %s" % s["mountpoint"]
        return True, None

    def write_live(self, s, value, ctx):
        # Pass the mount's current flags along (nosuid, nodev, noexec ...): a remount that
        # names only the size can drop them.
        current = mount_options(read_text(self.live_path(s, ctx)), s["mountpoint"]) or {}
        current[s["option"]] = str(value)
        options = ",".join(name if val == "" else "%s=%s" % (name, val) for name, val in current.items())
        argv = ["mount", "-o", "remount," + options, s["mountpoint"]]
        rc, out, err = ctx.run_command(argv)
        if rc != 0:
            raise OSError("%s failed (rc=%s): %s" % (" ".join(argv), rc, (err or out).strip()))

    # persistence: the mount point's line in /etc/fstab
    def unit(self, s, ctx):
        return {"type": "line", "path": "/etc/fstab", "match": s["mountpoint"], "kind": self.name}

    @staticmethod
    def matches(line, match):
        fields = line.split()
        return len(fields) >= 4 and not fields[0].startswith("#") and fields[1] == match

    def render_line(self, settings, current):
        """The fstab line carrying all of these settings' options, based on the current line."""
        if current is None:
            fields = ["tmpfs", settings[0]["mountpoint"], "tmpfs", "defaults", "0", "0"]
        else:
            fields = current.split()
            while len(fields) < 6:
                fields.append("0")
        opts = [o for o in fields[3].split(",") if o]
        for s in settings:
            opts = [o for o in opts if o.partition("=")[0] != s["option"]]
            opts.append("%s=%s" % (s["option"], s["value"]))
        fields[3] = ",".join(opts)
        return " ".join(fields)

    def persisted(self, s, unit_text):
        if unit_text is None:
            return None
        fields = unit_text.split()
        return option_dict(fields[3]).get(s["option"]) if len(fields) >= 4 else None

    def boot_value(self, s, ctx, pending=None):
        name = unit_name(s["mountpoint"])
        source, options = None, None
        line = (pending or {}).get("/etc/fstab")
        if line is None:
            for candidate in (read_text(ctx.path("/etc/fstab")) or "").splitlines():
                if self.matches(candidate, s["mountpoint"]):
                    line = candidate
        if line is not None and len(line.split()) >= 4:
            source, options = "/etc/fstab", line.split()[3]
        for directory in UNIT_DIRS_ABOVE:
            host_path = "%s/%s" % (directory, name)
            real = ctx.path(host_path)
            if os.path.islink(real) and os.readlink(real) == "/dev/null":
                return (None, host_path + " (masked)")
            text = read_text(real)
            if text is not None:
                source, options = host_path, unit_options(text)
                break
        dirs = ["%s/%s.d" % (d, name) for d in UNIT_DIRS]
        for host_path, text in ordered_files(ctx, dirs):
            found = unit_options(text)
            if found is not None:
                source, options = host_path, found
        if source is None:
            return None
        return (option_dict(options or "").get(s["option"]) or None, source)
