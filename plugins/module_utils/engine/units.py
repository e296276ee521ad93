# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine's units: the kinds it knows, and the files and lines a layer's settings persist in.

A unit is what one kind writes for a layer (a drop-in, one line of a shared file, a mount
unit): read it, snapshot it, write it, restore it, and find what a removed setting or a
snapshot leaves to put back. :class:`UnitFiles` is the part of :class:`engine.Engine` that
does this; the engine's flow (normalize, observe, apply, verify, restore) is in engine.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import fileops
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import SpecError, Unsupported
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.cmdline import GRUB_DROPIN, KernelArgKind
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.file import EnvVarKind, FileKind
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.grubby import (
    GrubbyArgKind,
    original_values,
    read_targets,
    restore_entries,
    snapshot_entries,
    snapshot_targets,
    state_text,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.irq import IrqAffinityKind
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.mount import MountKind
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.nvml import NvmlKind
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.sysctl import SYSCTL_DROPIN, SysctlKind
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.sysfs import TMPFILES, SysfsKind

KINDS = {
    k.name: k
    for k in (
        SysctlKind(),
        SysfsKind(),
        IrqAffinityKind(),
        KernelArgKind(),
        GrubbyArgKind(),
        MountKind(),
        FileKind(),
        EnvVarKind(),
        NvmlKind(),
    )
}


# the drop-in each unit kind writes, per layer (what a journal record may restore)
DROPINS = {"sysctl": SYSCTL_DROPIN, "tmpfiles": TMPFILES, "kernel_arg": GRUB_DROPIN}


def unit_key(unit):
    if unit["type"] == "line":
        return "line:%s:%s" % (unit["path"], unit["match"])
    return "%s:%s" % (unit["type"], unit["path"])


def split_lines(text):
    """``(lines, final_newline)`` of a text, lines split on newlines only (a carriage return or
    form feed stays part of its line), so that joining them gives the text back exactly."""
    if not text:
        return [], True
    final = text.endswith("\n")
    return (text[:-1] if final else text).split("\n"), final


def matching_lines(kind, lines, match):
    """Indices of the lines of a shared file that are the unit's line."""
    return [i for i, line in enumerate(lines) if kind.matches(line, match)]


class UnitFiles:
    """Units of a layer: the part of the engine that reads, writes and restores them.

    Expects of the class it is part of: ``ctx`` (the kinds' Context), ``check_mode``,
    ``journal`` and ``observe``.
    """

    # ------------------------------------------------------------------ observe
    def _unit(self, s):
        kind = KINDS[s["kind"]]
        try:
            return kind.unit(s, self.ctx), None
        except Unsupported as exc:
            return None, str(exc)

    def unit_path(self, host_path):
        """The rooted path of a unit, refused (UnsafePath) when a link lies on its way."""
        return fileops.check_no_links(self.ctx.root, host_path)

    def read_unit(self, unit):
        """Current text of a unit (whole file, or the matching line) or None when absent.

        A shared file with more than one line for the unit is refused: stacktune would have to
        drop lines it does not own (which one does the host use?); the message names them.
        """
        if unit["type"] == "boot_entries":
            return state_text(read_targets(self.ctx))
        text = fileops.read_unit_text(self.unit_path(unit["path"]))
        if unit["type"] != "line":
            return text
        lines, _final = split_lines(text)
        found = matching_lines(KINDS[unit["kind"]], lines, unit["match"])
        if len(found) > 1:
            raise SpecError(
                "%s has %d lines for %s (lines %s): stacktune manages one line and keeps every line it does not "
                "own, so it will not choose; keep the line the host should use and remove the others"
                % (unit["path"], len(found), unit["match"], ", ".join(str(i + 1) for i in found))
            )
        return lines[found[0]] if found else None

    def snapshot_unit(self, unit):
        if unit["type"] == "boot_entries":
            return {
                "type": "boot_entries",
                "path": unit["path"],
                "kind": unit["kind"],
                "files": snapshot_entries(self.ctx),
            }
        if unit["type"] == "line":
            return {
                "type": "line",
                "path": unit["path"],
                "match": unit["match"],
                "kind": unit["kind"],
                "file_exists": os.path.exists(self.unit_path(unit["path"])),
                "line": self.read_unit(unit),
            }
        snap = fileops.snapshot_file(self.unit_path(unit["path"]))
        snap.update({"type": unit["type"], "path": unit["path"], "kind": unit["kind"]})
        return snap

    # ------------------------------------------------------------------ units
    def desired_units(self, settings, observations, given_up=None):
        """Desired text of every unit the settings persist through, keyed by unit key.

        ``given_up``: ``{unit key: {name: original value}}`` of the arguments a layer no longer
        asks for in a unit shared with others it keeps (boot entries: grubby puts them back).
        """
        groups = {}
        for s in settings:
            unit = observations[s["id"]]["unit"]
            if unit is None:
                continue
            key = unit_key(unit)
            groups.setdefault(key, {"unit": unit, "settings": []})["settings"].append(s)
        out = {}
        for key, group in groups.items():
            unit, members = group["unit"], group["settings"]
            kind = KINDS[members[0]["kind"]]
            if unit["type"] == "dropin":
                text = kind.render(members, self.ctx.layer)
            elif unit["type"] == "file":
                text = members[0]["value"]
            elif unit["type"] == "boot_entries":
                text = kind.render_entries(members, self.read_unit(unit), (given_up or {}).get(key))
            else:
                text = kind.render_line(members, self.read_unit(unit))
            out[key] = {"unit": unit, "text": text, "settings": [m["id"] for m in members]}
        return out

    def write_unit(self, unit, text):
        path = self.unit_path(unit["path"])
        hook = {"kill_at": "mid_unit_write", "layer": self.ctx.layer}
        if unit["type"] == "dropin":
            fileops.atomic_write(path, text.encode("utf-8"), 0o644, **hook)
        elif unit["type"] == "file":
            fileops.atomic_write(path, text.encode("utf-8"), int(unit.get("mode", "0644"), 8), **hook)
        elif unit["type"] == "boot_entries":
            self._write_entries(unit, text)
        else:
            self._write_line(unit, text)

    def _write_entries(self, unit, text):
        """Run grubby for the arguments that change, then read the targets back: anything but
        the predicted text puts every file back as it was and fails, naming what grubby did."""
        current = self.read_unit(unit)
        if current == text:
            return
        files = snapshot_entries(self.ctx)
        argv = KINDS[unit["kind"]].grubby_argv(self.ctx, current, text)
        rc, out, err = self.ctx.run_command(argv) if self.ctx.run_command else (127, "", "no command runner")
        found = self.read_unit(unit) if rc == 0 else None
        if found != text:
            restore_entries(self.ctx, files)
            if rc != 0:
                why = "failed (rc=%s): %s" % (rc, (err or out).strip()[-400:])
            else:
                why = "left %s instead of %s" % (found.strip().replace("\n", "; "), text.strip().replace("\n", "; "))
            raise RuntimeError("%s %s; the boot entries were put back as they were" % (" ".join(argv), why))

    def _write_line(self, unit, new_line):
        """Replace the unit's line in its file (or append it; remove it when new_line is None).

        Every other line stays as it is, byte for byte, and so does the file's last newline
        (or its lack): removing the line stacktune added gives back the file it found.
        """
        path = self.unit_path(unit["path"])
        kind = KINDS[unit["kind"]]
        snap = fileops.snapshot_file(path)
        lines, final_newline = split_lines(fileops.snapshot_text(snap))
        idx = matching_lines(kind, lines, unit["match"])
        if len(idx) > 1:
            self.read_unit(unit)  # refuses, naming the lines
        if new_line is None:
            lines = [line for i, line in enumerate(lines) if i not in idx]
        elif idx:
            lines[idx[0]] = new_line
        else:
            lines.append(new_line)
        data = "\n".join(lines) + ("\n" if lines and final_newline else "")
        hook = {"kill_at": "mid_unit_write", "layer": self.ctx.layer}
        if snap.get("exists"):
            fileops.atomic_write(path, data.encode("utf-8"), int(snap["mode"], 8), snap["uid"], snap["gid"], **hook)
        else:
            fileops.atomic_write(path, data.encode("utf-8"), 0o644, **hook)

    def restore_unit(self, snap):
        """Put a unit back as snapshotted. Returns True when something changed."""
        if snap["type"] == "boot_entries":
            changed, notes = restore_entries(self.ctx, snap["files"], self.check_mode)
            self.notes.extend(n for n in notes if n not in self.notes)
            return changed
        path = self.unit_path(snap["path"])
        if not self.check_mode:
            fileops.sweep_temp(os.path.dirname(path))
        if snap["type"] == "line":
            unit = {"type": "line", "path": snap["path"], "match": snap["match"], "kind": snap["kind"]}
            if self.read_unit(unit) == snap["line"]:
                return False
            if not self.check_mode:
                self._write_line(unit, snap["line"])
                if not snap["file_exists"] and not (fileops.read_unit_text(path) or "").strip():
                    fileops.remove(path)
            return True
        if fileops.snapshot_file(path) == {k: v for k, v in snap.items() if k not in ("type", "path", "kind")}:
            return False
        if not self.check_mode:
            fileops.restore_file(path, snap)
        return True

    def _undo_live(self, written, snap, entry, before_apply):
        """A live write was refused: put back the live values written before it and the journal
        as it was, so the refused apply leaves nothing behind."""
        for s in reversed(written):
            old = snap["live"].get(s["id"])
            if old is not None:
                KINDS[s["kind"]].write_live(s, old, self.ctx)
        if before_apply is not None:
            self.journal.save(before_apply)
        else:
            fileops.remove(self.journal.path(entry["layer"]))

    @staticmethod
    def _write_rank(s):
        return KINDS[s["kind"]].write_rank(s) if s is not None and s.get("kind") in KINDS else 1

    def given_up(self, removed, entry, settings):
        """``{unit key: {name: original value}}`` of removed boot arguments whose boot entries
        the layer keeps for others (``desired_units``); a unit no setting keeps is restored whole."""
        kept = {self._unit_key_of(s) for s in settings}
        out = {}
        for s in removed:
            key = self._unit_key_of(s)
            snap = entry["original"]["units"].get(key)
            if key in kept and snap is not None and snap["type"] == "boot_entries":
                out.setdefault(key, {})[s["key"]] = original_values(self.ctx, snap["files"], s["key"])
        return out

    def _unit_key_of(self, s):
        unit, _err = self._unit(s)
        return unit_key(unit) if unit else None

    def _restore_removed(self, removed, entry, orphan_units):
        """Settings a layer no longer asks for go back to their original values."""
        rows = []
        for snap in orphan_units:
            if self.restore_unit(snap):
                rows.append(
                    {
                        "id": "unit:%s" % snap["path"],
                        "kind": "unit",
                        "key": snap["path"],
                        "expected": None,
                        "live": None,
                        "persisted": None,
                        "persisted_in": snap["path"],
                        "status": "changed",
                        "reason": "no longer requested: restored",
                        "changed": True,
                    }
                )
        for s in removed:
            original = entry["original"]["live"].get(s["id"])
            obs = self.observe(s)
            wrote = False
            if original is not None and obs["writable"] and not KINDS[s["kind"]].same(obs["live"], original):
                wrote = True
                if not self.check_mode:
                    KINDS[s["kind"]].write_live(s, original, self.ctx)
            rows.append(
                {
                    "id": s["id"],
                    "kind": s["kind"],
                    "key": s["key"],
                    "expected": original,
                    "live": obs["live"],
                    "persisted": None,
                    "persisted_in": None,
                    "status": "changed" if wrote else "ok",
                    "reason": "no longer requested: restored",
                    "changed": wrote,
                }
            )
        return rows

    def _changes_from_snapshot(self, snap, units, settings, before):
        """Unit and live changes a real run makes once an interrupted layer is back at snap."""
        unit_changes = {}
        for key, u in units.items():
            old = snap["units"].get(key)
            if old is None:
                current = self.read_unit(u["unit"])
            elif old["type"] == "line":
                current = old["line"]
            elif old["type"] == "boot_entries":
                current = state_text(snapshot_targets(self.ctx, old["files"]))
            else:
                current = fileops.snapshot_text(old)
            if current != u["text"]:
                unit_changes[key] = u
        live_changes = []
        for s in settings:
            kind = KINDS[s["kind"]]
            if not before[s["id"]]["writable"] or kind.unit_is_live:
                continue
            old = snap["live"].get(s["id"], before[s["id"]]["live"])
            if not kind.same(old, s["value"]):
                live_changes.append(s)
        return unit_changes, live_changes
