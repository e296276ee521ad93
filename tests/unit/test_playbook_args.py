"""make's ARGS reach ansible-playbook as the user meant them (tools/playbook.py): shell words,
quoted forms, and an unquoted JSON value of -e kept whole (the shell split it at its spaces,
and ansible-playbook printed its usage twice)."""

import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("playbook", os.path.join(HERE, "..", "..", "tools", "playbook.py"))
playbook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(playbook)


@pytest.mark.parametrize(
    "text,args",
    [
        ("", []),
        ("--check --diff", ["--check", "--diff"]),
        (
            '-e {"stacktune_layers": ["memory", "nosuchlayer"]}',
            ["-e", '{"stacktune_layers": ["memory", "nosuchlayer"]}'],
        ),
        (
            '-e stacktune_bench_workload=command -e \'{"stacktune_bench_command": ["python3", "/opt/a b.py"]}\'',
            ["-e", "stacktune_bench_workload=command", "-e", '{"stacktune_bench_command": ["python3", "/opt/a b.py"]}'],
        ),
        ('-e @vars.yml --extra-vars {"a": "b }"} -v', ["-e", "@vars.yml", "--extra-vars", '{"a": "b }"}', "-v"]),
        ("--limit 'gpu-[01:04]' -e x=1", ["--limit", "gpu-[01:04]", "-e", "x=1"]),
        ("-e {broken", ["-e", "{broken"]),  # ansible-playbook says what is wrong with it
    ],
)
def test_args_split_as_the_user_meant(text, args):
    assert playbook.split_args(text) == args


def test_an_unbalanced_quote_is_refused_naming_args(monkeypatch, capsys):
    monkeypatch.setenv("ARGS", "-e 'x=1")
    assert playbook.main(["playbook.py", "tune.yml"]) == 2
    assert capsys.readouterr().err.startswith("ARGS cannot be read as command-line arguments")
