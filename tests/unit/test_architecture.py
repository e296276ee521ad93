"""The shape of plugins/ that docs/architecture.md describes, checked on the source.

- the import graph of plugins/ has no circle (imports inside functions count too);
- no module imports a private name (``_name``) of another, neither ``from m import _name``
  nor ``m._name`` through an imported module;
- imports run down the package levels only (``LEVELS``, see test_no_import_runs_up_the_levels);
- no module_utils file is over 800 lines, and no module (plugins/modules) over 600: a module is
  its documentation, its argument spec and a call into module_utils;
- the programs stacktune runs on a host are .py files: the acceptance program, and the
  workload program's parts, each of which needs only the standard library and the parts
  before it; the files of such programs live in a ``host/`` folder of module_utils, and
  every file there keeps that import rule (torch and pynvml only inside functions); the
  NCCL check's program string imports the standard library and torch only.
"""

import ast
import os
import sys

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance.host import program as acceptance_program
from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import runner
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import nccl_transport
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import source

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGINS = os.path.join(REPO, "plugins")
COLLECTION = "ansible_collections.stacktune.gpu."
MAX_LINES = 800
MAX_MODULE_LINES = 600
# an action plugin is an adapter: the task's options to plain values, modules called through
# Ansible; its logic lives in module_utils (the gate's loop: gate/trial_loop.py)
MAX_ACTION_LINES = 250
# The packages of plugins/ by level, lowest first: a package imports only packages of lower
# levels (and itself). Each package sits one level above the highest it imports, as the import
# graph is now:
#   0 module_utils/common      stats, process, hostproc: imports nothing of the collection
#   1 hardware                 common
#   2 layers                   hardware (each layer's settings read facts and /proc text)
#   3 policy                   layers (the layers' value rules and candidates)
#   4 engine                   common, hardware, policy
#   5 workloads                common, hardware, engine (the bench module's runner and lease)
#     reporting                common, engine
#   6 gate                     common, workloads (the workload names), reporting (the budget in words)
#     acceptance               common, hardware, engine, reporting
#     plugin_utils             common, layers, reporting (controller-side helpers of the plugins)
#     diagnose                 common, hardware, workloads (the step lines, the workload program)
#   7 the plugins: action, callback, doc_fragments, filter, lookup, modules, test
LEVELS = (
    ("common",),
    ("hardware",),
    ("layers",),
    ("policy",),
    ("engine",),
    ("workloads", "reporting"),
    ("gate", "acceptance", "plugin_utils", "diagnose"),
    ("action", "callback", "doc_fragments", "filter", "lookup", "modules", "test"),
)


def module_name(path):
    rel = os.path.relpath(path, REPO)[: -len(".py")].replace(os.sep, ".")
    return COLLECTION + (rel[: -len(".__init__")] if rel.endswith(".__init__") else rel)


def python_files(top):
    for base, _dirs, files in os.walk(top):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(base, name)


MODULES = {module_name(path): path for path in python_files(PLUGINS)}


def parsed(path):
    with open(path) as handle:
        return ast.parse(handle.read(), path)


def imports(path):
    """(line, module imported from, name, is_module) for every collection import in a file."""
    out = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(COLLECTION):
            for alias in node.names:
                full = node.module + "." + alias.name
                out.append((node.lineno, node.module, alias, full in MODULES))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(COLLECTION):
                    out.append((node.lineno, alias.name, None, True))
    return out


def graph():
    edges = {}
    for name, path in MODULES.items():
        deps = set()
        for _line, module, alias, is_module in imports(path):
            deps.add(module + "." + alias.name if alias is not None and is_module else module)
        edges[name] = {d for d in deps if d in MODULES and d != name}
    return edges


def circles(edges):
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for dep in sorted(edges[node]):
            if state.get(dep) == "open":
                found.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_the_graph_is_read():
    edges = graph()
    assert len(edges) > 60
    engine = COLLECTION + "plugins.module_utils.engine.engine"
    assert COLLECTION + "plugins.module_utils.engine.units" in edges[engine]


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_of_plugins_has_no_circle():
    assert circles(graph()) == []


def package(name):
    """The package of a module: ``engine`` for module_utils/engine/kinds/base.py, ``filter`` for
    plugins/filter/fleet.py."""
    parts = name[len(COLLECTION) :].split(".")
    return parts[2] if parts[1] == "module_utils" else parts[1]


