# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan_lines, outcome_lines, next_commands and report_markdown filters.

fixtures/report/cases.json holds constructed runs (kept, rolled back, not measured, no
change; long values, '|' in reasons, null cells); real_N.md and check_N.md are the reports
of case N in a real run and in check mode, byte for byte.
"""

from __future__ import absolute_import, division, print_function

import json
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import run_report as filters
from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.notation import ms

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "report")
with open(os.path.join(FIXTURES, "cases.json")) as _handle:
    CASES = json.load(_handle)


def test_registered():
    assert set(filters.FilterModule().filters()) == {
        "plan_lines",
        "outcome_lines",
        "outcome_words",
        "next_commands",
        "report_markdown",
        "report_html",
        "gate_verdict",
    }


@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
@pytest.mark.parametrize("index", range(len(CASES)))
def test_report_markdown(index, check_mode):
    case = CASES[index]
    text = filters.report_markdown(
        case["results"],
        host="localhost",
        run_id="run-%d" % index,
        facts=case["fx"],
        check_mode=check_mode,
        acceptance=case["acc"],
        plot=case["plot"],
    )
    with open(os.path.join(FIXTURES, "%s_%d.md" % ("check" if check_mode else "real", index))) as handle:
        assert text == handle.read()


def test_report_cuts_long_values_at_a_word():
    assert filters._cut("x" * 45) == "x" * 45
    assert filters._cut("a very long value with spaces that goes on and on") == "a very long value with spaces that..."
    assert filters._cut(None) == "None"


def test_report_bad_input():
    with pytest.raises(AnsibleFilterError, match="stacktune_results"):
        filters.report_markdown({"layer": "x"}, "h", "r", {})
    with pytest.raises(AnsibleFilterError, match="facts"):
        filters.report_markdown([], "h", "r", None)


PLANS = {
    "bios": {"settings": [], "notes": ["n1", "n2"]},
    "kernel": {
        "settings": [
            {"id": "sysctl:a", "changed": True, "status": "changed"},
            {
                "id": "cmdline:x",
                "changed": False,
                "status": "overridden",
                "reason": "/etc/default/grub.d/40.cfg sets x",
            },
            {
                "id": "sysfs:/sys/firmware/acpi/platform_profile",
                "changed": False,
                "status": "unsupported",
                "reason": "no ACPI platform profile (the firmware offers none): "
                "/sys/firmware/acpi/platform_profile does not exist",
            },
        ]
    },
}


def test_plan_lines():
    layers = ["bios", "stacktune.gpu.kernel", "/srv/roles/own"]
    assert filters.plan_lines(layers, [PLANS["bios"], PLANS["kernel"], {}]) == [
        "bios: nothing to change - n1; n2",
        "kernel: 1 to change (sysctl:a)",
        "  cmdline:x overridden: /etc/default/grub.d/40.cfg sets x",
        "  sysfs:/sys/firmware/acpi/platform_profile not supported on this host: no ACPI platform profile "
        "(the firmware offers none)",
        "own: nothing to change",
    ]
    with pytest.raises(AnsibleFilterError, match="same order"):
        filters.plan_lines(layers, [])


RESULTS = [
    {"layer": "kernel", "settings": [{"changed": True}, {"changed": False}], "decision": "keep",
     "gate": {"summary": "kept: +3%", "reason": "r"}, "pending_reboot": ["kernel_arg:iommu", "x"]},
    {"layer": "memory", "settings": [{"changed": True}], "decision": "rollback", "gate": {"reason": "p99 worse"},
     "pending_reboot": []},
    {"layer": "nccl", "settings": [{"changed": True}], "decision": "keep", "gate": None, "pending_reboot": []},
    {"layer": "bios", "settings": [], "decision": "none", "gate": None, "pending_reboot": []},
]  # fmt: skip


def test_outcome_lines():
    assert filters.outcome_lines(RESULTS, gate=False, report="r/id/h.md", next_steps=["check: make verify"]) == [
        "kernel: kept (1 setting(s) changed) - keep: nothing measured worse (every change within the noise)"
        " ; pending reboot: kernel_arg:iommu, x",
        "memory: ROLLED BACK (1 setting(s) put back) - rolled back: p99 worse",
        "nccl: kept (1 setting(s) changed), not measured (gate off)",
        "bios: nothing to change",
        "report: r/id/h.md",
        "next: check: make verify",
    ]
    checked = filters.outcome_lines(RESULTS, check_mode=True, report="r.md")
    assert checked[:2] == [
        "kernel: would change 1 setting(s) (check mode: nothing changed or measured)"
        " ; pending reboot: kernel_arg:iommu, x",
        "memory: would change 1 setting(s) (check mode: nothing changed or measured)",
    ]
    assert checked[3] == "bios: nothing to change (check mode: nothing changed or measured)"
    assert filters.outcome_lines(RESULTS[2:3], report="r.md")[0] == "nccl: kept (1 setting(s) changed), not measured"


@pytest.mark.parametrize(
    "checkout, check_mode, expected",
    [
        (True, True, ["tune for real: make tune (without --check)"]),
        (False, True, ["tune for real: ansible-playbook stacktune.gpu.tune (without --check)"]),
        (
            True,
            False,
            [
                "check what is applied: make verify",
                "find and fix drift later (cron/AWX): make drift",
                "undo everything stacktune changed: make rollback",
            ],
        ),
        (
            False,
            False,
            [
                "check what is applied: ansible-playbook stacktune.gpu.verify",
                "find and fix drift later (cron/AWX): ansible-playbook stacktune.gpu.drift",
                "undo everything stacktune changed: ansible-playbook stacktune.gpu.rollback",
            ],
        ),
    ],
)
def test_next_commands(checkout, check_mode, expected):
    assert filters.next_commands(checkout, check_mode) == expected


# ------------------------------------------------------------------ the two registers

with open(os.path.join(FIXTURES, "decisions.json")) as _handle:
    DECISIONS = json.load(_handle)  # trials run on simulated blocks: what gate_layer records


def test_verdict_is_one_short_line_with_the_noise():
    for name, decision in DECISIONS.items():
        line = filters.gate_verdict(decision)
        assert "\n" not in line and len(line) < 300, name
        assert len(decision["reason"]) > 300 or name == "keep_improve"
    assert filters.gate_verdict(DECISIONS["rollback_tail"]) == (
        "rolled back: worse than allowed: tail (5%), stalled steps (0.5 points); throughput -5.3% ±6.4%, median step"
        " +1.4% ±6.4%, tail +201.6% ±6.6%, stalled steps +2.0 points ±0.0; on train_step, 4 blocks per arm (also"
        " judged on dataloader, 4 blocks per arm)"
    )
    assert filters.gate_verdict(DECISIONS["noreg_keep_2wl"]).startswith("keep: nothing measured worse; throughput")
    assert filters.gate_verdict(DECISIONS["improve_nothing"]).startswith("rolled back: no gain of the 2% asked for")


@pytest.mark.parametrize(
    "decision, expected",
    [
        ({}, "not measured"),
        (
            {"decision": "keep", "measurable": False, "seen_later": [{"id": "x", "effect": "next_boot"}]},
            "not measured, kept: 1 change(s) take effect only at the next boot",
        ),
        (
            {"decision": "keep", "measurable": False, "reason": "keep: not measurable on this host: none ..."},
            "not measured, kept: no workload that sees this layer runs on this host",
        ),
        (
            {"decision": "rollback", "cause": "workload_fails", "workload": "dl",
             "failures": {"dl": {"on": [{"error": "RuntimeError: shm"}], "off": []}}},
            "rolled back: the workload fails with this layer: RuntimeError: shm; on dl",
        ),
        # a decision of another trial: more fields, no blocks
        (
            {"decision": "keep", "mode": "live", "windows": 12, "throughput": {"ratio": 1.05, "resolution": 0.01},
             "verdicts": {"throughput": "better"}, "something_new": [1]},
            "keep: better: throughput; nothing worse; throughput +5.0% ±1.0%; 12 windows",
        ),
    ],
)  # fmt: skip
def test_verdict_reads_fields_defensively(decision, expected):
    assert filters.gate_verdict(decision) == expected


def test_details_keep_every_number():
    decision = DECISIONS["rollback_tail"]
    result = {"layer": "kernel", "policy": "improve", "decision": "rollback", "changed": True, "gate": decision,
              "settings": [{"id": "sysctl:a", "expected": "1", "live": "1", "live_before": "0", "changed": True},
                           {"id": "sysctl:b", "expected": "5", "live": "5", "live_before": "5", "changed": True}],
              "pending_reboot": []}  # fmt: skip
    text = filters.report_markdown([result], "h", "r", {}, budget={"min_blocks": 4, "max_blocks": 8})
    table = text.split("## kernel", maxsplit=1)[0]
    assert decision["reason"] not in table and "98.3%" not in table
    details = text.split("### kernel: details")[1]
    assert decision["reason"].replace("|", "/") in details
    for w in ("train_step", "dataloader"):
        tail = decision["workloads"][w]["tail"]
        assert ms(tail["before"]) in details and ms(tail["after"]) in details
    assert "98.3% confidence intervals" in details and "3 looks" in details
    assert (
        "at most 8 blocks per arm (with the layer, and without it) on each of 2 workload(s), so at most 32" in details
    )
    # a value that was already live is not counted among what the rollback put back
    assert "1 setting(s) (sysctl:a) put back" in text
    assert "| sysctl:b | 5 | 5 | 5 | already set live; its persisted line put back |" in text
    assert filters.outcome_lines([result], report="r.md")[0].startswith("kernel: ROLLED BACK (1 setting(s) put back)")
    decision = dict(decision, restored=["unit:/etc/sysctl.d/90.conf", "sysctl:a"])
    text = filters.report_markdown([dict(result, gate=decision)], "h", "r", {})
    assert "2 setting(s) (unit:/etc/sysctl.d/90.conf, sysctl:a) put back" in text


def test_a_file_is_a_summary_and_a_diff():
    row = {"id": "file:/etc/nccl.conf", "expected": "# Managed\nA=1\nB=2\n", "live": "# Managed\nA=1\nB=2\n",
           "live_before": "A=1\n", "changed": True, "status": "changed"}  # fmt: skip
    text = filters.report_markdown(
        [{"layer": "nccl", "decision": "keep", "changed": True, "settings": [row], "gate": None}], "h", "r", {}
    )
    assert "| file:/etc/nccl.conf | 1 line | 3 lines | same as set | changed |" in text
    assert (
        "```diff\n--- file:/etc/nccl.conf before\n+++ file:/etc/nccl.conf as set\n"
        "@@ -1 +1,3 @@\n+# Managed\n A=1\n+B=2\n```" in text
    )
    assert "# Managed" not in text.split("### nccl: details", maxsplit=1)[0]


def test_html_has_the_same_content_escaped():
    case = CASES[0]
    text = filters.report_markdown(case["results"], "localhost", "run-0", case["fx"], plot=case["plot"])
    html = filters.report_html(text)
    assert html.startswith("<!DOCTYPE html>") and "<title>stacktune run run-0 on localhost</title>" in html
    assert '<img src="localhost.png"' in html
    assert html.count("<table>") == sum(1 for line in text.splitlines() if line.startswith("| --- |"))
    assert "<script" not in filters.report_html("a <script>x</script> [l](javascript:alert(1)) ![i](/etc/passwd)")
    assert "&lt;script&gt;" in filters.report_html("a <script>x</script>")
    with pytest.raises(AnsibleFilterError, match="Markdown"):
        filters.report_html(None)


def test_a_live_trial_is_read_as_windows_of_one_running_process():
    decision = dict(DECISIONS["rollback_tail"], method="live", blocks={"with": 4, "without": 4})
    result = {"layer": "kernel", "policy": "improve", "decision": "rollback", "changed": True, "gate": decision,
              "settings": [], "pending_reboot": []}  # fmt: skip
    budget = {"min_blocks": 4, "max_blocks": 8, "max_seconds": 1800, "window_s": 3, "max_windows": 20}
    text = filters.report_markdown([result], "h", "r", {}, budget=budget)
    head = text.split("## Step times", maxsplit=1)[1].split("\n## ", 1)[0]
    assert "\n".join(filters.HOW_TO_READ_LIVE) in head
    assert "4 windows of one running process per arm" in text.split("## kernel", maxsplit=1)[0]
    details = text.split("### kernel: details")[1]
    assert "Budget: a live trial, one running process per workload; at most 20 windows of 3 s per arm" in details
    assert "blocks in all" not in details
    # measured in blocks: no word of live trials
    blocks = filters.report_markdown([dict(result, gate=DECISIONS["rollback_tail"])], "h", "r", {}, budget=budget)
    assert filters.HOW_TO_READ_LIVE[0] not in blocks and "at most 8 blocks per arm" in blocks


BIOS_NOTE = {
    "id": "aspm_policy",
    "severity": "warning",
    "subject": "0000:3b:00.0",
    "note": "ASPM policy is powersave",
    "remediation": "set PCIe ASPM to disabled in the BIOS",
}


def test_bios_notes_read_as_words_not_python_dicts():
    bios = {"layer": "bios", "settings": [], "decision": "none", "gate": None, "pending_reboot": [],
            "notes": [BIOS_NOTE, "a plain note"]}  # fmt: skip
    text = filters.report_markdown([bios], "h", "r", {})
    assert (
        "Note: [warning] 0000:3b:00.0 aspm_policy: ASPM policy is powersave => set PCIe ASPM to disabled in the BIOS"
        in text.splitlines()
    )
    assert "Note: a plain note" in text.splitlines()
    assert "{" not in text and "'severity'" not in text
    plan = filters.plan_lines(["bios"], [{"settings": [], "notes": [BIOS_NOTE]}])
    assert plan == ["bios: nothing to change - [warning] 0000:3b:00.0 aspm_policy: ASPM policy is powersave"
                    " => set PCIe ASPM to disabled in the BIOS"]  # fmt: skip


def _irq(n, live_before):
    return {"id": "irq_affinity:%d" % n, "changed": True, "status": "changed", "expected": "0-3",
            "live": "0-3", "live_before": live_before}  # fmt: skip


def test_a_layer_that_only_persisted_values_already_live_does_not_read_changed():
    # numa_irq on a host where every IRQ already had its affinity: only persistence was written
    numa = {"layer": "numa_irq", "settings": [_irq(n, "0-3") for n in range(8)], "decision": "keep",
            "changed": True, "gate": None, "pending_reboot": []}  # fmt: skip
    line = filters.outcome_lines([numa], report="r.md")[0]
    assert line == "numa_irq: kept (nothing changed live, 8 setting(s) already set persisted), not measured"
    text = filters.report_markdown([numa], "h", "r", {})
    row = [x for x in text.splitlines() if x.startswith("| numa_irq |")][0]
    assert row.split(" | ")[2] == "8 (8 only persisted)"
    assert text.count("already set live; persisted") == 8
    mixed = dict(numa, settings=[_irq(0, "0-15")] + [_irq(n, "0-3") for n in range(1, 8)])
    assert "kept (1 setting(s) changed, 7 more already set persisted)" in filters.outcome_lines([mixed], report="r")[0]
    live = dict(numa, settings=[_irq(0, "0-15")])
    assert "kept (1 setting(s) changed)" in filters.outcome_lines([live], report="r")[0]


def test_a_run_whose_lease_the_watchdog_ended_says_so_first():
    case = CASES[0]
    ended = (
        "the host's watchdog ended the run: its lease ran out at 2026-12-04T18:00:00Z with nobody renewing it,"
        " and the host put its undecided layers back"
    )
    lease = {"changed": False, "lease_lost": True, "lease_ended": ended}
    text = filters.report_markdown(case["results"], "h", "run-9", case["fx"], plot=case["plot"], lease=lease)
    lines = text.splitlines()
    assert lines[0] == "# stacktune run run-9 on h" and lines[1] == ""
    assert lines[2].startswith("**This run no longer held the host when it wrote this report**: the host's watchdog")
    said = " ".join(text.split("| layer |", maxsplit=1)[0].split())
    assert "the host put its undecided layers back. Run run-9 stopped there" in said
    assert "not necessarily the host's state now" in said
    # a run that held the host to its end says nothing of the kind
    held = filters.report_markdown(case["results"], "h", "run-9", case["fx"], plot=case["plot"],
                                   lease={"lease_ended": None})  # fmt: skip
    assert "no longer held" not in held
    assert held == filters.report_markdown(case["results"], "h", "run-9", case["fx"], plot=case["plot"])


def test_a_search_that_kept_the_hosts_value_is_not_called_a_rollback():
    """Seen on the H200: a power-limit search that found nothing better than 700 W read
    "ROLLED BACK (0 setting(s) put back)"; nothing changed, so the outcome says the value stays."""
    gate = {
        "decision": "rollback",
        "method": "search",
        "reason": "rollback: the host's own value (700) is the best by throughput; it is kept",
        "restored": [],
    }
    result = {"layer": "gpu_settings", "decision": "rollback", "gate": gate, "settings": []}
    line = filters.outcome_lines([result], report="r.md")[0]
    assert line.startswith("gpu_settings: searched, the host's own value stays (nothing changed) - ")
    assert "ROLLED BACK" not in line
    put_back = dict(result, gate=dict(gate, restored=["nvml:gpu0:power_limit_w"]))
    line = filters.outcome_lines([put_back], report="r.md")[0]
    assert line.startswith("gpu_settings: searched, the host's own value stays (the candidates tried, 1 setting(s)")


def test_a_kept_search_names_the_value_it_put_in_place():
    """Seen on an H100: a search that kept 600 W read "kept (0 setting(s) changed)", counting the
    rows of the first candidate (the host's own 700 W)."""
    gate = {
        "decision": "keep",
        "method": "search",
        "reason": "keep: 600 is the best by efficiency",
        "search": {"variable": "gpu_settings_power_limit_watts", "chosen": 600},
    }
    result = {"layer": "gpu_settings", "decision": "keep", "gate": gate, "settings": []}
    line = filters.outcome_lines([result], report="r.md")[0]
    assert line.startswith("gpu_settings: kept gpu_settings_power_limit_watts = 600, found by a search - ")


def test_the_html_report_embeds_its_plots_and_stands_alone(tmp_path):
    """The HTML linked its PNG (<img src="host.png">): the file alone, mailed, had no plot."""
    from ansible_collections.stacktune.gpu.plugins.filter.run_report import report_html

    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    (tmp_path / "h1.png").write_bytes(png)
    text = (
        "# stacktune report\n\n![step times without and with each measured layer](h1.png)\n\n![gone](h1-search.png)\n"
    )
    page = report_html(text, directory=str(tmp_path))
    assert '<img src="data:image/png;base64,iVBORw0KGgo' in page and 'src="h1.png"' not in page
    assert 'src="h1-search.png"' in page  # a plot not written stays a name
    assert 'src="h1.png"' in report_html(text)  # without the folder, as before


def test_outcome_words_are_the_tables_outcome_column_by_layer():
    results = CASES[3]["results"]
    words = filters.outcome_words(results)
    text = filters.report_markdown(results, "h", "r", {})
    for layer, word in words.items():
        assert [line for line in text.splitlines() if line.startswith("| %s | **%s** |" % (layer, word))], layer
    assert set(filters.outcome_words(results, True).values()) <= {"would change", "nothing to change"}
    with pytest.raises(AnsibleFilterError, match="outcome_words expects stacktune_results"):
        filters.outcome_words({"layer": "x"})
