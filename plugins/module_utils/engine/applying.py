# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The steps of ``Engine.apply``, in the order a real apply takes them:

1. ``_plan_apply``: what the host holds and what must be written (units, live values, and
   what settings the layer no longer has);
2. ``_predict_apply`` (check mode only): the rows a real run would report;
3. ``_write_ahead``: the journal records the originals and the pre-apply snapshot, state
   ``applying``, before the first write;
4. ``_write_live_values``: live values first (what the kernel refuses is never persisted);
5. ``_persist``: the persistence units, and what removed settings leave behind;
6. ``_observe_applied``: every setting observed again (the verification rows);
7. ``_finish_apply``: the journal's final record.

A layer's apply is all or nothing: when step 4 fails, the live values written before it and
the journal go back as they were; when step 5, 6 or 7 fails, ``_put_back_failed_apply`` puts
the host back to the snapshot of step 3, the journal ends ``restored`` (or back in the state
the layer had), and the error says so, or says exactly what could not be put back and why.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import datetime

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import fileops
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import SpecError
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.units import KINDS, UnitFiles, unit_key


def now():
    return datetime.datetime.utcnow().replace(microsecond=0).isoformat() + "Z"


def failure_words(exc):
    """An error in words that always say what happened (a full disk says so)."""
    text = str(exc)
    if getattr(exc, "errno", None) == 28 and "No space left" not in text:
        text = "%s (no space left on the device)" % text
    return text


