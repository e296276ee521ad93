# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A run's lease around one engine call: undo first, record after.

Every engine call of a run renews the run's lease first (``RunLock.renew``). When the lease
record cannot be read (a torn ``run.lock``) or written (a full disk):

- the run whose watchdog holds the host (``run.hold``, which names the run) rewrites the record
  as its own and goes on (``RunLock.renew``): a record is bookkeeping, the watchdog's hold is
  what excludes other runs;
- a call that puts a layer back (``UNDO_STATES``: switching it off for a block, restoring its
  snapshot, putting it back after a stop) goes ahead for the run that applied the layer, and
  says afterwards what could not be recorded: a change is never left on the host because its
  bookkeeping failed;
- anything else is refused, naming the record, and touches nothing.

A lease another run holds now (``HostLocked``) or that this run lost (``LeaseLost``) is never
passed over: that run put the layers back when it took the host, so this call touches nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import UnreadableLock

# host_settings states that put a layer back to what it was before the run changed it
UNDO_STATES = ("suspended", "restored", "interrupted")


def renew(lock, run_id, state, owns_layer):
    """Renew run_id's lease before an engine call in ``state`` (``RunLock.renew`` rewrites a torn
    record for the run whose watchdog holds ``run.hold``).

    Returns None when the lease is renewed, else the words to say after the call (an undo that
    goes ahead without its record); raises the lock's error when the call must not touch the
    host. ``owns_layer()``: whether this run applied the layer the call puts back."""
    try:
        lock.renew(run_id)
        return None
    except UnreadableLock as exc:
        if state in UNDO_STATES and owns_layer():
            why = str(exc).split(": another run may hold the host", 1)[0]
            return (
                "the layer was put back first; the lease could not be renewed: %s. It was left as found: run again "
                "with -e stacktune_lock_break=true once no stacktune run is running" % why
            )
        raise
    except (IOError, OSError) as exc:
        if state in UNDO_STATES and owns_layer():
            return "the layer was put back first; the lease could not be renewed in %s: %s" % (lock.path, exc)
        raise
