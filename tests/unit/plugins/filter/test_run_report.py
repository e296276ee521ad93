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

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "report")
with open(os.path.join(FIXTURES, "cases.json")) as _handle:
    CASES = json.load(_handle)


def test_registered():
    assert set(filters.FilterModule().filters()) == {"plan_lines", "outcome_lines", "next_commands", "report_markdown"}


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
        "kernel: kept (1 setting(s)) - kept: +3% ; pending reboot: kernel_arg:iommu, x",
        "memory: ROLLED BACK (1 setting(s) restored) - p99 worse",
        "nccl: kept (1 setting(s)), not measured (gate off)",
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
    assert filters.outcome_lines(RESULTS[2:3], report="r.md")[0] == "nccl: kept (1 setting(s)), not measured"


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
