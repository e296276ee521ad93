# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Driver/CUDA compatibility table, minor version compatibility, deny-list, versions."""

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware import compat as c


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("580.159.04", (580, 159, 4)),
        ("13.0", (13, 0)),
        ("2.28.3", (2, 28, 3)),
        ("v12.2", (12, 2)),
        ("2.11.0+cu130", (2, 11, 0)),
        ("9.19.0.56", (9, 19, 0, 56)),
        (12, (12,)),
    ],
)
def test_parse_version(text, expected):
    assert c.parse_version(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", None, "..1", True])
def test_parse_version_rejects(bad):
    with pytest.raises(ValueError):
        c.parse_version(bad)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("13.0", "13.0.0", 0),
        ("580.159.04", "580.65.06", 1),
        ("525.60.13", "525.85.12", -1),
        ("470.57.02", "470.57.2", 0),
        ("2.9.9", "2.10.0", -1),
    ],
)
def test_compare_versions(a, b, expected):
    assert c.compare_versions(a, b) == expected


@pytest.mark.parametrize(
    ("cuda", "driver", "row"),
    [
        ("11.6", "510.39.01", "11.6"),
        ("11.4.1", "470.57.02", "11.4.1"),
        ("12.6.77", "560.28.03", "12.6"),  # cudart build number, not an update number
        ("12.6.3", "560.35.05", "12.6.3"),
        ("12.9.5", "575.57.08", "12.9.1"),  # an update newer than the table: latest row listed
        ("13.0.96", "580.65.06", "13.0"),
        ("13.0", "580.65.06", "13.0"),
    ],
)
def test_min_driver_for_cuda(cuda, driver, row):
    assert c.min_driver_for_cuda(cuda) == (driver, row)


def test_table_covers_every_release_from_11_0_to_13_0():
    for major_minor in ["11.%d" % m for m in range(9)] + ["12.%d" % m for m in (0, 1, 2, 3, 4, 5, 6, 8, 9)] + ["13.0"]:
        assert major_minor in c.CUDA_TOOLKIT_MIN_DRIVER
    # the table never asks less of a later release
    keys = sorted(c.CUDA_TOOLKIT_MIN_DRIVER, key=c.parse_version)
    for a, b in zip(keys, keys[1:]):
        assert c.compare_versions(c.CUDA_TOOLKIT_MIN_DRIVER[a], c.CUDA_TOOLKIT_MIN_DRIVER[b]) <= 0, (a, b)


def test_field_report_470_with_cuda_11_6_is_incompatible():
    res = c.cuda_driver_compat("470.57.02", "11.6", "11.4")
    assert res["status"] == "incompatible"
    assert res["required_driver"] == "510.39.01"
    assert "not trusted for CUDA 11.x" in res["reason"]


def test_11_x_minor_compat_when_the_user_trusts_it():
    res = c.cuda_driver_compat("470.57.02", "11.6", "11.4", minor_compat_majors=[11, 12, 13])
    assert res["status"] == "minor_compat"
    assert res["minor_compat_floor"] == "450.80.02"


def test_h200_host_580_with_cuda_13_is_ok():
    res = c.cuda_driver_compat("580.159.04", "13.0.96", "13.0")
    assert res["status"] == "ok"
    assert res["required_driver"] == "580.65.06"


def test_525_60_13_runs_cuda_12_2_by_minor_version_compatibility():
    res = c.cuda_driver_compat("525.60.13", "12.2", "12.0")
    assert res["status"] == "minor_compat"
    assert res["required_driver"] == "535.54.03"
    assert res["minor_compat_floor"] == "525.60.13"


def test_below_the_major_floor_is_incompatible():
    res = c.cuda_driver_compat("520.61.05", "12.2", "11.8")
    assert res["status"] == "incompatible"
    assert "CUDA 12.x driver" in res["reason"]


def test_newer_major_runtime_than_driver_is_incompatible_even_if_driver_unknown_major():
    res = c.cuda_driver_compat("575.57.08", "13.0", "12.9")
    assert res["status"] == "incompatible"


def test_newer_driver_runs_older_runtime():
    assert c.cuda_driver_compat("580.159.04", "11.8", "13.0")["status"] == "ok"


def test_runtime_missing_from_table_is_decided_by_the_driver_api_version():
    assert c.cuda_driver_compat("590.10.01", "13.1", "13.1")["status"] == "ok"


def test_unknown_versions_are_unknown_not_ok():
    assert c.cuda_driver_compat(None, "12.2")["status"] == "unknown"
    assert c.cuda_driver_compat("550.54.14", None)["status"] == "unknown"


def test_library_expectations():
    assert c.check_library_expectations("13.0.96", "9.19.0", "2.28.3") == []
    probs = c.check_library_expectations("13.0", "8.9.7", "2.21.5")
    assert {p["library"] for p in probs} == {"cudnn", "nccl"}
    assert c.check_library_expectations("12.4", "9.1.0.70", "2.21.5") == []
    assert c.check_library_expectations(None, "8.9", "2.1") == []


def test_default_denylist_holds_515_65_01_with_the_field_reason():
    dl = c.build_denylist()
    hits = c.denylist_hits("515.65.01", dl)
    assert len(hits) == 1
    assert "CUDA-graph" in hits[0]["reason"]
    assert hits[0]["source"] == "default"
    assert c.denylist_hits("515.65.02", dl) == []
    assert c.denylist_hits("515.65", dl) == []
    assert c.build_denylist(use_default=False) == []


def test_user_entries_exact_prefix_range():
    user = [
        {"version": "550.54.14", "reason": "hang"},
        {"prefix": "535.54", "reason": "Xid 119"},
        {"min": "560.28.03", "max": "560.35.03", "reason": "range"},
        {"min": "600", "reason": "untested branch"},
    ]
    dl = c.build_denylist(user)
    assert [e["source"] for e in dl] == ["default", "user", "user", "user", "user"]
    assert [e["reason"] for e in c.denylist_hits("550.54.14", dl)] == ["hang"]
    assert c.denylist_hits("550.54.15", dl) == []
    assert [e["reason"] for e in c.denylist_hits("535.54.03", dl)] == ["Xid 119"]
    assert c.denylist_hits("535.5", dl) == []
    assert c.denylist_hits("535.540.1", dl) == []
    assert [e["reason"] for e in c.denylist_hits("560.35.03", dl)] == ["range"]
    assert c.denylist_hits("560.35.05", dl) == []
    assert [e["reason"] for e in c.denylist_hits("610.43.02", dl)] == ["untested branch"]
    assert c.denylist_hits("580.159.04", dl) == []


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"version": "550.54.14"}, "reason"),
        ({"version": "550.54.14", "reason": " "}, "reason"),
        ({"reason": "x"}, "exactly one"),
        ({"version": "1.2", "prefix": "1", "reason": "x"}, "exactly one"),
        ({"version": "abc", "reason": "x"}, "not a version"),
        ({"min": "600", "max": "500", "reason": "x"}, "above max"),
        ({"version": "1.2", "reason": "x", "why": "y"}, "unknown key"),
        ("515.65.01", "mapping"),
    ],
)
def test_bad_user_entries_name_the_variable_and_index(entry, needle):
    with pytest.raises(ValueError) as exc:
        c.build_denylist([{"version": "1.0", "reason": "ok"}, entry], where="preflight_driver_denylist")
    assert "preflight_driver_denylist[1]" in str(exc.value)
    assert needle in str(exc.value)
