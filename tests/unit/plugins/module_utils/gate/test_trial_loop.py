"""The gate's control loop (``gate.trial_loop.TrialLoop``) without Ansible: the settings engine
and the bench module are two callables of a fake host, which replays windows and blocks recorded
on one H200 (tests/unit/fixtures/live, blocks and search) and applies the layer's effect to them
while the layer is on. The host keeps the time: each block or window advances the loop's clock
by the steps it replayed, so the window sizing and the budget see real arithmetic.
"""

import importlib.util
import json
import os
import random

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.common.stats import mean
from ansible_collections.stacktune.gpu.plugins.module_utils.gate import trial_loop
from ansible_collections.stacktune.gpu.plugins.module_utils.gate.trial_loop import (
    LeaseLost,
    ModuleFailed,
    TrialError,
    TrialLoop,
)

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, "..", "..", "..", "fixtures")
_spec = importlib.util.spec_from_file_location("search_data", os.path.join(HERE, "search_data.py"))
search_data = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search_data)

LIVE_ROW = {"id": "sysctl:kernel.x", "changed": True, "effect": "now", "seen_running": True, "settle_s": 1.0}
SOCKET = "/run/stacktune-runner-t/runner.sock"


def load(*parts):
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return json.load(handle)


def live_windows(name):
    return [w["samples_ms"] for w in load("live", name)["windows"]]


def recorded_blocks(name):
    return [b["samples_ms"] for b in load("blocks", name)["arms"]["base"]["blocks"]]


class Host:
    """The engine and the bench module as the loop calls them.

    ``pools``: the recorded steps to draw from, per arm (``True``/``False`` the layer on/off, or
    a searched value, ``None`` the host's own); ``effect``: the factor on the steps while the
    layer is on; ``fail``: a function of (call number, bench args) raising what the module
    would, or None."""

    def __init__(self, pools, effect=1.0, seed=7, fail=None):
        self.pools, self.effect, self.fail = pools, effect, fail
        self.rng = random.Random(seed)
        self.arm = True
        self.calls = []
        self.t = 0.0
        self.steps = 0

    def clock(self):
        return self.t

    def engine(self, state, **options):
        self.calls.append(("host_settings", dict(options, state=state)))
        if state == "reapplied":
            self.arm = True
        elif state == "switched":
            self.arm = options["decision"]["value"]
        elif state in ("suspended", "restored", "interrupted"):
            self.arm = None if None in self.pools else False
        settings = [{"id": LIVE_ROW["id"], "changed": True}] if state == "restored" else []
        return {"changed": True, "settings": settings}

    def bench(self, args, check=True):
        self.calls.append(("bench", dict(args)))
        if self.fail:
            self.fail(len(self.calls), args)
        if args.get("runner_state") == "started":
            return {"runner_socket": SOCKET, "runner_start_s": 0.5, "runner_imports": []}
        if args.get("runner_state") == "stopped":
            return {"changed": True}
        if args.get("live") == "started":
            self.t += 2.0
            return {"live_start_s": 2.0}
        if args.get("live") == "stopped":
            return {"ended": {"rc": 0, "killed": False, "steps": self.steps, "extra": "not kept"}}
        window = self.rng.choice(self.pools[self.arm])
        steps = window.get("samples_ms") if isinstance(window, dict) else window
        factor = self.effect if self.arm is True else 1.0
        steps = [v * factor for v in steps]
        self.steps += len(steps)
        self.t += sum(steps) / 1000.0 + 0.2  # the steps, and the call around them
        if args.get("live") == "window":
            out = {"samples_ms": steps, "dropped": args["live_window"]["drop_steps"]}
            if isinstance(window, dict):
                out.update(energy_mj=window.get("energy_mj"), span_s=window.get("span_s"))
            return {"window": out}
        per_s = len(steps) * 1000.0 / sum(steps)
        return {"samples_ms": steps, "void": False, "throughput": {"value": per_s}, "workload": args["workload"]}

    def states(self):
        return [a["state"] for name, a in self.calls if name == "host_settings"]

    def benches(self, key):
        return [a[key] for name, a in self.calls if name == "bench" and a.get(key)]


