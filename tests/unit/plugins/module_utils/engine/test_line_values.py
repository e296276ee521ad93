"""No value becomes code or a second line: every kind of the settings engine that writes a
value into a line of a file refuses what would escape it, before anything is touched, in
check mode and in a real run alike; the message names the variable it came from."""

import os

import pytest

from ansible_collections.stacktune.gpu.plugins.filter.numa_irq import numa_irq_settings
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import check_layer_name, open_journal
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context, SpecError
from ansible_collections.stacktune.gpu.plugins.module_utils.policy.values import LINE_BREAKS

SUBST = "$(touch /tmp/x) --banirq=33"
# what would escape a line: every line break of str.splitlines, a NUL, the shell's own
ESCAPES = list(LINE_BREAKS) + ["\x00", "$(touch /tmp/x)", "`touch /tmp/x`", '"', "'", "\\", "${IFS}"]
IDS = ["U+%04X" % ord(e) if len(e) == 1 and not e.isprintable() else e for e in ESCAPES]


def engine(root, layer, check=False):
    return Engine(Context(layer, root=str(root)), open_journal("/var/lib/stacktune", str(root)), check_mode=check)


def journaled(root):
    return os.path.exists(os.path.join(str(root), "var/lib/stacktune/layers"))


def refused(root, hash_tree, layer, settings, *needles):
    """The settings are refused in check mode and for real, naming needles; nothing changed."""
    before = hash_tree(root)
    for check in (True, False):
        with pytest.raises(SpecError) as caught:
            engine(root, layer, check=check).apply(settings, "run1")
        for needle in needles:
            assert needle in str(caught.value)
    assert hash_tree(root) == before
    assert not journaled(root)
    return str(caught.value)


# ------------------------------------------------------------------ the cases that were seen


def test_a_command_substitution_in_the_irqbalance_arguments_is_refused_naming_the_variable(fakeroot, hash_tree):
    settings = numa_irq_settings(
        [{"device": "0000:3b:00.0", "cpus": "8-15", "var": "numa_irq_cpus_override"}],
        irqbalance="ban",
        irqbalance_file="/etc/default/irqbalance",
        irqs=[41, 42],
        irqbalance_args=SUBST,
    )
    message = refused(fakeroot, hash_tree, "numa_irq", settings, "numa_irq_irqbalance_args", "command substitution")
    assert "/etc/default/irqbalance" in message
    with open(os.path.join(str(fakeroot), "etc/default/irqbalance")) as handle:
        assert "IRQBALANCE_ARGS" not in handle.read()


def test_u2028_in_a_line_is_refused_and_a_plain_value_still_rolls_back_byte_for_byte(fakeroot, hash_tree):
    line = {
        "kind": "env_var",
        "path": "/etc/default/irqbalance",
        "key": "IRQBALANCE_ARGS",
        "var": "numa_irq_irqbalance_args",
    }
    refused(
        fakeroot,
        hash_tree,
        "numa_irq",
        [dict(line, value="--x\u2028--banirq=33")],
        "U+2028",
        "numa_irq_irqbalance_args",
    )
    before = hash_tree(fakeroot)
    engine(fakeroot, "numa_irq").apply([dict(line, value="--banirq=33")], "run1")
    assert hash_tree(fakeroot) != before
    engine(fakeroot, "numa_irq").restore("original", "run1")
    assert hash_tree(fakeroot) == before


# ------------------------------------------------------------------ every kind that writes a line


LINE_SETTINGS = {
    "env_var value": lambda bad: {
        "kind": "env_var",
        "path": "/etc/default/irqbalance",
        "key": "IRQBALANCE_ARGS",
        "value": "--x" + bad + "y",
    },
    "sysctl value": lambda bad: {"kind": "sysctl", "key": "vm.swappiness", "value": "1" + bad + "0"},
    "kernel_arg value": lambda bad: {"kind": "kernel_arg", "key": "pcie_aspm", "value": "o" + bad + "ff"},
    "kernel_arg key": lambda bad: {"kind": "kernel_arg", "key": "pcie" + bad + "_aspm", "value": "off"},
    "sysfs value": lambda bad: {
        "kind": "sysfs",
        "key": "/sys/kernel/mm/transparent_hugepage/enabled",
        "value": "ne" + bad + "ver",
    },
    "mount value": lambda bad: {"kind": "mount", "key": "/dev/shm", "option": "size", "value": "64" + bad + "G"},
    "mount key": lambda bad: {"kind": "mount", "key": "/dev" + bad + "/shm", "option": "size", "value": "64G"},
}


