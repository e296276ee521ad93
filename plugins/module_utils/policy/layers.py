# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine layers' settings: each layer's variables and facts turned into the settings the
engine takes (``{kind, key, value, var, ...}``), so that a layer's tasks/settings.yml only reads
the host and calls a filter. The filters in plugins/filter/ (memory_settings, kernel_settings,
cpu_settings, io_settings, numa_irq_*, gpu_settings_settings, nccl_variables, nccl_settings) check
their arguments and hand them here. Which disks io tunes is hardware/cpu_io_facts.py's io_targets.

Standard library only; a value the layer cannot use raises ValueError (the filter turns it into
a filter error).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import math
import posixpath
import re

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.parsers import (
    parse_meminfo_kib,
    parse_mount_size_kib,
)

# ---------------------------------------------------------------------------------------------
# memory

LIMITS_FILE = "/etc/security/limits.d/60-stacktune-memlock.conf"
LIMITS = (
    "# Managed by stacktune (layer memory): locked-memory limit for pinned host memory and RDMA.\n"
    "*    soft    memlock    {0}\n"
    "*    hard    memlock    {0}\n"
    "root soft    memlock    {0}\n"
    "root hard    memlock    {0}\n"
)
GIB_IN_KIB = 1048576


def slurped_text(results, path):
    """The text of ``path`` among M(ansible.builtin.slurp) loop results (each with item and content), or ''."""
    for result in results or []:
        if isinstance(result, dict) and result.get("item") == path and result.get("content"):
            return base64.b64decode(result["content"]).decode("utf-8", "replace")
    return ""


def auto_shm_size(meminfo, mounts):
    """("<half of RAM in whole GiB>G", whether /dev/shm is smaller than that now) from the text of
    /proc/meminfo and /proc/mounts."""
    total = parse_meminfo_kib(meminfo).get("MemTotal")
    if total is None:
        raise ValueError("memory_shm_size is auto but /proc/meminfo has no MemTotal line")
    half_gib = int(math.ceil(total / 2.0 / GIB_IN_KIB))
    current_kib = parse_mount_size_kib(mounts, "/dev/shm") or 0
    return "%dG" % half_gib, current_kib < half_gib * GIB_IN_KIB


def memory_settings(
    shm_size="auto", memlock=None, thp_enabled=None, thp_defrag=None, hugepages=None, enabled=True, proc=None
):
    """Settings for /dev/shm, memlock, THP and hugepages; ``proc``: the slurp results of
    /proc/meminfo and /proc/mounts (read for ``shm_size: auto`` only)."""
    if not enabled:
        return []
    out = []
    if shm_size is not None:
        if shm_size == "auto":
            value, wanted = auto_shm_size(slurped_text(proc, "/proc/meminfo"), slurped_text(proc, "/proc/mounts"))
        else:
            value, wanted = shm_size, True
        if wanted:
            out.append({"kind": "mount", "key": "/dev/shm", "option": "size", "value": value, "var": "memory_shm_size"})
    if memlock is not None:
        out.append(
            {
                "kind": "file",
                "key": LIMITS_FILE,
                "value": LIMITS.format(memlock),
                "mode": "0644",
                "var": "memory_memlock",
            }
        )
    for name, key, value in (
        ("memory_thp_enabled", "/sys/kernel/mm/transparent_hugepage/enabled", thp_enabled),
        ("memory_thp_defrag", "/sys/kernel/mm/transparent_hugepage/defrag", thp_defrag),
    ):
        if value is not None:
            out.append({"kind": "sysfs", "key": key, "value": value, "var": name})
    if hugepages is not None:
        out.append({"kind": "sysctl", "key": "vm.nr_hugepages", "value": str(hugepages), "var": "memory_hugepages"})
    return out


# ---------------------------------------------------------------------------------------------
# kernel

ASPM_POLICY = "/sys/module/pcie_aspm/parameters/policy"


def boot_arg_kind(os_family):
    """The engine kind that persists boot arguments: grubby edits the BLS boot entries of
    RHEL-family hosts (their GRUB never reads /etc/default/grub.d); a GRUB drop-in elsewhere."""
    return "grubby_arg" if os_family == "RedHat" else "kernel_arg"