def task(**over):
    """The gate_layer task's options, as the action plugin hands them to the loop."""
    args = {
        "layer": "kernel",
        "policy": "no_regression",
        "workloads": ["train_step"],
        "gpu_count": 1,
        "bench": {"python": "/opt/torch/bin/python3", "runner": True, "live": True},
        "gate": {},
        "budget": {"min_blocks": 4, "max_blocks": 8, "max_windows": 12, "window_s": 3, "max_seconds": 600},
        "run_id": "r1",
        "changes": [LIVE_ROW],
    }
    args.update(over)
    return args


def run_loop(args, host):
    """What the action does with a gate task: check, measure, keep or restore."""
    lines = []
    mode, gate, bench, workloads = trial_loop.check_args(args)
    assert mode == "gate"
    policy, search = trial_loop.check_gate_args(args, gate)
    loop = TrialLoop(args, host.engine, host.bench, say=lines.append, warn=lines.append, clock=host.clock)
    loop.wanted = loop.runner_workloads(workloads, args["gpu_count"], bench)
    assert trial_loop.not_measured(args, workloads, bench, policy) is None
    decision, samples, kept = loop.measure(workloads, bench, gate, policy, search)
    loop.finish(decision)
    return decision, samples, kept, lines


def test_a_live_trial_sees_a_slower_layer_in_recorded_windows_and_restores_it():
    pool = live_windows("h200x1_live_train_step_aa.json")
    host = Host({True: pool, False: pool}, effect=1.03)
    decision, samples, kept, lines = run_loop(task(), host)
    assert decision["decision"] == "rollback", decision["reason"]
    assert decision["method"] == "live" and decision["live"]["used"] is True
    assert decision["verdicts"]["throughput"] == "worse"
    # the arms' steps are the recorded ones, the layer's 3% on the windows with it
    ratio = mean(samples["train_step"]["with"]) / mean(samples["train_step"]["without"])
    assert ratio == pytest.approx(1.03, abs=0.005)
    # one program for the trial: started once, a window per block, stopped once; the runner too
    lives = host.benches("live")
    assert lives.count("started") == 1 and lives.count("stopped") == 1 and lives[-1] == "stopped"
    assert lives.count("window") == decision["blocks"]["with"] + decision["blocks"]["without"]
    assert host.benches("runner_state") == ["started", "stopped"] and kept is None
    # the first window after each switch drops the settling (settle_s of the row), later ones do not
    windows = [a["live_window"] for name, a in host.calls if name == "bench" and a.get("live") == "window"]
    assert windows[0]["fresh"] and windows[0]["drop_s"] == 1.0 and windows[0]["drop_steps"] > 0
    assert all(w["drop_s"] == (1.0 if w["fresh"] else 0.0) for w in windows)
    # switched through the engine only, then put back to its snapshot with the decision
    assert set(host.states()[:-1]) <= {"suspended", "reapplied"} and host.states()[-1] == "restored"
    assert decision["restored"] == [LIVE_ROW["id"]]
    assert decision["live"]["measured_s"] <= decision["live"]["windows_s"]
    assert decision["live_ended"] == {"rc": 0, "killed": False, "steps": host.steps}
    assert any("window 1 without the layer" in line or "window 1 with the layer" in line for line in lines)


def test_a_live_a_a_trial_keeps_nothing_under_improve():
    pool = live_windows("h200x1_live_dataloader_aa.json")
    host = Host({True: pool, False: pool})
    decision, _samples, _kept, _lines = run_loop(task(policy="improve", workloads=["dataloader"]), host)
    assert decision["decision"] == "rollback", decision["reason"]
    assert decision["verdicts"]["throughput"] != "better"
    assert host.states()[-1] == "restored"


