# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a fleet costs the controller: CPU seconds per host of each playbook against a ping round.

For each N of ``--hosts`` (inventory aliases of this machine, local connections, forks 20),
runs in one round, side by side: ``ansible -m ping``, ``playbooks/verify.yml``,
``playbooks/drift.yml`` and ``tune.yml --check`` (the plan: nothing on the host changes, the
gate is off), and prints per playbook the wall time, the CPU seconds of the run (the
controller, its task workers and, with local connections, the module runs: everything it forked
and waited for), the CPU per host, the CPU per host over the ping's, and the marginal CPU per
host between the smallest and the largest N (the per-run start-up cancels out). With local
connections the modules' own CPU counts as the controller's: an upper bound of what a
controller pays per host over SSH, where the modules run on the hosts.

Run from the repository root (``make deps-run`` first):

    python3 benchmarks/fleet_controller.py --hosts 1,8,16
    python3 benchmarks/fleet_controller.py --hosts 1,4 --playbooks ping,verify
"""

from __future__ import absolute_import, division, print_function

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from controller_cpu import REPO, inventory  # noqa: E402  (the same inventory of aliases)

PLAYBOOKS = {
    "ping": ("ansible", ["all", "-m", "ansible.builtin.ping"]),
    "verify": ("ansible-playbook", [os.path.join(REPO, "playbooks", "verify.yml")]),
    "drift": ("ansible-playbook", [os.path.join(REPO, "playbooks", "drift.yml")]),
    "check": ("ansible-playbook", [os.path.join(REPO, "tune.yml"), "--check"]),
}


def command(tool):
    found = shutil.which(tool, path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if found:
        return [found]
    return [sys.executable, "-m", "ansible.cli.adhoc" if tool == "ansible" else "ansible.cli.playbook"]


def run_once(name, inv):
    tool, args = PLAYBOOKS[name]
    env = dict(
        os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    run = subprocess.run(
        command(tool) + ["-i", inv] + args, env=env, cwd=REPO, capture_output=True, text=True, check=False
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        sys.exit("%s failed (rc %d):\n%s" % (name, run.returncode, (run.stdout + run.stderr)[-3000:]))
    lines = len((run.stdout + run.stderr).splitlines())
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,8,16", help="comma-separated inventory sizes")
    parser.add_argument("--playbooks", default=",".join(PLAYBOOKS), help="comma-separated: " + ", ".join(PLAYBOOKS))
    args = parser.parse_args()
    try:
        sizes = sorted({int(n) for n in args.hosts.split(",") if n})
    except ValueError:
        parser.error("--hosts: comma-separated whole numbers, got %r" % args.hosts)
    if not sizes or sizes[0] < 1:
        parser.error("--hosts: at least one size of 1 or more, got %r" % args.hosts)
    names = [n for n in args.playbooks.split(",") if n]
    unknown = [n for n in names if n not in PLAYBOOKS]
    if unknown:
        parser.error("--playbooks: unknown %s (known: %s)" % (", ".join(unknown), ", ".join(PLAYBOOKS)))
    if "ping" not in names:
        names.insert(0, "ping")
    results = {}
    for n in sizes:
        work = tempfile.mkdtemp(prefix="stacktune-fleet-controller.")
        try:
            inv = inventory(work, n)
            for name in names:
                results[(name, n)] = run_once(name, inv)
                wall, cpu, lines = results[(name, n)]
                print("%3d host(s) %-7s wall %6.1f s  cpu %6.1f s  %5d lines" % (n, name, wall, cpu, lines), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print("| playbook | hosts | wall s | CPU s | CPU s per host | per host vs ping | lines printed per host |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        for n in sizes:
            wall, cpu, lines = results[(name, n)]
            ping = results[("ping", n)][1] / n
            print(
                "| %s | %d | %.1f | %.1f | %.2f | %.1fx | %.0f |"
                % (name, n, wall, cpu, cpu / n, (cpu / n) / ping if ping else 0.0, lines / float(n))
            )
    if len(sizes) > 1:
        low, high = sizes[0], sizes[-1]
        print()
        print("Marginal CPU per host between %d and %d hosts (the run's start-up cancels out):" % (low, high))
        print()
        print("| playbook | CPU s per added host | vs ping |")
        print("| --- | --- | --- |")
        ping = (results[("ping", high)][1] - results[("ping", low)][1]) / (high - low)
        for name in names:
            marginal = (results[(name, high)][1] - results[(name, low)][1]) / (high - low)
            print("| %s | %.2f | %.1fx |" % (name, marginal, marginal / ping if ping > 0 else 0.0))


if __name__ == "__main__":
    main()
