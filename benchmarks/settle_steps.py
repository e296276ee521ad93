"""Steps to settle after a switch, per kind of setting, from recorded timelines.

A timeline (benchmarks/gpu_timeline.py) holds every step of ONE running program as it arrived,
``steps`` = [[arrival s, step ms], ...], and each switch between arms, ``switches`` =
[{"arm", "t0", "t1"}, ...]. For each switch this finds how many steps after it the program's
steps are back within noise of the arm's steady state:

- the steady state of a switch's arm: the steps arriving from ``--steady-after`` seconds after
  the switch to the next switch: their median and robust spread (1.4826 x the median absolute
  deviation), at least 10 steps;
- settled after k steps: from the k-th step that arrived after the switch ended (the step
  that spanned it is step 0) on, the median of every 3 consecutive steps stays within
  ``--band`` x the spread (and at least 0.5% of the median) of the steady state for the next
  ``--hold`` steps, step k itself within it too.

The arms are named for what they set; ``--kind ARM_PREFIX=KIND`` says which kind of the
settings engine each belongs to (by default: dirty_ -> sysctl, thp_ -> sysfs, a number of
watts -> nvml). Per kind it prints the switches, the steps to settle (median, most) and the
seconds they took at most: the live trial's ``settle_s`` for the kind (engine/kinds/*.py)
is the most seconds, rounded up to 0.05 s (in seconds, not steps: a program with shorter
steps needs more of them), besides the two steps it drops after every switch anyway.

    python3 benchmarks/settle_steps.py tests/unit/fixtures/settle/*.json \\
        tests/unit/fixtures/search/h200_power_curve.json
    python3 benchmarks/settle_steps.py --synthetic     # a made-up timeline with known settling
"""

import argparse
import json
import math
import random
import statistics
import sys

DEFAULT_KINDS = (("dirty_", "sysctl"), ("vm.", "sysctl"), ("thp_", "sysfs"), ("#", "nvml"))
LIVE_DROP_STEPS = 2  # dropped after every switch besides settle_s (gate/trial.py)


def kind_of(arm, kinds):
    for prefix, kind in kinds:
        if prefix == "#" and arm.replace(".", "", 1).isdigit():
            return kind
        if prefix != "#" and arm.startswith(prefix):
            return kind
    return "other"


def settle_after(steps, switch, next_t0, steady_after=1.0, band=4.0, hold=10):
    """Steps (and seconds) after ``switch`` until the program is within noise of the arm's
    steady state; None when the arm's steady state has too few steps."""
    after = [(t, ms) for t, ms in steps if t > switch["t1"] and (next_t0 is None or t <= next_t0)]
    steady = [ms for t, ms in after if t >= switch["t1"] + steady_after]
    if len(steady) < 10 or len(after) < 3:
        return None
    mid = statistics.median(steady)
    spread = 1.4826 * statistics.median(abs(v - mid) for v in steady)
    width = max(band * spread, 0.005 * mid)
    meds = [statistics.median(ms for _t, ms in after[i : i + 3]) for i in range(len(after) - 2)]
    for k in range(len(meds)):
        window = meds[k : k + hold]
        if abs(after[k][1] - mid) <= width and all(abs(m - mid) <= width for m in window):
            # the settling is over once step k started: its arrival less its own time
            seconds = max(0.0, after[k][0] - after[k][1] / 1000.0 - switch["t1"])
            return {"steps": k, "seconds": round(seconds, 3), "steady_ms": round(mid, 3), "band_ms": round(width, 3)}
    return {"steps": len(after), "seconds": round(after[-1][0] - switch["t1"], 3), "steady_ms": round(mid, 3)}


