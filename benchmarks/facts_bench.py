# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How long one GPU topology facts collection takes per host.

Measures, on the machine it runs on:
- the in-process collection (record sysfs/procfs, NVML, ldconfig) plus assembly, N times;
- when `ansible` is on PATH: N runs of
  `ansible localhost -c local -m stacktune.gpu.gpu_topology_facts` (wall time), and in the
  same run, interleaved, N runs of the no-op `ansible localhost -c local -m ping` as the
  baseline every ad-hoc call pays.

Prints a Markdown table. Run from the repository root:

    PYTHONPATH=collections python3 benchmarks/facts_bench.py -n 20
"""

from __future__ import absolute_import, division, print_function

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.hostprobe import capture
from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import quantile
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import assemble

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def summary(samples_ms):
    values = sorted(samples_ms)
    return {"n": len(values), "median": quantile(values, 0.5), "p90": quantile(values, 0.9)}


def in_process(n):
    samples, last = [], None
    for _unused in range(n):
        start = time.perf_counter()
        raw = capture()
        last = assemble(raw)
        samples.append((time.perf_counter() - start) * 1000.0)
    return samples, last


def ansible_runs(ansible, n):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    commands = {
        "facts": [ansible, "localhost", "-c", "local", "-m", "stacktune.gpu.gpu_topology_facts"],
        "ping": [ansible, "localhost", "-c", "local", "-m", "ping"],
    }
    samples = {name: [] for name in commands}
    for _unused in range(n):
        for name, argv in commands.items():  # interleaved, so drift hits both alike
            start = time.perf_counter()
            proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
            elapsed = (time.perf_counter() - start) * 1000.0
            if proc.returncode != 0:
                raise SystemExit(
                    "%s failed (rc %d):\n%s%s" % (" ".join(argv), proc.returncode, proc.stdout, proc.stderr)
                )
            samples[name].append(elapsed)
    return samples


def main(argv=None):
    parser = argparse.ArgumentParser(description="Time one GPU topology facts collection.")
    parser.add_argument("-n", type=int, default=20, help="in-process repetitions (default 20)")
    parser.add_argument("--ansible-runs", type=int, default=10, help="runs of each ansible command (default 10)")
    parser.add_argument("--no-ansible", action="store_true", help="skip the ansible command runs")
    args = parser.parse_args(argv)

    samples, facts = in_process(args.n)
    rows = [("in-process collect + assemble", summary(samples))]
    ansible = None if args.no_ansible else shutil.which("ansible")
    if ansible:
        timed = ansible_runs(ansible, args.ansible_runs)
        rows.append(("`ansible -m stacktune.gpu.gpu_topology_facts` (wall)", summary(timed["facts"])))
        rows.append(("`ansible -m ping` baseline (wall)", summary(timed["ping"])))

    print(
        "Host: %s, kernel %s, Python %s, %d GPU(s)%s"
        % (
            platform.node(),
            platform.release(),
            platform.python_version(),
            facts["gpu_count"],
            "" if facts["gpu_count"] else " (%s)" % facts["reason"],
        )
    )
    print("")
    print("| measurement | runs | median ms | p90 ms |")
    print("|---|---:|---:|---:|")
    for name, stats in rows:
        print("| %s | %d | %.1f | %.1f |" % (name, stats["n"], stats["median"], stats["p90"]))
    if not ansible and not args.no_ansible:
        print("")
        print("`ansible` is not on PATH: only the in-process collection was measured.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
