"""One registry of the built-in workloads (plugins/module_utils/workloads/host/registry.py): a row per
workload in the part that defines its function, every other name derived from the rows, and the
lists that are text (the bench module's DOCUMENTATION, the stacktune role's argument spec and
vars, docs/bench.md) tied to it here.

The checks of the text lists are plain functions of a collection root and a registry module, so
that the last test runs them on a copy of the collection with a workload added."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import source
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import base, program, registry

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", ".."))
BENCH = os.path.join("plugins", "modules", "bench.py")
SPEC = os.path.join("roles", "stacktune", "meta", "argument_specs.yml")
VARS = os.path.join("roles", "stacktune", "vars", "main.yml")
DOCS = os.path.join("docs", "bench.md")


# ------------------------------------------------------------------ the text lists


def _read(root, path):
    with open(os.path.join(root, path)) as handle:
        return handle.read()


def _bench_doc(root):
    for node in ast.parse(_read(root, BENCH)).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError("%s has no DOCUMENTATION" % BENCH)


def _spec(root):
    return yaml.safe_load(_read(root, SPEC))["argument_specs"]["main"]["options"]


def _differ(where, got, want):
    """The problems of a list of workload names ``got`` that should be ``want``, naming the file."""
    missing, extra = [n for n in want if n not in got], [n for n in got if n not in want]
    out = []
    if missing:
        out.append(
            "%s: missing workload(s) %s of the registry (plugins/module_utils/workloads/host/registry.py)"
            % (where, missing)
        )
    if extra:
        out.append("%s: workload(s) %s that the registry does not know" % (where, extra))
    return out


def _choices(reg):
    return list(reg.NOT_BUILT_IN[:1]) + list(reg.WORKLOADS) + list(reg.NOT_BUILT_IN[1:])


def bench_choices(root, reg):
    options = _bench_doc(root)["options"]
    return _differ(BENCH + " DOCUMENTATION options.workload.choices", options["workload"]["choices"], _choices(reg))


def bench_described(root, reg):
    """Every workload is described in the ``workload`` option (V(name))."""
    text = " ".join(_bench_doc(root)["options"]["workload"]["description"])
    named = re.findall(r"V\((\w+)\)", text)
    return _differ(
        BENCH + " DOCUMENTATION options.workload.description", [n for n in named if n in reg.WORKLOADS], reg.WORKLOADS
    )


def _stated_sizes(text):
    """name -> default size as a description states them: ``V(a) 8192`` or ``V(a)/V(b) 256``."""
    out = {}
    for names, size in re.findall(r"((?:V\(\w+\)/)*V\(\w+\)) (\d+)", text):
        for name in re.findall(r"V\((\w+)\)", names):
            out[name] = int(size)
    return out


def bench_sizes(root, reg):
    stated = _stated_sizes(" ".join(_bench_doc(root)["options"]["size"]["description"]))
    where = BENCH + " DOCUMENTATION options.size.description"
    out = _differ(where, list(stated), reg.WORKLOADS)
    out.extend(
        "%s: %s defaults to %d, not %d" % (where, name, reg.DEFAULT_SIZE[name], size)
        for name, size in stated.items()
        if name in reg.DEFAULT_SIZE and reg.DEFAULT_SIZE[name] != size
    )
    return out


def spec_choices(root, reg):
    return _differ(
        SPEC + " stacktune_bench_workload choices", _spec(root)["stacktune_bench_workload"]["choices"], _choices(reg)
    )


def spec_steps(root, reg):
    options = _spec(root)["stacktune_bench_steps_by_workload"]["options"]
    want = list(reg.WORKLOADS) + ["command"]
    return _differ(SPEC + " stacktune_bench_steps_by_workload options", list(options), want)


def data_dir_var(root, reg):
    got = yaml.safe_load(_read(root, VARS))["__stacktune_data_dir_workloads"]
    return _differ(VARS + " __stacktune_data_dir_workloads", got, reg.DATA_DIR_WORKLOADS)


def docs_table(root, reg):
    """The Workloads table of docs/bench.md: a row per workload, its default size in parentheses."""
    text = _read(root, DOCS)
    section = text.split("\n## Workloads\n", 1)[-1].split("\n## ", 1)[0] if "\n## Workloads\n" in text else ""
    rows = re.findall(r"^\| `(\w+)` \|[^|]*\| ([^|]*) \|", section, re.M)
    sizes = {name: re.search(r"\((\d+)\)", size) for name, size in rows if name not in reg.NOT_BUILT_IN}
    where = DOCS + " table of workloads"
    out = _differ(where, list(sizes), reg.WORKLOADS)
    for name, found in sizes.items():
        if name in reg.DEFAULT_SIZE and (found is None or int(found.group(1)) != reg.DEFAULT_SIZE[name]):
            out.append(
                "%s: %s defaults to %d (the size column says %s)"
                % (where, name, reg.DEFAULT_SIZE[name], found and found.group(0))
            )
    return out


def docs_live(root, reg):
    """The built-in workloads that run live, as docs/bench.md lists them."""
    found = re.search(r"The built-in workloads do this themselves\s*\(([^)]*)\)", _read(root, DOCS))
    if found is None:
        return ["%s: no list of the workloads that run live ('The built-in workloads do this themselves (...)')" % DOCS]
    return _differ(DOCS + " workloads that run live", re.findall(r"`(\w+)`", found.group(1)), reg.LIVE_WORKLOADS)


TEXT_LISTS = (
    bench_choices,
    bench_described,
    bench_sizes,
    spec_choices,
    spec_steps,
    data_dir_var,
    docs_table,
    docs_live,
)


def problems(root, reg):
    """Every way the text lists under ``root`` differ from the registry ``reg``."""
    return [line for check in TEXT_LISTS for line in check(root, reg)]


@pytest.mark.parametrize("check", TEXT_LISTS, ids=lambda f: f.__name__)
def test_each_text_list_of_workloads_is_the_registry(check):
    assert check(REPO, registry) == []


def test_a_workload_missing_from_a_text_list_is_named_with_its_file():
    class Fewer:
        NOT_BUILT_IN = registry.NOT_BUILT_IN
        WORKLOADS = dict(registry.WORKLOADS, extra_one=None)
        DEFAULT_SIZE = dict(registry.DEFAULT_SIZE, extra_one=7, gemm=1)
        DATA_DIR_WORKLOADS = registry.DATA_DIR_WORKLOADS + ("extra_one",)
        LIVE_WORKLOADS = registry.LIVE_WORKLOADS + ("extra_one",)

    found = "\n".join(problems(REPO, Fewer))
    for path in (BENCH, SPEC, VARS, DOCS):
        assert path + " " in found
    assert found.count("missing workload(s) ['extra_one']") == len(TEXT_LISTS)
    assert "gemm defaults to 1" in found


# ------------------------------------------------------------------ the registry


def test_every_name_is_derived_from_the_rows():
    rows = registry.WORKLOADS
    assert list(rows) == list(registry.GPU_WORKLOADS) + list(registry.CPU_WORKLOADS)
    assert {n: r.func for n, r in rows.items()} == registry.WORKLOAD_FUNCS
    assert program.WORKLOAD_FUNCS is registry.WORKLOAD_FUNCS
    assert set(registry.DEFAULT_SIZE) == set(registry.SIZE_MEANING) == set(registry.DEFAULT_STEPS) == set(rows)
    assert set(registry.LIVE_SIZE) == set(registry.LIVE_WORKLOADS)
    assert registry.LIVE_SIZE["train_step"] == 128 and registry.DEFAULT_SIZE["train_step"] == 32
    assert (
        registry.MIN_GPUS["allreduce"] == 2 and registry.MIN_GPUS["gemm"] == 1 and registry.MIN_GPUS["mem_touch"] == 0
    )


def test_each_row_is_in_the_part_that_defines_its_function():
    """A row sits next to its function, the function is ``wl_<name>``, and every ``wl_`` function
    of the parts has a row."""
    tables = {"gpu": registry.GPU_TABLE, "cpu": registry.CPU_TABLE, "files": registry.FILE_TABLE}
    assert tuple(tables.values()) == registry.TABLES
    parts = {p.__name__.rsplit(".", 1)[-1]: p for p in source.PARTS}
    for part, table in tables.items():
        for row in table:
            assert row.func.__name__ == "wl_" + row.name, row
            assert row.func.__module__ == parts[part].__name__, row
    defined = {name for p in source.PARTS for name in vars(p) if name.startswith("wl_")}
    assert defined == {"wl_" + n for n in registry.WORKLOADS}


def test_a_row_is_checked_and_a_name_twice_refused():
    with pytest.raises(ValueError, match="device"):
        base.Workload("x", None, "tpu", 1, "units")
    with pytest.raises(ValueError, match="live_size without live"):
        base.Workload("x", None, base.CPU, 1, "units", live_size=2)
    row = base.Workload("x", None, base.GPU, 1, "units")
    assert (row.steps, row.live, row.min_gpus, row.min_workers, row.preload) == (
        base.DEFAULT_STEPS_OTHER,
        False,
        1,
        0,
        (),
    )
    with pytest.raises(ValueError, match="'x' is declared twice"):
        registry.gather(((row,), (row,)))
    with pytest.raises(ValueError, match="'auto' is declared twice"):
        registry.gather(((base.Workload("auto", None, base.CPU, 1, "units"),),))


# ------------------------------------------------------------------ what adding one touches

# The dummy workload, added in a copy of the collection the way docs/architecture.md says: its
# function and row in cpu.py, then the text lists. Each edit: (file, old text, new text).
DUMMY_FUNC = '''

def wl_dummy(p):
    """A test workload: sums ``size`` numbers per step."""
    monitor = Monitor()

    def step():
        t0 = time.perf_counter()
        sum(range(p["size"]))
        return ms_since(t0)

    samples = timed_loop(step, p["steps"], p["warmup"], monitor)
    conditions = monitor.result()
    return {"samples_ms": samples, "work_per_step": float(p["size"]), "work_unit": "samples", "conditions": conditions}
'''
CPU_PART = os.path.join("plugins", "module_utils", "workloads", "host", "cpu.py")
ADD_DUMMY = (
    (CPU_PART, "\n\n# The CPU workloads, one row each", DUMMY_FUNC + "\n\n# The CPU workloads, one row each"),
    (
        CPU_PART,
        "\nCPU_TABLE = (\n",
        '\nCPU_TABLE = (\n    Workload("dummy", wl_dummy, CPU, 3, "numbers summed per step", live=True, live_size=5),'
        "\n",
    ),
    (BENCH, "file_dataloader, command]", "file_dataloader, dummy, command]"),
    (
        BENCH,
        "      - V(command) runs O(command).",
        "      - V(dummy) sums numbers.\n      - V(command) runs O(command).",
    ),
    (
        BENCH,
        "V(file_dataloader) 32 (files per batch).",
        "V(file_dataloader) 32 (files per batch), V(dummy) 3 (numbers).",
    ),
    (SPEC, "file_dataloader, command]", "file_dataloader, dummy, command]"),
    (
        SPEC,
        "          command:\n",
        "          dummy:\n            type: int\n            description: Steps of dummy.\n          command:\n",
    ),
    (
        DOCS,
        "| `auto` | `gemm` when",
        "| `dummy` | sum of `size` numbers | numbers (3) | samples/s |\n| `auto` | `gemm` when",
    ),
    (DOCS, "`cpu_train_step`). For your own", "`cpu_train_step`, `dummy`). For your own"),
)

CHECK_COPY = r"""
import importlib.util, json, os, subprocess, sys
root, copy, repo, checks, out = sys.argv[1:6]
sys.path[:0] = [root]
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import bench, source
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host import program, registry
from ansible_collections.stacktune.gpu.plugins.module_utils.gate import settings, trial
assert registry.__file__.startswith(copy), registry.__file__
spec = importlib.util.spec_from_file_location("workload_checks", checks)
tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tests)
program_path = source.write_program(out)
run = subprocess.run([sys.executable, program_path, json.dumps({"workload": "dummy", "steps": 4, "warmup": 1})],
                     capture_output=True, text=True, timeout=60)
