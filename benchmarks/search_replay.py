# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The search of candidate values (gate/search.py) replayed on windows of one running program.

The windows are those recorded on one H200 (tests/unit/fixtures/search/, benchmarks/gpu_timeline.py:
a GPU-bound transformer step, the power limit switched live between windows, NVML's total-energy
counter read at the windows' edges; tests/unit/fixtures/settle/: THP and vm.dirty_ratio switched
on the same program), and windows built from issue 42's table, on which its targets were set
(tests/unit/plugins/module_utils/gate/search_data.py). Each trial draws
every window at random from its arm's recorded ones, in the search's own order. The clock runs
by the windows' spans plus, after each switch, the settling the live trial drops (``--settle``
seconds and two steps). Per case it prints how often the target was met, the seconds of
measuring, the share of the search's time in measured steps and every arm's throughput
resolution:

    python3 benchmarks/search_replay.py [--trials 200]
"""

import argparse
import importlib.util
import os
import random
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.search import Search, replay  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "search_data", os.path.join(REPO, "tests", "unit", "plugins", "module_utils", "gate", "search_data.py")
)
data = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(data)

CANDIDATES = [700, 650, 600, 550, 500, 450]


def trial(windows, host, candidates, seed, settle, **kw):
    by_arm = {c: windows[c] for c in candidates}
    by_arm[None] = windows[host]
    switch, measure = replay(by_arm, random.Random(seed))
    clock = {"t": 0.0, "measured": 0.0, "arm": "unset"}

    def timed_switch(value):
        if value != clock["arm"]:
            clock["arm"] = value
            clock["t"] += settle
            clock["pending"] = True
        switch(value)

    def timed_measure():
        out = measure()
        steps = out["samples_ms"]
        if clock.pop("pending", False):
            clock["t"] += 2 * sum(steps) / len(steps) / 1000.0  # the two steps dropped after a switch
        clock["t"] += sum(steps) / 1000.0
        clock["measured"] += sum(steps) / 1000.0
        return out

    res = Search(
        candidates, host, timed_switch, timed_measure, rng=random.Random(seed + 7919), clock=lambda: clock["t"], **kw
    ).run()
    res["measured_s"], res["wall_s"] = clock["measured"], clock["t"]
    return res


def case(name, target, windows, host, candidates, trials, settle, ok, **kw):
    hits, measured, wall, worst = 0, 0.0, 0.0, 0.0
    chosen = {}
    for seed in range(trials):
        res = trial(windows, host, candidates, seed, settle, **kw)
        chosen[res["chosen"]] = chosen.get(res["chosen"], 0) + 1
        hits += ok(res["chosen"])
        measured += res["measured_s"]
        wall += res["wall_s"]
        for row in res["rows"]:
            if row.get("throughput_half"):
                worst = max(worst, row["throughput_half"] / row["throughput"])
    print(
        "| %s | %s | %.1f%% | %s | %.1f s | %.0f%% | %.2f%% |"
        % (
            name,
            target,
            100.0 * hits / trials,
            ", ".join("%s: %d" % (k, v) for k, v in sorted(chosen.items(), key=lambda kv: -kv[1])),
            measured / trials,
            100.0 * measured / wall,
            100.0 * worst,
        )
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--settle", type=float, default=1.0, help="seconds dropped after each switch")
    args = parser.parse_args()
    n, s = args.trials, args.settle
    thp, dirty = data.thp_windows(), data.dirty_windows()
    for label, power, slow10 in (
        ("recorded (tests/unit/fixtures/search/h200_power_curve.json)", data.recorded("*power*.json"), 600),
        ("built from issue 42's table", data.table_windows(), 550),
    ):
        if power is None:
            continue
        print("\nwindows %s; %d trials per case\n" % (label, n))
        print("| case | target | met | chosen (trials) | measuring | share measured | worst arm's throughput +- |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for host in (700, 450):
            case(
                "throughput, host %d W, 6 candidates" % host,
                "700 W (or within noise)",
                power,
                host,
                CANDIDATES,
                n,
                s,
                lambda c: c in (700, 650),
            )
        case(
            "efficiency, max_slowdown 0.05",
            "650 W",
            power,
            700,
            CANDIDATES,
            n,
            s,
            lambda c: c == 650,
            objective="efficiency",
            max_slowdown=0.05,
        )
        case(
            "efficiency, max_slowdown 0.10",
            "%d W" % slow10,
            power,
            700,
            CANDIDATES,
            n,
            s,
            lambda c, want=slow10: c == want,
            objective="efficiency",
            max_slowdown=0.10,
        )
    print("\nwindows recorded on the same program (tests/unit/fixtures/settle); %d trials per case\n" % n)
    print("| case | target | met | chosen (trials) | measuring | share measured | worst arm's throughput +- |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    case(
        "THP always vs never (host never)",
        "host's value in >= 95%",
        thp,
        "never",
        ["always"],
        n,
        s,
        lambda c: c == "never",
    )
    case(
        "THP never vs always (host always)",
        "host's value in >= 95%",
        thp,
        "always",
        ["never"],
        n,
        s,
        lambda c: c == "always",
    )
    if dirty:
        case("vm.dirty_ratio 10 vs 40 (host 40)", "host's value in >= 95%", dirty, 40, [10], n, s, lambda c: c == 40)
    # the layer's policy no_regression (a layer the diagnosis says cannot move the program): the
    # choice against the host's own value is still judged under improve
    for host, other in (("never", "always"), ("always", "never")):
        case(
            "THP %s vs %s (host %s), layer policy no_regression" % (other, host, host),
            "host's value in >= 95%",
            thp,
            host,
            [other],
            n,
            s,
            lambda c, want=host: c == want,
            policy="no_regression",
        )


if __name__ == "__main__":
    main()
