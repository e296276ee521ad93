# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verify table: one fixed-width table per layer, one row per setting.

Columns: the setting, the value stacktune wants, the live value, the value its file
persists, what the next boot applies, the status, and who else writes the setting (other
tools running on the host, or another file that decides the value at the next boot). Rows
whose status needs a reason (drift, overridden, pending_reboot, unsupported) get it on a
line below the table, and so do the layer's notes. Input is one layer's result of
stacktune.gpu.host_settings state=verify (or of journal_info verify=true).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.notation import show_value
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.states import MEANINGS

COLUMNS = ("setting", "expected", "live", "persisted", "at boot", "status", "other writers")


def other_writers(row):
    """Who else writes a setting: the tools verify found, and the file that decides the value at
    the next boot when it is not stacktune's own."""
    out = list(row.get("other_writers") or [])
    source = row.get("at_boot_from")
    if source and source != row.get("persisted_in"):
        out.append(source)
    return ", ".join(out) or "-"


def show_against(value, expected):
    """A value next to the expected one: a file's text that is the expected text reads ``same``
    (and one that is not, ``N lines, differs``), so a drifted file stands out."""
    shown = show_value(value)
    if value is None or not shown.endswith(" lines"):
        return shown
    return "same" if str(value) == str(expected) else shown + ", differs"


def cells(row):
    expected = row.get("expected")
    return [
        str(row.get("id") or "%s:%s" % (row.get("kind"), row.get("key"))),
        show_value(expected),
        show_against(row.get("live"), expected),
        show_against(row.get("persisted"), expected),
        show_against(row.get("at_boot"), expected),
        str(row.get("status") or "-"),
        other_writers(row),
    ]


def layer_title(result):
    counts = result.get("counts") or {}
    rows = result.get("settings") or []
    shown = ", ".join("%d %s" % (counts[k], k) for k in sorted(counts))
    state = result.get("layer_state") or "?"
    title = "%s [%s]" % (result.get("layer"), result.get("kept_as") or state)
    if not rows:
        return title + ": no setting to verify (%s)" % (MEANINGS.get(state) or "the layer holds nothing now")
    return "%s: %d setting%s, %s" % (title, len(rows), "" if len(rows) == 1 else "s", shown)


def render_layer(result):
    """Lines of one layer's table (the title, the header, one line per setting, then the
    reasons and the notes), none ending with a newline or trailing blanks."""
    rows = list(result.get("settings") or [])
    lines = [layer_title(result)]
    if rows:
        table = [list(COLUMNS)] + [cells(r) for r in rows]
        widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
        for line in table:
            padded = [cell.ljust(widths[i]) for i, cell in enumerate(line[:-1])] + [line[-1]]
            lines.append(("  " + "  ".join(padded)).rstrip())
    for r in rows:
        if r.get("reason") and r.get("status") != "ok":
            lines.append("  %s: %s" % (r.get("id"), r["reason"]))
    for note in result.get("notes") or []:
        lines.append("  note: %s" % note)
    return lines
