"""Live trials replayed on recorded step streams of one running program (tests/unit/fixtures/live/).

A recording of one process with no change (an A/A stream, or the A/A windows of
benchmarks/live_windows.py) is cut into windows of a given length, each window losing the
steps that a switch and its settling drop; the gate's live trial (``gate.trial.Trial`` with
``settings.live_gate``, A B B A / B A A B quads drawn at random) draws windows from that pool
(with replacement) and a change is laid on the windows with the layer. With ``sized`` the
first look's windows are measured at the budget's ``window_s``, and ``calibration.window_plan``
on them picks the length the rest of the trial is cut at (as the gate_layer action does).

Used by benchmarks/gate_replay.py (``--live``) and the unit tests (few draws).
"""

import json
import os
import random
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))
FIXTURES = os.path.join(REPO, "tests", "unit", "fixtures", "live")
# the DataLoader-bound user program streamed for 110 s (gpu_timeline.py), and the A/A windows
# of the same kind of program, of the built-in DataLoader and of the training step
STREAMS = (
    "h200x1_live_resnet18_stream",
    "h200x1_live_user_resnet18_aa",
    "h200x1_live_dataloader_aa",
    "h200x1_live_train_step_aa",
)


def step_runs(name):
    """The recording's steps in arrival order (ms), as one run: a timeline after its warm-up, or
    the recorded windows one after the other (A/A: no change between them; what lay between two
    windows was dropped by the recorder as a switch's settling, as ``cut`` drops it again)."""
    with open(os.path.join(FIXTURES, "%s.json" % name)) as handle:
        doc = json.load(handle)
    if "steps" in doc:
        start = doc.get("first_step_s", 0.0) + doc.get("warmup_s", 0.0)
        return [[ms for t, ms in doc["steps"] if t >= start]]
    return [[v for w in doc["windows"] for v in w["samples_ms"]]]


def cut(runs, window_s, drop_s=1.0):
    """Windows of ``window_s`` seconds of steps, each after ``drop_s`` seconds of dropped steps
    (a switch and its settling), never across two runs."""
    out = []
    for steps in runs:
        i = 0
        while i < len(steps):
            spent = 0.0
            while i < len(steps) and spent < drop_s * 1000.0:
                spent += steps[i]
                i += 1
            piece, spent = [], 0.0
            while i < len(steps) and spent < window_s * 1000.0:
                piece.append(steps[i])
                spent += steps[i]
                i += 1
            if spent >= 0.9 * window_s * 1000.0 and len(piece) >= 3:
                out.append(piece)
    return out


def replay(runs, policy, seed, scale_on=1.0, window_s=3.0, sized=False, max_windows=20, drop_s=1.0, **options):
    """One live trial on windows drawn from ``runs``; returns the decision (with ``window_s``
    and ``measured_s``: the seconds of windows, dropped steps included)."""
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate.calibration import window_bounds, window_plan
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import check_settings, live_gate
    from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import Trial

    gate = live_gate(check_settings({}, {"max_windows": max_windows, "window_s": int(window_s)}))
    rng = random.Random(seed)
    pools = {window_s: cut(runs, window_s, drop_s)}
    state = {"on": True, "t": 0.0, "length": window_s, "first": [], "arms": [], "plan": None}
    first_look = 2 * gate.budget["min_blocks"]

    def measure(_w):
        if sized and len(state["first"]) == first_look and state["plan"] is None:
            plan = window_plan(
                state["first"],
                drop_s / 2.0,
                window_bounds(window_s),
                arms=state["arms"],
                budget_s=max_windows * window_s,
            )
            state["plan"] = plan or {}
            if plan:
                state["length"] = plan["window_s"]
                pools.setdefault(plan["window_s"], cut(runs, plan["window_s"], drop_s))
        pool = pools[state["length"]]
        steps = list(rng.choice(pool))
        if state["on"]:
            steps = [v * scale_on for v in steps]
        if len(state["first"]) < first_look:
            state["first"].append(steps)
            state["arms"].append(state["on"])
        state["t"] += state["length"] + drop_s / 2.0
        return {"samples_ms": steps, "throughput": None}

    trial = Trial(
        ["w"],
        lambda on: state.update(on=on),
        measure,
        policy,
        gate,
        lambda: state["t"],
        rng=random.Random(seed),
        **options,
    )
    res = trial.run()
    res["window_s_used"] = state["length"]
    res["measured_s"] = state["t"]
    return res


CASES = (
    ("A/A kept under improve", "improve", 1.0, "keep", "<= 5%"),
    ("A/A rolled back under no_regression", "no_regression", 1.0, "rollback", "<= 5%"),
    ("15% faster kept", "improve", 1.0 / 1.15, "keep", ">= 90%"),
    ("15% slower rolled back", "no_regression", 1.15, "rollback", ">= 95%"),
    ("5% faster kept", "improve", 1.0 / 1.05, "keep", "context"),
)


def table(names, draws, window_s=3.0, max_windows=20, out=print):
    """Per recording and case: decided so, fixed windows and sized windows, windows per arm, seconds."""
    out(
        "| recording | case | target | fixed %gs windows: decided so | windows per arm | seconds "
        "| sized windows: decided so | windows per arm | seconds | length chosen (median) |" % window_s
    )
    out("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        runs = step_runs(name)
        for label, policy, scale, wanted, target in CASES:
            row = []
            for sized in (False, True):
                res = [
                    replay(runs, policy, seed, scale, window_s, sized=sized, max_windows=max_windows)
                    for seed in range(draws)
                ]
                right = sum(r["decision"] == wanted for r in res)
                row.append(
                    (
                        100.0 * right / draws,
                        sum(r["blocks"]["with"] for r in res) / float(draws),
                        sum(r["measured_s"] for r in res) / float(draws),
                        sorted(r["window_s_used"] for r in res)[draws // 2],
                    )
                )
            out(
                "| %s | %s | %s | %.0f%% | %.1f | %.0f | %.0f%% | %.1f | %.0f | %g s |"
                % ((name, label, target) + row[0][:3] + row[1])
            )


def minutes_for(name, scale, draws, window_s=3.0, steps=(20, 40, 60, 100, 150), want=0.9, out=print):
    """How many minutes of windows a live trial needs to keep a change of ``scale`` in ``want``
    of the draws: per ``max_windows``, the share kept and the median seconds spent."""
    runs = step_runs(name)
    found = None
    for most in steps:
        res = [replay(runs, "improve", seed, scale, window_s, sized=True, max_windows=most) for seed in range(draws)]
        kept = sum(r["decision"] == "keep" for r in res) / float(draws)
        spent = sorted(r["measured_s"] for r in res)
        out(
            "| %s | x%.3f | %d | %.0f%% | %.1f | %.1f |"
            % (name, scale, most, 100.0 * kept, spent[draws // 2] / 60.0, spent[-1] / 60.0)
        )
        if kept >= want and found is None:
            found = (most, spent[-1] / 60.0)
    return found