@pytest.mark.parametrize("bad", ESCAPES, ids=IDS)
@pytest.mark.parametrize("where", sorted(LINE_SETTINGS))
def test_every_line_kind_refuses_what_would_escape_its_line(fakeroot, hash_tree, where, bad):
    setting = dict(LINE_SETTINGS[where](bad), var="some_variable")
    refused(fakeroot, hash_tree, "kernel", [setting], "some_variable")


@pytest.mark.parametrize("bad", [b for b in ESCAPES if b in LINE_BREAKS and b != "\n"] + ["\x00"])
def test_a_whole_file_keeps_each_value_on_its_line(fakeroot, hash_tree, bad):
    """nccl.conf, limits.d: lines end in newlines only; what another reader ends a line at is refused."""
    setting = {"kind": "file", "key": "/etc/nccl.conf", "value": "NCCL_IB_HCA=mlx5_0%sNCCL_P2P_DISABLE=1\n" % bad}
    refused(fakeroot, hash_tree, "nccl", [dict(setting, var="nccl_env")], "nccl_env", "/etc/nccl.conf content")


@pytest.mark.parametrize(
    "setting",
    [
        {"kind": "env_var", "path": "/etc/default/irqbalance", "key": "IRQBALANCE_ARGS\n", "value": "1"},
        {"kind": "env_var", "path": "/etc/default/irqbalance\n", "key": "IRQBALANCE_ARGS", "value": "1"},
        {"kind": "file", "key": "/etc/nccl.conf\n", "value": "x\n"},
        {"kind": "sysctl", "key": "vm.swappiness\n", "value": "1"},
        {"kind": "sysfs", "key": "/sys/kernel/mm/transparent_hugepage/enabled\t", "value": "never"},
        {"kind": "sysfs", "key": "/sys/kernel/mm/transparent_hugepage/enabled", "value": "%m"},
        {"kind": "mount", "key": "/dev/shm", "option": "size", "value": "\uff16\uff14G"},
        {"kind": "mount", "key": "/dev/shm", "option": "mode", "value": "1777,exec"},
        {"kind": "irq_affinity", "key": "\u0664\u0661", "value": "0-3"},
        {"kind": "irq_affinity", "device": "0000:3b:00.0\n", "value": "0-3"},
    ],
    ids=lambda s: "%s %r" % (s["kind"], s.get("key") or s.get("device")),
)
def test_keys_paths_and_fields_end_where_they_end(fakeroot, hash_tree, setting):
    """A trailing newline no longer passes a pattern anchored with $, nor a digit of another script a number."""
    refused(fakeroot, hash_tree, "kernel", [dict(setting, var="some_variable")], "some_variable")


def test_plain_values_are_still_written(fakeroot):
    result = engine(fakeroot, "kernel").apply(
        [
            {
                "kind": "env_var",
                "path": "/etc/default/irqbalance",
                "key": "IRQBALANCE_ARGS",
                "value": "--foreground --banirq=41",
            },
            {"kind": "sysctl", "key": "net.ipv4.tcp_rmem", "value": "4096\t87380\t16777216"},
            {
                "kind": "file",
                "key": "/etc/nccl.conf",
                "value": "NCCL_SOCKET_IFNAME=^lo,docker\nNCCL_IB_HCA==mlx5_0:1\n",
            },
        ],
        "run1",
    )
    assert result["layer_state"] == "applied"


@pytest.mark.parametrize("name", ["kernel\n", "../kernel", "kernel/x", "", "k\u2028"])
def test_a_layer_name_is_one_plain_name(name):
    with pytest.raises(ValueError):
        check_layer_name(name)
