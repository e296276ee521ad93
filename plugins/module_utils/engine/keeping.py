# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Why a layer stays on a host: the one rule every ``keep`` passes through.

A change that a running program sees (a sysctl, THP, an IRQ mask, an NVML setting, a block
queue value: its kind's ``seen_running``) stays on a host only after a trial on the program
said keep. Every journaled keep therefore carries a ``basis``:

- ``gain``: a trial showed the layer helps;
- ``no_harm``: a trial measured it and showed nothing worse (policy ``no_regression``);
- ``unmeasured``: no trial in this run could measure it, with ``unmeasured`` naming why (one of
  ``UNMEASURED``).

``Engine.keep`` calls :func:`refusal` with the ids of the settings a running program sees whose
live value this run moved; a keep without a trial whose reason cannot hold for such a change is
refused, and the engine puts the layer back before it says so.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.units import KINDS

# basis: the word the report, `make verify` and the metrics use
BASES = {
    "gain": "measured: helps",
    "no_harm": "measured: no harm",
    "unmeasured": "not measured",
}

# why a layer was kept without a trial; the second field says whether the reason can hold for
# a change a running program sees (a live sysctl moved now is never "seen at the next boot")
UNMEASURED = {
    "seen_later": ("every change takes effect at the next login or boot", False),
    "not_used": ("read when a program starts, and the program measured does not use it", False),
    "no_workload": ("no workload on this host can see it", True),
    "gate_off": ("the gate is off (stacktune_gate=false)", True),
    "nothing_changed": ("this run changed nothing a program sees", False),
}


def moved_live(entry, observe):
    """Ids of the layer's settings that a running program sees whose live value differs from the
    snapshot taken before this run's apply (what a keep without a trial may not leave).
    ``observe(setting)``: the engine's reading of a setting."""
    before = (entry.get("snapshot") or {}).get("live") or {}
    moved = []
    for s in entry.get("settings") or []:
        kind = KINDS.get(s.get("kind"))
        if kind is None or s["id"] not in before or kind.reboot:
            continue
        if not kind.running_fields(s).get("seen_running"):
            continue
        obs = observe(s)
        if obs["live_error"] is None and not kind.same(obs["live"], before[s["id"]]):
            moved.append(s["id"])
    return moved


def basis_of(decision):
    """``(basis, why)`` of a keep decision: why the layer stays (``why`` None unless unmeasured)."""
    decision = decision if isinstance(decision, dict) else {}
    return decision.get("basis"), decision.get("unmeasured")


def refusal(decision, moved_live):
    """The words that refuse this keep, or None when it may stand.

    ``decision``: the keep's record; ``moved_live``: ids of the layer's settings a running
    program sees whose live value this run moved."""
    basis, why = basis_of(decision)
    if basis not in BASES:
        return "a keep must say why the layer stays (basis one of %s), got %r" % (", ".join(BASES), basis)
    if basis != "unmeasured":
        return None
    if why not in UNMEASURED:
        return "a keep without a trial must name why none could measure it (one of %s), got %r" % (
            ", ".join(UNMEASURED),
            why,
        )
    holds_for_live = UNMEASURED[why][1]
    if moved_live and not holds_for_live:
        return (
            "it changed %s, which a running program sees, and no trial measured it (%s cannot hold for a live "
            "change): a change a program can see stays only after a trial says keep" % (", ".join(moved_live), why)
        )
    return None


def words(decision):
    """``kept (measured: helps)`` and the like: the journal state of a kept layer with its basis."""
    basis, why = basis_of(decision)
    if basis not in BASES:
        return "kept"
    if basis == "unmeasured" and why in UNMEASURED:
        return "kept (not measured: %s)" % UNMEASURED[why][0]
    return "kept (%s)" % BASES[basis]
