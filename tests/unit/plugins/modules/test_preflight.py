# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""stacktune.gpu.preflight as Ansible runs it: options in, JSON out, failed or not.

The kernel log is read through `dmesg`, which here is replaced by a stand-in that returns
text recorded on the H200 test host (plus one XID line in the driver's format), because a
CI container's dmesg is usually not readable.
"""

from __future__ import absolute_import, division, print_function

import json

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.stacktune.gpu.plugins.modules import preflight

H200_DMESG = (
    "[    0.604859] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)\n"
    "[    1.270547] NVRM: gpuClearFbhubPoisonIntrForBug2924523_GA100: FBHUB Interrupt detected. Clearing it.\n"
)
XID_LINE = (
    "[ 8812.114455] NVRM: Xid (PCI:0000:00:05): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
)


def facts(driver="580.159.04"):
    return {
        "schema_version": 1,
        "collected_at": "2026-11-29T14:00:00Z",
        "reason": None,
        "gpu_count": 1,
        "driver": {
            "nvml_version": driver,
            "kernel_module_version": driver,
            "agree": True,
            "cuda_driver_version": "13.0",
        },
        "libraries": {"cuda_runtime": "13.0.96", "cudnn": "9.19.0", "nccl": "2.28.3", "sources": {}},
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H200",
                "pci_bus_id": "0000:00:05.0",
                "power": {"limit_w": 700.0, "max_limit_w": 700.0},
                "ecc": {"volatile_uncorrected": 0, "aggregate_uncorrected": 0, "remapped_rows_pending": False},
                "throttle_reasons": ["gpu_idle"],
            }
        ],
        "findings": [],
    }


@pytest.fixture
def dmesg(monkeypatch):
    state = {"rc": 0, "out": H200_DMESG, "err": "", "argv": None, "bin": "/usr/bin/dmesg"}

    def get_bin_path(self, name, *a, **kw):
        return state["bin"] if name == "dmesg" else None

    def run_command(self, argv, *a, **kw):
        state["argv"] = argv
        return state["rc"], state["out"], state["err"]

    monkeypatch.setattr(preflight.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(preflight.AnsibleModule, "run_command", run_command)
    return state


def run_module(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        preflight.main()
    return json.loads(capsys.readouterr().out)


def test_healthy_host_passes(capsys, dmesg):
    res = run_module(capsys, {"facts": facts(), "expected_gpu_count": 1, "psu_capacity_watts": 1500})
    assert "failed" not in res
    assert res["changed"] is False
    assert res["ok"] is True
    assert res["blocking"] == []
    assert dmesg["argv"] == ["/usr/bin/dmesg", "--level=err,warn"]
    assert res["kernel_log"]["source"] == "dmesg --level=err,warn"
    statuses = {c["name"]: c["status"] for c in res["checks"]}
    assert statuses["kernel_xid"] == "pass"
    assert statuses["power_budget"] == "pass"


def test_denylisted_driver_fails_with_message(capsys, dmesg):
    res = run_module(capsys, {"facts": facts("515.65.01"), "kernel_log": False})
    assert res["failed"] is True
    assert res["msg"].startswith("Failed to pass preflight: ")
    assert "driver_denylisted [critical] host: driver 515.65.01 is deny-listed" in res["msg"]
    assert dmesg["argv"] is None
    assert res["kernel_log"]["error"] == "not read (kernel_log=false)"


def test_user_denylist_entries(capsys, dmesg):
    args = {"facts": facts(), "driver_denylist": [{"version": "580.159.04", "reason": "ticket OPS-7"}]}
    res = run_module(capsys, args)
    assert res["failed"] is True
    assert "ticket OPS-7" in res["msg"]


def test_fail_on_never_reports_only(capsys, dmesg):
    res = run_module(capsys, {"facts": facts("515.65.01"), "fail_on": "never"})
    assert "failed" not in res
    assert res["ok"] is False
    # 515.65.01 is deny-listed and also too old for the CUDA 13 runtime on the host
    assert sorted(f["id"] for f in res["findings"] if f["severity"] == "critical") == [
        "driver_cuda_incompatible",
        "driver_denylisted",
    ]


def test_fail_on_warning_catches_warnings(capsys, dmesg):
    f = facts()
    f["gpus"][0]["throttle_reasons"] = ["sw_thermal_slowdown"]
    assert "failed" not in run_module(capsys, {"facts": f})
    res = run_module(capsys, {"facts": f, "fail_on": "warning"})
    assert res["failed"] is True
    assert "gpu_throttled [warning] gpu0" in res["msg"]


def test_xid_from_dmesg_fails_the_host(capsys, dmesg):
    dmesg["out"] = H200_DMESG + XID_LINE
    res = run_module(capsys, {"facts": facts()})
    assert res["failed"] is True
    xid = next(f for f in res["findings"] if f["id"] == "kernel_xid")
    assert xid["subject"] == "gpu0"
    assert xid["evidence"]["xid"] == 79
    assert xid["evidence"]["source"] == "dmesg --level=err,warn"


def test_kern_log_fallback(capsys, dmesg, tmp_path, monkeypatch):
    dmesg["rc"] = 1
    dmesg["err"] = "dmesg: read kernel buffer failed: Operation not permitted"
    kern = tmp_path / "kern.log"
    kern.write_text("Nov 29 13:02:11 h1 kernel: " + XID_LINE.split("] ", 1)[1])
    monkeypatch.setattr(preflight, "KERN_LOG_PATHS", (str(kern),))
    res = run_module(capsys, {"facts": facts(), "fail_on": "never"})
    assert res["kernel_log"]["source"] == str(kern)
    assert res["kernel_log"]["tried"] == ["dmesg --level=err,warn", str(kern)]
    assert [f["evidence"]["xid"] for f in res["findings"] if f["id"] == "kernel_xid"] == [79]


def test_unreadable_kernel_log_is_info_not_failure(capsys, dmesg, tmp_path, monkeypatch):
    dmesg["bin"] = None
    monkeypatch.setattr(preflight, "KERN_LOG_PATHS", (str(tmp_path / "missing.log"),))
    res = run_module(capsys, {"facts": facts(), "fail_on": "warning"})
    assert "failed" not in res
    f = next(f for f in res["findings"] if f["id"] == "kernel_log_unreadable")
    assert f["severity"] == "info"
    assert "dmesg: not installed" in f["message"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"psu_capacity_watts": 0}, "psu_capacity_watts must be a positive number"),
        ({"platform_watts": -5}, "platform_watts must be a number >= 0"),
        ({"power_headroom_percent": 150}, "power_headroom_percent must be a number from 0"),
        ({"expected_gpu_count": -2}, "expected_gpu_count must be a whole number"),
        ({"driver_denylist": [{"version": "1.2.3"}]}, "driver_denylist[0]: reason"),
    ],
)
def test_bad_options_name_the_option(capsys, dmesg, args, needle):
    args = dict(args, facts=facts())
    res = run_module(capsys, args)
    assert res["failed"] is True
    assert res["msg"].startswith("Failed to validate preflight options: ")
    assert needle in res["msg"]
    assert "stacktune_" not in res["msg"]


def test_garbage_facts_fail_cleanly(capsys, dmesg):
    res = run_module(capsys, {"facts": {"gpus": "not a list"}, "kernel_log": False})
    assert res["failed"] is True
    assert res["msg"].startswith("Failed to run preflight checks on the facts: ")
    assert "Traceback" not in json.dumps(res)
