"""The collection's two rules for where a value lands (module_utils/policy/values.py): one
plain value on one line of a file, and one component of a path."""

import os
import sys

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.policy.values import (
    LINE_BREAKS,
    component_problem,
    inside,
    line_error,
    line_problem,
)

# Every character Python's str.splitlines ends a line at, found over the whole of Unicode
# (not copied from its documentation): the rule must refuse each one.
SPLITS = sorted(chr(c) for c in range(sys.maxunicode + 1) if len(("a%sb" % chr(c)).splitlines()) == 2)

SHELL = {
    "$(touch /tmp/x) --banirq=33": "command substitution $(...)",
    "`touch /tmp/x`": "command substitution `...`",
    "${IFS}x": "shell expansion",
    "$HOME": "shell expansion",
    'a" ; touch /tmp/x ; "': "a double quote",
    "a'b": "a single quote",
    "--banirq=33\\": "a backslash",
}

PLAIN = [
    "",
    "--foreground --banirq=33 --banirq=34",
    "^docker,lo",
    "=mlx5_0:1,mlx5_1:1",
    "4096 87380 16777216",
    "4096\t87380",
    "unlimited",
    "64G",
    "mq-deadline",
    "defer+madvise",
    "/etc/nccl-topo.xml",
    10,
]


def test_the_line_breaks_are_every_character_splitlines_splits_on():
    assert sorted(LINE_BREAKS) == SPLITS
    assert "\u2028" in SPLITS and "\x85" in SPLITS and "\x1c" in SPLITS


@pytest.mark.parametrize("char", SPLITS, ids=["U+%04X" % ord(c) for c in SPLITS])
def test_every_line_break_is_refused_in_a_line_and_in_a_name(char):
    assert "line break" in line_problem("--banirq=33%s--banirq=34" % char)
    assert "line break" in component_problem("run%s1" % char)


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b", "\x7f", "\x9b"])
def test_other_control_characters_are_refused(char):
    assert "control character" in line_problem("a%sb" % char)
    assert component_problem("a%sb" % char) is not None


@pytest.mark.parametrize("value,what", sorted(SHELL.items()))
def test_what_a_shell_would_run_or_end_the_value_at_is_refused(value, what):
    assert what in line_problem(value)


@pytest.mark.parametrize("value", PLAIN)
def test_plain_values_pass(value):
    assert line_problem(value) is None


def test_the_message_names_the_variable_the_file_and_the_character():
    message = line_error("numa_irq_irqbalance_args", "a\u2028b", "/etc/default/irqbalance")
    assert message == (
        "numa_irq_irqbalance_args must be plain text on one line (it is written into a line of "
        "/etc/default/irqbalance); 'a\\u2028b' holds a line break, U+2028 (LINE SEPARATOR)"
    )
    assert line_error("x", "plain") is None


@pytest.mark.parametrize(
    "value,problem",
    [
        ("", "empty"),
        (".", "'.'"),
        ("..", "'..'"),
        (None, "empty"),
        ("../../../escaped-runid", "path separator (/)"),
        ("a/b", "path separator (/)"),
        ("a\\b", "path separator (\\)"),
        ("x" * 256, "longer than 255 bytes"),
    ],
)
def test_what_is_no_path_component(value, problem):
    assert problem in component_problem(value)


@pytest.mark.parametrize("value", ["20261202T185248Z", "calibrate-20261202T185248Z", "gpu01.example.com", "..x", "a b"])
def test_names_that_are_path_components(value):
    assert component_problem(value) is None


def test_inside_joins_names_and_refuses_what_resolves_outside(tmp_path):
    base = tmp_path / "reports"
    base.mkdir()
    assert inside(str(base), "run1", "host.json") == str(base / "run1" / "host.json")
    with pytest.raises(ValueError, match="path separator"):
        inside(str(base), "../../../escaped-runid")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(str(tmp_path / "elsewhere"), str(base / "linked"))
    with pytest.raises(ValueError, match="outside"):
        inside(str(base), "linked")
