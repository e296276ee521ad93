# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The built-in workloads: one registry, gathered from the tables of the parts that define
them (``GPU_TABLE`` in gpu.py, ``CPU_TABLE`` in cpu.py, ``FILE_TABLE`` in files.py; a row is a
``base.Workload``). Every name the collection uses about them is derived here: the names per
device, the default sizes, steps and live sizes, what each needs, the functions. Part of the
assembled workload program (``source.py``), after the parts whose tables it reads.

A new workload: its function and its row in the part it belongs to (a new part: add it to
``PARTS`` in ``source.py`` and its table to :data:`TABLES`); then the lists that are text, not
Python, which ``tests/unit/plugins/module_utils/workloads/test_workload_registry.py`` ties to this
registry: the bench module's ``workload`` choices, description and ``size`` defaults
(plugins/modules/bench.py DOCUMENTATION), the stacktune role's argument spec
(``stacktune_bench_workload`` choices, ``stacktune_bench_steps_by_workload`` options), the
table of docs/bench.md and its list of the workloads that run live, and for one that needs a
data directory ``__stacktune_data_dir_workloads`` (roles/stacktune/vars/main.yml).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.base import CPU, GPU
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.cpu import CPU_TABLE
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.files import FILE_TABLE
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.gpu import GPU_TABLE


# The parts' tables, in the order the workloads are listed (GPU ones first).
TABLES = (GPU_TABLE, CPU_TABLE, FILE_TABLE)


# Values of the bench module's ``workload`` that are no built-in workload.
NOT_BUILT_IN = ("auto", "command")


def gather(tables):
    """name -> row of every row of ``tables``, in order; a name twice is an error."""
    out = {}
    for table in tables:
        for row in table:
            if row.name in out or row.name in NOT_BUILT_IN:
                raise ValueError("workload %r is declared twice" % row.name)
            out[row.name] = row
    return out


WORKLOADS = gather(TABLES)


GPU_WORKLOADS = tuple(name for name, row in WORKLOADS.items() if row.device == GPU)


CPU_WORKLOADS = tuple(name for name, row in WORKLOADS.items() if row.device == CPU)


# Workloads that read and write files in the data directory (the bench module's data_dir):
# without one they cannot run.
DATA_DIR_WORKLOADS = tuple(name for name, row in WORKLOADS.items() if row.data_dir)


# Default of the `size` option per workload, and what the number means.
DEFAULT_SIZE = {name: row.size for name, row in WORKLOADS.items()}


SIZE_MEANING = {name: row.meaning for name, row in WORKLOADS.items()}


# Measured steps per block when none are given (the rows say why).
DEFAULT_STEPS = {name: row.steps for name, row in WORKLOADS.items()}


# Workloads that can run for a whole live trial, and the size each takes there.
LIVE_WORKLOADS = tuple(name for name, row in WORKLOADS.items() if row.live)


LIVE_SIZE = {name: row.size if row.live_size is None else row.live_size for name, row in WORKLOADS.items() if row.live}


# GPUs and worker processes a workload needs.
MIN_GPUS = {name: row.min_gpus for name, row in WORKLOADS.items()}


MIN_WORKERS = {name: row.min_workers for name, row in WORKLOADS.items()}


# What the block runner imports before it forks, per workload (after torch for a GPU one).
RUNNER_PRELOAD = {name: row.preload for name, row in WORKLOADS.items() if row.preload}


WORKLOAD_FUNCS = {name: row.func for name, row in WORKLOADS.items()}
