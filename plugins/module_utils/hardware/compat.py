# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Driver / CUDA / cuDNN / NCCL compatibility data and version helpers, stdlib only.

Sources:
- ``CUDA_TOOLKIT_MIN_DRIVER``: NVIDIA CUDA Toolkit release notes, table "CUDA Toolkit and
  Corresponding Driver Versions" (the "Toolkit Driver Version" column, Linux x86_64).
  Keys are toolkit releases "major.minor" or "major.minor.update"; for a runtime version
  that matches several keys the most specific one wins ("12.6.3" -> the 12.6 Update 3 row).
- ``MINOR_COMPAT_MIN_DRIVER``: the same notes, table "CUDA Toolkit and Minimum Required
  Driver Version for CUDA Minor Version Compatibility" (11.x: 450.80.02, 12.x: 525.60.13,
  13.x: 580.65.06; the cuDNN support matrix lists the same floors for 12.x and 13.x).

The rule applied by :func:`cuda_driver_compat`:
1. the driver is at least the toolkit's own minimum -> ``ok``;
2. otherwise, when the driver reports a CUDA driver API of the same major as the runtime,
   the driver is at least the major's minor-version-compatibility floor, and that major is
   in ``minor_compat_majors`` -> ``minor_compat`` (runs; PTX compiled by the newer toolkit
   cannot be JIT-compiled by the older driver, and APIs added in later minors return
   "cudaErrorCallRequiresNewerDriver");
3. otherwise -> ``incompatible``.
Minor version compatibility is trusted by default for CUDA 12 and 13 only
(``DEFAULT_MINOR_COMPAT_MAJORS``). For 11.x, framework builds commonly carried PTX for newer
architectures, and CUDA 11.6 containers on driver 470.57.02 (CUDA 11.4) broke in the field:
add 11 to the list to trust it anyway.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.constants import version_prefix

# Toolkit release -> minimum Linux x86_64 driver ("Toolkit Driver Version").
CUDA_TOOLKIT_MIN_DRIVER = {
    "11.0": "450.36.06",  # 11.0.1 RC
    "11.0.2": "450.51.05",
    "11.0.3": "450.51.06",
    "11.1": "455.23",
    "11.1.1": "455.32",
    "11.2": "460.27.03",
    "11.2.1": "460.32.03",
    "11.2.2": "460.32.03",
    "11.3": "465.19.01",
    "11.3.1": "465.19.01",
    "11.4": "470.42.01",
    "11.4.1": "470.57.02",
    "11.4.2": "470.57.02",
    "11.4.3": "470.82.01",
    "11.4.4": "470.82.01",
    "11.5": "495.29.05",
    "11.5.1": "495.29.05",
    "11.5.2": "495.29.05",
    "11.6": "510.39.01",
    "11.6.1": "510.47.03",
    "11.6.2": "510.47.03",
    "11.7": "515.43.04",
    "11.7.1": "515.65.01",
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.0.1": "525.85.12",
    "12.1": "530.30.02",
    "12.1.1": "530.30.02",
    "12.2": "535.54.03",
    "12.2.1": "535.86.09",
    "12.2.2": "535.104.05",
    "12.3": "545.23.06",
    "12.3.1": "545.23.08",
    "12.3.2": "545.23.08",
    "12.4": "550.54.14",
    "12.4.1": "550.54.15",
    "12.5": "555.42.02",
    "12.5.1": "555.42.06",
    "12.6": "560.28.03",
    "12.6.1": "560.35.03",
    "12.6.2": "560.35.03",
    "12.6.3": "560.35.05",
    "12.8": "570.26",
    "12.8.1": "570.124.06",
    "12.9": "575.51.03",
    "12.9.1": "575.57.08",
    "13.0": "580.65.06",
    "13.0.1": "580.82.07",
}

