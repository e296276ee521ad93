# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The workload program as the host runs it: one file assembled from its parts.

The parts are module_utils files (the workload's own in ``workloads/host/``, the folder of the
code that runs on the host), so linters and tests read them like any other Python;
the host gets one self-contained program of the standard library (and torch, imported where
a GPU workload needs it). Each part's statements are kept in order; what only the collection
needs is left out: the module docstring, the ``__future__`` import and ``__metaclass__`` (the
program has them once, at the top) and the imports of other parts, whose names the parts
before it define.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import os

from ansible_collections.stacktune.gpu.plugins.module_utils.common import hostproc
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import constants
from ansible_collections.stacktune.gpu.plugins.module_utils.common.process import module_source
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import (
    base,
    cpu,
    files,
    gpu,
    live,
    program,
    registry,
)

# In order: a part uses only names of the parts before it.
PARTS = (hostproc, constants, base, gpu, cpu, files, registry, live, program)
COLLECTION = "ansible_collections."
# The program's file name on the host (in the bench module's private folder, or the runner's).
PROGRAM_NAME = "stacktune_workload.py"
HEADER = (
    "# stacktune workload program (stacktune.gpu.bench), assembled from plugins/module_utils:\n"
    "# %s\n"
    "from __future__ import absolute_import, division, print_function\n"
    "\n"
    "__metaclass__ = type\n"
)


def _left_out(node, first):
    """Whether a top-level statement is for the collection only (see the module docstring)."""
    if first and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True
    if isinstance(node, ast.ImportFrom):
        return node.module == "__future__" or (node.module or "").startswith(COLLECTION)
    if isinstance(node, ast.Assign):
        return [getattr(t, "id", None) for t in node.targets] == ["__metaclass__"]
    return False


def part_text(source):
    """One part's text for the program: its statements and comments from its first statement
    on, less what only the collection needs."""
    lines = source.splitlines(True)
    body = ast.parse(source).body
    keep = [True] * len(lines)
    for index in range(body[0].lineno - 1 if body else len(lines)):
        keep[index] = False
    for index, node in enumerate(body):
        if _left_out(node, index == 0):
            for line in range(node.lineno - 1, node.end_lineno):
                keep[line] = False
    return "".join(line for line, kept in zip(lines, keep) if kept).strip("\n") + "\n"


def program_source(parts=PARTS):
    """The text of the workload program, as the bench module writes it for the host."""
    names = ", ".join(part.__name__.split(".module_utils.", 1)[1].replace(".", "/") + ".py" for part in parts)
    texts = [HEADER % names] + [part_text(module_source(part)) for part in parts]
    return "\n\n".join(texts)


def write_program(folder, name=PROGRAM_NAME):
    """Write the workload program into ``folder`` as ``name`` and return its path (for running
    it by hand or from a benchmark, as the bench module does from its private folder)."""
    path = os.path.join(folder, name)
    with open(path, "w") as handle:
        handle.write(program_source())
    return path