class ApplySteps(UnitFiles):
    """The steps of an apply (see the module's docstring). Expects of the class it is part of
    the Engine's ``observe``, ``status_of``, ``effect_of``, ``result_row``, ``restore``,
    ``load`` and ``variables``."""

    def _plan_apply(self, settings, entry, resuming):
        """What an apply of ``settings`` over ``entry`` writes (a dict)."""
        new_ids = {s["id"] for s in settings}
        if resuming:
            previous = entry["snapshot"]["settings"]  # what the host holds while the layer is off
        else:
            previous = entry["settings"] if entry["state"] in ("applying", "applied", "suspended", "kept") else []
        removed = [s for s in previous if s["id"] not in new_ids]
        before = {s["id"]: self.observe(s) for s in settings}
        units = self.desired_units(settings, before, self.given_up(removed, entry, settings))
        return {
            "settings": settings,
            "previous": previous,
            "removed": removed,
            "before": before,
            "units": units,
            "unit_changes": {k: u for k, u in units.items() if self.read_unit(u["unit"]) != u["text"]},
            "live_changes": [
                s
                for s in settings
                if before[s["id"]]["writable"]
                and not KINDS[s["kind"]].unit_is_live
                and not KINDS[s["kind"]].same(before[s["id"]]["live"], s["value"])
            ],
            # units that only removed settings persisted through, and live values to put back
            "orphan_units": [
                snap
                for key, snap in entry["original"]["units"].items()
                if key not in units and any(key == self._unit_key_of(s) for s in removed)
            ],
        }

    def _wrote(self, plan, s):
        return s in plan["live_changes"] or any(s["id"] in u["settings"] for u in plan["unit_changes"].values())

    def _predict_apply(self, plan, entry, interrupted):
        """The rows a real apply would report (check mode: nothing is written)."""
        settings, before, units = plan["settings"], plan["before"], plan["units"]
        if interrupted:
            # the real run first puts the interrupted layer back to its snapshot
            plan["unit_changes"], plan["live_changes"] = self._changes_from_snapshot(
                entry["snapshot"], units, settings, before
            )
        rows = []
        for s in settings:
            obs = before[s["id"]]
            wrote = self._wrote(plan, s)
            kind = KINDS[s["kind"]]
            pred = dict(obs)
            pred["live_ok"] = (obs["live_error"] is None and kind.same(obs["live"], s["value"])) or (
                s in plan["live_changes"]
            )
            if kind.unit_is_live and obs["unit"] is not None:
                pred["live_ok"] = True
            if obs["unit"] is not None:
                pred["persisted"] = s["value"]
                key = unit_key(obs["unit"])
                if key in units:
                    pending = {units[key]["unit"]["path"]: units[key]["text"]}
                    pred["boot"] = kind.boot_value(s, self.ctx, pending=pending)
            status, reason = self.status_of(s, pred, wrote=wrote, predicted=True)
            effect = self.effect_of(s, status, wrote, s in plan["live_changes"])
            rows.append(self.result_row(s, obs, status, reason, wrote, effect=effect))
        rows.extend(self._restore_removed(plan["removed"], entry, plan["orphan_units"]))
        return rows

    def _write_ahead(self, plan, entry, run_id):
        """Record the originals and the pre-apply snapshot, state ``applying``, before any change."""
        settings, removed, before = plan["settings"], plan["removed"], plan["before"]
        involved_units = {k: u["unit"] for k, u in plan["units"].items()}
        for s in removed:
            unit, _err = self._unit(s)
            if unit is not None:
                involved_units.setdefault(unit_key(unit), unit)
        if entry["state"] not in ("applying", "suspended") or not entry.get("snapshot"):
            entry["snapshot"] = {
                "state": entry["state"],
                "settings": copy.deepcopy(plan["previous"]),
                "live": {},
                "units": {},
            }
        snap = entry["snapshot"]
        for s in settings + removed:
            if s["id"] not in snap["live"]:
                obs = before.get(s["id"]) or self.observe(s)
                snap["live"][s["id"]] = obs["live"] if obs["live_error"] is None else None
            if s["id"] not in entry["original"]["live"]:
                entry["original"]["live"][s["id"]] = snap["live"][s["id"]]
            entry["known"][s["id"]] = s
        for key, unit in involved_units.items():
            if key not in snap["units"]:
                snap["units"][key] = self.snapshot_unit(unit)
            if key not in entry["original"]["units"]:
                entry["original"]["units"][key] = snap["units"][key]
        entry["state"] = "applying"
        entry["run_id"] = run_id
        entry["pending"] = copy.deepcopy(settings)
        self.journal.save(entry)
        fileops.kill_point("after_journal_write_ahead", self.ctx.layer)

    def _write_live_values(self, plan, entry, before_apply):
        """Live values first: what the kernel refuses is never persisted; a refusal puts back
        the values written before it and the journal as it was."""
        written = []
        for s in sorted(plan["live_changes"], key=self._write_rank):
            try:
                KINDS[s["kind"]].write_live(s, s["value"], self.ctx)
            except (OSError, IOError) as exc:
                self._undo_live(written, entry["snapshot"], entry, before_apply)
                raise SpecError(
                    "%sthe kernel refused %s = %s: %s; nothing was persisted and the layer is as it was"
                    % (
                        "%s: " % self.variables[s["id"]] if s["id"] in self.variables else "",
                        s["key"],
                        s["value"],
                        failure_words(exc),
                    )
                ) from None
            written.append(s)
        fileops.kill_point("after_live_written", self.ctx.layer)

    def _persist(self, plan, entry):
        """Write the persistence units; the rows of removed settings put back."""
        changed_kinds = {}
        for key in sorted(plan["unit_changes"]):
            u = plan["unit_changes"][key]
            self.write_unit(u["unit"], u["text"])
            changed_kinds.setdefault(u["unit"]["kind"], []).append(key)
        for kind_name, keys in sorted(changed_kinds.items()):
            if kind_name in KINDS:
                self.notes.extend(KINDS[kind_name].after_persist(self.ctx, keys))
        rows = self._restore_removed(plan["removed"], entry, plan["orphan_units"])
        fileops.kill_point("after_units_written", self.ctx.layer)
        return rows

    def _observe_applied(self, plan):
        """Every setting observed again: what the apply did, setting by setting."""
        rows = []
        for s in plan["settings"]:
            obs = self.observe(s)
            wrote = self._wrote(plan, s)
            status, reason = self.status_of(s, obs, wrote=wrote)
            effect = self.effect_of(s, status, wrote, s in plan["live_changes"])
            rows.append(self.result_row(s, obs, status, reason, wrote, before=plan["before"][s["id"]], effect=effect))
        return rows

    def _restore_units(self, target, entry):
        """Put a restore's units back, all or nothing: when one cannot be written, those put
        back before it return to what they held, and the error says so (the live values are
        not touched yet: the host stays as the journal says). Returns (rows, changed kinds)."""
        rows, changed_kinds, done = [], set(), []
        for key in sorted(target["units"]):
            snap = target["units"][key]
            current = None if self.check_mode else self.snapshot_unit(snap)
            try:
                changed = self.restore_unit(snap)
            except (OSError, IOError) as exc:
                left = []
                for unit_now in reversed(done):
                    try:
                        self.restore_unit(unit_now)
                    except (OSError, IOError) as undo_exc:
                        left.append("%s (%s)" % (unit_now["path"], failure_words(undo_exc)))
                what = (
                    "the files put back before it could not be returned: %s" % "; ".join(left)
                    if left
                    else "nothing was changed: the host is as the journal says (layer %s %s)"
                    % (self.ctx.layer, entry["state"])
                )
                raise SpecError(
                    "could not put back %s: %s; %s. Run it again once %s can be written"
                    % (snap["path"], failure_words(exc), what, snap["path"])
                ) from None
            if changed:
                done.append(current)
                changed_kinds.add(snap.get("kind"))
                rows.append(
                    {
                        "id": key,
                        "kind": "unit",
                        "key": snap["path"],
                        "status": "changed",
                        "changed": True,
                        "reason": "restored %s" % snap["path"],
                        "expected": None,
                        "live": None,
                        "persisted": None,
                    }
                )
        return rows, changed_kinds

    def _put_back_failed_apply(self, run_id, ahead, exc, step):
        """A step after the first write failed: put the host back to the write-ahead snapshot
        and end the journal there. Returns the SpecError to raise, which says what was put back
        or what was left, and why."""
        layer = self.ctx.layer
        snap = ahead["snapshot"]
        why = "%s failed: %s" % (step, failure_words(exc))
        left = []
        try:
            result = self.restore("snapshot", run_id, entry=copy.deepcopy(ahead), recovering=True)
            left = ["%s (%s)" % (r["key"], r["reason"]) for r in result["settings"] if r["status"] == "unsupported"]
        except (OSError, IOError, SpecError) as undo_exc:
            left.append("the layer's files (%s)" % failure_words(undo_exc))
        entry = copy.deepcopy(ahead)
        record = {"time": now(), "run_id": run_id, "action": "apply_failed", "reason": why, "left": left}
        if not left:
            entry["state"] = "restored" if snap["state"] in ("new", "restored") else snap["state"]
            entry["settings"] = copy.deepcopy(snap["settings"])
            if not snap["settings"]:
                entry["original"] = {"live": {}, "units": {}}
            entry["snapshot"] = None
            entry.pop("pending", None)
        # else the journal keeps the layer ``applying`` with its snapshot: the next run puts it back
        entry["history"].append(record)
        try:
            self.journal.save(entry)
            self.journal.event(dict(record, layer=layer))
            journal = "the journal says %s" % entry["state"]
        except (OSError, IOError) as save_exc:
            journal = (
                "the journal could not be written (%s) and still says applying: the next run puts the layer "
                % (failure_words(save_exc))
                + "back again"
            )
        if left:
            return SpecError(
                "%s; the host could NOT be put back whole: left as applied: %s; %s; run "
                "playbooks/rollback.yml once that is fixed" % (why, "; ".join(left), journal)
            )
        return SpecError(
            "%s; every change of this apply was put back (the host is as it was before it), %s" % (why, journal)
        )