def upward(edges, levels):
    """Every import from a package to another of the same or a higher level:
    ``(module, module imported, its level, the imported one's level)``."""
    level = {pkg: index for index, names in enumerate(levels) for pkg in names}
    found = []
    for name in sorted(edges):
        for dep in sorted(edges[name]):
            here, there = package(name), package(dep)
            if here != there and level[there] >= level[here]:
                found.append((name, dep, level[here], level[there]))
    return found


def test_upward_imports_are_found():
    a, b, c = (COLLECTION + "plugins.module_utils.%s.m" % p for p in ("low", "high", "side"))
    edges = {a: {b}, b: {a}, c: {a}}
    assert upward(edges, (("low",), ("high", "side"))) == [(a, b, 0, 1)]
    assert upward({a: set(), c: {b}}, (("low",), ("high", "side"))) == [(c, b, 1, 1)]


def test_every_package_has_a_level():
    named = [pkg for names in LEVELS for pkg in names]
    assert len(named) == len(set(named))
    assert {package(name) for name in MODULES} == set(named)


def test_no_import_runs_up_the_levels():
    """A package imports only packages of lower levels (see ``LEVELS``): never one of its own
    level, nor one above it. Shared utilities go down to module_utils/common instead."""
    assert upward(graph(), LEVELS) == []


@pytest.mark.parametrize("path", sorted(MODULES.values()), ids=lambda p: os.path.relpath(p, PLUGINS))
def test_no_module_imports_a_private_name_of_another(path):
    tree = parsed(path)
    modules = {}
    for line, module, alias, is_module in imports(path):
        if alias is None:
            continue
        assert not alias.name.startswith("_"), "%s:%d imports %s from %s" % (path, line, alias.name, module)
        if is_module:
            modules[alias.asname or alias.name] = module + "." + alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            assert not private, "%s:%d uses %s.%s" % (path, node.lineno, modules[node.value.id], node.attr)


# the size rule per folder: module_utils files, modules (with their documentation), action plugins
SIZE_RULES = (("module_utils", MAX_LINES), ("modules", MAX_MODULE_LINES), ("action", MAX_ACTION_LINES))


@pytest.mark.parametrize(
    "path,limit",
    [(path, limit) for folder, limit in SIZE_RULES for path in sorted(python_files(os.path.join(PLUGINS, folder)))],
    ids=lambda p: os.path.relpath(p, PLUGINS) if isinstance(p, str) else str(p),
)
def test_no_file_is_over_its_folders_size_rule(path, limit):
    with open(path) as handle:
        lines = handle.read().count("\n")
    assert lines <= limit, "%s has %d lines (its folder's rule: %d)" % (path, lines, limit)


def test_module_utils_is_in_packages():
    top = os.path.join(PLUGINS, "module_utils")
    assert not [n for n in os.listdir(top) if n.endswith(".py")]
    for base, dirs, _files in os.walk(top):
        for name in dirs:
            if name != "__pycache__":
                init = os.path.join(base, name, "__init__.py")
                assert os.path.isfile(init), init
                assert os.path.getsize(init) == 0, init  # ansible-test sanity: empty-init


def test_the_acceptance_program_is_a_py_file_shipped_as_it_is():
    with open(acceptance_program.__file__) as handle:
        text = handle.read()
    assert runner.program_source() == text
    compile(text, "acceptance.py", "exec")


def _top_level_names(tree):
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_the_workload_program_is_one_file_of_its_parts():
    text = source.program_source()
    tree = ast.parse(text)
    names = [n for n in _top_level_names(tree) if n != "__metaclass__"]
    assert len(names) == len(set(names)), "a name is defined twice in the assembled program"
    assert "ansible_collections" not in text
    assert text.count("from __future__ import") == 1
    for part in source.PARTS:
        body = _top_level_names(ast.parse(source.part_text(source.module_source(part))))
        assert set(body) <= set(names), part.__name__