doc = json.loads(run.stdout)
print(json.dumps({
    "size": registry.DEFAULT_SIZE.get("dummy"), "meaning": registry.SIZE_MEANING.get("dummy"),
    "steps": registry.DEFAULT_STEPS.get("dummy"), "live_size": registry.LIVE_SIZE.get("dummy"),
    "cpu": "dummy" in registry.CPU_WORKLOADS, "live": "dummy" in registry.LIVE_WORKLOADS,
    "func": program.WORKLOAD_FUNCS["dummy"].__name__, "choice": "dummy" in bench.WORKLOAD_CHOICES,
    "gate": trial.resolve_workloads(["dummy"], 0), "preload": program.runner_preload(["dummy"]),
    "gate_table": bool(settings.check_settings({}, {}, {"cpu": ["dummy"]})),
    "needs": [registry.MIN_GPUS["dummy"], registry.MIN_WORKERS["dummy"], "dummy" in registry.DATA_DIR_WORKLOADS],
    "run": [run.returncode, doc.get("workload"), doc.get("size"), len(doc.get("samples_ms") or ()),
            doc.get("size_meaning")],
    "problems": tests.problems(copy, registry), "problems_before": tests.problems(repo, registry),
}))
"""


def _copy_collection(tmp_path):
    root = tmp_path / "collections"
    copy = root / "ansible_collections" / "stacktune" / "gpu"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("plugins", "roles"):
        shutil.copytree(os.path.join(REPO, folder), str(copy / folder), ignore=ignore)
    (copy / "docs").mkdir()
    shutil.copy(os.path.join(REPO, DOCS), str(copy / DOCS))
    return str(root), str(copy)


def test_a_new_workload_touches_four_files_and_shows_everywhere(tmp_path):
    root, copy = _copy_collection(tmp_path)
    touched = set()
    for path, old, new in ADD_DUMMY:
        text = _read(copy, path)
        assert text.count(old) == 1, (path, old)
        with open(os.path.join(copy, path), "w") as handle:
            handle.write(text.replace(old, new))
        touched.add(path)
    assert touched == {CPU_PART, BENCH, SPEC, DOCS}
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    (tmp_path / "out").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", CHECK_COPY, root, copy, REPO, os.path.abspath(__file__), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["problems"] == []
    assert (got["size"], got["meaning"], got["steps"], got["live_size"]) == (3, "numbers summed per step", 400, 5)
    assert got["cpu"] and got["live"] and got["choice"]
    assert (got["func"], got["gate"], got["preload"]) == ("wl_dummy", ["dummy"], [])
    assert got["gate_table"] and got["needs"] == [0, 0, False]
    assert got["run"] == [0, "dummy", 3, 4, "numbers summed per step"]
    # the same registry against the text lists without it: each one is named, with its file
    before = "\n".join(got["problems_before"])
    assert before.count("missing workload(s) ['dummy']") == len(TEXT_LISTS) - 1  # not a data_dir one
    for path in (BENCH, SPEC, DOCS):
        assert path + " " in before