@pytest.mark.parametrize(("effect", "want"), [(1.0, "keep"), (1.25, "rollback")])
def test_blocks_of_a_recorded_workload_judge_the_layer(effect, want):
    """The recorded blocks' medians differ by several percent from one block to the next: at 4+4
    blocks a layer 25% slower is shown worse, the same steps either way are kept."""
    pool = recorded_blocks("h200x1_train_step_400.json")
    host = Host({True: pool, False: pool}, effect=effect, seed=3)
    args = task(bench={"python": "/opt/torch/bin/python3", "steps": 400, "live": False})
    decision, samples, _kept, lines = run_loop(args, host)
    assert decision["decision"] == want, decision["reason"]
    assert decision["live"] == {"used": False, "why": "live trials are off (stacktune_gate_live)"}
    # blocks in balanced order, each a bench call through the runner, with the options of bench
    blocks = [a for name, a in host.calls if name == "bench" and a.get("workload") and not a.get("runner_state")]
    assert len(blocks) == decision["blocks"]["with"] + decision["blocks"]["without"]
    assert all(b["runner_socket"] == SOCKET and b["steps"] == 400 and b["run_id"] == "r1" for b in blocks)
    assert "command" not in blocks[0]
    assert len(samples["train_step"]["with"]) == 400 * decision["blocks"]["with"]
    assert host.states()[-1] == ("kept" if want == "keep" else "restored")
    assert any("block 1 of at most 8" in line for line in lines)


def test_a_block_of_short_steps_says_their_time_in_milliseconds():
    """A block of microsecond steps (shm_pingpong) said "(steps 0.00 s)"; its line now gives
    the time its steps took in milliseconds, a block of longer steps in seconds."""
    host = Host({True: [[0.01] * 400], False: [[0.01] * 400]})
    _decision, _samples, _kept, lines = run_loop(task(bench={"python": "/opt/torch/bin/python3", "live": False}), host)
    blocks = [line for line in lines if " block " in line and "(steps " in line]
    assert blocks and all(line.endswith("(steps 4 ms)") for line in blocks), blocks
    host = Host({True: [[2.5] * 400], False: [[2.5] * 400]})
    _decision, _samples, _kept, lines = run_loop(task(bench={"python": "/opt/torch/bin/python3", "live": False}), host)
    assert all(line.endswith("(steps 1.00 s)") for line in lines if " block " in line and "(steps " in line)


def test_the_runner_is_left_to_the_next_layer_when_asked():
    pool = recorded_blocks("h200x1_train_step_400.json")
    host = Host({True: pool, False: pool})
    args = task(bench={"steps": 400, "live": False}, keep_runner=True, budget={"min_blocks": 4, "max_blocks": 4})
    _decision, _samples, kept, _lines = run_loop(args, host)
    assert kept == SOCKET and host.benches("runner_state") == ["started"]


def test_a_search_through_the_loop_chooses_the_least_energy_within_the_slowdown():
    """The recorded power curve: 600 W is the least energy per step within 10% of 700 W's speed
    (650 W -2.7%, 600 W -5.5%, 550 W -10.1%), as the search alone finds on the same windows."""
    power = search_data.power_windows()
    values = [650, 600, 550, 500]
    pools = {v: power[v] for v in values}
    pools[None] = power[700]
    host = Host(pools)
    host.arm = None
    search = {
        "variable": "gpu_settings_power_limit_watts",
        "host_value": 700,
        "objective": "efficiency",
        "max_slowdown": 0.10,
        "candidates": [{"value": v, "settings": [{"id": "gpu_power", "value": v}]} for v in values],
    }
    args = task(policy="improve", search=search, budget={"max_windows": 20, "window_s": 3, "max_seconds": 900})
    decision, samples, _kept, lines = run_loop(args, host)
    assert decision["method"] == "search" and decision["decision"] == "keep", decision["reason"]
    assert decision["search"]["chosen"] == 600
    # each candidate put in place by one engine call with its own settings; the chosen one last
    switched = [a for name, a in host.calls if name == "host_settings" and a["state"] == "switched"]
    assert {a["decision"]["value"] for a in switched} == set(values)
    assert all(a["settings"] == [{"id": "gpu_power", "value": a["decision"]["value"]}] for a in switched)
    assert switched[-1]["decision"]["value"] == 600 and host.states()[-1] == "kept"
    assert samples == {"train_step": {"without": [], "with": []}}
    assert any("at the host's own value" in line for line in lines)


