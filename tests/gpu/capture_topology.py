# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Record every input of the GPU topology facts on this machine into a JSON file.

The file is the ``raw`` dict that ``stacktune.gpu.gpu_topology_facts`` returns with
``include_raw: true``; ``topology.assemble(raw)`` replays it to the same facts offline,
which is how tests/unit/fixtures/topology/*.json are made. Needs only the standard
library and, for GPU facts, pynvml (nvidia-ml-py). Run from the repository root:

    PYTHONPATH=collections python3 tests/gpu/capture_topology.py tests/unit/fixtures/topology/h200.json

``--compact`` drops Python package directory entries that do not name a library the
facts report, after checking that the facts replay unchanged without them.

The recording also carries ``commands.nvidia_smi_topo``, the output of
``nvidia-smi topo -m`` where nvidia-smi exists, so the unit tests can hold the facts' path
classes against NVIDIA's for the same layout; the facts themselves do not read it. Run it
as root (sudo) to record full PCI config space; without root the ACS registers are not
readable.
"""

from __future__ import absolute_import, division, print_function

import argparse
import copy
import json
import os
import sys

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.hostprobe import capture, collect_topo_matrix
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import LIBRARY_DISTRIBUTIONS, assemble
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology_table import render_table


def compact(raw):
    """Copy of raw without package directory entries that cannot change the facts."""
    small = copy.deepcopy(raw)
    dirs = small.get("files", {}).get("dirs", {})
    for path, names in dirs.items():
        if names and path.endswith(("/site-packages", "/dist-packages")):
            dirs[path] = [n for n in names if any(p.match(n) for p in LIBRARY_DISTRIBUTIONS.values())]
    return small


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("output", help="path of the JSON file to write")
    parser.add_argument("--no-nics", action="store_true", help="do not record network interfaces")
    parser.add_argument("--no-libraries", action="store_true", help="do not look for CUDA/cuDNN/NCCL libraries")
    parser.add_argument("--compact", action="store_true", help="drop package directory entries the facts ignore")
    parser.add_argument("--quiet", action="store_true", help="do not print the facts table to stderr")
    args = parser.parse_args(argv)

    raw = capture(nics=not args.no_nics, libraries=not args.no_libraries)
    raw["commands"]["nvidia_smi_topo"] = collect_topo_matrix()
    facts = assemble(raw)
    if args.compact:
        small = compact(raw)
        if assemble(small) == facts:
            raw = small
        else:
            sys.stderr.write("--compact would change the facts; writing the full recording\n")
    directory = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(directory):
        os.makedirs(directory)
    with open(args.output, "w") as handle:
        json.dump(raw, handle, indent=1, sort_keys=True)
        handle.write("\n")
    if os.geteuid() != 0:
        sys.stderr.write("not root: PCI config space (ACS) is recorded truncated\n")
    if not args.quiet:
        sys.stderr.write(render_table(facts))
    sys.stderr.write("wrote %s (%d GPU(s))\n" % (args.output, facts["gpu_count"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
