"""The stacktune stdout callback: what a person following a run sees (plugins/callback/stacktune.py).

Real Ansible objects (Task, Host, CallbackTaskResult, AggregateStats) are fed to the
callback; its output is read from the display.
"""

import re

import pytest
from ansible.executor.stats import AggregateStats
from ansible.inventory.host import Host
from ansible.playbook.task import Task
from ansible.utils.display import Display

from ansible_collections.stacktune.gpu.plugins.callback.stacktune import CallbackModule

try:
    from ansible.executor.task_result import CallbackTaskResult as Result
except ImportError:  # ansible-core < 2.19
    from ansible.executor.task_result import TaskResult as Result


@pytest.fixture
def callback(monkeypatch):
    lines = []
    monkeypatch.setattr(Display, "display", lambda self, msg, *a, **k: lines.append(msg))
    cb = CallbackModule()
    # the plugin loader names a plugin it loads; ansible-core before 2.19 reads that name
    # in set_options, and this test builds the callback without the loader
    cb._load_name = "stacktune.gpu.stacktune"
    cb.set_options()
    cb._display.verbosity = 0
    cb.lines = lines
    return cb


def task(name, action):
    t = Task()
    t.name = name
    t.action = action
    return t


def result(host, t, data):
    try:
        return Result(host, t, data, {})
    except TypeError:
        return Result(host, t, data)


def test_quiet_tasks_are_counted_and_changes_messages_and_failures_are_printed(callback):
    host = Host("gpu01")
    quiet = task("Read the journal", "ansible.builtin.stat")
    callback.v2_playbook_on_task_start(quiet, False)
    callback.v2_runner_on_ok(result(host, quiet, {"changed": False}))
    callback.v2_runner_on_skipped(result(host, quiet, {"skipped": True}))
    assert callback.lines == []

    applied = task("Apply kernel settings", "stacktune.gpu.host_settings")
    callback.v2_runner_on_ok(result(host, applied, {"changed": True}))
    said = task("Show the outcome per layer", "ansible.builtin.debug")
    callback.v2_runner_on_ok(
        result(
            host,
            said,
            {"msg": ["kernel: kept (5 setting(s)) - keep: faster", "next: check what is applied: make verify"]},
        )
    )
    broken = task("Run preflight", "stacktune.gpu.preflight")
    callback.v2_runner_on_failed(result(host, broken, {"failed": True, "msg": "power budget over the PSU"}))

    out = "\n".join(callback.lines)
    assert re.search(r"^\d\d:\d\d:\d\d gpu01 \| changed: Apply kernel settings$", out, re.M)
    assert "    kernel: kept (5 setting(s)) - keep: faster" in out
    assert re.search(r"^\d\d:\d\d:\d\d gpu01 \| FAILED: Run preflight$", out, re.M)
    assert "power budget over the PSU" in out
    assert "Read the journal" not in out
    assert "make verify" not in out  # next commands come once, at the recap


def test_the_recap_keeps_ansibles_line_format_and_names_reports_and_next_steps(callback):
    stats = AggregateStats()
    for what in ("ok", "ok", "changed"):
        stats.increment(what, "gpu01")
    stats.set_custom_stats("stacktune_reports", ["gpu01: reports/run1/gpu01.md (and .json, .png)"])
    stats.update_custom_stats("stacktune_next", ["check what is applied: make verify"])
    stats.update_custom_stats("stacktune_next", ["check what is applied: make verify"])
    callback.v2_playbook_on_stats(stats)
    out = "\n".join(callback.lines)
    # the recap line other tools parse (molecule's idempotence check, schedulers)
    assert re.search(r"^gpu01\s+: ok=2\s+changed=1\s+unreachable=0\s+failed=0\s+skipped=0", out, re.M)
    assert "  reports:\n    gpu01: reports/run1/gpu01.md (and .json, .png)" in out
    assert out.count("make verify") == 1


def test_no_hosts_matched_says_what_to_do(callback):
    callback.v2_playbook_on_no_hosts_matched()
    assert "make tune" in callback.lines[0] and "-i inventories/local/hosts.yml" in callback.lines[0]


def test_a_debug_var_task_shows_its_variable(callback):
    host = Host("gpu01")
    shown = task("Show what the journal holds", "ansible.builtin.debug")
    shown.args = {"var": "held.layers"}
    data = {"held.layers": [{"layer": "kernel", "state": "kept"}], "changed": False, "_ansible_verbose_always": True}
    callback.v2_runner_on_ok(result(host, shown, data))
    out = "\n".join(callback.lines)
    assert "    held.layers: [" in out
    assert '"layer": "kernel"' in out
    assert "_ansible" not in out and "changed" not in out


