"""Shared fixtures for the unit tests."""

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import types

import pytest


def _patch_module_args_before_2_19():
    """ansible.module_utils.testing.patch_module_args where ansible-core (before 2.19) has none:
    the module arguments handed to AnsibleModule the way those versions read them."""
    try:
        import ansible.module_utils.testing  # noqa: F401
    except ImportError:
        from ansible.module_utils import basic

        @contextlib.contextmanager
        def patch_module_args(args=None):
            saved = basic._ANSIBLE_ARGS
            basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}).encode("utf-8")
            try:
                yield
            finally:
                basic._ANSIBLE_ARGS = saved

        shim = types.ModuleType("ansible.module_utils.testing")
        shim.patch_module_args = patch_module_args
        sys.modules["ansible.module_utils.testing"] = shim


_patch_module_args_before_2_19()


def write(root, path, text):
    full = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as handle:
        handle.write(text)
    return full


@pytest.fixture
def fakeroot(tmp_path):
    """A small host tree: kernel interfaces as plain files, plus /etc.

    Live kernel files here are ordinary files, so the engine's reads and writes are
    real file operations whose results the tests can check.
    """
    root = tmp_path / "host"
    write(root, "/proc/sys/vm/swappiness", "60\n")
    write(root, "/proc/sys/vm/max_map_count", "65530\n")
    write(root, "/proc/sys/kernel/numa_balancing", "1\n")
    write(root, "/proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n")
    write(root, "/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    write(root, "/sys/module/pcie_aspm/parameters/policy", "[default] performance powersave powersupersave\n")
    write(root, "/proc/irq/40/smp_affinity_list", "0-15\n")
    write(root, "/proc/irq/41/smp_affinity_list", "0-15\n")
    write(root, "/proc/irq/42/smp_affinity_list", "0-15\n")
    write(root, "/sys/bus/pci/devices/0000:3b:00.0/msi_irqs/41", "msix\n")
    write(root, "/sys/bus/pci/devices/0000:3b:00.0/msi_irqs/42", "msix\n")
    write(root, "/sys/bus/pci/devices/0000:3b:00.0/irq", "0\n")
    write(root, "/proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet\n")
    write(root, "/etc/default/grub", 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n')
    write(root, "/proc/mounts", "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=8388608k,inode64 0 0\n")
    write(root, "/etc/fstab", "# /etc/fstab\nUUID=abcd / ext4 errors=remount-ro 0 1\n")
    write(root, "/etc/default/irqbalance", '#Configuration for the irqbalance daemon\nENABLED="1"\n')
    return root


def tree_hash(root, exclude=("var/lib/stacktune",)):
    """Hash of the managed state under root, the journal excluded.

    Files under /etc are hashed byte for byte with their modes. Kernel interface files
    (/proc, /sys) are hashed by the value the kernel would show: the active choice of
    a "[x] y" attribute and whitespace-normalised numbers, as a real kernel prints them
    whatever was written.
    """
    digest = hashlib.sha256()
    for base, dirs, files in sorted(os.walk(str(root))):
        dirs.sort()
        rel = os.path.relpath(base, str(root))
        if any(rel == e or rel.startswith(e + "/") for e in exclude):
            continue
        for name in sorted(files):
            path = os.path.join(base, name)
            st = os.stat(path)
            digest.update(os.path.relpath(path, str(root)).encode())
            digest.update(oct(st.st_mode).encode())
            with open(path, "rb") as handle:
                data = handle.read()
            if rel.split("/")[0] in ("proc", "sys"):
                data = kernel_view(data.decode())
                digest.update(data.encode())
            else:
                digest.update(data)
    return digest.hexdigest()


def kernel_view(text):
    match = re.search(r"\[([^\]]+)\]", text)
    return match.group(1) if match else " ".join(text.split())


@pytest.fixture
def hash_tree():
    return tree_hash


def _needed(reason):
    """Skip where a test tool is missing here; in CI (CI=true), where tools/bootstrap.sh installs
    it, a missing tool is a failure."""
    if os.environ.get("CI") == "true":
        pytest.fail("%s (CI installs it: tools/bootstrap.sh test)" % reason)
    pytest.skip(reason)


@pytest.fixture
def prometheus_families():
    """Parse a Prometheus text exposition with prometheus_client's own parser: {name: family}."""

    def parse(text):
        try:
            from prometheus_client.parser import text_string_to_metric_families
        except ImportError:
            _needed("prometheus_client is not installed (requirements-test.txt)")
        families = {}
        for family in text_string_to_metric_families(text):
            assert family.name not in families, "family %s twice" % family.name
            families[family.name] = family
        return families

    return parse


@pytest.fixture
def promtool_check():
    """Run `promtool check metrics` (Debian's prometheus package) on a text exposition."""

    def check(text):
        promtool = shutil.which("promtool")
        if promtool is None:
            _needed("promtool is not on PATH (tools/bootstrap.sh test puts it in .venv/bin)")
        proc = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, "promtool check metrics: %s%s" % (proc.stdout, proc.stderr)
        return proc.stdout + proc.stderr

    return check


# make cores (tools/test-cores.sh) runs on the other ansible-core versions only the tests whose
# verdict can depend on ansible-core: STACKTUNE_CORE_FACING_ONLY=1 leaves out every test file
# that neither imports ansible-core nor a plugin that runs inside it (modules, action, filter,
# lookup, test, callback, plugin_utils, doc_fragments), nor runs an ansible command. What is left
# out tests module_utils alone, which imports nothing from ansible-core
# (tests/unit/test_cores.py::test_module_utils_import_no_ansible_core keeps it so), so it gives
# the same verdict on every core; the main version runs every test.
_COLLECTION_PLUGINS = "ansible_collections.stacktune.gpu.plugins"
_ANSIBLE_COMMAND = re.compile(r"""["'](?:ansible|ansible-(?:playbook|doc|galaxy|test|lint|inventory))["']""")


def _imported(path):
    """The modules a Python file imports, at any depth of the file."""
    import ast

    with open(path) as handle:
        source = handle.read()
    names = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.extend([node.module] + [node.module + "." + alias.name for alias in node.names])
    return source, names


def core_facing(path, _seen=None):
    """Whether a test file's verdict can depend on the ansible-core version (see above)."""
    source, names = _imported(path)
    if _ANSIBLE_COMMAND.search(source):
        return True
    for name in names:
        if name == "ansible" or name.startswith("ansible."):
            return True
        if name.startswith(_COLLECTION_PLUGINS + ".") and not name.startswith(_COLLECTION_PLUGINS + ".module_utils"):
            return True
    # helpers the tests import from their own folders count as part of the test file
    seen = set() if _seen is None else _seen
    here = os.path.dirname(path)
    for name in names:
        helper = os.path.join(here, name.split(".")[0] + ".py")
        if helper not in seen and os.path.isfile(helper) and helper != path:
            seen.add(helper)
            if core_facing(helper, seen):
                return True
    return False


def pytest_collection_modifyitems(config, items):
    """On the other ansible-core versions, leave out the tests marked one_core (pytest.ini)."""
    if os.environ.get("STACKTUNE_CORE_FACING_ONLY") != "1":
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("one_core") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_ignore_collect(collection_path, config):
    if os.environ.get("STACKTUNE_CORE_FACING_ONLY") != "1":
        return None
    path = str(collection_path)
    if os.path.basename(path).startswith("test_") and path.endswith(".py") and not core_facing(path):
        return True
    return None