def test_a_search_whose_first_candidate_is_the_hosts_value_measures_it_once_in_3_s_windows():
    """As tune.yml hands a search over (seen on the H200): no host_value, the first candidate
    applied and nothing changed, so it is the host's own value: measured as the host's arm only,
    named in the choice, and the windows keep the length the rounds were planned on (sized to
    12 s after the first look, one round took the whole 90-s cap)."""
    power = search_data.power_windows()
    values = [700, 650, 600, 550, 500, 450]
    pools = {v: power[v] for v in values[1:]}
    pools[None] = power[700]
    host = Host(pools)
    host.arm = None
    rows = [
        {"id": "nvml:gpu0:power_limit_w", "changed": False, "seen_running": True, "settle_s": 0.1},
        {"id": "nvml:gpu0:persistence_mode", "changed": False, "seen_running": True, "settle_s": 0.1},
    ]
    search = {
        "variable": "gpu_settings_power_limit_watts",
        "objective": "throughput",
        "candidates": [{"value": v, "settings": [{"id": "gpu_power", "value": v}]} for v in values],
    }
    args = task(
        layer="gpu_settings",
        policy="improve",
        search=search,
        changes=rows,
        budget={"max_windows": 20, "window_s": 3, "max_seconds": 900},
    )
    decision, _samples, _kept, lines = run_loop(args, host)
    found = decision["search"]
    assert decision["method"] == "search" and decision["decision"] == "rollback", decision["reason"]
    assert found["chosen"] == 700 and found["rows"][0]["value"] == 700
    assert [r["value"] for r in found["rows"][1:]] == values[1:]
    assert found["rounds"] >= 2
    # 700 W was never switched to during the search: the host's arm is the layer suspended
    switched = [
        a["decision"]["value"] for name, a in host.calls if name == "host_settings" and a["state"] == "switched"
    ]
    assert 700 not in switched[:-1]
    assert {w["seconds"] for w in host.benches("live_window")} == {3.0}
    assert not any("windows of" in line and "sized" in line for line in lines)
    assert "kept the host's own value 700" in decision["summary"] and "None" not in decision["summary"]
    # the share of the search's time in measured steps: the windows' steps over its seconds
    assert 0.5 < found["measured_share"] <= 1.0 and found["measured_s"] < found["seconds"]


def test_a_lost_lease_in_a_window_stops_the_loop_touching_nothing_more():
    pool = live_windows("h200x1_live_train_step_aa.json")

    def fail(n, args):
        if args.get("live") == "window" and n > 8:
            raise LeaseLost("bench failed: the run's lease is gone", {"failed": True, "lease_lost": True})

    host = Host({True: pool, False: pool}, fail=fail)
    _mode, gate, bench, workloads = trial_loop.check_args(task())
    loop = TrialLoop(task(), host.engine, host.bench, clock=host.clock)
    with pytest.raises(LeaseLost):
        loop.measure(workloads, bench, gate, "no_regression", None)
    # after the lost window only the program's session is ended: no switch, no restore
    assert [a.get("live") for _name, a in host.calls[-2:]] == ["window", "stopped"]
    assert "restored" not in host.states() and host.benches("runner_state") == ["started"]


def test_a_program_that_ends_in_a_window_is_started_again_in_that_arm():
    pool = live_windows("h200x1_live_train_step_aa.json")
    ended = {"done": False}

    def fail(n, args):
        if args.get("live") == "window" and not ended["done"] and n > 10:
            ended["done"] = True
            raise ModuleFailed("bench failed: exit", {"failed": True, "failure": "exit", "error_line": "rc 1"})

    host = Host({True: pool, False: pool}, fail=fail)
    decision, _samples, _kept, _lines = run_loop(task(), host)
    assert decision["decision"] in ("keep", "rollback")
    assert host.benches("live").count("started") == 2


def test_a_layer_no_block_can_see_is_decided_without_measuring():
    args = task(workloads=[], unmeasurable="rollback")
    _mode, gate, bench, workloads = trial_loop.check_args(args)
    decision = trial_loop.not_measured(args, workloads, bench, "improve")
    assert decision["decision"] == "rollback" and decision["measurable"] is False
    assert decision["summary"].startswith("rollback: not measurable on this host")
    later = dict(LIVE_ROW, effect="reboot")
    decision = trial_loop.not_measured(task(changes=[later]), ["train_step"], bench, "improve")
    assert decision["decision"] == "keep" and decision["seen_later"][0]["id"] == LIVE_ROW["id"]


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"mode": "bake"}, "mode must be gate or calibrate"),
        ({"budget": [4]}, r"budget must be a dict \(stacktune_gate_budget\)"),
        ({"gate": {"tail_tolrance": 0.1}}, "stacktune_gate_tail_tolrance"),
        ({"bench": {"stepz": 1}}, r"bench: unknown option\(s\) stepz"),
        ({"workloads": "train_step"}, "workloads must be a list"),
        ({"gpu_count": "two"}, "gpu_count must be an integer"),
    ],
)
def test_bad_options_are_refused_naming_them(over, words):
    with pytest.raises(TrialError, match=words):
        trial_loop.check_args(task(**over))