def test_a_looped_debug_var_shows_the_variable_asked_for(callback):
    host = Host("gpu01")
    shown = task("Show each layer", "ansible.builtin.debug")
    shown.args = {"var": "item"}
    items = [
        {"item": "kernel", "idx": 0, "ansible_loop_var": "item", "ansible_index_var": "idx", "changed": False},
        {"item": "nccl", "idx": 1, "ansible_loop_var": "item", "ansible_index_var": "idx", "changed": False},
    ]
    callback.v2_runner_on_ok(result(host, shown, {"results": items, "changed": False}))
    out = "\n".join(callback.lines)
    assert '    item: "kernel"' in out and '    item: "nccl"' in out
    assert "idx" not in out


def test_the_hosts_a_run_holds_are_tracked_for_a_signal_between_measurements(callback):
    # what the controller's signal handler is told when no host is measuring a layer
    host = Host("gpu01")
    take = task("Take the host for this run (a second run is refused, naming the first)", "stacktune.gpu.run_lock")
    callback.v2_playbook_on_task_start(take, False)
    callback.v2_runner_on_ok(result(host, take, {"holder": {"run_id": "r1"}, "watchdog_pid": 4242}))
    assert callback._taken == {"gpu01"}
    check = task("Check that the run still holds the host", "stacktune.gpu.run_lock")
    callback.v2_runner_on_ok(result(host, check, {"holder": {"run_id": "r1"}}))
    assert callback._taken == {"gpu01"}
    diagnose = task("Run the program and say where it is bound (read-only)", "stacktune.gpu.diagnose")
    callback.v2_playbook_on_task_start(diagnose, False)
    assert callback._last_task_name == "Run the program and say where it is bound (read-only)"
    give = task("Give the host back", "stacktune.gpu.run_lock")
    callback.v2_runner_on_ok(result(host, give, {"holder": None}))
    assert callback._taken == set()


def test_a_fleet_run_prints_failures_then_one_summary_not_every_hosts_lines(callback):
    """A play over more hosts than fleet_hosts: no host's messages or changes as they come, a
    failure in one line, and at the end hosts per outcome, per layer the decisions (from the
    stacktune_outcomes the role publishes) and the failed hosts with their reason."""
    callback._fleet = True
    hosts = [Host("gpu%02d" % i) for i in range(1, 13)]
    said = task("Show the outcome per layer", "ansible.builtin.debug")
    applied = task("Apply kernel settings", "stacktune.gpu.host_settings")
    stop = task("Stop with the reason", "ansible.builtin.fail")
    stats = AggregateStats()
    outcomes = {}
    for i, host in enumerate(hosts):
        callback.v2_runner_on_ok(result(host, applied, {"changed": True}))
        callback.v2_runner_on_ok(result(host, said, {"msg": ["kernel: kept - keep: faster"]}))
        stats.increment("ok", host.name)
        if i == 3:
            callback.v2_runner_on_failed(
                result(host, stop, {"failed": True, "msg": "Tuning failed on gpu04 at 'Apply': disk full\nmore"})
            )
            stats.increment("failures", host.name)
            continue
        stats.increment("changed", host.name)
        outcomes[host.name] = {"kernel": "kept" if i % 4 else "rolled back", "bios": "nothing to change"}
    stats.set_custom_stats("stacktune_outcomes", outcomes)
    stats.set_custom_stats(
        "stacktune_reports", ["%s: reports/r1/%s.md (and .html, .json)" % (h.name, h.name) for h in hosts]
    )
    assert [line for line in callback.lines if "FAILED" in line] == [
        [line for line in callback.lines if "gpu04 | FAILED: Tuning failed on gpu04 at 'Apply': disk full" in line][0]
    ]
    assert not [line for line in callback.lines if "kept - keep" in line or "changed:" in line]
    callback.v2_playbook_on_stats(stats)
    out = "\n".join(callback.lines)
    assert re.search(r"FLEET SUMMARY: 12 host\(s\): 1 failed, 11 changed$", out, re.M)
    assert "  kernel: kept on 8, rolled back on 3" in out
    assert "  bios: nothing to change on 11" in out
    assert "  failed: gpu04: Tuning failed on gpu04 at 'Apply': disk full" in out
    assert "    ... and 11 more host(s), each its <host>.md, .html and .json beside it" in out
    assert out.count("reports/r1/") == 1