def kernel_settings(profile, sysctl=None, floors=(), aspm_policy=None, cmdline_args=None, os_family="", enabled=True):
    """Settings from a sysctl profile (``{name: value}``), the user's sysctls, the ASPM policy and
    the boot arguments. A profile sysctl named in ``floors`` and not set by the user is a minimum
    (the engine's ``at_least``); the user's sysctls override the profile and are applied exactly."""
    if not enabled:
        return []
    sysctl = dict(sysctl or {})
    at_least = [name for name in floors or () if name not in sysctl]
    exact = {k: v for k, v in (profile or {}).items() if k not in at_least}
    exact.update(sysctl)
    out = [{"key": k, "value": v, "kind": "sysctl", "var": "kernel_sysctl"} for k, v in exact.items()]
    out += [
        {"key": k, "value": v, "kind": "sysctl", "var": "kernel_sysctl", "at_least": True}
        for k, v in (profile or {}).items()
        if k in at_least
    ]
    if aspm_policy is not None:
        out.append({"kind": "sysfs", "key": ASPM_POLICY, "value": aspm_policy, "var": "kernel_aspm_policy"})
    kind = boot_arg_kind(os_family)
    out += [{"key": k, "value": v, "kind": kind, "var": "kernel_cmdline_args"} for k, v in (cmdline_args or {}).items()]
    return out


# ---------------------------------------------------------------------------------------------
# gpu_settings

# (setting key, role variable) in the order they are applied
GPU_FIELDS = (
    ("persistence_mode", "gpu_settings_persistence_mode"),
    ("power_limit_w", "gpu_settings_power_limit_watts"),
    ("compute_mode", "gpu_settings_compute_mode"),
    ("app_clocks", "gpu_settings_app_clocks"),
)


def gpu_settings(gpus, values, gpu_count=0, enabled=True):
    """One ``nvml`` setting per value that is not null and per GPU of ``gpus`` (``all`` or a list
    of indexes); ``values``: ``{setting key: value}``; none on a host without GPUs."""
    if not enabled or int(gpu_count or 0) <= 0:
        return []
    targets = ["all"] if gpus == "all" else list(gpus or [])
    return [
        {"kind": "nvml", "key": key, "gpu": gpu, "var": var, "value": values.get(key)}
        for key, var in GPU_FIELDS
        if values.get(key) is not None
        for gpu in targets
    ]


# ---------------------------------------------------------------------------------------------
# nccl

NCCL_HEADER = (
    "# Managed by stacktune (layer nccl): derived from this host's GPU and NIC facts.\n"
    "# Changes here are reported as drift and restored; set values through the\n"
    "# stacktune.gpu.nccl role variables (nccl_socket_ifname, nccl_ib_hca, nccl_topo_file, nccl_env).\n"
)


def _unique(items):
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def nccl_hcas(facts):
    """Every RDMA device, those nearest to a GPU first (in GPU order: facts gpudirect.nearest_nic,
    PCIe path classes as NCCL reads them), then the others by name."""
    every = sorted(_unique(n["rdma_device"] for n in (facts.get("nics") or []) if n.get("rdma_device")))
    near = []
    for entry in (facts.get("gpudirect") or {}).get("nearest_nic") or []:
        if entry.get("rdma"):
            near += [nic for nic in _flatten(entry.get("nics")) if nic in every]
    near = _unique(near)
    return near + [h for h in every if h not in near]


def _flatten(value):
    if isinstance(value, (list, tuple)):
        return [item for part in value for item in _flatten(part)]
    return [value]


def nccl_variables(facts, socket_ifname="auto", socket_ifname_auto="", ib_hca="auto", topo_file=None, env=None):
    """The NCCL variables of the host: NCCL_SOCKET_IFNAME, NCCL_IB_HCA (``=`` and the RDMA devices
    of nccl_hcas with ``auto``) and NCCL_TOPO_FILE where not empty, then ``env`` over them."""
    hcas = nccl_hcas(facts or {})
    system = (
        ("NCCL_SOCKET_IFNAME", socket_ifname_auto if socket_ifname == "auto" else socket_ifname),
        ("NCCL_IB_HCA", (("=" + ",".join(hcas)) if hcas else "") if ib_hca == "auto" else ib_hca),
        ("NCCL_TOPO_FILE", topo_file or ""),
    )
    out = {name: value for name, value in system if value != ""}
    out.update(env or {})
    return out


def nccl_line_value(value):
    """A value as the file writes it: a boolean as 1 or 0."""
    return str(int(value) if isinstance(value, bool) else value)


def nccl_settings(variables, conf_path, enabled=True):
    """The ``file`` setting of the NCCL configuration file (``NAME=value`` lines under a header),
    none when the layer is off or there is no variable."""
    if not enabled or not variables:
        return []
    content = NCCL_HEADER + "".join("%s=%s\n" % (name, nccl_line_value(value)) for name, value in variables.items())
    return [{"kind": "file", "key": conf_path, "value": content, "mode": "0644", "var": "nccl_conf_path"}]


# ---------------------------------------------------------------------------------------------
# numa_irq

NIC_FILTERS = ("rdma", "physical", "none")
PCI_DEVICES = "/sys/bus/pci/devices"


