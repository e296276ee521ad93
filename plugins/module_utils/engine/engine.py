# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The settings engine: every change stacktune makes goes through here.

One flow for every kind of setting:
``normalize`` (validate everything before touching anything) -> ``observe`` (live and
persisted state) -> plan -> write-ahead journal (originals and the pre-apply snapshot)
-> write live values, then persistence units -> observe again -> per-setting status ->
journal (the steps of an apply: ``engine/applying.py``; an apply is all or nothing).
``verify`` observes only; ``restore`` puts the units and live values of a layer back to its
pre-apply snapshot or to the pre-stacktune original.

Crash safety: the journal entry is saved (atomically) with state ``applying`` and the
pre-apply snapshot before the first write. A layer found ``applying`` was interrupted
mid-write: ``apply`` first puts it back to that snapshot and then applies afresh, so a
re-run converges to what an uninterrupted run does and reports (and measures) the change.
``recover`` does the same for a layer an interrupted run left ``applied`` but never
judged by the gate. Restores are idempotent: a restore killed halfway is simply run again.

Per-setting status: ``ok`` (already as wanted), ``changed``, ``drift`` (verify: differs),
``pending_reboot`` (persisted, takes effect at boot) or ``unsupported`` (with the reason,
e.g. a read-only /proc/sys in a container: the value is persisted, not applied live).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import fileops, keeping
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.applying import ApplySteps, failure_words, now
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import UntrustedJournal, new_entry
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import EFFECTS, SpecError, Unsupported
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.file import check_path
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.grubby import ENTRIES, allowed_file
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.units import DROPINS, KINDS

_INTEGER = re.compile(r"^-?[0-9]+\Z")
ACTIVE_STATES = ("applying", "applied", "suspended", "kept")
# States a run leaves only while it works: found by another run (or by an apply), the
# layer is put back to its snapshot first (``recover``).
INTERRUPTED_STATES = ("applying", "applied", "suspended")


def _setting_id(s):
    return s["id"]


def kill_point(point, layer):
    fileops.kill_point(point, layer)


def unit_allowed(unit, layer):
    """Whether a unit of a journal record lies where its kind writes for this layer: the
    kind's own drop-in, /etc/fstab for a mount, a file the file kinds may own."""
    kind, path = unit.get("kind"), unit.get("path")
    if unit.get("type") == "dropin":
        return kind in DROPINS and path == DROPINS[kind] % layer
    if unit.get("type") == "line" and kind == "mount":
        return path == "/etc/fstab"
    if unit.get("type") == "boot_entries":
        files = unit.get("files") if isinstance(unit.get("files"), dict) else {None: None}
        return kind == "grubby_arg" and path == ENTRIES and all(allowed_file(str(p)) for p in files)
    if unit.get("type") in ("line", "file") and kind in ("env_var", "file"):
        try:
            check_path(path, kind)
        except SpecError:
            return False
        return (unit["type"] == "line") == (kind == "env_var")
    return False


def check_record(entry, path):
    """Refuse a record whose settings name unknown kinds or whose units lie elsewhere."""
    layer = entry["layer"]
    for s in entry["settings"] + list(entry["known"].values()):
        if s["kind"] not in KINDS:
            raise UntrustedJournal(
                "journal %s names a setting of unknown kind %r; stacktune will not restore from it" % (path, s["kind"])
            )
    for target in (entry["original"], entry.get("snapshot") or {"units": {}}):
        for unit in target["units"].values():
            if not unit_allowed(unit, layer):
                raise UntrustedJournal(
                    "journal %s would restore %s (a %s unit of kind %s), which is not where layer %s's settings "
                    "live; stacktune will not restore from it"
                    % (path, unit.get("path"), unit.get("type"), unit.get("kind"), layer)
                )


def _same_settings(a, b):
    return sorted(a or [], key=_setting_id) == sorted(b or [], key=_setting_id)


def _restored_row(sid, s, original, obs, status, reason, wrote):
    """One live value's row in a restore's result."""
    return {
        "id": sid,
        "kind": s["kind"],
        "key": s["key"],
        "expected": original,
        "live": obs["live"],
        "persisted": None,
        "status": status,
        "reason": reason,
        "changed": wrote,
    }


