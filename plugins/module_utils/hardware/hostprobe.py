# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Collectors for the GPU topology facts, written so that every input is recorded.

Three kinds of input feed the facts:

* files: sysfs, procfs and /etc contents, directory listings, symlink targets and binary
  files (PCI config space, kept as hex), read through a :class:`FileReader` that keeps
  what it saw (``recording``);
* nvml: raw NVML values per GPU as a plain JSON-able dict (:func:`collect_nvml`);
* commands: the output of the few commands run (``ldconfig -p``; on NVSwitch systems the
  fabric manager's unit state and version; :func:`collect_commands`).

:func:`capture` runs all three against the live host and returns the raw dict
``{"files", "nvml", "commands", ...}``. ``topology.assemble(raw)`` turns a raw dict into
the facts without touching the host, so a raw dict recorded on one machine replays to the
identical facts anywhere (unit tests, bug reports).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import contextlib
import ctypes
import datetime
import os
import re
import subprocess
import sys

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.acs import CONFIG_MAX_BYTES
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.fabric import FABRIC_MANAGER_UNIT, fabric_expected
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import (
    RAW_FORMAT_VERSION,
    ReplayReader,
    build_facts,
)

__all__ = [
    "FileReader",
    "ReplayReader",
    "capture",
    "collect_commands",
    "collect_nvml",
    "default_runner",
]

# Biggest chunk read from one file: sysfs attributes are one line; /proc/cpuinfo is the
# only large input and its first processor block is all the facts need.
DEFAULT_MAX_BYTES = 256 * 1024

# Lines of `ldconfig -p` kept in the recording: only the libraries the facts report.
LDCONFIG_KEEP = re.compile(r"\blib(cudart|cudnn|nccl)\.so")

COMMAND_TIMEOUT_S = 10


class FileReader:
    """Read files, directory listings and links under ``root``, recording every answer.

    Every method returns None when the path is missing or unreadable (sysfs attributes
    may fail with EINVAL or EIO, e.g. a NIC's speed while its link is down) and never
    raises. With ``record=True`` each answer is kept in ``recording`` under the
    absolute path asked for, in the format :class:`ReplayReader` reads back; binary
    reads go to ``recording["bytes"]`` as hex strings (the key appears with the first).
    """

    def __init__(self, root="/", record=True):
        self.root = root or "/"
        self.record = record
        self.recording = {"files": {}, "dirs": {}, "links": {}, "realpaths": {}}

    def _host_path(self, path):
        if self.root == "/":
            return path
        return os.path.join(self.root, path.lstrip("/"))

    def _keep(self, kind, path, value):
        if self.record:
            self.recording[kind][path] = value
        return value

    def read(self, path, max_bytes=DEFAULT_MAX_BYTES):
        """Text of a file (UTF-8, undecodable bytes replaced), or None."""
        try:
            with open(self._host_path(path), "rb") as handle:
                data = handle.read(max_bytes)
            text = data.decode("utf-8", "replace")
        except (IOError, OSError, ValueError):
            text = None
        return self._keep("files", path, text)

    def read_bytes(self, path, max_bytes=CONFIG_MAX_BYTES):
        """Bytes of a binary file (e.g. PCI config space), or None.

        Fewer bytes than the file holds may come back: sysfs gives a process without
        CAP_SYS_ADMIN only the first 64 bytes of a PCI device's config space.
        """
        try:
            with open(self._host_path(path), "rb") as handle:
                data = handle.read(max_bytes)
        except (IOError, OSError, ValueError):
            data = None
        if self.record:
            self.recording.setdefault("bytes", {})[path] = (
                binascii.hexlify(data).decode("ascii") if data is not None else None
            )
        return data

    def listdir(self, path):
        """Sorted entry names of a directory, or None."""
        try:
            names = sorted(os.listdir(self._host_path(path)))
        except (IOError, OSError, ValueError):
            names = None
        return self._keep("dirs", path, names)

    def readlink(self, path):
        """Target of a symbolic link as stored in the link, or None."""
        try:
            target = os.readlink(self._host_path(path))
        except (IOError, OSError, ValueError):
            target = None
        return self._keep("links", path, target)

    def realpath(self, path):
        """Canonical absolute path (links resolved) of an existing path, or None."""
        host_path = self._host_path(path)
        resolved = None
        try:
            if os.path.exists(host_path):
                resolved = os.path.realpath(host_path)
                if self.root != "/":
                    root = os.path.realpath(self.root)
                    if resolved == root:
                        resolved = "/"
                    elif resolved.startswith(root + os.sep):
                        resolved = resolved[len(root) :]
                    else:
                        resolved = None
        except (IOError, OSError, ValueError):
            resolved = None
        return self._keep("realpaths", path, resolved)


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _error_text(exc):
    text = str(exc).strip()
    return text or type(exc).__name__


def _call(errors, key, func, *args):
    """Run one NVML query; None (and the error under ``key``) when it fails."""
    try:
        return func(*args)
    except Exception as exc:  # noqa: BLE001 - every NVMLError_* and missing functions alike
        errors[key] = _error_text(exc)
        return None


def _first_api(nvml, names):
    for name in names:
        func = getattr(nvml, name, None)
        if func is not None:
            return name, func
    return None, None


def _pair(value):
    if value is None:
        return None
    return [int(value[0]), int(value[1])]


def _device_raw(nvml, index, handle, fabric=False):
    errors = {}
    dev = {"index": index, "errors": errors}

    def q(key, name, *args):
        func = getattr(nvml, name, None)
        if func is None:
            errors[key] = "%s not available in this pynvml" % name
            return None
        return _call(errors, key, func, handle, *args)

    dev["name"] = _text(q("name", "nvmlDeviceGetName"))
    dev["uuid"] = _text(q("uuid", "nvmlDeviceGetUUID"))
    dev["serial"] = _text(q("serial", "nvmlDeviceGetSerial"))
    dev["vbios"] = _text(q("vbios", "nvmlDeviceGetVbiosVersion"))
    pci = q("pci_bus_id", "nvmlDeviceGetPciInfo")
    dev["pci_bus_id"] = _text(getattr(pci, "busId", None)) if pci is not None else None
    dev["numa_node"] = q("numa_node", "nvmlDeviceGetNumaNodeId")

    dev["pcie_gen_current"] = q("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration")
    dev["pcie_gen_max"] = q("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration")
    dev["pcie_gen_gpu_max"] = q("pcie_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration")
    dev["pcie_width_current"] = q("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth")
    dev["pcie_width_max"] = q("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")

    dev["power_limit_mw"] = q("power_limit_mw", "nvmlDeviceGetPowerManagementLimit")
    dev["power_default_limit_mw"] = q("power_default_limit_mw", "nvmlDeviceGetPowerManagementDefaultLimit")
    dev["power_constraints_mw"] = _pair(q("power_constraints_mw", "nvmlDeviceGetPowerManagementLimitConstraints"))
    dev["power_enforced_limit_mw"] = q("power_enforced_limit_mw", "nvmlDeviceGetEnforcedPowerLimit")
    dev["power_usage_mw"] = q("power_usage_mw", "nvmlDeviceGetPowerUsage")

    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    dev["clock_sm_mhz"] = q("clock_sm_mhz", "nvmlDeviceGetClockInfo", sm)
    dev["clock_mem_mhz"] = q("clock_mem_mhz", "nvmlDeviceGetClockInfo", mem)
    dev["clock_sm_max_mhz"] = q("clock_sm_max_mhz", "nvmlDeviceGetMaxClockInfo", sm)
    dev["clock_mem_max_mhz"] = q("clock_mem_max_mhz", "nvmlDeviceGetMaxClockInfo", mem)
    dev["app_clock_sm_mhz"] = q("app_clock_sm_mhz", "nvmlDeviceGetApplicationsClock", sm)
    dev["app_clock_mem_mhz"] = q("app_clock_mem_mhz", "nvmlDeviceGetApplicationsClock", mem)
    dev["default_app_clock_sm_mhz"] = q("default_app_clock_sm_mhz", "nvmlDeviceGetDefaultApplicationsClock", sm)
    dev["default_app_clock_mem_mhz"] = q("default_app_clock_mem_mhz", "nvmlDeviceGetDefaultApplicationsClock", mem)

    dev["ecc_mode"] = _pair(q("ecc_mode", "nvmlDeviceGetEccMode"))
    corrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    volatile, aggregate = getattr(nvml, "NVML_VOLATILE_ECC", 0), getattr(nvml, "NVML_AGGREGATE_ECC", 1)
    counters = (
        ("ecc_volatile_corrected", corrected, volatile),
        ("ecc_volatile_uncorrected", uncorrected, volatile),
        ("ecc_aggregate_corrected", corrected, aggregate),
        ("ecc_aggregate_uncorrected", uncorrected, aggregate),
    )
    ecc_on = dev["ecc_mode"] is not None and bool(dev["ecc_mode"][0])
    for key, error_type, counter in counters:
        dev[key] = q(key, "nvmlDeviceGetTotalEccErrors", error_type, counter) if ecc_on else None
    rows = q("remapped_rows", "nvmlDeviceGetRemappedRows")
    dev["remapped_rows"] = [int(v) for v in rows] if rows is not None else None

    dev["persistence_mode"] = q("persistence_mode", "nvmlDeviceGetPersistenceMode")
    dev["compute_mode"] = q("compute_mode", "nvmlDeviceGetComputeMode")
    dev["mig_mode"] = _pair(q("mig_mode", "nvmlDeviceGetMigMode"))

    sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    temp_api, _func = _first_api(nvml, ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"))
    dev["temperature_c"] = q("temperature_c", temp_api, sensor) if temp_api else None

    # nvidia-ml-py >= 12.535 names them "clocks event reasons"; older ones "throttle reasons".
    api, _func = _first_api(
        nvml, ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
    )
    dev["clocks_event_reasons_api"] = api
    dev["clocks_event_reasons"] = q("clocks_event_reasons", api) if api else None

    meminfo = q("memory", "nvmlDeviceGetMemoryInfo")
    dev["memory_total_bytes"] = int(meminfo.total) if meminfo is not None else None
    dev["memory_used_bytes"] = int(meminfo.used) if meminfo is not None else None

    dev["nvlink"] = _nvlink_raw(nvml, handle, errors)
    if fabric:
        dev["fabric"] = _fabric_raw(nvml, handle)
    return dev


# pynvml entry points for the GPU fabric state, newest first, with the struct each fills.
FABRIC_APIS = (
    ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
    ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
)


def _fabric_raw(nvml, handle):
    """NVSwitch fabric state of one GPU as NVML reports it; unsupported when pynvml or the GPU lacks it."""
    out = {"api": None, "supported": False, "error": None}
    for api, struct_name in FABRIC_APIS:
        func, struct = getattr(nvml, api, None), getattr(nvml, struct_name, None)
        if func is None or struct is None:
            continue
        out["api"] = api
        info = struct()
        try:
            func(handle, ctypes.byref(info))
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported on GPUs outside a fabric, and the like
            out["error"] = _error_text(exc)
            return out
        health = getattr(info, "healthMask", None)
        out.update(
            {
                "supported": True,
                "state": int(info.state),
                "status": int(info.status),
                "clique_id": int(info.cliqueId),
                "cluster_uuid": binascii.hexlify(bytearray(info.clusterUuid)).decode("ascii"),
                "health_mask": int(health) if health is not None else None,
            }
        )
        return out
    out["error"] = "nvmlDeviceGetGpuFabricInfo not available in this pynvml"
    return out


def _nvlink_raw(nvml, handle, errors):
    """Per-link state; None when NVLink is not supported on this GPU."""
    max_links = getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)
    state_fn = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
    if state_fn is None:
        errors["nvlink"] = "nvmlDeviceGetNvLinkState not available in this pynvml"
        return None
    links = []
    for link in range(max_links):
        try:
            state = state_fn(handle, link)
        except Exception as exc:  # noqa: BLE001
            if link == 0:
                errors["nvlink"] = _error_text(exc)
                return None
            break  # past the last link of this GPU
        entry = {"link": link, "active": bool(state), "remote_pci_bus_id": None, "remote_device_type": None}
        if state:
            remote = _call(errors, "nvlink%d_remote" % link, nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            entry["remote_pci_bus_id"] = _text(getattr(remote, "busId", None)) if remote is not None else None
            type_fn = getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
            if type_fn is not None:
                entry["remote_device_type"] = _call(errors, "nvlink%d_remote_type" % link, type_fn, handle, link)
        links.append(entry)
    return links


def _import_pynvml():
    import pynvml  # noqa: PLC0415 - optional dependency, imported only when facts are gathered

    return pynvml


def _distribution_version(name):
    try:
        from importlib.metadata import version  # noqa: PLC0415 - Python 3.8+

        return version(name)
    except Exception:  # noqa: BLE001 - not installed as a distribution, or no metadata support
        return None


def collect_nvml(nvml=None, fabric=False):
    """Raw NVML values for every GPU, as plain JSON-able data.

    ``nvml`` is the pynvml module (imported here when not given). Never raises: when
    pynvml is missing or NVML cannot start, ``available`` is false and ``error`` says
    why; a single failing query leaves None for that value and its error under the
    device's ``errors``. With ``fabric=True`` each device also carries ``fabric``, its
    NVSwitch fabric state (:func:`_fabric_raw`).
    """
    out = {
        "available": False,
        "error": None,
        "pynvml_version": None,
        "driver_version": None,
        "nvml_version": None,
        "cuda_driver_version": None,
        "device_count": None,
        "devices": [],
        "topology": None,
        "errors": {},
    }
    if nvml is None:
        try:
            nvml = _import_pynvml()
        except Exception as exc:  # noqa: BLE001 - ImportError and a broken install alike
            out["error"] = "pynvml (nvidia-ml-py) is not importable by %s: %s" % (sys.executable, _error_text(exc))
            return out
    out["pynvml_version"] = getattr(nvml, "__version__", None)
    if out["pynvml_version"] is None and getattr(nvml, "__name__", None) == "pynvml":
        out["pynvml_version"] = _distribution_version("nvidia-ml-py")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001
        out["error"] = "NVML initialisation failed: %s" % _error_text(exc)
        return out
    out["available"] = True
    errors = out["errors"]
    try:
        out["driver_version"] = _text(_call(errors, "driver_version", nvml.nvmlSystemGetDriverVersion))
        out["nvml_version"] = _text(_call(errors, "nvml_version", nvml.nvmlSystemGetNVMLVersion))
        cuda_api, cuda_fn = _first_api(nvml, ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"))
        if cuda_fn is not None:
            out["cuda_driver_version"] = _call(errors, "cuda_driver_version", cuda_fn)
        count = _call(errors, "device_count", nvml.nvmlDeviceGetCount)
        out["device_count"] = count
        handles = []
        for index in range(count or 0):
            handle = _call(errors, "handle%d" % index, nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                continue
            handles.append(handle)
            out["devices"].append(_device_raw(nvml, index, handle, fabric=fabric))
        out["topology"] = _topology_raw(nvml, handles, errors)
    finally:
        with contextlib.suppress(Exception):  # shutting down is best effort
            nvml.nvmlShutdown()
    return out


def _topology_raw(nvml, handles, errors):
    """Common-ancestor level (NVML_TOPOLOGY_* number) for each GPU pair; None on the diagonal."""
    func = getattr(nvml, "nvmlDeviceGetTopologyCommonAncestor", None)
    n = len(handles)
    matrix = [[None] * n for _unused in range(n)]
    if func is None:
        return matrix
    for i in range(n):
        for j in range(i + 1, n):
            level = _call(errors, "topology%d_%d" % (i, j), func, handles[i], handles[j])
            matrix[i][j] = matrix[j][i] = level
    return matrix


def _which(name, extra_dirs=("/sbin", "/usr/sbin", "/usr/local/sbin")):
    dirs = os.environ.get("PATH", "").split(os.pathsep) + list(extra_dirs)
    for directory in dirs:
        candidate = os.path.join(directory, name)
        if directory and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def default_runner(argv):
    """Run argv (a list, never a shell string) with a timeout; return (rc, stdout, stderr)."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except (IOError, OSError) as exc:
        return 127, "", _error_text(exc)
    try:
        out, err = proc.communicate(timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return 124, _text(out), "timed out after %ss" % COMMAND_TIMEOUT_S
    return proc.returncode, _text(out), _text(err)


def _command(run, argv, missing, keep=None):
    """One command's recorded result; ``argv[0]`` None records ``missing`` instead of running."""
    entry = {"argv": None, "rc": None, "stdout": None, "stderr": None}
    if argv[0] is None:
        entry["stderr"] = missing
        return entry
    entry["argv"] = list(argv)
    rc, out, err = run(entry["argv"])
    entry["rc"] = rc
    lines = (out or "").splitlines()
    entry["stdout"] = "".join(line + "\n" for line in lines if keep is None or keep.search(line))
    entry["stderr"] = (err or "").strip()[:2000] or None
    return entry


def collect_commands(run=None, libraries=True, ldconfig=None, fabric=False):
    """Output of the commands the facts need, as recorded data.

    ``run(argv) -> (rc, stdout, stderr)`` runs one command (``module.run_command`` in the
    module, :func:`default_runner` elsewhere). With ``libraries``, ``ldconfig -p`` runs
    once and only its lines about the reported libraries are kept. With ``fabric`` (an
    NVSwitch system), the fabric manager's systemd unit state and its version
    (``nv-fabricmanager --version``, or the installed package when the binary is
    missing) are read.
    """
    commands = {}
    run = run or default_runner
    if libraries:
        ldconfig = ldconfig or _which("ldconfig")
        entry = _command(run, [ldconfig, "-p"], "ldconfig not found", keep=LDCONFIG_KEEP)
        entry["filter"] = LDCONFIG_KEEP.pattern
        commands["ldconfig_p"] = entry
    if fabric:
        commands["fabricmanager_unit"] = _command(
            run,
            [_which("systemctl"), "show", "--property=LoadState,ActiveState,SubState", FABRIC_MANAGER_UNIT],
            "systemctl not found",
        )
        binary = _which("nv-fabricmanager")
        commands["fabricmanager_version"] = _command(run, [binary, "--version"], "nv-fabricmanager not found")
        if binary is None:
            dpkg, rpm = _which("dpkg-query"), _which("rpm")
            if dpkg:
                argv = [dpkg, "-W", "-f", "${db:Status-Status} ${Version}\n", "nvidia-fabricmanager*"]
            else:
                argv = [rpm, "-qa", "--queryformat", "installed %{VERSION}\n", "nvidia-fabric*manager*"]
            commands["fabricmanager_package"] = _command(run, argv, "no dpkg-query or rpm")
    return commands


def collect_topo_matrix(run=None, nvidia_smi=None):
    """``nvidia-smi topo -m`` as a recorded command, to compare NVIDIA's path classes with the facts'.

    Not part of :func:`capture` (the facts do not read it); ``tests/gpu/capture_topology.py``
    adds it to the recordings it writes.
    """
    return _command(run or default_runner, [nvidia_smi or _which("nvidia-smi"), "topo", "-m"], "nvidia-smi not found")


def utc_now():
    """Current UTC time as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def capture(nics=True, libraries=True, run=None, nvml=None, root="/", collected_at=None):
    """Record every input of the facts on the live host and return the raw dict.

    ``topology.assemble(raw)`` gives the facts; it reads nothing but ``raw``.
    """
    reader = FileReader(root=root, record=True)
    nvml_raw = collect_nvml(nvml, fabric=True)
    raw = {
        "format": RAW_FORMAT_VERSION,
        "collected_at": collected_at or utc_now(),
        "options": {"nics": bool(nics), "libraries": bool(libraries)},
        "python": {"prefix": sys.prefix, "executable": sys.executable, "version": sys.version.split()[0]},
        "nvml": nvml_raw,
        # The fabric manager matters only where NVSwitches are: on the PCI bus, or at the
        # far end of the GPUs' NVLinks.
        "commands": collect_commands(run, libraries=libraries, fabric=fabric_expected(reader, nvml_raw)),
    }
    # Walk the host exactly as the facts builder does; the reader keeps every answer.
    build_facts(reader, raw)
    raw["files"] = reader.recording
    return raw