def test_a_gate_needs_a_layer_and_a_known_policy():
    gate = trial_loop.check_args(task())[1]
    with pytest.raises(TrialError, match="layer is required"):
        trial_loop.check_gate_args(task(layer=None), gate)
    with pytest.raises(TrialError, match="policy must be one of"):
        trial_loop.check_gate_args(task(policy="faster"), gate)


# ------------------------------------------------------------------ every route to a keep

NCCL_ROW = {"id": "file:/etc/nccl.conf", "changed": True, "effect": "now", "seen_running": False}
NOT_USED = "the program does not use NCCL collectives (it holds one GPU (0) and names no ranks in its environment)"


def test_a_layer_the_program_reads_at_start_and_does_not_use_is_not_measured():
    args = task(layer="nccl", workloads=["command"], changes=[NCCL_ROW], not_used=NOT_USED)
    decision = trial_loop.not_measured(args, ["command"], {}, "no_regression")
    assert (decision["decision"], decision["unmeasured"]) == ("keep", "not_used")
    assert decision["reason"] == (
        "keep: not measured: %s; kept as the host's configuration for the programs that do" % NOT_USED
    )
    assert trial_loop.keep_basis(decision) == "unmeasured"
    # a change a running program sees is measured whatever the diagnosis says the program uses
    args = task(changes=[NCCL_ROW, LIVE_ROW], not_used=NOT_USED)
    assert trial_loop.not_measured(args, ["command"], {}, "no_regression") is None
    # without the diagnosis's words the program's blocks measure it
    assert trial_loop.not_measured(task(changes=[NCCL_ROW]), ["command"], {}, "no_regression") is None


def test_a_search_that_cannot_run_puts_the_hosts_own_value_back_and_says_why():
    search = {"variable": "memory_thp_enabled", "candidates": []}
    args = task(layer="memory", workloads=[], search=search)
    decision = trial_loop.not_measured(args, [], {}, "improve")
    assert decision["decision"] == "rollback" and decision["search_not_run"] is True
    assert decision["reason"].startswith(
        "put back: the search of memory_thp_enabled could not run, so the host keeps its own value: "
        "not measurable on this host: none of the workloads"
    )
    # the journal goes back unjudged (the next run searches again), never to 'rejected'
    host = Host({True: [], False: []})
    TrialLoop(task(), host.engine, host.bench).finish(decision)
    assert host.states() == ["interrupted"]


def test_the_basis_of_every_keep_the_gate_makes():
    assert trial_loop.keep_basis({"verdicts": {"throughput": "better", "tail": "same"}}) == "gain"
    assert trial_loop.keep_basis({"verdicts": {"throughput": "same", "tail": "unknown"}}) == "no_harm"
    assert trial_loop.keep_basis({"measurable": False}) == "unmeasured"
    assert trial_loop.keep_basis({"search": {"chosen": "never"}}) == "gain"
    host = Host({True: [], False: []})
    decision = {"decision": "keep", "verdicts": {"throughput": "same"}}
    TrialLoop(task(), host.engine, host.bench).finish(decision)
    assert decision["basis"] == "no_harm"


def test_a_check_takes_one_look():
    _mode, gate, _bench, _workloads = trial_loop.check_args(task())
    assert trial_loop.sized(gate, "full") is gate
    small = trial_loop.sized(gate, "check")
    assert (small.budget["max_blocks"], small.budget["max_windows"]) == (4, 4)
    with pytest.raises(TrialError, match="size must be one of full, check"):
        trial_loop.sized(gate, "tiny")