class Engine(ApplySteps):
    def __init__(self, ctx, journal, check_mode=False, retry_rejected=False):
        self.ctx = ctx
        self.journal = journal
        self.check_mode = check_mode
        self.retry_rejected = retry_rejected
        self.notes = []
        # what a put-back could not record in the journal (a full disk), in words; None when recorded
        self.unrecorded = None
        self.variables = {}  # setting id -> the role variable it came from, for messages

    # ------------------------------------------------------------------ journal
    def load(self, layer):
        """A layer's journal record, refused when it names a kind this engine does not know
        or a unit outside what that kind may write (UntrustedJournal)."""
        entry = self.journal.load(layer)
        if entry is not None:
            check_record(entry, self.journal.path(layer))
        return entry

    # ------------------------------------------------------------------ normalise
    def normalize(self, specs):
        """Validate and expand requested settings. Raises SpecError naming the item."""
        settings, unsupported, seen = [], [], set()
        for index, spec in enumerate(specs or []):
            if not isinstance(spec, dict):
                raise SpecError("settings[%d] must be a dict, got %s" % (index, type(spec).__name__))
            kind = KINDS.get(spec.get("kind"))
            if kind is None:
                raise SpecError(
                    "settings[%d].kind %r is not one of %s" % (index, spec.get("kind"), ", ".join(sorted(KINDS)))
                )
            try:
                expanded = kind.expand(spec, self.ctx)
            except SpecError as exc:
                origin = "%s: " % spec["var"] if spec.get("var") else ""
                raise SpecError(
                    "%ssettings[%d] (%s %s): %s" % (origin, index, spec.get("kind"), spec.get("key"), exc)
                ) from None
            except Unsupported as exc:
                unsupported.append(
                    {
                        "id": "%s:%s" % (spec.get("kind"), spec.get("key")),
                        "kind": spec.get("kind"),
                        "key": spec.get("key"),
                        "expected": spec.get("value"),
                        "live": None,
                        "persisted": None,
                        "status": "unsupported",
                        "reason": str(exc),
                        "changed": False,
                    }
                )
                continue
            for flag in ("at_least", "seen_running"):
                if spec.get(flag) is not None and not isinstance(spec[flag], bool):
                    raise SpecError("settings[%d].%s must be true or false, got %r" % (index, flag, spec[flag]))
            at_least, running = spec.get("at_least") or False, spec.get("seen_running")
            effect = spec.get("takes_effect")
            if effect is not None and effect not in EFFECTS:
                raise SpecError(
                    "%ssettings[%d].takes_effect must be one of %s, got %r"
                    % ("%s: " % spec["var"] if spec.get("var") else "", index, ", ".join(EFFECTS), effect)
                )
            for s in expanded:
                if s["id"] in seen:
                    raise SpecError("settings[%d]: %s is requested twice" % (index, s["id"]))
                if at_least:
                    if not _INTEGER.match(str(s["value"])):
                        raise SpecError(
                            "%ssettings[%d] (%s): at_least needs an integer value, got %r"
                            % ("%s: " % spec["var"] if spec.get("var") else "", index, s["id"], s["value"])
                        )
                    s["at_least"] = True
                if effect is not None:
                    s["takes_effect"] = effect
                if running is not None:
                    s["seen_running"] = running
                seen.add(s["id"])
                settings.append(s)
                if spec.get("var"):
                    self.variables[s["id"]] = spec["var"]
        return settings, unsupported

    def minimums(self, settings, entry):
        """The settings to manage, less the minimums (``at_least``) the host meets by itself.

        A minimum is compared with the host's own value: the original the journal kept while
        the layer holds the setting (the live value is then stacktune's), else the live value.
        A host at or above it keeps its value and the setting is left out, the same on every
        run, so a second run changes nothing. The flag is not kept with the setting.
        """
        held = {s["id"] for s in entry["settings"]} if entry["state"] in ACTIVE_STATES else set()
        out = []
        for s in settings:
            if not s.pop("at_least", False):
                out.append(s)
                continue
            if s["id"] in held and s["id"] in entry["original"]["live"]:
                own = entry["original"]["live"][s["id"]]
            else:
                obs = self.observe(s)
                own = obs["live"] if obs["live_error"] is None else None
            if own is not None and _INTEGER.match(str(own).strip()) and int(own) >= int(s["value"]):
                self.notes.append(
                    "%s: the host's own %s is at or above the minimum %s; left as it is" % (s["id"], own, s["value"])
                )
                continue
            out.append(s)
        return out

    def check_ownership(self, layer, settings):
        """Refuse settings that another active layer already manages."""
        ids = {s["id"] for s in settings}
        for other in self.journal.layers():
            if other == layer:
                continue
            entry = self.load(other) or {}
            if entry.get("state") not in ACTIVE_STATES:
                continue
            clash = ids.intersection(s["id"] for s in entry.get("settings", []))
            if clash:
                raise SpecError("%s already managed by layer %s" % (", ".join(sorted(clash)), other))

    def observe(self, s):
        """Live and persisted state of one setting."""
        kind = KINDS[s["kind"]]
        obs = {"live": None, "live_error": None, "writable": False, "why_not": None}
        if kind.unit_is_live:
            unit, err = self._unit(s)
            obs["persisted"] = kind.persisted(s, self.read_unit(unit)) if unit else None
            obs["live"] = obs["persisted"]
            obs["writable"] = unit is not None
            obs["why_not"] = err
            obs["unit"] = unit
            obs["boot"] = kind.boot_value(s, self.ctx) if unit else None
            return obs
        try:
            obs["live"] = kind.read_live(s, self.ctx)
        except Unsupported as exc:
            obs["live_error"] = str(exc)
        if obs["live_error"] is None:
            obs["writable"], obs["why_not"] = kind.live_writable(s, self.ctx)
        else:
            obs["why_not"] = obs["live_error"]
        unit, err = self._unit(s)
        obs["unit"] = unit
        obs["unit_error"] = err
        obs["persisted"] = kind.persisted(s, self.read_unit(unit)) if unit else None
        obs["boot"] = kind.boot_value(s, self.ctx) if unit else None
        return obs

    # ------------------------------------------------------------------ status
    @staticmethod
    def status_of(s, obs, wrote=False, predicted=False):
        """Derive a setting's status from an observation (after apply, or for verify)."""
        kind = KINDS[s["kind"]]
        want = s["value"]
        live_ok = obs["live_error"] is None and kind.same(obs["live"], want) if not predicted else obs["live_ok"]
        has_unit = obs["unit"] is not None
        persisted_ok = (not has_unit) or kind.same(obs["persisted"], want)
        if obs.get("unit_error") and not kind.unit_is_live and not kind.reboot:
            persisted_ok = True  # nothing to persist to; the live part decides
        reason = None
        if kind.reboot:
            if not has_unit:
                status, reason = "unsupported", obs.get("unit_error")
            elif not persisted_ok:
                status = "drift"
            elif not live_ok:
                status, reason = "pending_reboot", "persisted; takes effect at the next boot"
            else:
                status = "changed" if wrote else "ok"
        elif not live_ok and not obs["writable"]:
            if has_unit and not persisted_ok:
                status = "drift"
            else:
                status = "unsupported"
                reason = obs["why_not"] or obs["live_error"]
                if has_unit:
                    reason = "persisted; live apply not possible here: %s" % reason
        elif live_ok and persisted_ok:
            status = "changed" if wrote else "ok"
        else:
            status = "drift"
        boot = obs.get("boot")
        overridable = ("ok", "changed", "pending_reboot", "unsupported")
        if status in overridable and has_unit and persisted_ok and boot is not None and not kind.same(boot[0], want):
            status = "overridden"
            value = "nothing (the setting is dropped)" if boot[0] is None else boot[0]
            ours = boot[2] if len(boot) > 2 and boot[2] else want
            why = "at the next boot %s sets %s; stacktune's %s sets %s" % (boot[1], value, obs["unit"]["path"], ours)
            reason = why if reason is None or kind.reboot else "%s (%s)" % (why, reason)
        return status, reason

    @staticmethod
    def effect_of(s, status, wrote, live_moved):
        """When a newly started process sees what this apply wrote (None: nothing written).

        A value only persisted (pending the next boot, live apply not possible, or the live
        value already right) is seen at the next boot; a live change when its kind (or the
        setting's ``takes_effect``) says.
        """
        if not wrote:
            return None
        kind = KINDS[s["kind"]]
        if status in ("pending_reboot", "unsupported") or not (live_moved or kind.unit_is_live):
            return "next_boot"
        return s.get("takes_effect") or kind.takes_effect(s)

    @staticmethod
    def result_row(s, obs, status, reason, wrote, before=None, effect=None):
        row = {
            "id": s["id"],
            "kind": s["kind"],
            "key": s["key"],
            "expected": s["value"],
            "live": obs["live"],
            "persisted": obs["persisted"] if obs["unit"] is not None else None,
            "persisted_in": obs["unit"]["path"] if obs["unit"] is not None else None,
            "at_boot": obs["boot"][0] if obs.get("boot") else None,
            "at_boot_from": obs["boot"][1] if obs.get("boot") else None,
            "status": status,
            "reason": reason,
            "changed": bool(wrote),
        }
        if wrote:
            row["effect"] = effect
            if effect == "now":
                row.update(KINDS[s["kind"]].running_fields(s))
        elif s.get("kind") in KINDS:
            # what a running process would see of it, for a search whose candidate changes this row
            row.update(KINDS[s["kind"]].running_fields(s))
        if before is not None:
            row["live_before"] = before["live"]
            row["persisted_before"] = before["persisted"] if before["unit"] is not None else None
        return row

    # ------------------------------------------------------------------ apply
    def suspend(self, run_id):
        """Switch an applied layer off for one measurement block.

        The host goes back to the layer's snapshot (the state before its apply in this run);
        the journal keeps the layer's settings and that snapshot, in state ``suspended``, so
        ``reapply`` switches it on again and an interruption puts it back without a verdict.
        """
        layer = self.ctx.layer
        entry = self.load(layer)
        if entry is None or entry["state"] not in ("applied", "suspended") or not entry.get("snapshot"):
            raise SpecError("layer %s has no settings applied in this run to switch off" % layer)
        if entry["state"] == "suspended":
            return self._summary("suspended", [], [], entry, changed=False, note="layer %s is off already" % layer)
        result = self.restore("snapshot", run_id, entry=entry, recovering=True)
        if not self.check_mode:
            fileops.pause_point("mid_suspend", layer)
            entry = self.load(layer)
            entry["state"] = "suspended"
            entry["history"].append({"time": now(), "run_id": run_id, "action": "suspend"})
            try:
                self.journal.save(entry)
            except (OSError, IOError) as exc:
                raise SpecError(
                    "layer %s is off on the host (back to its snapshot), but the journal could not record it (%s): "
                    "it still says applied, which the next run puts back (nothing left to do) and no drift fix "
                    "re-applies" % (layer, exc)
                ) from None
        result["action"] = "suspended"
        result["layer_state"] = "suspended"
        return result

    def reapply(self, run_id):
        """Switch a layer that ``suspend`` took off on again, to measure it again.

        The gate's balanced schedule toggles a layer off and on through here, so every toggle
        is journaled, snapshotted and verified like any apply.
        """
        entry = self.load(self.ctx.layer)
        if entry is None or entry["state"] != "suspended":
            raise SpecError("layer %s is not switched off for a measurement; nothing to put back on" % self.ctx.layer)
        return self.apply(None, run_id, given=copy.deepcopy(entry["settings"]))

    def switch(self, specs, run_id, value):
        """Put one candidate of a search in place: the layer switched off (back to its snapshot)
        and applied with that candidate's settings, as ``suspend`` and ``reapply`` do, with the
        snapshot of the layer's first apply in this run kept (an interruption or a rollback goes
        back there). The journal says "candidate <value> in place for the search" (a ``switch``
        record in the history and the events), never that a run stopped.
        """
        layer = self.ctx.layer
        entry = self.load(layer)
        if entry is None or entry["state"] not in ("applied", "suspended") or not entry.get("snapshot"):
            raise SpecError("layer %s has no settings applied in this run to switch to candidate %r" % (layer, value))
        if not specs:
            raise SpecError("layer %s: candidate %r has no settings to put in place" % (layer, value))
        settings, unsupported = self.normalize(specs)
        settings = self.minimums(settings, entry)
        self.check_ownership(layer, settings)
        if entry["state"] == "applied" and _same_settings(entry["settings"], settings):
            note = "candidate %s is in place already" % (value,)
            return self._summary("switched", [], unsupported, entry, changed=False, note=note)
        if entry["state"] == "applied":
            self.suspend(run_id)
        if self.check_mode:
            result = self._summary("switched", [], unsupported, entry, changed=True)
        else:
            result = self.apply(None, run_id, given=settings)
            entry = self.load(layer)
            record = {
                "time": now(),
                "run_id": run_id,
                "action": "switch",
                "value": value,
                "note": "candidate %s in place for the search" % (value,),
            }
            entry["history"].append(record)
            self.journal.save(entry)
            record["layer"] = layer
            self.journal.event(record)
        result["action"] = "switched"
        result["notes"].append("candidate %s in place for the search" % (value,))
        return result

    def interrupt(self, run_id, reason):
        """Put a layer this run was measuring back to its snapshot, because the run stopped.

        The journal records the interruption, never a gate verdict: the next run measures
        the layer again. A layer that is not being measured (kept, rolled back) is left as is.
        """
        result = self.recover(run_id, states=INTERRUPTED_STATES, reason=reason, own=True)
        result["action"] = "interrupted"
        return result

    def apply(self, specs, run_id, from_journal=False, given=None):
        """Apply a layer's settings, all or nothing (the steps: ``engine/applying.py``).

        ``from_journal``: the layer's journaled settings again (drift correction); ``given``:
        these settings (``reapply``). A failure after the first write puts back everything
        this apply wrote before the error is raised, and the error says so.
        """
        stored, entry, interrupted, resuming = self._start_apply(run_id, given)
        settings, unsupported, done = self._settings_to_apply(specs, entry, run_id, from_journal, given)
        if done is not None:
            return done
        plan = self._plan_apply(settings, entry, resuming)
        if self.check_mode:
            return self._summary("present", self._predict_apply(plan, entry, interrupted), unsupported, entry)
        before_apply = copy.deepcopy(stored) if stored is not None else None
        self._write_ahead(plan, entry, run_id)
        self._write_live_values(plan, entry, before_apply)
        ahead = copy.deepcopy(entry)
        step = "persisting the layer's settings"
        try:
            rows = self._persist(plan, entry)
            step = "verifying the layer's settings"
            rows = self._observe_applied(plan) + rows
            step = "writing the journal's final record"
            self._finish_apply(plan, entry, rows, run_id, from_journal)
        except (OSError, IOError, SpecError, Unsupported) as exc:
            raise self._put_back_failed_apply(run_id, ahead, exc, step) from None
        return self._summary("present", rows, unsupported, entry)

    def _start_apply(self, run_id, given):
        """The layer's record, after a layer a run left mid-apply, switched off or unjudged went
        back to its snapshot (the tune flow's run_lock does it for every layer; a real apply does
        it for its own). Returns (stored, entry, interrupted, resuming)."""
        layer = self.ctx.layer
        stored = self.load(layer)
        entry = stored or new_entry(layer)
        resuming = given is not None and entry["state"] == "suspended"
        interrupted = bool(
            not resuming
            and entry.get("snapshot")
            and (
                entry["state"] in ("applying", "suspended")
                or (self.check_mode and entry["state"] == "applied" and entry.get("run_id") != run_id)
            )
        )
        if interrupted and not self.check_mode:
            self.recover(run_id, entry=entry, states=("applying", "suspended"), own=True)
            stored = self.load(layer)
            entry = stored or new_entry(layer)
            interrupted = False
        return stored, entry, interrupted, resuming

    def _settings_to_apply(self, specs, entry, run_id, from_journal, given):
        """(settings, unsupported, None), or (None, None, summary) when there is nothing to apply."""
        layer = self.ctx.layer
        if given is not None:
            return given, [], None
        if from_journal:
            if entry["state"] in INTERRUPTED_STATES:
                # a drift correction re-applies only what a gate kept: an undecided layer goes back
                why = "layer %s was left %s by run %s, never judged by a gate: a drift correction puts it back" % (
                    layer,
                    entry["state"],
                    entry.get("run_id"),
                )
                return None, None, self.recover(run_id, entry=entry, reason=why, own=True)
            if entry["state"] not in ACTIVE_STATES:
                note = "layer %s is %s: nothing to apply" % (layer, entry["state"])
                return None, None, self._summary("present", [], [], entry, note=note)
            return copy.deepcopy(entry["settings"]), [], None
        settings, unsupported = self.normalize(specs)
        settings = self.minimums(settings, entry)
        self.check_ownership(layer, settings)
        if (
            not self.retry_rejected
            and entry["state"] == "rolled_back"
            and _same_settings(entry.get("rejected"), settings)
        ):
            note = (
                "the gate rolled these settings back in run %s; not re-applied "
                "(-e stacktune_retry_rejected=true, the module's retry_rejected, measures them again)"
            )
            rejected_by = entry.get("rejected_by", entry.get("run_id"))
            return None, None, self._summary("present", [], unsupported, entry, note=note % rejected_by)
        return settings, unsupported, None

    def _finish_apply(self, plan, entry, rows, run_id, from_journal):
        """The journal's final record of an apply."""
        settings, layer = plan["settings"], self.ctx.layer
        # a run that changed nothing leaves a kept layer kept (and its gate decision standing)
        unchanged = not any(r["changed"] for r in rows) and _same_settings(plan["previous"], settings)
        # so does a drift correction: it puts the kept settings back, and no gate is to judge them
        restoring_kept = from_journal and entry["snapshot"].get("state") == "kept"
        entry["state"] = (
            "kept" if (unchanged or restoring_kept) and entry["snapshot"].get("state") == "kept" else "applied"
        )
        if entry["state"] == "kept":
            entry["snapshot"] = None
        entry["settings"] = settings
        entry.pop("pending", None)
        entry.pop("interrupted", None)
        if not settings:
            entry["original"] = {"live": {}, "units": {}}
            entry["state"] = "restored"
        changed_ids = [r["id"] for r in rows if r["changed"]]
        entry["history"].append({"time": now(), "run_id": run_id, "action": "apply", "changed": changed_ids})
        kill_point("before_journal_final", layer)
        self.journal.save(entry)
        self.journal.event({"time": now(), "run_id": run_id, "layer": layer, "action": "apply", "changed": changed_ids})

    # ------------------------------------------------------------------ recover
    def recover(self, run_id, entry=None, states=INTERRUPTED_STATES, reason=None, own=False):
        """Put back a layer that a run left mid-apply, switched off, or never judged.

        A layer in state ``applying`` (killed while writing), ``suspended`` (switched off for
        a measurement block) or ``applied`` (killed before the gate decided) returns to the
        snapshot taken before that apply, and the journal returns to the state it had then,
        so the next apply starts from the same place an uninterrupted run did. The journal
        records the interruption (``interrupted``: which run, when, why); nothing is marked
        rejected, so the next run measures the layer again. Without ``own``, a layer that
        run_id itself applied is its own work in progress and is left alone.
        """
        layer = self.ctx.layer
        entry = entry or self.load(layer)
        if (
            entry is None
            or entry["state"] not in states
            or not entry.get("snapshot")
            or (not own and entry["state"] in ("applied", "suspended") and entry.get("run_id") == run_id)
        ):
            note = None
            if own and entry is not None and entry["state"] not in states:
                note = "layer %s is %s: nothing to put back" % (layer, entry["state"])
            return self._summary("recovered", [], [], entry or new_entry(layer), changed=False, note=note)
        interrupted_run, left_as = entry.get("run_id"), entry["state"]
        snap = entry["snapshot"]
        why = reason or "run %s stopped before the gate decided" % interrupted_run
        result = self.restore("snapshot", run_id, entry=entry, recovering=True)
        if not self.check_mode:
            entry = self.load(layer)
            entry["state"] = snap["state"]
            entry["settings"] = copy.deepcopy(snap["settings"])
            if not snap["settings"]:
                entry["original"] = {"live": {}, "units": {}}
            entry["snapshot"] = None
            entry.pop("pending", None)
            entry["interrupted"] = {"run_id": interrupted_run, "time": now(), "left": left_as, "reason": why}
            record = {
                "time": now(),
                "run_id": run_id,
                "action": "interrupted" if reason else "recover",
                "interrupted_run": interrupted_run,
                "reason": why,
            }
            entry["history"].append(record)
            self._record_undo(entry, record, left_as)
        result["action"] = "recovered"
        result["layer_state"] = entry["state"] if not self.check_mode else snap["state"]
        result["changed"] = True
        result["notes"].append(
            "layer %s was left %s by run %s: put back to its snapshot (%s)" % (layer, left_as, interrupted_run, why)
        )
        return result

    # ------------------------------------------------------------------ verify
    def verify(self, specs=None):
        entry = self.load(self.ctx.layer) or new_entry(self.ctx.layer)
        if specs:
            settings, unsupported = self.normalize(specs)
            settings = self.minimums(settings, entry)
        else:
            settings = entry["settings"] if entry["state"] in ACTIVE_STATES else []
            unsupported = []
        rows = []
        for s in settings:
            obs = self.observe(s)
            status, reason = self.status_of(s, obs)
            if not specs and obs["live_error"] and entry["original"]["live"].get(s["id"]) is not None:
                # stacktune read and kept it; that it cannot be read any more is drift, not "unsupported"
                status, reason = "drift", "kept by stacktune, but now %s" % obs["live_error"]
            row = self.result_row(s, obs, status, reason, False)
            row["other_writers"] = []
            rows.append(row)
        by_id = {r["id"]: r for r in rows}
        for kind_name in sorted({s["kind"] for s in settings}):
            for writer in KINDS[kind_name].other_writers([s for s in settings if s["kind"] == kind_name], self.ctx):
                self.notes.append(writer["message"])
                for sid in writer["ids"]:
                    by_id[sid]["other_writers"].append(writer["tool"])
        return self._summary("verify", rows, unsupported, entry)

    # ------------------------------------------------------------------ restore
    def restore(self, to, run_id, decision=None, entry=None, recovering=False):
        layer = self.ctx.layer
        entry = entry or self.load(layer)
        if entry is None or (entry["state"] in ("new", "restored", "rolled_back") and to == "snapshot"):
            return self._summary("restored", [], [], entry or new_entry(layer), note="nothing to restore")
        target = entry["original"] if to == "original" else entry.get("snapshot")
        if not target:
            return self._summary("restored", [], [], entry, note="no snapshot to restore")
        rows, changed_kinds = self._restore_units(target, entry)
        if not self.check_mode:
            for kind_name in sorted(k for k in changed_kinds if k in KINDS):
                self.notes.extend(KINDS[kind_name].after_persist(self.ctx, []))
            kill_point("after_units_restored", layer)
        # A write the kernel refuses is tried again once the other values are back: some
        # attributes depend on others (intel_pstate refuses an energy_performance_preference
        # other than "performance" while the governor is still "performance").
        refused = []
        for sid in sorted(target["live"], key=lambda sid: (self._write_rank(entry["known"].get(sid)), sid)):
            s = entry["known"].get(sid)
            if s is None or KINDS[s["kind"]].unit_is_live:
                continue
            original = target["live"][sid]
            obs = self.observe(s)
            kind = KINDS[s["kind"]]
            wrote, status, reason = False, "ok", None
            if original is None or kind.same(obs["live"], original):
                status = "ok"
            elif kind.reboot:
                status, reason = "pending_reboot", "boot argument removed; takes effect at the next boot"
            elif obs["writable"]:
                wrote, status = True, "changed"
                if not self.check_mode:
                    try:
                        kind.write_live(s, original, self.ctx)
                    except (OSError, IOError):
                        refused.append((sid, s, original))
                        continue
            else:
                status, reason = "unsupported", obs["why_not"]
            rows.append(_restored_row(sid, s, original, obs, status, reason, wrote))
        for sid, s, original in refused:
            kind = KINDS[s["kind"]]
            obs = self.observe(s)
            wrote, status, reason = True, "changed", "put back after the values it depends on"
            if not kind.same(obs["live"], original):
                try:
                    kind.write_live(s, original, self.ctx)
                except (OSError, IOError) as exc:
                    wrote, status, reason = False, "unsupported", "the kernel refused the write: %s" % exc
            rows.append(_restored_row(sid, s, original, obs, status, reason, wrote))
        if not self.check_mode and not recovering:
            kill_point("before_restore_journal", layer)
            if to == "original":
                entry.update(
                    {"state": "restored", "settings": [], "original": {"live": {}, "units": {}}, "snapshot": None}
                )
            else:
                rejected = entry["settings"]
                entry["settings"] = target["settings"]
                entry["state"] = target["state"] if target["settings"] else "rolled_back"
                if not target["settings"]:
                    entry["original"] = {"live": {}, "units": {}}
                entry["snapshot"] = None
                entry["rejected"] = rejected
                entry["rejected_by"] = run_id
            entry.pop("pending", None)
            if decision is not None:
                entry["decision"] = decision
            changed_ids = [r["id"] for r in rows if r["changed"]]
            record = {"time": now(), "run_id": run_id, "action": "restore_%s" % to, "changed": changed_ids}
            if decision is not None:
                record["decision"] = decision.get("decision")
            entry["history"].append(record)
            before_state = (self.load(layer) or {}).get("state", "?")
            entry["run_id"] = run_id
            self._record_undo(entry, record, before_state)
        return self._summary("restored", rows, [], entry)

    def _record_undo(self, entry, record, left_as):
        """The journal's record of a layer put back, written after the host is back (undo first,
        record after). A record that cannot be written (a full disk) is said (``unrecorded``, and
        in the notes), never a reason to fail the undo: the journal still says ``left_as``, and
        the next run or rollback puts the layer back again, finding nothing left to change."""
        layer = self.ctx.layer
        try:
            self.journal.save(entry)
        except (OSError, IOError) as exc:
            self.unrecorded = (
                "layer %s is back on the host as it was before the run, but the journal could not record it (%s): "
                "it still says %s, and the next run or rollback finds nothing left to put back"
                % (layer, failure_words(exc), left_as)
            )
            self.notes.append(self.unrecorded)
            return
        record["layer"] = layer
        try:
            self.journal.event(record)
        except (OSError, IOError) as exc:
            self.notes.append("the journal's event log could not record the put-back of %s: %s" % (layer, exc))

    # ------------------------------------------------------------------ decisions
    def keep(self, run_id, decision=None):
        """Record that the layer stays, with the decision that says why (``engine/keeping.py``).

        A keep of a layer this run applied must carry its basis; one that kept a change a running
        program sees without a trial is refused: the layer goes back to its snapshot first, then
        the refusal is raised (SpecError) saying so."""
        entry = self.load(self.ctx.layer)
        if entry is None or entry["state"] not in ("applied", "kept"):
            raise SpecError("layer %s has no applied settings to keep" % self.ctx.layer)
        if entry["state"] == "applied":
            why = keeping.refusal(decision, keeping.moved_live(entry, self.observe))
            if why is not None:
                put_back = dict(decision or {}, decision="rollback", reason="refused to keep: %s" % why)
                self.restore("snapshot", run_id, decision=put_back, entry=entry)
                raise SpecError("layer %s was not kept: %s. It was put back to its snapshot" % (self.ctx.layer, why))
        changed = entry["state"] != "kept" or (decision is not None and entry.get("decision") != decision)
        if changed and not self.check_mode:
            entry["state"] = "kept"
            entry["snapshot"] = None
            if decision is not None:
                entry["decision"] = decision
            record = {"time": now(), "run_id": run_id, "action": "keep"}
            if decision is not None:
                record["decision"] = decision.get("decision")
            entry["history"].append(record)
            self.journal.save(entry)
            record["layer"] = self.ctx.layer
            self.journal.event(record)
        return self._summary("kept", [], [], entry, changed=changed)

    # ------------------------------------------------------------------ summary
    def _summary(self, action, rows, unsupported, entry, note=None, changed=None):
        rows = list(rows) + list(unsupported)
        counts = {}
        for r in rows:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        return {
            "layer": self.ctx.layer,
            "action": action,
            "settings": rows,
            "counts": counts,
            "changed": any(r["changed"] for r in rows) if changed is None else changed,
            "drift": [r["id"] for r in rows if r["status"] == "drift"],
            "overridden": [r["id"] for r in rows if r["status"] == "overridden"],
            "pending_reboot": [r["id"] for r in rows if r["status"] == "pending_reboot"],
            "layer_state": entry["state"] if entry else None,
            # why a kept layer stays, in the words verify and the report use (engine/keeping.py)
            "kept_as": keeping.words(entry.get("decision")) if entry and entry["state"] == "kept" else None,
            "notes": self.notes + ([note] if note else []),
        }