# CUDA major -> minimum driver for minor version compatibility within that major.
MINOR_COMPAT_MIN_DRIVER = {
    11: "450.80.02",
    12: "525.60.13",
    13: "580.65.06",
}

DEFAULT_MINOR_COMPAT_MAJORS = (12, 13)

# Library expectations per CUDA major. cuDNN: which cuDNN majors ship builds for a CUDA
# major (cuDNN support matrix: cuDNN 8.x for CUDA 10.2/11.x/12.x, cuDNN 9.x for 11.8, 12.x
# and 13.x). NCCL: builds are per CUDA major; the floor is the first NCCL release line
# published for that major (NCCL release notes, "Compatibility").
CUDNN_MAJORS_FOR_CUDA = {
    11: (8, 9),
    12: (8, 9),
    13: (9,),
}
NCCL_MIN_FOR_CUDA = {
    11: "2.7.8",
    12: "2.16.2",
    13: "2.27.7",
}

# Driver builds known to be bad. Users extend this list with entries of the same shape.
DEFAULT_DRIVER_DENYLIST = (
    {
        "version": "515.65.01",
        "reason": (
            "corrupted CUDA-graph stream reuse with apex DDP + fused AdamW + AMP O2 "
            "(field report); use another 515 build or a newer branch"
        ),
    },
)