def _candidates(facts, gpus, nics, nic_filter):
    out = []
    if gpus:
        for g in facts.get("gpus") or []:
            if g.get("pci_bus_id"):
                out.append(
                    {
                        "device": str(g["pci_bus_id"]).lower(),
                        "name": "gpu%s" % g.get("index"),
                        "numa_node": g.get("numa_node"),
                        "cpus": g.get("local_cpulist"),
                        "var": "numa_irq_gpus",
                    }
                )
    for n in facts.get("nics") or []:
        if not n.get("pci_address"):
            continue
        chosen = (
            n.get("name") in nics
            if nics
            else (nic_filter == "physical" or (nic_filter == "rdma" and n.get("rdma_device")))
        )
        if chosen:
            out.append(
                {
                    "device": str(n["pci_address"]).lower(),
                    "name": "nic:%s" % n.get("name"),
                    "numa_node": n.get("numa_node"),
                    "cpus": n.get("local_cpulist"),
                    "var": "numa_irq_nics" if nics else "numa_irq_nic_filter",
                }
            )
    return out


def numa_irq_devices(facts, gpus=True, nics=None, nic_filter="rdma", cpus_override=None):
    """The devices whose interrupts follow their NUMA node (the GPUs with ``gpus``; the NICs named
    in ``nics``, else those ``nic_filter`` picks), each once, with ``skip`` (why not, or None);
    ``cpus_override`` (PCI address: CPU list) pins a device to the CPUs it names."""
    override = {str(k).lower(): str(v) for k, v in (cpus_override or {}).items()}
    out, seen = [], set()
    for c in _candidates(facts, bool(gpus), list(nics or []), nic_filter):
        if c["device"] in seen:
            continue
        seen.add(c["device"])
        if c["device"] in override:
            c.update(cpus=override[c["device"]], var="numa_irq_cpus_override", skip=None)
        elif not c["cpus"]:
            c["skip"] = "no local CPUs reported for the device"
        elif c["numa_node"] is None:
            c["skip"] = "no NUMA node reported for the device (local CPUs %s)" % c["cpus"]
        else:
            c["skip"] = None
        out.append(c)
    return out


def numa_irq_notes(devices):
    """One line per device left alone: ``gpu0 (0000:17:00.0) not pinned: why``."""
    return ["%s (%s) not pinned: %s" % (d["name"], d["device"], d["skip"]) for d in devices or [] if d.get("skip")]


def numa_irq_settings(devices, irqbalance="ban", irqbalance_file=None, irqs=None, irqbalance_args=""):
    """Engine settings: the affinity of every pinned device, and irqbalance's ban list when asked."""
    pinned = [d for d in devices or [] if not d.get("skip")]
    out = [
        {"kind": "irq_affinity", "key": d["device"], "device": d["device"], "value": d["cpus"], "var": d["var"]}
        for d in pinned
    ]
    irqs = list(irqs or [])
    if irqbalance == "ban" and irqbalance_file and irqs:
        args = ([irqbalance_args] if str(irqbalance_args or "").strip() else []) + ["--banirq=%s" % i for i in irqs]
        out.append(
            {
                "kind": "env_var",
                "path": irqbalance_file,
                "key": "IRQBALANCE_ARGS",
                "value": " ".join(args),
                # the engine's refusal of a value names the variable it came from
                "var": "numa_irq_irqbalance_args" if str(irqbalance_args or "").strip() else "numa_irq_irqbalance",
            }
        )
    return out


NUMBER = re.compile(r"^[0-9]+$")


def numa_irq_msi_dirs(devices):
    """The msi_irqs folder of every pinned device (``skip`` empty)."""
    return ["%s/%s/msi_irqs" % (PCI_DEVICES, d["device"]) for d in devices or [] if not d.get("skip")]


def _msi_device(path):
    """The device of a file /sys/bus/pci/devices/<device>/msi_irqs/<irq>."""
    parts = str(path).split("/")
    return parts[5] if len(parts) > 5 else None


def numa_irq_legacy_devices(devices, msi_files=None):
    """The pinned devices that have no MSI interrupt among ``msi_files`` (M(ansible.builtin.find)'s files)."""
    with_msi = [_msi_device(f.get("path")) for f in msi_files or []]
    return [d["device"] for d in devices or [] if not d.get("skip") and d["device"] not in with_msi]


def numa_irq_irqs(msi_files=None, legacy=None):
    """The interrupts of the pinned devices, in order, each once: the names of their MSI files and
    the legacy interrupt read from sysfs (slurp results); 0 and anything not a number are left out."""
    names = [posixpath.basename(str(f.get("path"))) for f in msi_files or []]
    names += [
        base64.b64decode(r["content"]).decode("utf-8", "replace").strip()
        for r in legacy or []
        if isinstance(r, dict) and r.get("content") is not None
    ]
    return sorted({int(n) for n in names if NUMBER.match(n) and int(n) != 0})


