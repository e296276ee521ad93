# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The driver role's findings: the preflight's driver findings, the installed and loaded
versions, the CUDA the driver supports and the package holds (the driver_findings filter
hands them to the role)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import version_text
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.compat import (
    compare_versions,
    try_parse_version,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.findings import finding

# The preflight findings about the driver; the others are preflight's own to report.
PREFLIGHT_IDS = (
    "driver_denylisted",
    "driver_cuda_incompatible",
    "driver_cuda_minor_compat",
    "driver_version_mismatch",
    "library_version_mismatch",
)


# Packages whose version is the driver's.
DRIVER_PACKAGES = re.compile(r"^(nvidia-driver|nvidia-dkms|kmod-nvidia|libnvidia-compute|cuda-drivers)")
EPOCH = re.compile(r"^[0-9]+:")


def installed_packages(lines):
    """``{name: version}`` of the installed packages in the package query's lines
    (``ii <TAB>name<TAB>version``: dpkg-query's status abbreviation, rpm's query format alike)."""
    out = {}
    for line in lines or []:
        fields = str(line).split("\t")
        if fields[0].startswith("ii") and len(fields) > 2:
            out[fields[1]] = fields[2]
    return out


def pattern_regex(patterns):
    """One regular expression for shell-like package name patterns (``*`` any text, ``?`` one character)."""
    return "^(%s)$" % "|".join(re.escape(p).replace("\\*", ".*").replace("\\?", ".") for p in patterns)


def package_driver_versions(installed, packages):
    """The driver versions the driver packages among ``packages`` carry ("580.65.06" of
    "1:580.65.06-0ubuntu1"), sorted, each once."""
    found = []
    for name in packages:
        if not DRIVER_PACKAGES.match(name):
            continue
        version = EPOCH.sub("", str(installed.get(name) or ""), count=1)
        text = version_text(version, least=2) if version[:1].isdigit() else None
        if text and text not in found:
            found.append(text)
    return sorted(found)


def driver_packages(lines, patterns):
    """The installed NVIDIA packages that match ``patterns`` (sorted) and the driver versions they carry."""
    installed = installed_packages(lines)
    regex = re.compile(pattern_regex(patterns))
    packages = sorted(name for name in installed if regex.match(name))
    return {"packages": packages, "versions": package_driver_versions(installed, packages)}


HELD = re.compile(r"^\S+ hold$")
# The package managers whose holds the driver role manages (dpkg selections, dnf versionlock).
HOLD_MANAGERS = ("apt", "dnf", "dnf5")


def held_packages(lines):
    """The packages dpkg-query's ``<name> <want>`` lines list as held."""
    return [str(line).split(" ", 1)[0] for line in lines or [] if HELD.match(str(line))]


def _changed_items(registered):
    return [r.get("item") for r in (registered or {}).get("results") or [] if isinstance(r, dict) and r.get("changed")]


def holds_summary(packages, hold, pkg_mgr, apt_hold=None, apt_release=None, dnf_lock=None):
    """What holding (``hold``) or releasing ``packages`` changed, from the registered results of the
    role's apt hold and release loops and its dnf versionlock task: ``{changed, held, released,
    unsupported}`` (``unsupported``: packages on a package manager without holds)."""
    dnf_changed = bool((dnf_lock or {}).get("changed"))
    held = _changed_items(apt_hold) + (list(packages) if dnf_changed and hold else [])
    released = _changed_items(apt_release) + (list(packages) if dnf_changed and not hold else [])
    return {
        "changed": bool(_changed_items(apt_hold) + _changed_items(apt_release)) or dnf_changed,
        "held": held,
        "released": released,
        "unsupported": len(packages) > 0 and pkg_mgr not in HOLD_MANAGERS,
    }


def _host(finding_id, severity, message):
    return finding(finding_id, severity, "host", message)


def _versions(facts, package_versions, packages, declared):
    out = []
    driver = facts.get("driver") or {}
    module = driver.get("kernel_module_version")
    loaded = module or driver.get("nvml_version")
    installed = ", ".join(str(v) for v in package_versions)
    if len(package_versions) > 1:
        out.append(
            _host(
                "driver_packages_disagree",
                "warning",
                "installed driver packages carry different versions: %s (%s)" % (installed, ", ".join(packages)),
            )
        )
    if module and package_versions and module not in package_versions:
        out.append(
            _host(
                "driver_reboot_pending",
                "critical",
                "the loaded kernel module is %s but the installed driver packages are %s: reboot (or reload the"
                " nvidia modules) to run what is installed" % (module, installed),
            )
        )
    if not declared:
        return out
    if loaded and loaded != declared:
        out.append(
            _host(
                "driver_version_unexpected",
                "critical",
                "the loaded driver is %s, driver_nvidia_version declares %s" % (loaded, declared),
            )
        )
    elif not loaded and package_versions and declared not in package_versions:
        out.append(
            _host(
                "driver_version_unexpected",
                "critical",
                "the installed driver packages are %s, driver_nvidia_version declares %s" % (installed, declared),
            )
        )
    elif not loaded and not package_versions:
        out.append(
            _host(
                "driver_not_found",
                "info",
                "driver_nvidia_version declares %s but no NVIDIA driver is loaded or installed (%s)"
                % (declared, facts.get("reason") or "no GPU"),
            )
        )
    return out


def _cuda(facts, expected):
    if not expected:
        return []
    out = []
    cuda = (facts.get("driver") or {}).get("cuda_driver_version")
    runtime = (facts.get("libraries") or {}).get("cuda_runtime")
    supported, wanted = try_parse_version(cuda), try_parse_version(expected)
    if supported is not None and wanted is not None and compare_versions(supported, wanted) < 0:
        out.append(
            _host(
                "driver_cuda_too_old",
                "critical",
                "the driver supports CUDA up to %s, driver_expected_cuda needs %s" % (cuda, expected),
            )
        )
    if runtime and (try_parse_version(runtime) or ())[:2] != (wanted or ())[:2]:
        out.append(
            _host(
                "cuda_runtime_differs",
                "warning",
                "the CUDA runtime on the host is %s, driver_expected_cuda is %s" % (runtime, expected),
            )
        )
    return out


def _holds(holds, hold):
    if holds is None:
        return []
    if hold and holds.get("held"):
        return [
            _host(
                "driver_packages_not_held",
                "warning",
                "driver_hold is true but these packages are not held: %s" % ", ".join(holds["held"]),
            )
        ]
    if not hold and holds.get("released"):
        return [
            _host(
                "driver_packages_held",
                "info",
                "driver_hold is false but these packages are still held: %s" % ", ".join(holds["released"]),
            )
        ]
    return []


def driver_findings(
    facts,
    preflight=None,
    package_versions=None,
    packages=None,
    declared=None,
    expected_cuda=None,
    holds=None,
    hold=False,
):
    """The driver findings of one host, in the order they are printed (plain data: a dict of
    facts, lists and dicts as a module or the filter hands them)."""
    package_versions = list(package_versions or [])
    out = [
        finding(f.get("id"), f.get("severity"), f.get("subject"), f.get("message"), f.get("evidence"))
        for f in preflight or []
        if f.get("id") in PREFLIGHT_IDS
    ]
    out += _versions(facts, package_versions, list(packages or []), str(declared) if declared else "")
    out += _cuda(facts, str(expected_cuda) if expected_cuda else "")
    out += _holds(holds, bool(hold))
    return out
