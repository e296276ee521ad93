# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One notation for every report: numbers, changes, noise and table cells.

- a measured number has 3 significant figures and never an exponent (``22700``,
  ``2.28 ms``, ``0.0129 ms``);
- a change is signed with one decimal (``+1.5%``) and its noise follows it as ``±15.0%``;
- a table cell holds at most ``CELL_LIMIT`` characters: longer text is cut at a word and
  says where the rest is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

CELL_LIMIT = 300
ELLIPSIS = "..."
VALUE_WIDTH = 22


def as_float(value):
    """``value`` as a float, or None (booleans, None, text that is no number, inf and nan)."""
    if isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def number(value, digits=3):
    """A measured number with ``digits`` significant figures and no exponent: ``22700``,
    ``2.28``, ``0.0129``; ``-`` for what is no number."""
    v = as_float(value)
    if v is None:
        return "-"
    if v == 0:
        return "0"
    magnitude = int(math.floor(math.log10(abs(v))))
    decimals = digits - 1 - magnitude
    rounded = round(v, decimals)
    if rounded and int(math.floor(math.log10(abs(rounded)))) > magnitude:  # 9.996 -> 10.0
        decimals -= 1
    if decimals <= 0:
        return "%d" % int(round(v, decimals))
    return "%.*f" % (decimals, rounded)


def ms(value):
    """A time in milliseconds: ``2.28 ms``."""
    text = number(value)
    return text if text == "-" else text + " ms"


def change(fraction):
    """A relative change, signed, one decimal: ``+1.5%``."""
    return "%+.1f%%" % (fraction * 100.0)


def cut(text, limit, where="..."):
    """``text`` cut at a word to at most ``limit`` characters, ending in ``where``."""
    text = str(text)
    if len(text) <= limit:
        return text
    head = text[: max(0, limit - len(where) - 1)]
    if " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,;:") + " " + where if where != ELLIPSIS else head.rstrip(" ,;:") + ELLIPSIS


def cell_text(value, limit=CELL_LIMIT, rest="(in full below)"):
    """Text in a table cell: a '|' would end the cell, a newline the row; at most ``limit``
    characters, ending in ``rest`` when cut."""
    text = " ".join(str("" if value is None else value).replace("|", "/").split())
    return cut(text, limit, "... " + rest) if len(text) > limit else text


def show_value(value, width=VALUE_WIDTH):
    """A setting's value as one short cell: ``-`` for none, ``N lines`` for a file's text, else
    the value itself, cut to ``width`` characters."""
    if value is None:
        return "-"
    text = str(value)
    if isinstance(value, bool):
        text = text.lower()
    lines = text.rstrip("\n").split("\n")
    if len(lines) > 1:
        return "%d lines" % len(lines)
    text = " ".join(lines[0].split()) or '""'
    if len(text) > width:
        return text[: width - len(ELLIPSIS)] + ELLIPSIS
    return text