def first_existing(stat_results):
    """The item of the first M(ansible.builtin.stat) loop result whose file exists, or None."""
    for r in stat_results or []:
        if isinstance(r, dict) and isinstance(r.get("stat"), dict) and r["stat"].get("exists"):
            return r.get("item")
    return None


# ---------------------------------------------------------------------------------------------
# cpu

# The kernel arguments that cap the C-state, for intel_idle and for the ACPI processor driver.
MAX_CSTATE_ARGS = ("intel_idle.max_cstate", "processor.max_cstate")


def cpu_settings(
    sysfs,
    idle_states=None,
    idle_max_latency_us=None,
    max_cstate=None,
    idle_reason=None,
    cpu_root="/sys/devices/system/cpu",
):
    """Settings from the cpu layer's sysfs rows (``{var, key, value, ...}``; a null value is left
    out), its idle-latency limit (every idle state above it disabled; all of them where the facts
    list none) and its C-state cap (boot arguments)."""
    out = [
        dict(row, kind="sysfs", missing="unsupported", value=str(row["value"]))
        for row in sysfs
        if row.get("value") is not None
    ]
    if idle_max_latency_us is not None:
        states = idle_states or []
        keys = [] if states else [cpu_root + "/cpu*/cpuidle/state*/disable"]
        limit = int(idle_max_latency_us)
        keys += [
            "%s/cpu*/cpuidle/%s/disable" % (cpu_root, st.get("state"))
            for st in states
            if st.get("latency_us") is not None and st["latency_us"] > limit
        ]
        out += [
            {
                "kind": "sysfs",
                "key": key,
                "value": "1",
                "missing": "unsupported",
                "reason": idle_reason,
                "var": "cpu_idle_max_latency_us",
            }
            for key in keys
        ]
    if max_cstate is not None:
        out += [
            {"kind": "kernel_arg", "key": arg, "value": str(max_cstate), "var": "cpu_max_cstate"}
            for arg in MAX_CSTATE_ARGS
        ]
    return out


# ---------------------------------------------------------------------------------------------
# io


def io_settings(
    targets,
    disks=None,
    read_ahead_kb=None,
    read_ahead_at_least=False,
    scheduler=None,
    scheduler_auto=None,
    nr_requests=None,
    writeback=False,
    dirty_expire_centisecs=None,
    dirty_writeback_centisecs=None,
    reason_gone=None,
):
    """Settings: readahead per target (io_targets), scheduler and queue depth per member disk (the
    scheduler first: a scheduler change resets nr_requests), writeback timers."""
    disks = disks or {}
    out = []
    for t in targets:
        if t.get("disk") is None:
            out.append(
                {
                    "kind": "sysfs",
                    "key": "/sys/dev/block/%s/queue/read_ahead_kb" % t.get("dev"),
                    "value": "0",
                    "missing": "unsupported",
                    "reason": t.get("reason"),
                    "var": "io_paths",
                }
            )
        elif read_ahead_kb is not None:
            out.append(
                {
                    "kind": "sysfs",
                    "key": "/sys/block/%s/queue/read_ahead_kb" % t["disk"],
                    "value": str(read_ahead_kb),
                    "at_least": bool(read_ahead_at_least),
                    "missing": "unsupported",
                    "reason": reason_gone,
                    "var": "io_read_ahead_kb",
                }
            )
    # the scheduler comes before nr_requests, which a scheduler change resets
    for d in _unique(m for t in targets if t.get("disk") for m in t.get("members") or [] if m is not None):
        if scheduler is not None:
            auto = scheduler_auto or {}
            chosen = (
                (auto.get("nvme") if disks[d].get("nvme") else auto.get("other")) if scheduler == "auto" else scheduler
            )
            out.append(
                {
                    "kind": "sysfs",
                    "key": "/sys/block/%s/queue/scheduler" % d,
                    "value": chosen,
                    "choices_from": "scheduler",
                    "missing": "unsupported",
                    "reason": reason_gone,
                    "var": "io_scheduler",
                }
            )
        if nr_requests is not None:
            out.append(
                {
                    "kind": "sysfs",
                    "key": "/sys/block/%s/queue/nr_requests" % d,
                    "value": str(nr_requests),
                    "missing": "unsupported",
                    "reason": reason_gone,
                    "var": "io_nr_requests",
                }
            )
    if writeback:
        out.append(
            {
                "kind": "sysctl",
                "key": "vm.dirty_expire_centisecs",
                "value": str(dirty_expire_centisecs),
                "var": "io_dirty_expire_centisecs",
            }
        )
        out.append(
            {
                "kind": "sysctl",
                "key": "vm.dirty_writeback_centisecs",
                "value": str(dirty_writeback_centisecs),
                "var": "io_dirty_writeback_centisecs",
            }
        )
    return out
