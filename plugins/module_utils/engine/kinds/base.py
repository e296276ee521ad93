# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The contract every kind of setting fulfils for the settings engine.

A kind knows how to validate and expand a requested setting, read its live value,
tell whether the live value can be written here, write it, and where its value is
persisted. Persistence goes through *units* that the engine snapshots and restores
byte for byte:

- ``dropin``: a file owned by stacktune, one per layer and kind family
  (e.g. /etc/sysctl.d/60-stacktune-kernel.conf), rendered from all settings in it;
- ``line``: one line of a shared file (e.g. the /dev/shm line of /etc/fstab);
- ``file``: a whole file whose content is the setting (e.g. /etc/nccl.conf).

Kinds with no persistence (NVML settings) return no unit; drift runs re-apply them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import (
    read_text,
    rooted,
    writable,
    write_live,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.policy.values import control_problem, line_error, shown

HEADER = "# Managed by stacktune (layer %s). Changes here are reported as drift and restored.\n"


# When a newly started process sees a setting's change (``Kind.takes_effect``; a setting's
# ``takes_effect``): the gate measures a layer only when one of its changes is seen ``now``.
EFFECTS = ("now", "next_login", "next_boot")


# Whether a process that is already running sees a setting's change (``Kind.seen_running``; a
# setting's ``seen_running`` from the layer's policy comes first). The gate switches a layer
# inside one running workload (a live trial) only when every change it can measure is seen
# that way; otherwise a fresh process per block must start to see it. A kind claims it only
# where a test or a measurement showed it (docs/gate.md): a wrong claim measures nothing.


class SpecError(ValueError):
    """A requested setting is invalid; the message names the offending field."""


class Unsupported(Exception):
    """The setting (or its live part) cannot be handled on this host; the message says why."""


def command_runner(module):
    """The ``run_command`` a Context needs, from an AnsibleModule: argv lists only, the program
    looked up on the host's PATH (exit 127 with a message when it is not there)."""

    def run_command(argv):
        binary = module.get_bin_path(argv[0])
        if binary is None:
            return _not_found(argv)
        return module.run_command([binary] + list(argv[1:]))

    return run_command


def run_argv(argv):
    """The same ``run_command`` outside Ansible (the host's watchdog): argv lists only, the
    program looked up on PATH (exit 127 with a message when it is not there)."""
    binary = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0])
    if binary is None:
        return _not_found(argv)
    proc = subprocess.run([binary] + list(argv[1:]), capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def _not_found(argv):
    return 127, "", "No such file: %s" % argv[0]


class Context(object):
    """What a kind needs to know about the run: root, layer, command runner, NVML session.

    ``nvml`` is an NVML session (``nvml.NvmlSession``); the nvml kind creates one on
    first use when none is given, so this module imports no kind.
    """

    def __init__(self, layer, root="/", run_command=None, nvml=None):
        self.layer = layer
        self.root = root or "/"
        self.run_command = run_command
        self.nvml_session = nvml

    @property
    def alternate_root(self):
        return self.root != "/"

    def path(self, host_path):
        return rooted(self.root, host_path)


def norm_ws(value):
    """Collapse whitespace the way the kernel prints multi-value settings."""
    return " ".join(str(value).split())


def setting(kind, key, value, **extra):
    """Build a normalised setting dict with its stable id."""
    out = {"id": "%s:%s" % (kind, key), "kind": kind, "key": key, "value": value}
    out.update(extra)
    return out


class Kind(object):
    """Base class: a live file under /proc or /sys, persisted through a drop-in unit."""

    name = None
    reboot = False  # the live value changes only at the next boot
    # True where the unit IS the live state (a whole file, a line of a file): the engine
    # then reads and writes only the unit, and there is no separate live value
    unit_is_live = False

    def expand(self, spec, ctx):
        raise NotImplementedError

    def live_path(self, s, ctx):
        raise NotImplementedError

    def read_live(self, s, ctx):
        text = read_text(self.live_path(s, ctx))
        if text is None:
            raise Unsupported("%s cannot be read" % self.live_path(s, ctx))
        return self.parse_live(text)

    def parse_live(self, text):
        return norm_ws(text)

    def live_writable(self, s, ctx):
        return writable(self.live_path(s, ctx))

    def write_live(self, s, value, ctx):
        write_live(self.live_path(s, ctx), value)

    def same(self, a, b):
        if a is None or b is None:
            return a is b
        return norm_ws(a) == norm_ws(b)

    def takes_effect(self, s):
        """When a newly started process sees this setting's change: ``now``, ``next_login``
        (read when a login session starts, like limits.d) or ``next_boot``. A setting's own
        ``takes_effect`` (from the layer's policy) comes before this."""
        return "next_boot" if self.reboot else "now"

    # A running process sees a new value of this kind (see ``seen_running``).
    running = False
    # Seconds after a switch before a running process's steps show the new value settled (a
    # GPU clock ramp after a power-limit change); the live trial drops them.
    settle_s = 0.0

    def seen_running(self, s):
        """Whether a process already running sees this setting's change on its next steps.
        A setting's own ``seen_running`` (from the layer's policy) comes before this."""
        return self.running and not self.reboot

    def running_fields(self, s):
        """What a row of a change seen now says of a running process: ``seen_running``, ``settle_s``."""
        given = s.get("seen_running")
        return {"seen_running": self.seen_running(s) if given is None else given, "settle_s": self.settle_s}

    def write_rank(self, s):
        """Settings of lower rank are written first, live and at boot (0: a value whose write
        resets others, such as a block queue's scheduler, which resets nr_requests)."""
        return 1

    # persistence
    def unit(self, s, ctx):
        return None

    def render(self, settings, layer):
        """Content of this kind's drop-in for the given settings (dropin units only)."""
        raise NotImplementedError

    @staticmethod
    def matches(line, match):
        """Whether a line of a shared file is this kind's line ``match`` (line units only)."""
        raise NotImplementedError

    def render_line(self, settings, current):
        """The line that carries these settings, given the current line or None (line units only)."""
        raise NotImplementedError

    def persisted(self, s, unit_text):
        """Value of the setting as its unit currently persists it (None when absent)."""
        return

    def after_persist(self, ctx, changed_units):
        """Hook run after units of this kind changed (e.g. regenerate the bootloader config)."""
        return []

    def other_writers(self, settings, ctx):
        """Other tools on the host that rewrite what these settings manage:
        ``[{"tool": short name, "message": sentence, "ids": [setting ids it may rewrite]}]``."""
        return []

    def boot_value(self, s, ctx, pending=None):
        """What the host's own boot machinery will set: ``(value, source path[, ours])``.

        ``ours`` (optional) is a short form of what stacktune's unit sets, for the message
        when the whole setting is long (a file whose one line is overridden).

        ``pending``: ``{host path: text}`` of units about to be written (check mode predicts
        with them in place).
        None where this kind cannot tell (then its drop-in is taken as what the next boot
        applies). A value that differs from the setting's means another file overrides
        stacktune's at the next boot: the engine reports the setting ``overridden``.
        """
        return


def plain_value(spec, what, required=True):
    """The value of a setting as the text the kernel or the file gets, refused when it is no
    plain value: a boolean (YAML 1.1 reads yes/no/on/off/true/false unquoted as booleans, so
    ``pcie_aspm: off`` arrives as false), a list, a mapping, or nothing where a value is needed."""
    value = spec.get("value")
    if isinstance(value, bool):
        raise SpecError(
            "%s: %r is a boolean, not a value for the kernel (YAML reads yes/no/on/off/true/false as booleans): "
            'write the value the kernel expects, in quotes ("off", "1")' % (what, value)
        )
    if isinstance(value, (list, dict)):
        raise SpecError("%s: the value must be a single number or word, got %r" % (what, value))
    text = "" if value is None else str(value).strip()
    if required and text == "":
        raise SpecError("%s needs a value, got %r" % (what, value))
    return text


def plain_line(what, value, where=None):
    """``value`` as it is, refused (SpecError) when it would not stay one plain value on its line
    of ``where`` (the collection's one rule for such values: ``policy/values.py``)."""
    message = line_error(what, value, where)
    if message is not None:
        raise SpecError(message)
    return value


def plain_name(what, value):
    """``value`` as it is, refused (SpecError) when it holds a line break or a control character
    (a key, a path: what a kind writes as one field of a line)."""
    problem = control_problem(str(value))
    if problem is not None:
        raise SpecError("%s %s %s" % (what, shown(value), problem))
    return value


def require(spec, field, kind):
    if spec.get(field) in (None, ""):
        raise SpecError("setting of kind %s needs '%s'" % (kind, field))
    return spec[field]


def exists(ctx, host_path):
    return os.path.exists(ctx.path(host_path))
