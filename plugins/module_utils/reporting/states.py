# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The journal's layer states in words: what each means for the host and what the next run,
verify, drift and rollback do with it. Verify's legend and docs/layers.md read the same text."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import STATES

MEANINGS = {
    "new": "journaled, nothing written yet",
    "applying": "a run was writing the layer and stopped mid-way; the next run (or rollback) puts it back",
    "applied": "written by a run that has not decided on it yet; if that run is gone, the next run puts it back",
    "suspended": "switched off for a measurement block; if the run is gone, the next run puts it back",
    "kept": "a trial showed it helps (measured: helps) or no harm (measured: no harm), or no trial in its run"
    " could measure it (not measured, with why): verify and drift check these settings",
    "rolled_back": "the gate rolled it back: the host has the values from before that run, and the next run does"
    " not try the rejected settings again unless asked (stacktune_retry_rejected)",
    "restored": "holds no setting: its plan had nothing to change on this host, or rollback put it back to"
    " its state before stacktune",
    "unreadable": "its journal record cannot be read (the error says why); it is neither verified nor restored",
}

# the states a verify title names in other words (a restored layer holds nothing)
TITLES = {"restored": "holds nothing", "rolled_back": "rolled back"}


def legend(states=None):
    """``state: meaning`` lines, for the states given (every state when none are)."""
    wanted = [s for s in (states or list(STATES) + ["unreadable"]) if s]
    seen = []
    for s in wanted:
        if s not in seen:
            seen.append(s)
    return ["%s: %s" % (s, MEANINGS.get(s, "a state this version of stacktune does not know")) for s in seen]
