"""The diagnosis sampler's cost to the program it watches: an A/A from a recorded timeline.

The timeline (benchmarks/gpu_timeline.py with ``--arm on=@sampler-on --arm off=@sampler-off``)
holds windows of ONE running program, the 2-Hz sampler switched on and off between them in
rounds, each round's order drawn at random. Per round the on window's mean step is compared
with the off window's; this prints the mean difference with its 95% interval (Student's t over
the rounds), each arm's p50/p99, what one snapshot cost the sampler, and how long the
diagnosis's arithmetic takes on the samples (derive + rules).

    python3 benchmarks/diagnose_overhead.py tests/unit/fixtures/diagnose/h200_sampler_aa.json
"""

import argparse
import json
import os
import statistics
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))

from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import quantile, t_ppf  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose.run import assemble  # noqa: E402


def rounds(doc):
    """[(round, on window mean ms, off window mean ms)] from the windows and the switches."""
    by_round = {}
    for sw, w in zip(doc["switches"], doc["windows"]):
        if w["steps_ms"]:
            by_round.setdefault(sw["round"], {})[w["arm"]] = statistics.fmean(w["steps_ms"])
    return [(r, arms["on"], arms["off"]) for r, arms in sorted(by_round.items()) if "on" in arms and "off" in arms]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "timeline", nargs="?", default=os.path.join(REPO, "tests/unit/fixtures/diagnose/h200_sampler_aa.json")
    )
    args = parser.parse_args(argv)
    with open(args.timeline) as handle:
        doc = json.load(handle)
    pairs = rounds(doc)
    diffs = [100.0 * (on - off) / off for _r, on, off in pairs]
    mean = statistics.fmean(diffs)
    half = (
        t_ppf(0.975, len(diffs) - 1) * statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    )
    print("timeline: %s (%s, %s)" % (os.path.relpath(args.timeline, REPO), doc.get("program"), doc.get("recorded")))
    print(
        "rounds: %d, one on and one off window each (%d steps per window on average)"
        % (len(pairs), statistics.fmean(len(w["steps_ms"]) for w in doc["windows"]))
    )
    for r, on, off in pairs:
        print("  round %d: on %.3f ms, off %.3f ms, on - off %+.3f%%" % (r, on, off, 100.0 * (on - off) / off))
    print("sampler on vs off, mean step: %+.3f%% (95%% interval %+.3f%% .. %+.3f%%)" % (mean, mean - half, mean + half))
    for arm in ("off", "on"):
        steps = sorted(ms for w in doc["windows"] if w["arm"] == arm for ms in w["steps_ms"])
        print(
            "  %-3s: %d steps, p50 %.3f ms, p99 %.3f ms"
            % (arm, len(steps), quantile(steps, 0.5), quantile(steps, 0.99))
        )
    costs = [s["cost_s"] * 1000.0 for s in doc["samples"]]
    print(
        "one snapshot (NVML + /proc, in the sampling process, outside the program): "
        "mean %.1f ms, max %.1f ms, %d snapshots" % (statistics.fmean(costs), max(costs), len(costs))
    )
    start = time.perf_counter()
    out = assemble(doc["samples"], doc, doc["steps"], {"command": [doc.get("program") or "?"]})
    print(
        "derive + rules on %d snapshots: %.1f ms; verdict: %s"
        % (len(doc["samples"]), 1000.0 * (time.perf_counter() - start), out["verdict"])
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