def parse_version(text):
    """Parse "580.159.04", "13.0", "2.28.3", "v12.2" into a tuple of ints.

    Leading digits-and-dots are used (``constants.version_prefix``); a suffix such as "+cu130"
    or "-1ubuntu1" is ignored. Raises ValueError for text without a leading number.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise ValueError("not a version: %r" % (text,))
    parsed = version_prefix(text)
    if parsed is None:
        raise ValueError("not a version: %r" % (text,))
    return parsed


def try_parse_version(text):
    """Like parse_version, but None for None or unparseable input."""
    if text is None:
        return None
    try:
        return parse_version(text)
    except ValueError:
        return None


def compare_versions(a, b):
    """Return -1, 0 or 1; missing trailing components count as 0 ("13.0" == "13.0.0")."""
    va = parse_version(a) if not isinstance(a, tuple) else a
    vb = parse_version(b) if not isinstance(b, tuple) else b
    n = max(len(va), len(vb))
    va = va + (0,) * (n - len(va))
    vb = vb + (0,) * (n - len(vb))
    return (va > vb) - (va < vb)


def version_ge(a, b):
    return compare_versions(a, b) >= 0


def format_version(v):
    return ".".join(str(p) for p in v)


def min_driver_for_cuda(cuda_version):
    """Minimum driver for a CUDA toolkit/runtime version, from the most specific table row.

    "12.6.77" (a cudart build number) maps to the 12.6 row: component build numbers
    (>= 20) are not toolkit update numbers. Returns (min_driver, row) or (None, None) when
    the major.minor is not in the table.
    """
    v = parse_version(cuda_version)
    if len(v) < 2:
        v = v + (0,)
    major_minor = "%d.%d" % (v[0], v[1])
    if len(v) >= 3 and 0 < v[2] < 20:
        key = "%s.%d" % (major_minor, v[2])
        while key not in CUDA_TOOLKIT_MIN_DRIVER and v[2] > 0:
            # an update newer than the table knows: use the latest update row listed
            v = (v[0], v[1], v[2] - 1)
            key = "%s.%d" % (major_minor, v[2]) if v[2] else major_minor
        if key in CUDA_TOOLKIT_MIN_DRIVER:
            return CUDA_TOOLKIT_MIN_DRIVER[key], key
    if major_minor in CUDA_TOOLKIT_MIN_DRIVER:
        return CUDA_TOOLKIT_MIN_DRIVER[major_minor], major_minor
    return None, None


def cuda_driver_compat(driver_version, cuda_version, driver_cuda_version=None, minor_compat_majors=None):
    """Decide whether a driver runs a CUDA runtime version.

    driver_version: "580.159.04"; cuda_version: runtime/toolkit "13.0.96" or "13.0";
    driver_cuda_version: the driver API version NVML reports ("13.0"), optional.
    Returns a dict: status (ok | minor_compat | incompatible | unknown), reason,
    required_driver, table_row, minor_compat_floor.
    """
    if minor_compat_majors is None:
        minor_compat_majors = DEFAULT_MINOR_COMPAT_MAJORS
    minor_compat_majors = {int(m) for m in minor_compat_majors}
    out = {
        "status": "unknown",
        "reason": "",
        "driver": driver_version,
        "cuda": cuda_version,
        "driver_cuda": driver_cuda_version,
        "required_driver": None,
        "table_row": None,
        "minor_compat_floor": None,
    }
    drv = try_parse_version(driver_version)
    cud = try_parse_version(cuda_version)
    if drv is None or cud is None:
        out["reason"] = "driver version %r or CUDA version %r is unknown" % (driver_version, cuda_version)
        return out
    dcuda = try_parse_version(driver_cuda_version)
    major = cud[0]
    required, row = min_driver_for_cuda(cuda_version)
    out["required_driver"] = required
    out["table_row"] = row
    floor = MINOR_COMPAT_MIN_DRIVER.get(major)
    out["minor_compat_floor"] = floor

    if dcuda is not None and dcuda[0] < major:
        out["status"] = "incompatible"
        out["reason"] = "driver %s provides CUDA %s; the CUDA %s runtime needs a CUDA %d.x driver" % (
            driver_version,
            driver_cuda_version,
            cuda_version,
            major,
        )
        return out
    if required is not None and version_ge(drv, required):
        out["status"] = "ok"
        out["reason"] = "driver %s >= %s, the minimum for CUDA %s" % (driver_version, required, row)
        return out
    if required is None and dcuda is not None and compare_versions(dcuda[:2], cud[:2]) >= 0:
        out["status"] = "ok"
        out["reason"] = "driver %s provides CUDA %s >= runtime %s (CUDA %s not in the driver table)" % (
            driver_version,
            driver_cuda_version,
            cuda_version,
            format_version(cud[:2]),
        )
        return out
    same_major = dcuda is None or dcuda[0] == major
    if floor is not None and same_major and version_ge(drv, floor):
        if major in minor_compat_majors:
            out["status"] = "minor_compat"
            out["reason"] = (
                "driver %s is below %s (CUDA %s) but >= %s, the CUDA %d.x minor version compatibility "
                "floor: runs, without PTX JIT of newer PTX and without APIs added after the driver's CUDA %s"
            ) % (driver_version, required, row or cuda_version, floor, major, driver_cuda_version or "version")
            return out
        out["status"] = "incompatible"
        out["reason"] = (
            "driver %s is below %s, the minimum for CUDA %s; minor version compatibility is not "
            "trusted for CUDA %d.x here (add %d to the trusted majors to accept it)"
        ) % (driver_version, required, row or cuda_version, major, major)
        return out
    out["status"] = "incompatible"
    if required is None:
        out["reason"] = "CUDA %s is not in the driver table and driver %s does not provide it" % (
            cuda_version,
            driver_version,
        )
    else:
        out["reason"] = "driver %s is below %s, the minimum for CUDA %s" % (driver_version, required, row)
    return out


def check_library_expectations(cuda_version, cudnn_version=None, nccl_version=None):
    """Compare cuDNN / NCCL versions against the CUDA major. Returns a list of problems
    (dicts with library, version, cuda, expected, message); empty when all is as expected
    or unknown."""
    problems = []
    cud = try_parse_version(cuda_version)
    if cud is None:
        return problems
    major = cud[0]
    cudnn = try_parse_version(cudnn_version)
    if cudnn is not None and major in CUDNN_MAJORS_FOR_CUDA:
        allowed = CUDNN_MAJORS_FOR_CUDA[major]
        if cudnn[0] not in allowed:
            problems.append(
                {
                    "library": "cudnn",
                    "version": cudnn_version,
                    "cuda": cuda_version,
                    "expected": "cuDNN major in %s" % (list(allowed),),
                    "message": "cuDNN %s has no build for CUDA %d.x (expected cuDNN %s)"
                    % (cudnn_version, major, " or ".join(str(a) for a in allowed)),
                }
            )
    nccl = try_parse_version(nccl_version)
    if nccl is not None and major in NCCL_MIN_FOR_CUDA:
        floor = NCCL_MIN_FOR_CUDA[major]
        if not version_ge(nccl, floor):
            problems.append(
                {
                    "library": "nccl",
                    "version": nccl_version,
                    "cuda": cuda_version,
                    "expected": ">= %s" % floor,
                    "message": "NCCL %s predates the first NCCL release for CUDA %d.x (%s)"
                    % (nccl_version, major, floor),
                }
            )
    return problems


def normalize_denylist_entry(entry, where="driver_denylist"):
    """Validate one deny-list entry and return it normalized.

    Accepted shapes (reason is always required):
      {version: "515.65.01", reason: ...}            exact match
      {prefix: "515.65", reason: ...}                "515.65" and "515.65.*"
      {min: "515.43", max: "515.76", reason: ...}     inclusive range; either bound optional
    Raises ValueError naming ``where`` on bad input.
    """
    if not isinstance(entry, dict):
        raise ValueError("%s: each entry must be a mapping with version/prefix/min/max and reason" % where)
    unknown = set(entry) - {"version", "prefix", "min", "max", "reason"}
    if unknown:
        raise ValueError("%s: unknown key(s) %s" % (where, ", ".join(sorted(unknown))))
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("%s: reason must be a non-empty string" % where)
    kinds = [k for k in ("version", "prefix") if entry.get(k) not in (None, "")]
    has_range = entry.get("min") not in (None, "") or entry.get("max") not in (None, "")
    if len(kinds) + (1 if has_range else 0) != 1:
        raise ValueError("%s: give exactly one of version, prefix, or min/max" % where)
    out = {"reason": reason.strip()}
    for key in ("version", "prefix", "min", "max"):
        val = entry.get(key)
        if val in (None, ""):
            continue
        val = str(val).strip()
        if try_parse_version(val) is None:
            raise ValueError("%s: %s %r is not a version" % (where, key, val))
        out[key] = val
    if "min" in out and "max" in out and compare_versions(out["min"], out["max"]) > 0:
        raise ValueError("%s: min %s is above max %s" % (where, out["min"], out["max"]))
    return out


def denylist_entry_matches(entry, version):
    """True when a normalized entry matches a driver version string."""
    v = try_parse_version(version)
    if v is None:
        return False
    if "version" in entry:
        return compare_versions(v, entry["version"]) == 0 and len(v) == len(parse_version(entry["version"]))
    if "prefix" in entry:
        p = parse_version(entry["prefix"])
        return v[: len(p)] == p
    if "min" in entry and compare_versions(v, entry["min"]) < 0:
        return False
    return not ("max" in entry and compare_versions(v, entry["max"]) > 0)


def build_denylist(user_entries=None, use_default=True, where="driver_denylist"):
    """Default entries (when use_default) followed by the user's, all normalized; each
    carries ``source`` (default | user)."""
    out = []
    if use_default:
        for e in DEFAULT_DRIVER_DENYLIST:
            n = normalize_denylist_entry(e, "default deny-list")
            n["source"] = "default"
            out.append(n)
    for i, e in enumerate(user_entries or []):
        n = normalize_denylist_entry(e, "%s[%d]" % (where, i))
        n["source"] = "user"
        out.append(n)
    return out


def denylist_hits(version, denylist):
    """Entries of a normalized deny-list that match ``version``."""
    return [e for e in denylist if denylist_entry_matches(e, version)]
