# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How long a drift check takes, next to the transport floor of the same hosts.

In one run, interleaved N times each, both through ansible-runner (``ansible_runner.run()``,
the way a scheduler such as AWX runs a playbook):
- a one-task playbook that pings the inventory's hosts: the floor every playbook run over
  these hosts pays (interpreter start, inventory, connection, one module round trip);
- ``playbooks/drift.yml`` over the same hosts (report only: it changes nothing on the hosts
  except the Prometheus metrics file); its structured events give each host's drift line.

Prints a Markdown table of wall times (median, p90, min) and the drift/ping ratio of the
medians. The drift run exits non-zero when it finds drift; the exit codes are shown. The
metrics file goes to a temporary directory (--metrics-dir to change it).

``--scale 1,10,50`` then runs drift.yml with ansible-playbook over inventories of that many
hosts, all this machine through local connections, each with a journal and metrics
directory of its own, and prints the CPU seconds the run used per host (the controller and,
with local connections, the module runs too): flat as hosts grow, or not.

Run from the repository root:

    python3 benchmarks/drift_bench.py -n 5                       # this machine (inventories/local)
    python3 benchmarks/drift_bench.py -n 5 --scale 1,10,50
    python3 benchmarks/drift_bench.py -n 5 -i ~/.cache/molecule/main/fleet/inventory
