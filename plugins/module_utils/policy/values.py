# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a value may hold where it lands: one line of a file, or one part of a path.

Two rules for the whole collection, read by the settings engine's kinds (so no layer can
write past them) and by ``check_vars`` (so a run stops on its variables, before anything
on a host changes):

- :func:`line_problem`: a value written into one line of a file that a shell sources
  (/etc/default/irqbalance, the GRUB drop-in) or that a program reads line by line
  (sysctl.d, tmpfiles.d, fstab, limits.d, nccl.conf). It must stay that one value on that
  one line: no character that ends a line to any reader (every character ``str.splitlines``
  splits on, and the other control characters), no shell expansion (``$``: ``$(...)``,
  ``${...}``, ``$NAME``), no backtick, no quote that would end a quoted value, no backslash
  that would escape the character after it.
- :func:`component_problem`: a value that becomes one component of a path (a run id, a
  layer name, a report's host name): no separator, not ``.`` or ``..``, no control
  character; :func:`inside` joins such components under a directory and refuses a result
  that resolves outside it.

Standard library only: the engine's kinds run on the host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import unicodedata

# Every character str.splitlines() ends a line at (Python's "universal newlines").
LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
# What a shell does with the rest of a value, in the order they are reported.
SHELL_ACTIVE = (
    ("$(", "command substitution $(...)"),
    ("`", "command substitution `...`"),
    ("$", "shell expansion ($NAME, ${...})"),
    ('"', "a double quote, which ends a quoted value"),
    ("'", "a single quote, which ends a quoted value"),
    ("\\", "a backslash, which escapes the character after it (a closing quote, the line's end)"),
)
# the longest file name Linux takes, in bytes
NAME_MAX = 255


def char_name(char):
    """``U+2028 (LINE SEPARATOR)``: a character as a person can find it in a table."""
    name = unicodedata.name(char, "")
    if not name and char in "\n\r\t\x0b\x0c":
        name = {"\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\t": "TAB", "\x0b": "LINE TABULATION"}.get(
            char, "FORM FEED"
        )
    return "U+%04X%s" % (ord(char), " (%s)" % name if name else "")


def control_problem(text):
    """Why text holds a character that ends a line or controls a terminal, or None.

    Every character ``str.splitlines`` splits on, every other control character (C0, DEL,
    C1) but the tab, and the line and paragraph separators of Unicode.
    """
    for char in text:
        if char in LINE_BREAKS:
            return "holds a line break, %s" % char_name(char)
        if char != "\t" and unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return "holds a control character, %s" % char_name(char)
    return None


def line_problem(value):
    """Why ``value`` cannot be written as one plain value into one line of a file a shell
    sources or a program reads line by line; None when it can."""
    text = str(value)
    problem = control_problem(text)
    if problem:
        return problem
    for token, what in SHELL_ACTIVE:
        if token in text:
            return "holds %s" % what
    return None


def component_problem(value):
    """Why ``value`` cannot be one component of a path (a file or directory name); None when it can."""
    text = "" if value is None else str(value)
    if text in ("", ".", ".."):
        return "is %s, not a name" % ("empty" if not text else "'%s'" % text)
    if "/" in text or "\\" in text:
        return "holds a path separator (%s)" % ("/" if "/" in text else "\\")
    problem = control_problem(text)
    if problem:
        return problem
    if "\x00" in text:
        return "holds a NUL character"
    if len(text.encode("utf-8", "surrogatepass")) > NAME_MAX:
        return "is longer than %d bytes" % NAME_MAX
    return None


def shown(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def line_error(what, value, where=None):
    """The message for a value :func:`line_problem` refuses (None when it is fine)."""
    problem = line_problem(value)
    if problem is None:
        return None
    return "%s must be plain text on one line%s; %s %s" % (
        what,
        " (it is written into a line of %s)" % where if where else "",
        shown(value),
        problem,
    )


def component_error(what, value, where=None):
    """The message for a value :func:`component_problem` refuses (None when it is fine)."""
    problem = component_problem(value)
    if problem is None:
        return None
    return "%s must be a name without path separators, '..' or control characters%s; %s %s" % (
        what,
        " (it names a file or directory in %s)" % where if where else "",
        shown(value),
        problem,
    )


def inside(base, *parts):
    """``base/part/...``, refused (ValueError) when a part is no path component or the result
    resolves (through links that already exist) outside ``base``."""
    for part in parts:
        problem = component_problem(part)
        if problem is not None:
            raise ValueError("%s %s" % (shown(part), problem))
    path = os.path.join(base, *[str(p) for p in parts])
    top = os.path.realpath(base)
    real = os.path.realpath(path)
    if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
        raise ValueError("%s resolves to %s, outside %s" % (path, real, top))
    return path
