# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Writing the host's ``stacktune.prom`` for node_exporter's textfile collector: where
(``node_exporter.resolve``), what (``metrics.render`` over the journal's layers), and the
atomic write. ``textfile_metrics`` and the drift report write through :class:`MetricsFile`."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import atomic_write, read_text
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import Journal
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.metrics import (
    FILE_NAME,
    content_changed,
    layer_view,
    parse,
    render,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.node_exporter import resolve


class MetricsFailed(Exception):
    """The metrics could not be placed or written; the message names what."""


def file_mode(text):
    """The octal mode of the file, e.g. ``"0644"``, checked."""
    try:
        mode = int(text, 8)
    except (TypeError, ValueError):
        raise MetricsFailed("Failed to parse mode: %r is not an octal file mode" % (text,)) from None
    if not 0 <= mode <= 0o7777:
        raise MetricsFailed("Failed to parse mode: %r is not an octal file mode" % (text,))
    return mode


def journal_entries(journal_dir):
    journal = Journal(journal_dir)
    entries = []
    for layer in journal.layers():
        entry = journal.load(layer)
        if entry is not None:
            entries.append(entry)
    return entries


def place(directory):
    """Where the file goes: ``(where, warnings)``, ``where`` with ``path``, ``directory``,
    ``directory_source`` and ``directory_detail``."""
    try:
        found = resolve(directory, files=(FILE_NAME,))
    except ValueError as exc:
        raise MetricsFailed("Failed to use the metrics directory: %s" % exc) from None
    where = dict(
        path=os.path.join(found["path"], FILE_NAME),
        directory=found["path"],
        directory_source=found["source"],
        directory_detail=found["detail"],
    )
    return where, found["warnings"]


def write_metrics(
    where,
    playbook,
    success,
    journal_dir,
    records=(),
    drift_settings=None,
    drift_corrected=None,
    mode=0o644,
    check_mode=False,
    diff=False,
):
    """Render this run's metrics over the journal's layers and write them (unless ``check_mode``)
    atomically to ``where["path"]`` with ``mode`` (an int, from :func:`file_mode`); the module
    result without ``where``'s keys."""
    for key, value in (("drift_settings", drift_settings), ("drift_corrected_settings", drift_corrected)):
        if value is not None and value < 0:
            raise MetricsFailed("Failed to validate %s: must not be negative, got %s" % (key, value))
    path = where["path"]
    try:
        entries = journal_entries(journal_dir)
    except (IOError, OSError, ValueError) as exc:
        raise MetricsFailed("Failed to read the journal in %s: %s" % (journal_dir, exc)) from None
    layers = layer_view(entries, list(records or []))
    before = read_text(path) if os.path.isfile(path) else None
    content = render(
        layers,
        playbook,
        success,
        time.time(),
        previous_text=before,
        drift_settings=drift_settings,
        drift_corrected=drift_corrected,
    )
    changed = content_changed(before, content)
    if before is not None and stat.S_IMODE(os.stat(path).st_mode) != mode:
        changed = True
    written = False
    if not check_mode:
        try:
            atomic_write(path, content.encode("utf-8"), mode=mode)
        except (IOError, OSError) as exc:
            raise MetricsFailed("Failed to write the metrics file %s: %s" % (path, exc)) from None
        written = True
    result = dict(changed=changed, content=content, series=len(parse(content)), written=written, layers=layers)
    if diff:
        result["diff"] = {"before": before or "", "after": content, "before_header": path, "after_header": path}
    return result


class MetricsFile:
    """The metrics file a module writes: its mode and directory checked when it is made (before
    the module reads or changes anything; the directory's warnings go to the module), then
    :meth:`write` in the module's check and diff mode."""

    def __init__(self, module, directory, mode):
        self.module = module
        self.mode = file_mode(mode)
        self.where, warnings = place(directory)
        for warning in warnings:
            module.warn(warning)

    def write(self, playbook, success, journal_dir, **what):
        """:func:`write_metrics` at this place and mode; ``what`` its records and drift counts."""
        return write_metrics(
            self.where,
            playbook,
            success,
            journal_dir,
            mode=self.mode,
            check_mode=self.module.check_mode,
            diff=self.module._diff,  # AnsibleModule's diff mode
            **what,
        )