"""

from __future__ import absolute_import, division, print_function

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import ansible_runner

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))

from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import quantile  # noqa: E402


def find_tool(name):
    local = os.path.join(REPO, ".venv", "bin", name)
    return local if os.path.exists(local) else shutil.which(name)


def timed(argv, env):
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    return (time.perf_counter() - start) * 1000.0, proc.returncode, proc.stdout.decode("utf-8", "replace")


def timed_runner(playbook, inventory, limit, extravars, env):
    """One drift run through ansible-runner: (ms, rc, {host: drift line}, runner stats)."""
    private = tempfile.mkdtemp(prefix="stacktune-drift-runner-")
    start = time.perf_counter()
    run = ansible_runner.run(
        private_data_dir=private,
        playbook=playbook,
        inventory=inventory,
        limit=limit,
        extravars=extravars,
        envvars=env,
        quiet=True,
    )
    ms = (time.perf_counter() - start) * 1000.0
    lines = {}
    for event in run.events:
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and data.get("task") == "Report the drift":
            lines[data.get("host")] = (data.get("res") or {}).get("msg")
    stats = run.stats or {}
    shutil.rmtree(private, ignore_errors=True)
    return ms, run.rc, lines, stats


PING_PLAYBOOK = """---
- name: One module round trip per host (the floor a playbook run over these hosts pays)
  hosts: "{{ stacktune_hosts | default('all') }}"
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def scale(counts, env, scratch):
    """Per inventory size: wall seconds and CPU seconds per host of one drift.yml run."""
    rows = []
    for count in counts:
        base = os.path.join(scratch, "scale-%d" % count)
        os.makedirs(base)
        inventory = os.path.join(base, "hosts.yml")
        with open(inventory, "w") as handle:
            handle.write("all:\n  hosts:\n")
            for i in range(count):
                handle.write(
                    "    h%d:\n      ansible_connection: local\n      ansible_python_interpreter: %s\n"
                    "      stacktune_journal_dir: %s/journal-%d\n      stacktune_metrics_dir: %s/metrics-%d\n"
                    % (i, sys.executable, base, i, base, i)
                )
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        ms, rc, _out = timed([find_tool("ansible-playbook"), "-i", inventory, "playbooks/drift.yml"], env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        rows.append((count, ms / 1000.0, cpu, cpu / count, rc))
    return rows


def summary(samples_ms):
    values = sorted(samples_ms)
    return {"median": quantile(values, 0.5), "p90": quantile(values, 0.9), "min": values[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("-n", "--repeat", type=int, default=5, help="runs of each command (default 5)")
    parser.add_argument("-i", "--inventory", default=None, help="inventory (default: ansible.cfg's, this machine)")
    parser.add_argument("-l", "--limit", default="all", help="host pattern (default all)")
    parser.add_argument(
        "--metrics-dir", default=None, help="stacktune_metrics_dir on the hosts (default: a temporary directory)"
    )
    parser.add_argument("--show-output", action="store_true", help="print the last drift run's line per host")
    parser.add_argument("--scale", default="", help="comma-separated host counts for the CPU-per-host table")
    args = parser.parse_args()
    ansible = find_tool("ansible")
    if not ansible or not find_tool("ansible-playbook"):
        sys.exit("ansible and ansible-playbook are needed (make deps-run creates .venv)")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    env["PATH"] = os.path.dirname(ansible) + os.pathsep + env.get("PATH", "")
    os.environ["PATH"] = env["PATH"]  # ansible-runner looks up ansible-playbook on this PATH
    # ansible.cfg's inventory, made absolute: ansible-runner runs from its own directory
    local = os.path.join(REPO, "inventories", "local", "hosts.yml")
    inventory_path = os.path.abspath(os.path.expanduser(args.inventory or local))
    scratch = tempfile.mkdtemp(prefix="stacktune-drift-bench-")
    metrics_dir = args.metrics_dir or os.path.join(scratch, "textfile")
    ping_playbook = os.path.join(scratch, "ping.yml")
    with open(ping_playbook, "w") as handle:
        handle.write(PING_PLAYBOOK)
    drift_playbook = os.path.join(REPO, "playbooks", "drift.yml")
    extravars = {"stacktune_metrics_dir": metrics_dir}

    timed_runner(ping_playbook, inventory_path, args.limit, {}, env)  # warm caches before measuring
    times = {"ping": [], "drift": []}
    codes = {"ping": set(), "drift": set()}
    lines, stats = {}, {}
    for _round in range(args.repeat):
        ms, rc, _lines, _stats = timed_runner(ping_playbook, inventory_path, args.limit, {}, env)
        times["ping"].append(ms)
        codes["ping"].add(rc)
        ms, rc, lines, stats = timed_runner(drift_playbook, inventory_path, args.limit, extravars, env)
        times["drift"].append(ms)
        codes["drift"].add(rc)
    scaled = scale([int(c) for c in args.scale.split(",") if c.strip()], env, scratch) if args.scale else []
    shutil.rmtree(scratch, ignore_errors=True)
    hosts = len(set(stats.get("ok", {})) | set(stats.get("failures", {})) | set(stats.get("dark", {})))

    ping_s, drift_s = summary(times["ping"]), summary(times["drift"])
    print(
        "drift check vs transport floor: %d run(s) each, interleaved, %d host(s) (%s)"
        % (args.repeat, hosts, args.limit)
    )
    print(
        "inventory: %s; python %s on %s"
        % (args.inventory or "ansible.cfg default", platform.python_version(), platform.node())
    )
    print("")
    print("| command | median ms | p90 ms | min ms | exit codes |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, label, s in (
        ("ping", "one-task ping playbook (ansible-runner)", ping_s),
        ("drift", "`playbooks/drift.yml` (ansible-runner)", drift_s),
    ):
        print(
            "| %s | %.0f | %.0f | %.0f | %s |"
            % (label, s["median"], s["p90"], s["min"], ", ".join(str(c) for c in sorted(codes[name])))
        )
    print("")
    print("drift / ping (medians): %.2fx" % (drift_s["median"] / ping_s["median"]))
    if scaled:
        print("")
        print("| hosts (local connections) | wall s | CPU s | CPU s per host | exit code |")
        print("| ---: | ---: | ---: | ---: | --- |")
        for count, wall, cpu, per_host, rc in scaled:
            print("| %d | %.1f | %.1f | %.2f | %d |" % (count, wall, cpu, per_host, rc))
    if args.show_output:
        print("")
        for host in sorted(lines):
            print("%s: %s" % (host, lines[host]))
        print("recap failures: %s" % (stats.get("failures") or {}))


if __name__ == "__main__":
    main()
