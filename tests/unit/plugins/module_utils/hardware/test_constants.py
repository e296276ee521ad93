"""The hardware constants, the one reading of a version and the order of a version's numbers
(module_utils/hardware/constants.py), every other reading of a version going through it,
and the one tmpfiles persistence the sysfs and irq_affinity kinds share."""

import os

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.irq import IrqAffinityKind
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.sysfs import TMPFILES, SysfsKind, TmpfilesUnit
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import compat, constants

PLUGINS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(constants.__file__))))


@pytest.mark.parametrize(
    "newer, older",
    [
        ("12.4.127", "12.4.99"),
        ("9.1.0", "9.0.12"),
        ("2.28.3", "2.28"),
        ("12.4.1", "12.4.x"),
        ("F13", "F12"),
        ("2.17a.3", "2.17a"),
        ("1.10", "1.9"),
    ],
)
def test_version_order_orders_library_and_bios_versions(newer, older):
    assert constants.version_order(newer) > constants.version_order(older)


def test_version_order_reads_the_numbers_in_order():
    assert constants.version_order("2.17a.3") == (2, 17, 3)
    assert constants.version_order(None) == constants.version_order("unknown") == ()


@pytest.mark.parametrize(
    "text, parts, expected",
    [
        ("6.8.0-45-generic", 3, (6, 8, 0)),
        ("6.8.0-45-generic", 2, (6, 8)),
        ("550.54.15", 1, (550,)),
        (" 5.15", 3, (5, 15)),
        ("v12.2", None, (12, 2)),
        ("580.159.04", None, (580, 159, 4)),
        ("generic", 3, None),
        (None, 3, None),
    ],
)
def test_version_prefix_reads_the_leading_numbers(text, parts, expected):
    assert constants.version_prefix(text, parts) == expected


@pytest.mark.parametrize(
    "text, parts, least, expected",
    [
        ("580.159.04-0ubuntu1", None, 1, "580.159.04"),
        ("580.159.04", 1, 1, "580"),
        ("6.8.0-45-generic", 2, 1, "6.8"),
        ("v12.2", None, 1, "12.2"),
        ("550.54.15.1", 3, 2, "550.54.15"),
        ("575-0ubuntu1", None, 2, None),
        ("generic", None, 1, None),
        ("", None, 1, None),
        (None, None, 1, None),
    ],
)
def test_version_text_is_the_leading_version_as_written(text, parts, least, expected):
    assert constants.version_text(text, parts, least) == expected


@pytest.mark.parametrize("text", ["580.159.04", "6.8.0-45-generic", "v12.2", " 5.15", "13.0+cu130", "7"])
def test_the_numeric_readings_are_the_text_reading(text):
    numbers = tuple(int(n) for n in constants.version_text(text).split("."))
    assert constants.version_prefix(text) == numbers == compat.parse_version(text)


def test_no_other_version_parser_in_plugins():
    """Versions are read by constants.py (and its strict form compat.parse_version): no
    LooseVersion, StrictVersion or packaging.version anywhere in plugins/."""
    found = []
    for base, _dirs, files in os.walk(PLUGINS):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(base, name)) as handle:
                    text = handle.read()
                found += [
                    (name, word) for word in ("LooseVersion", "StrictVersion", "packaging.version") if word in text
                ]
    assert found == []


def test_pcie_rates_and_addresses():
    assert constants.PCIE_GT_S[5] == 32.0 and constants.PCIE_GT_S[7] == 128.0
    assert sorted(constants.PCIE_GT_S) == list(range(1, 8))
    assert constants.PCI_ADDRESS.match("0000:3b:00.0") and constants.PCI_ADDRESS.match("10000:01:00.7")
    assert not constants.PCI_ADDRESS.match("3b:00.0")


def test_slowdown_reasons_are_known_clock_event_reasons():
    names = {name for _bit, name in constants.CLOCKS_EVENT_REASONS}
    assert set(constants.SLOWDOWN_REASONS) <= names
    assert "sw_power_cap" not in constants.SLOWDOWN_REASONS


def test_sysfs_and_irq_affinity_persist_through_one_tmpfiles_unit():
    for kind in (SysfsKind, IrqAffinityKind):
        assert issubclass(kind, TmpfilesUnit)
        for method in ("unit", "render", "persisted", "boot_value"):
            assert getattr(kind, method) is getattr(TmpfilesUnit, method), (kind, method)

    class Ctx:
        layer = "numa_irq"

    assert IrqAffinityKind().unit({}, Ctx()) == {"type": "dropin", "path": TMPFILES % "numa_irq", "kind": "tmpfiles"}
