# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Candidate values of a setting: a list or a range ``{from, to, step}`` where a variable
takes one value, each checked as a single value is (gate/search.py searches them).

Standard library only. Each layer module (``layers/<layer>.py``) names in its ``SEARCHABLE``
the variables that take candidates and how one value of each is checked (the registry gathers
them); a layer puts the first candidate in place and hands the gate every candidate's settings
(``<layer>_search``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

# The most candidates one setting may be given: each is an arm of every round.
MAX_CANDIDATES = 16


class CandidateError(ValueError):
    """A candidate list or range is malformed, or one candidate is not a valid value."""


def positive_watts(v):
    """A power limit: a positive whole number of watts (a string of digits is read as one)."""
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError("must be a positive whole number of watts")
    return v


def choice(*words):
    """The check of a value that is one of ``words``."""

    def check(v):
        if v not in words:
            raise ValueError("must be one of %s" % ", ".join(words))
        return v

    return check


def is_candidates(raw):
    """True when a variable's value asks for a search: a list, or a dict with ``from``."""
    return isinstance(raw, (list, tuple)) or (isinstance(raw, dict) and "from" in raw)


def expand_candidates(name, raw, check_one=None):
    """The candidate values of variable ``name``: a list as given, or a range ``{"from", "to",
    "step"}`` (inclusive at both ends when the steps reach ``to``), each checked with
    ``check_one(value)`` (raises ValueError; returns the value as normalized). Duplicates are
    dropped in order. Raises CandidateError naming the variable and the bad candidate."""
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - {"from", "to", "step"})
        if unknown or not {"from", "to", "step"} <= set(raw):
            raise CandidateError("%s: a range of candidates is {from, to, step}, got %r" % (name, raw))
        lo, hi, step = raw["from"], raw["to"], raw["step"]
        for key, v in (("from", lo), ("to", hi), ("step", step)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise CandidateError("%s.%s must be a number, got %r" % (name, key, v))
        if step == 0 or (hi - lo) * step < 0:
            raise CandidateError("%s: step %r does not lead from %r to %r" % (name, step, lo, hi))
        count = int(math.floor((hi - lo) / float(step) + 1e-9)) + 1
        if count > MAX_CANDIDATES:
            raise CandidateError("%s: the range gives %d candidates; at most %d" % (name, count, MAX_CANDIDATES))
        values = [lo + i * step for i in range(count)]
        values = [int(v) if float(v).is_integer() and isinstance(step, int) else v for v in values]
    elif isinstance(raw, (list, tuple)):
        values = list(raw)
    else:
        raise CandidateError("%s: candidates are a list or {from, to, step}, got %r" % (name, raw))
    if not values:
        raise CandidateError("%s: the candidate list is empty" % name)
    if len(values) > MAX_CANDIDATES:
        raise CandidateError("%s: %d candidates; at most %d" % (name, len(values), MAX_CANDIDATES))
    out = []
    for given in values:
        if isinstance(given, (list, dict)):
            raise CandidateError("%s: candidate %r is not a single value" % (name, given))
        v = given
        if check_one is not None:
            try:
                v = check_one(given)
            except ValueError as exc:
                raise CandidateError("%s: candidate %r: %s" % (name, given, exc)) from None
        if v not in out:
            out.append(v)
    return out


def searchable_candidates(name, raw, searchable):
    """The checked candidates of a variable of ``searchable`` (a layer's ``SEARCHABLE``: variable
    -> (words, check of one value)), or None when it holds one value. Raises CandidateError
    naming the variable and the bad candidate."""
    if name not in searchable or not is_candidates(raw):
        return None
    return expand_candidates(name, raw, searchable[name][1])


def layer_search(variable, candidates, settings_for):
    """The ``<layer>_search`` a layer hands the gate: every candidate with the layer's whole
    settings for it (``settings_for(value)``: the layer's policy with that value)."""
    return {
        "variable": variable,
        "candidates": [{"value": v, "settings": settings_for(v)} for v in candidates],
    }


def journaled_search(journaled, layer):
    """The search the journal records for ``layer`` (its row of ``journal_info``'s ``layers``,
    whose ``search`` is the last search's variable, candidates, chosen value and decision),
    with the layer's ``state``; None when its last decision was no search."""
    for row in journaled or []:
        if isinstance(row, dict) and row.get("layer") == layer and isinstance(row.get("search"), dict):
            return dict(row["search"], state=row.get("state"))
    return None


def settled(layer, variable, values, journaled, retry_rejected=False):
    """What a run does with the candidates ``values`` of ``variable`` after the searches the
    journal records (``journaled``: ``journal_info``'s ``layers``): ``{"value", "search",
    "why"}``, the value the layer puts in place and whether the gate searches.

    - the same candidates searched, the chosen value kept (state ``kept``): the chosen value,
      no search; applying it changes nothing, so the run changes nothing;
    - the same candidates searched, the host's own value kept (state ``rolled_back``): the
      first candidate (the settings the rollback recorded as rejected, which the engine does not
      apply again), no search, unless ``retry_rejected``: then a new search;
    - otherwise (no search recorded, other candidates, another variable): the first candidate
      and a search.
    """
    last = journaled_search(journaled, layer)
    same = last is not None and last.get("variable") == variable and list(last.get("candidates") or []) == values
    if same and last.get("state") == "kept" and last.get("decision") == "keep" and last.get("chosen") in values:
        why = "%s: the search of %s kept %s; it stays in place" % (layer, variable, last["chosen"])
        return {"value": last["chosen"], "search": False, "why": why}
    if same and last.get("state") == "rolled_back" and last.get("decision") == "rollback" and not retry_rejected:
        why = (
            "%s: the search of %s kept the host's own value; not searched again "
            "(-e stacktune_retry_rejected=true searches again)" % (layer, variable)
        )
        return {"value": values[0], "search": False, "why": why}
    return {"value": values[0], "search": True, "why": "%s: search %s" % (layer, variable)}
