"""Live trials replayed on windows recorded on one H200 (tests/unit/fixtures/live/, made by
benchmarks/live_windows.py through the block runner: ONE process of the workload, windows of
its streamed steps, a change switched between them; docs/benchmarks.md).

The machine running these tests has no GPU: the windows are the real measurements, and the
gate's trial (``gate.trial.Trial``, as the gate_layer action runs it in a live trial) draws
them in its own A B B A / B A A B order. A/A recordings have no change between their arms, so
any arm may stand for either; a change is the recorded 700/450 W switch, or a recorded A/A
window scaled by the change.
"""

import json
import os
import random

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.gate.settings import check_settings, live_gate
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial import Trial

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "live")
AA = ("h200x1_live_train_step_aa.json", "h200x1_live_dataloader_aa.json", "h200x1_live_user_resnet18_aa.json")


def load(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return json.load(handle)


def windows(doc, arm=None):
    return [w["samples_ms"] for w in doc["windows"] if arm is None or w["arm"] == arm]


def settings(**budget):
    return live_gate(check_settings({}, dict({"max_windows": 20}, **budget)))


def replay(pool_on, pool_off, policy, seed, scale_on=1.0, **budget):
    """One live trial drawing windows (with replacement) from the two pools."""
    rng = random.Random(seed)
    state = {"on": True, "t": 0.0}

    def set_layer(on):
        state["on"] = on

    def measure(_w):
        state["t"] += 3.0
        pool = pool_on if state["on"] else pool_off
        steps = rng.choice(pool)
        return {"samples_ms": [v * scale_on for v in steps] if state["on"] else list(steps), "throughput": None}

    trial = Trial(["w"], set_layer, measure, policy, settings(**budget), lambda: state["t"], rng=random.Random(seed))
    return trial.run()


def test_the_recorded_train_step_windows_vary_by_a_tenth_of_a_percent():
    doc = load("h200x1_live_train_step_aa.json")
    assert doc["summary"]["off"]["spread_pct"] < 0.5 and doc["summary"]["on"]["spread_pct"] < 0.5
    assert abs(doc["summary"]["ratio_on_off"] - 1.0) < 0.005


@pytest.mark.parametrize("name", AA)
@pytest.mark.parametrize("policy", ["improve", "no_regression"])
def test_a_a_live_trials_rarely_decide_a_change(name, policy):
    """No change between the arms: under improve a keep, under no_regression a rollback, is an error."""
    pool = windows(load(name))
    errors = 0
    draws = 40
    for seed in range(draws):
        res = replay(pool, pool, policy, seed)
        wrong = res["decision"] == "keep" if policy == "improve" else res["decision"] == "rollback"
        errors += wrong
    assert errors <= 0.05 * draws + 1, "%d of %d A/A trials decided a change on %s" % (errors, draws, name)


def test_a_two_percent_faster_training_step_is_kept_within_a_minute_of_windows():
    pool = windows(load("h200x1_live_train_step_aa.json"))
    kept, spent = 0, []
    for seed in range(40):
        res = replay(pool, pool, "improve", seed, scale_on=1.0 / 1.02)
        kept += res["decision"] == "keep"
        spent.append(res["blocks"]["with"] + res["blocks"]["without"])
    # exactly at the 2% asked for (min_gain): 89 of 100 draws keep it (docs/benchmarks.md)
    assert kept >= 32, "kept %d of 40" % kept
    # 3-second windows: at most 20 windows (one minute) of measuring on the median trial
    assert sorted(spent)[len(spent) // 2] * 3.0 <= 60.0


def test_a_two_percent_slower_training_step_is_rolled_back():
    pool = windows(load("h200x1_live_train_step_aa.json"))
    rolled = sum(
        replay(pool, pool, "no_regression", seed, scale_on=1.03)["decision"] == "rollback" for seed in range(20)
    )
    assert rolled >= 18


def test_the_recorded_450_watt_limit_is_rolled_back_at_the_first_look():
    doc = load("h200x1_live_train_step_power.json")
    on, off = windows(doc, "on"), windows(doc, "off")
    res = replay(on, off, "improve", 1)
    assert res["decision"] == "rollback" and res["resolved"]
    assert res["verdicts"]["throughput"] == "worse"
    assert res["blocks"] == {"with": 4, "without": 4}
    assert 0.78 < res["throughput"]["ratio"] < 0.83
    # and the reverse (the host at 450 W, the layer to 700 W) is kept
    back = replay(off, on, "improve", 2)
    assert back["decision"] == "keep" and back["verdicts"]["throughput"] == "better"
