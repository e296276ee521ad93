# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The CPU time a tune's controller spends, with and without the collection's plugins preloaded.

Runs ``tune.yml --check`` (nothing on the host changes; the gate is off) over K inventory
aliases of this machine (local connections), N rounds, the variants interleaved in each
round, and prints per variant the median wall time and the median CPU seconds of the run (the
controller, its task workers and, with local connections, the module runs: everything the run
forked and waited for):

- ``per-task``: the collection's filters are imported in every task's worker (Ansible's own
  behaviour: no ``stacktune.gpu.preload`` callback, Ansible's default stdout callback);
- ``preload``: the same with the ``stacktune.gpu.preload`` callback of ``ansible.cfg``;
- ``preload+poll5``, ``preload+poll10``: the same with Ansible's ``internal_poll_interval`` at
  5 and 10 ms instead of 1 ms (how often the controller's main process looks for finished
  tasks while it waits).

Run from the repository root (``make deps-run`` first; on the GPU host with the carried wheels):

    python3 benchmarks/controller_cpu.py -n 3 --hosts 1
    python3 benchmarks/controller_cpu.py -n 3 --hosts 8 --variants per-task,preload
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {
    "per-task": {"preload": False},
    "preload": {"preload": True},
    "preload+poll5": {"preload": True, "ANSIBLE_INTERNAL_POLL_INTERVAL": "0.005"},
    "preload+poll10": {"preload": True, "ANSIBLE_INTERNAL_POLL_INTERVAL": "0.01"},
}


def config_without_preload(work):
    """The repository's ansible.cfg less callbacks_enabled, its relative paths made absolute."""
    with open(os.path.join(REPO, "ansible.cfg")) as handle:
        text = handle.read()
    text = re.sub(r"^callbacks_enabled\s*=.*\n", "", text, flags=re.M)
    text = re.sub(r"^(\w+\s*=\s*)\./", lambda m: m.group(1) + REPO + "/", text, flags=re.M)
    text = re.sub(r"^(inventory\s*=\s*)(?!/)", lambda m: m.group(1) + REPO + "/", text, flags=re.M)
    path = os.path.join(work, "ansible-per-task.cfg")
    with open(path, "w") as handle:
        handle.write(text)
    return path


def inventory(work, hosts):
    data = {
        "all": {
            "hosts": {"tuned-%d" % i: {} for i in range(1, hosts + 1)},
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "stacktune_gate": False,
                "stacktune_serial": ["100%"],
                "metrics_enabled": False,
                "stacktune_report_dir": os.path.join(work, "reports"),
            },
        }
    }
    path = os.path.join(work, "inventory.json")
    with open(path, "w") as handle:
        json.dump(data, handle)
    return path


def run_once(variant, inv, per_task_cfg, playbook_cmd):
    env = dict(os.environ)
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.default"
    env["ANSIBLE_CONFIG"] = os.path.join(REPO, "ansible.cfg") if variant["preload"] else per_task_cfg
    env.update({k: v for k, v in variant.items() if k.startswith("ANSIBLE_")})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    run = subprocess.run(
        playbook_cmd + ["-i", inv, os.path.join(REPO, "tune.yml"), "--check"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if run.returncode != 0:
        sys.exit("tune.yml --check failed (rc %d):\n%s" % (run.returncode, (run.stdout + run.stderr)[-3000:]))
    recap = re.findall(r"ok=(\d+)\s+changed=\d+\s+unreachable=\d+\s+failed=\d+\s+skipped=(\d+)", run.stdout)
    return wall, cpu, recap[-1] if recap else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--rounds", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=1, help="inventory aliases of this machine")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    args = parser.parse_args()
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        parser.error("--variants: unknown %s (known: %s)" % (", ".join(unknown), ", ".join(VARIANTS)))
    playbook = shutil.which("ansible-playbook")
    playbook_cmd = [playbook] if playbook else [sys.executable, "-m", "ansible.cli.playbook"]
    work = tempfile.mkdtemp(prefix="stacktune-controller-cpu.")
    try:
        inv = inventory(work, args.hosts)
        per_task_cfg = config_without_preload(work)
        results = {name: [] for name in names}
        recaps = {}
        for rnd in range(args.rounds):
            order = names if rnd % 2 == 0 else list(reversed(names))
            for name in order:
                wall, cpu, recap = run_once(VARIANTS[name], inv, per_task_cfg, playbook_cmd)
                results[name].append((wall, cpu))
                recaps[name] = recap
                print("round %d %-15s wall %6.1f s  cpu %6.1f s" % (rnd + 1, name, wall, cpu), flush=True)
        base = statistics.median(c for _w, c in results[names[0]])
        print()
        print("tune.yml --check, %d host(s), %d round(s); CPU: the run and all it forked" % (args.hosts, args.rounds))
        print()
        print("| variant | wall (median) | CPU s (median) | CPU vs %s | tasks ok / skipped per host |" % names[0])
        print("| --- | --- | --- | --- | --- |")
        for name in names:
            wall = statistics.median(w for w, _c in results[name])
            cpu = statistics.median(c for _w, c in results[name])
            ok_skipped = "%s / %s" % recaps[name] if recaps[name] else "-"
            print("| %s | %.1f s | %.1f | %+.0f%% | %s |" % (name, wall, cpu, 100.0 * (cpu / base - 1), ok_skipped))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