@pytest.mark.parametrize("part", source.PARTS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_each_workload_part_needs_the_standard_library_and_earlier_parts_only(part):
    earlier = {p.__name__ for p in source.PARTS[: source.PARTS.index(part)]}
    for node in parsed(part.__file__).body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] in sys.stdlib_module_names, (part.__name__, alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            if node.module.startswith(COLLECTION):
                assert node.module in earlier, (part.__name__, node.module)
            else:
                assert node.module.split(".")[0] in sys.stdlib_module_names, (part.__name__, node.module)


def test_part_text_leaves_out_what_only_the_collection_needs():
    text = (
        '# header\n"""Doc."""\n\nfrom __future__ import absolute_import\n\n__metaclass__ = type\n\n'
        "import os\n\nfrom ansible_collections.x.y import z  # a part before\n\n\n# kept\nVALUE = z(os.sep)\n"
    )
    assert source.part_text(text) == "import os\n\n\n\n# kept\nVALUE = z(os.sep)\n"


def test_write_program_writes_the_assembled_program(tmp_path):
    path = source.write_program(str(tmp_path))
    assert path == str(tmp_path / "stacktune_workload.py")
    with open(path) as handle:
        assert handle.read() == source.program_source()


# Where the programs that run on the host keep their files, and what they may import besides
# the standard library: torch and NVML's bindings, inside the functions that need a GPU.
HOST_FOLDER = "host"
HOST_ONLY = {"torch", "pynvml"}


def host_files():
    top = os.path.join(PLUGINS, "module_utils")
    return sorted(
        path
        for path in python_files(top)
        if os.path.basename(os.path.dirname(path)) == HOST_FOLDER and not path.endswith("__init__.py")
    )


def host_import_faults(tree, name, earlier):
    """The imports of a host program's file (or text) that break its rule: at module level the
    standard library, ``__future__`` and the collection modules in ``earlier`` (the parts the
    assembly joins before it, whose import block it leaves out); inside functions the standard
    library, torch and pynvml."""
    faults = []
    top = set(map(id, tree.body))
    for node in ast.walk(tree):
        allowed = sys.stdlib_module_names | ({"__future__"} if id(node) in top else HOST_ONLY)
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
            if node.level:
                faults.append((name, node.lineno, "relative import"))
                continue
        else:
            continue
        for module in modules:
            if module.startswith(COLLECTION):
                if id(node) not in top or module not in earlier:
                    faults.append((name, node.lineno, module))
            elif module.split(".")[0] not in allowed:
                faults.append((name, node.lineno, module))
    return faults


def test_the_host_folders_hold_the_host_programs():
    names = {module_name(path) for path in host_files()}
    acceptance = acceptance_program.__name__
    parts = {part.__name__ for part in source.PARTS}
    assert acceptance in names
    # every file of a host folder is the acceptance program or a part of the workload
    # program; the parts outside one (hostproc, constants) are shared with the collection
    assert names - {acceptance} <= parts
    assert {name for name in parts if ".%s." % HOST_FOLDER not in name} == {
        COLLECTION + "plugins.module_utils.common.hostproc",
        COLLECTION + "plugins.module_utils.hardware.constants",
    }


@pytest.mark.parametrize("path", host_files(), ids=lambda p: os.path.relpath(p, PLUGINS))
def test_a_host_program_file_imports_the_standard_library_and_earlier_parts_only(path):
    name = module_name(path)
    names = [part.__name__ for part in source.PARTS]
    earlier = set(names[: names.index(name)]) if name in names else set()
    assert host_import_faults(parsed(path), name, earlier) == []


def test_the_nccl_program_string_imports_the_standard_library_and_torch_only():
    tree = ast.parse(nccl_transport.PROGRAM)
    faults = [f for f in host_import_faults(tree, "nccl", set()) if f[2].split(".")[0] not in HOST_ONLY]
    assert faults == []


def test_host_import_faults_are_found():
    text = (
        "import os\nimport torch\nfrom ansible_collections.stacktune.gpu.plugins.module_utils.common import process\n"
        "from . import near\n\ndef f():\n    import torch\n    import yaml\n"
    )
    faults = host_import_faults(ast.parse(text), "t", set())
    assert [line for _n, line, _m in faults] == [2, 3, 4, 8]
    earlier = {COLLECTION + "plugins.module_utils.common"}
    assert [line for _n, line, _m in host_import_faults(ast.parse(text), "t", earlier)] == [2, 4, 8]