def analyse(doc, kinds=DEFAULT_KINDS, **options):
    """Per switch of one timeline: its arm, kind and settling."""
    switches = sorted(doc.get("switches") or [], key=lambda s: s["t0"])
    out = []
    for i, sw in enumerate(switches):
        next_t0 = switches[i + 1]["t0"] if i + 1 < len(switches) else None
        got = settle_after(doc["steps"], sw, next_t0, **options)
        if got is not None:
            got.update(arm=sw["arm"], kind=kind_of(str(sw["arm"]), kinds), label=doc.get("label"))
            out.append(got)
    return out


def per_kind(rows):
    """Per kind: switches, steps to settle (median, most), seconds (most) and the settle_s it gives."""
    table = {}
    for row in rows:
        table.setdefault(row["kind"], []).append(row)
    out = {}
    for kind, got in sorted(table.items()):
        steps = sorted(r["steps"] for r in got)
        most_s = max(r["seconds"] for r in got)
        out[kind] = {
            "switches": len(got),
            "steps_median": steps[len(steps) // 2],
            "steps_most": steps[-1],
            "seconds_most": most_s,
            "settle_s": round(math.ceil(round(most_s / 0.05, 6)) * 0.05, 2),
        }
    return out


def synthetic(seed=1, lag_steps=6, step_ms=20.0, arms=("dirty_10", "dirty_40", "700", "450")):
    """A made-up timeline: 3-s arms, steps of ``step_ms`` with 1% noise; the nvml arms (watts)
    change the step time ``lag_steps`` steps after their switch, the sysctl arms at once."""
    rng = random.Random(seed)
    t, steps, switches, level = 0.0, [], [], step_ms
    for r in range(3):
        for arm in arms:
            switches.append({"arm": arm, "t0": t, "t1": t + 0.002, "round": r})
            t += 0.002
            target = step_ms * (1.2 if arm == "450" else 1.0)
            start = level
            n = 0
            end = t + 3.0
            while t < end:
                level = start if arm.isdigit() and n < lag_steps else target
                ms = level * (1.0 + 0.01 * rng.gauss(0.0, 1.0))
                t += ms / 1000.0
                steps.append([round(t, 6), round(ms, 4)])
                n += 1
    return {"label": "synthetic", "steps": steps, "switches": switches}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timelines", nargs="*", help="timeline JSON files (benchmarks/gpu_timeline.py)")
    parser.add_argument(
        "--synthetic", action="store_true", help="a made-up timeline: the nvml arms settle 6 steps late"
    )
    parser.add_argument("--steady-after", type=float, default=1.0)
    parser.add_argument("--band", type=float, default=4.0)
    parser.add_argument("--hold", type=int, default=10)
    parser.add_argument("--kind", action="append", default=[], help="ARM_PREFIX=KIND ('#' for numbers)")
    args = parser.parse_args(argv)
    kinds = tuple(tuple(k.split("=", 1)) for k in args.kind) + DEFAULT_KINDS
    docs = [synthetic()] if args.synthetic else []
    for path in args.timelines:
        with open(path) as handle:
            docs.append(json.load(handle))
    if not docs:
        parser.error("give timelines or --synthetic")
    rows = []
    for doc in docs:
        rows.extend(analyse(doc, kinds, steady_after=args.steady_after, band=args.band, hold=args.hold))
    print("| timeline | arm | kind | steps to settle | seconds | steady step ms | band ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            "| %s | %s | %s | %d | %.3f | %.3f | %s |"
            % (r["label"], r["arm"], r["kind"], r["steps"], r["seconds"], r["steady_ms"], r.get("band_ms", "-"))
        )
    print()
    print(
        "| kind | switches | steps to settle (median) | most | seconds at most "
        "| settle_s (the %d steps after a switch are dropped besides) |" % LIVE_DROP_STEPS
    )
    print("|---|---|---|---|---|---|")
    for kind, k in per_kind(rows).items():
        print(
            "| %s | %d | %d | %d | %.3f | %.2f |"
            % (kind, k["switches"], k["steps_median"], k["steps_most"], k["seconds_most"], k["settle_s"])
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
