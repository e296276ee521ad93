# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The layer filters that replaced Jinja in the layers' tasks/settings.yml (kernel_settings,
gpu_settings_settings, nccl_variables, nccl_settings, numa_irq_msi_dirs, numa_irq_legacy_devices,
numa_irq_irqs, numa_irq_irqbalance_file, driver_packages): each gives what the Jinja it replaced gave, rendered
here by ansible-core's own templating from the same facts (tests/unit/fixtures/topology, assembled
as gpu_topology_facts does) and variables."""

from __future__ import absolute_import, division, print_function

import base64
import copy
import json
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.stacktune.gpu.plugins.filter import driver as driver_filters
from ansible_collections.stacktune.gpu.plugins.filter import gpu_settings as gpu_filters
from ansible_collections.stacktune.gpu.plugins.filter import kernel as kernel_filters
from ansible_collections.stacktune.gpu.plugins.filter import nccl as nccl_filters
from ansible_collections.stacktune.gpu.plugins.filter import numa_irq as numa_filters
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import assemble

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core before 2.19 templates every string

    def trust_as_template(text):
        return text


FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "topology")


def facts(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return assemble(json.load(handle))


def render(expression, **variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def b64(text):
    return base64.b64encode(text.encode()).decode()


# --------------------------------------------------------------------------------------- kernel

# roles/kernel/vars/main.yml and tasks/settings.yml before the kernel_settings filter
OLD_KERNEL_FLOORS = "{{ __kernel_floor_sysctls | reject('in', kernel_sysctl) | list }}"
OLD_KERNEL_BOOT_KIND = (
    "{{ ((ansible_facts['os_family'] | default('')) == 'RedHat') | ternary('grubby_arg', 'kernel_arg') }}"
)
OLD_KERNEL = """{{
        (kernel_enabled | bool) | ternary(
          (__kernel_profiles[kernel_profile] | dict2items | rejectattr('key', 'in', __kernel_floors) | items2dict
             | combine(kernel_sysctl) | dict2items
            | map('combine', {'kind': 'sysctl', 'var': 'kernel_sysctl'}) | list)
          + (__kernel_profiles[kernel_profile] | dict2items | selectattr('key', 'in', __kernel_floors)
            | map('combine', {'kind': 'sysctl', 'var': 'kernel_sysctl', 'at_least': true}) | list)
          + ((kernel_aspm_policy is not none) | ternary(
              [{'kind': 'sysfs', 'key': '/sys/module/pcie_aspm/parameters/policy',
                'value': kernel_aspm_policy, 'var': 'kernel_aspm_policy'}], []))
          + (kernel_cmdline_args | dict2items
            | map('combine', {'kind': __kernel_boot_kind, 'var': 'kernel_cmdline_args'}) | list),
          [])
      }}"""
TRAINING = {
    "vm.swappiness": "10",
    "vm.dirty_ratio": "40",
    "vm.dirty_background_ratio": "10",
    "kernel.numa_balancing": "0",
    "vm.max_map_count": "1048576",
}
KERNEL_CASES = [
    dict(profile=TRAINING, sysctl={}, aspm=None, args={}, family="Debian", enabled=True),
    dict(
        profile=TRAINING,
        sysctl={"vm.swappiness": "1", "net.core.rmem_max": 16777216},
        aspm="performance",
        args={"iommu": "pt", "intel_iommu": "on"},
        family="RedHat",
        enabled=True,
    ),
    dict(
        profile=TRAINING,
        sysctl={"vm.max_map_count": "262144"},
        aspm=None,
        args={"iommu": "pt"},
        family=None,
        enabled=True,
    ),
    dict(profile={}, sysctl={"vm.swappiness": "5"}, aspm="default", args={}, family="Debian", enabled=True),
    dict(
        profile=TRAINING,
        sysctl={"vm.swappiness": "1"},
        aspm="performance",
        args={"iommu": "pt"},
        family="RedHat",
        enabled=False,
    ),
]


@pytest.mark.parametrize("case", KERNEL_CASES)
def test_kernel_settings_give_what_the_jinja_gave(case):
    variables = {
        "__kernel_profiles": {"p": case["profile"]},
        "kernel_profile": "p",
        "__kernel_floor_sysctls": ["vm.max_map_count"],
        "kernel_sysctl": case["sysctl"],
        "kernel_aspm_policy": case["aspm"],
        "kernel_cmdline_args": case["args"],
        "kernel_enabled": case["enabled"],
        "ansible_facts": {} if case["family"] is None else {"os_family": case["family"]},
    }
    variables["__kernel_floors"] = render(OLD_KERNEL_FLOORS, **variables)
    variables["__kernel_boot_kind"] = render(OLD_KERNEL_BOOT_KIND, **variables)
    old = render(OLD_KERNEL, **variables)
    new = kernel_filters.kernel_settings(
        case["profile"],
        sysctl=case["sysctl"],
        floors=["vm.max_map_count"],
        aspm_policy=case["aspm"],
        cmdline_args=case["args"],
        os_family=(case["family"] or ""),
        enabled=case["enabled"],
    )
    assert new == old


def test_kernel_settings_floor_and_boot_kind():
    settings = kernel_filters.kernel_settings(
        TRAINING, floors=["vm.max_map_count"], cmdline_args={"iommu": "pt"}, os_family="RedHat"
    )
    assert settings[-2] == {
        "key": "vm.max_map_count",
        "value": "1048576",
        "kind": "sysctl",
        "var": "kernel_sysctl",
        "at_least": True,
    }
    assert settings[-1] == {"key": "iommu", "value": "pt", "kind": "grubby_arg", "var": "kernel_cmdline_args"}
    with pytest.raises(AnsibleFilterError, match="floors"):
        kernel_filters.kernel_settings(TRAINING, floors="vm.max_map_count")


# ---------------------------------------------------------------------------------- gpu_settings

OLD_GPU_LOOP = "{{ __gpu_settings_fields | rejectattr('value', 'none') | product(__gpu_settings_targets) | list }}"
OLD_GPU_ITEM = """{{ __gpu_settings_settings + [{'kind': 'nvml', 'key': item.0.key, 'gpu': item.1, 'var': item.0.var,
                                     'value': item.0.value}] }}"""


def old_gpu_settings(gpus, values, gpu_count, enabled):
    """The loop of roles/gpu_settings/tasks/settings.yml before gpu_settings_settings."""
    fields = [
        {"key": "persistence_mode", "value": values[0], "var": "gpu_settings_persistence_mode"},
        {"key": "power_limit_w", "value": values[1], "var": "gpu_settings_power_limit_watts"},
        {"key": "compute_mode", "value": values[2], "var": "gpu_settings_compute_mode"},
        {"key": "app_clocks", "value": values[3], "var": "gpu_settings_app_clocks"},
    ]
    out = []
    if not (enabled and int(gpu_count) > 0):
        return out
    targets = ["all"] if gpus == "all" else gpus
    for item in render(OLD_GPU_LOOP, __gpu_settings_fields=fields, __gpu_settings_targets=targets):
        out = render(OLD_GPU_ITEM, __gpu_settings_settings=out, item=item)
    return out


@pytest.mark.parametrize(
    "gpus, values, fixture, enabled",
    [
        ("all", (True, None, None, None), "h200.json", True),
        ([0, 1], (True, 500, "exclusive_process", {"memory": 2619, "graphics": 1980}), "h200x2.json", True),
        ("all", (None, 600, None, None), "degraded_8gpu_constructed.json", True),
        ("all", (True, 600, None, None), "no_gpu_debian.json", True),
        ("all", (True, 600, None, None), "h200.json", False),
        ("all", (None, None, None, None), "h200.json", True),
    ],
)
def test_gpu_settings_settings_give_what_the_loop_gave(gpus, values, fixture, enabled):
    count = facts(fixture)["gpu_count"]
    new = gpu_filters.gpu_settings_settings(gpus, *values, gpu_count=count, enabled=enabled)
    assert new == old_gpu_settings(gpus, values, count, enabled)


def test_gpu_settings_settings_refuses_a_string_of_gpus():
    with pytest.raises(AnsibleFilterError, match="list of GPU indexes"):
        gpu_filters.gpu_settings_settings("0,1", persistence_mode=True, gpu_count=2)


# ------------------------------------------------------------------------------------------ nccl

OLD_NCCL_VARS = {
    "__nccl_all_hcas": """{{ ansible_facts.stacktune.nics | default([], true) | selectattr('rdma_device')
         | map(attribute='rdma_device') | unique | sort }}""",
    "__nccl_near_hcas": """{{ (ansible_facts.stacktune.gpudirect | default({}, true)).nearest_nic | default([], true)
         | selectattr('rdma') | map(attribute='nics') | flatten | select('in', __nccl_all_hcas) | unique }}""",
    "__nccl_hcas": "{{ [__nccl_near_hcas, __nccl_all_hcas | reject('in', __nccl_near_hcas) | list] | flatten }}",
}
OLD_NCCL_SYSTEM = {
    "NCCL_SOCKET_IFNAME": "{{ __nccl_socket_ifname_auto if nccl_socket_ifname == 'auto' else nccl_socket_ifname }}",
    "NCCL_IB_HCA": (
        "{{ (('=' ~ __nccl_hcas | join(',')) if __nccl_hcas else '') if nccl_ib_hca == 'auto' else nccl_ib_hca }}"
    ),
    "NCCL_TOPO_FILE": "{{ nccl_topo_file | default('', true) }}",
}
OLD_NCCL_VARIABLES = """{{ (__nccl_system | dict2items | rejectattr('value', 'equalto', '') | list | items2dict)
         | combine(nccl_env) }}"""
OLD_NCCL_CONTENT = """# Managed by stacktune (layer nccl): derived from this host's GPU and NIC facts.
# Changes here are reported as drift and restored; set values through the
# stacktune.gpu.nccl role variables (nccl_socket_ifname, nccl_ib_hca, nccl_topo_file, nccl_env).
{% for name, value in nccl_variables.items() %}
{{ name }}={{ (value | int) if value is boolean else value }}
{% endfor %}
"""
OLD_NCCL_SETTINGS = """{{ [{'kind': 'file', 'key': nccl_conf_path, 'value': __nccl_content, 'mode': '0644',
                               'var': 'nccl_conf_path'}]
         if (nccl_enabled | bool and nccl_variables | length > 0) else [] }}"""


def nearest_first():
    """The 8-GPU host with GPUDirect paths: GPU 0 nearest mlx5_2, GPU 1 nearest mlx5_0 and mlx5_2."""
    host = copy.deepcopy(facts("degraded_8gpu_constructed.json"))
    near = host["gpudirect"]["nearest_nic"]
    near[0]["nics"] = ["mlx5_2"]
    near[1]["nics"] = ["mlx5_0", "mlx5_2", "mlx5_9"]
    near[2].update(nics=["mlx5_3"], rdma=False)
    return host


def old_nccl(host, socket_ifname, ib_hca, topo_file, env, enabled):
    variables = {
        "ansible_facts": {"stacktune": host},
        "__nccl_socket_ifname_auto": "^lo,docker,virbr,veth",
        "nccl_socket_ifname": socket_ifname,
        "nccl_ib_hca": ib_hca,
        "nccl_topo_file": topo_file,
        "nccl_env": env,
        "nccl_enabled": enabled,
        "nccl_conf_path": "/etc/nccl.conf",
    }
    for name, expression in OLD_NCCL_VARS.items():
        variables[name] = render(expression, **variables)
    variables["__nccl_system"] = {k: render(v, **variables) for k, v in OLD_NCCL_SYSTEM.items()}
    variables["nccl_variables"] = render(OLD_NCCL_VARIABLES, **variables)
    variables["__nccl_content"] = render(OLD_NCCL_CONTENT, **variables)
    return variables["nccl_variables"], render(OLD_NCCL_SETTINGS, **variables)


NCCL_CASES = [
    ("h200.json", "auto", "auto", None, {}, True),
    ("degraded_8gpu_constructed.json", "auto", "auto", "", {"NCCL_NET_GDR_LEVEL": "PHB"}, True),
    (
        "nearest",
        "auto",
        "auto",
        "/etc/nccl/topo.xml",
        {"NCCL_IB_QPS_PER_CONNECTION": 4, "NCCL_CUMEM_ENABLE": True},
        True,
    ),
    ("nearest", "ib0,ib1", "=mlx5_1", None, {"NCCL_IB_HCA": "mlx5_3", "NCCL_NVLS_ENABLE": False}, True),
    ("no_gpu_debian.json", "auto", "auto", None, {}, False),
    ("no_gpu_debian.json", "", "", None, {}, True),
]


@pytest.mark.parametrize("case", NCCL_CASES)
def test_nccl_variables_and_settings_give_what_the_jinja_gave(case):
    name, socket_ifname, ib_hca, topo_file, env, enabled = case
    host = nearest_first() if name == "nearest" else facts(name)
    variables = nccl_filters.nccl_variables(
        host,
        socket_ifname=socket_ifname,
        socket_ifname_auto="^lo,docker,virbr,veth",
        ib_hca=ib_hca,
        topo_file=topo_file,
        env=env,
    )
    settings = nccl_filters.nccl_settings(variables, "/etc/nccl.conf", enabled=enabled)
    old_variables, old_settings = old_nccl(host, socket_ifname, ib_hca, topo_file, env, enabled)
    assert variables == old_variables
    assert list(variables) == list(old_variables)
    assert settings == old_settings


def test_nccl_hcas_nearest_first_then_by_name():
    variables = nccl_filters.nccl_variables(nearest_first(), socket_ifname="eth0")
    assert variables == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "=mlx5_2,mlx5_0,mlx5_1,mlx5_3"}
    content = nccl_filters.nccl_settings(dict(variables, NCCL_CUMEM_ENABLE=False), "/etc/nccl.conf")[0]["value"]
    assert content.endswith("NCCL_SOCKET_IFNAME=eth0\nNCCL_IB_HCA==mlx5_2,mlx5_0,mlx5_1,mlx5_3\nNCCL_CUMEM_ENABLE=0\n")


def test_nccl_filters_refuse_what_they_cannot_read():
    with pytest.raises(AnsibleFilterError, match="gpu_topology_facts"):
        nccl_filters.nccl_variables(["eth0"])
    with pytest.raises(AnsibleFilterError, match="env"):
        nccl_filters.nccl_variables({}, env=["NCCL_DEBUG=INFO"])
    with pytest.raises(AnsibleFilterError, match="NCCL variables"):
        nccl_filters.nccl_settings("NCCL_DEBUG=INFO", "/etc/nccl.conf")


# -------------------------------------------------------------------------------------- numa_irq

OLD_MSI_DIRS = """{{ __numa_irq_devices | rejectattr('skip') | map(attribute='device')
         | map('regex_replace', '^', '/sys/bus/pci/devices/') | map('regex_replace', '$', '/msi_irqs') | list }}"""
OLD_LEGACY = """{{ __numa_irq_devices | rejectattr('skip') | map(attribute='device')
       | reject('in', __numa_irq_msi.files | default([]) | map(attribute='path') | map('split', '/')
                      | map(attribute=5) | list)
       | list }}"""
OLD_CONFIG = """{{ (__numa_irq_irqbalance_stat.results | default([]) | selectattr('stat', 'defined')
          | selectattr('stat.exists') | map(attribute='item') | list + [none]) | first }}"""
OLD_IRQS = """{{ (__numa_irq_msi.files | default([]) | map(attribute='path') | map('basename') | list
          + __numa_irq_legacy.results | default([]) | selectattr('content', 'defined') | map(attribute='content')
            | map('b64decode') | map('trim') | list)
         | select('match', '^[0-9]+$') | map('int') | reject('equalto', 0) | unique | sort | list }}"""


def msi_found(irqs_by_device):
    return {
        "changed": False,
        "matched": sum(len(v) for v in irqs_by_device.values()),
        "files": [
            {"path": "/sys/bus/pci/devices/%s/msi_irqs/%s" % (dev, irq), "isreg": True}
            for dev, irqs in irqs_by_device.items()
            for irq in irqs
        ],
    }


def legacy_read(contents):
    results = [{"item": dev, "content": b64(text), "encoding": "base64"} for dev, text in contents.items()]
    results.append({"item": "0000:ff:00.0", "failed": True, "msg": "file not found"})
    return {"changed": False, "results": results}


NUMA_STATES = [
    # devices of the 8-GPU host, some with MSI interrupts, one legacy, one with irq 0
    (
        "degraded_8gpu_constructed.json",
        {"0000:18:00.0": ["130", "131", "129"], "0000:1a:00.0": ["140", "130"]},
        {"0000:2a:00.0": "16\n", "0000:3a:00.0": "0\n", "0000:3c:00.0": "n/a\n"},
        [
            {"item": "/etc/default/irqbalance", "stat": {"exists": False}},
            {"item": "/etc/sysconfig/irqbalance", "stat": {"exists": True}},
        ],
    ),
    ("h200.json", {}, {"0000:00:06.0": "11\n"}, [{"item": "/etc/default/irqbalance", "stat": {"exists": True}}]),
    ("h200x2.json", {}, {}, [{"item": "/etc/default/irqbalance", "skipped": True}]),
]


@pytest.mark.parametrize("state", NUMA_STATES)
def test_numa_irq_reads_give_what_the_jinja_gave(state):
    name, msi_irqs, legacy, stats = state
    devices = numa_filters.numa_irq_devices(facts(name))
    msi = msi_found(msi_irqs)
    slurped = legacy_read(legacy)
    stat = {"changed": False, "results": stats}
    variables = {
        "__numa_irq_devices": devices,
        "__numa_irq_msi": msi,
        "__numa_irq_legacy": slurped,
        "__numa_irq_irqbalance_stat": stat,
    }
    assert numa_filters.numa_irq_msi_dirs(devices) == render(OLD_MSI_DIRS, **variables)
    assert numa_filters.numa_irq_legacy_devices(devices, msi=msi) == render(OLD_LEGACY, **variables)
    assert numa_filters.numa_irq_irqs(msi, legacy=slurped) == render(OLD_IRQS, **variables)
    # no file: the filter's None is what the task's template makes of it on this ansible-core
    # (None from 2.19 on, '' before), as the replaced Jinja's none was
    found = numa_filters.numa_irq_irqbalance_file(stat)
    assert (render("{{ none }}") if found is None else found) == render(OLD_CONFIG, **variables)


def test_numa_irq_reads_of_skipped_tasks():
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    devices = numa_filters.numa_irq_devices(facts("h200.json"))
    assert numa_filters.numa_irq_msi_dirs(devices) == ["/sys/bus/pci/devices/0000:00:06.0/msi_irqs"]
    assert numa_filters.numa_irq_legacy_devices(devices, msi=skipped) == ["0000:00:06.0"]
    assert numa_filters.numa_irq_irqs(skipped, legacy=skipped) == []
    assert numa_filters.numa_irq_irqbalance_file(skipped) is None
    irqs = numa_filters.numa_irq_irqs(msi_found({"0000:00:06.0": ["47", "45", "46"]}), legacy=legacy_read({"x": "0\n"}))
    assert irqs == [45, 46, 47]
    with pytest.raises(AnsibleFilterError, match="expects a list"):
        numa_filters.numa_irq_msi_dirs("0000:00:06.0")


# ---------------------------------------------------------------------------------------- driver

# roles/driver/tasks/packages.yml before the driver_packages filter, as YAML (its escapes count)
OLD_DRIVER_TASKS = r"""
- vars:
    __driver_lines: "{{ __driver_query.stdout_lines | default([]) | select('match', '^ii')
      | map('split', '\t') | list }}"
  set_fact:
    __driver_installed: "{{ dict(__driver_lines | map(attribute=1) | zip(__driver_lines | map(attribute=2))) }}"
- vars:
    __driver_regex: >-
      ^({{ driver_package_patterns | map('regex_escape') | map('replace', '\*', '.*')
      | map('replace', '\?', '.') | join('|') }})$
  set_fact:
    driver_packages: "{{ __driver_installed | list | select('match', __driver_regex) | sort }}"
- set_fact:
    __driver_package_versions: >-
      {{ driver_packages | select('match', '^(nvidia-driver|nvidia-dkms|kmod-nvidia|libnvidia-compute|cuda-drivers)')
         | map('extract', __driver_installed)
         | map('regex_replace', '^[0-9]+:', '') | map('regex_search', '^[0-9]+(\.[0-9]+)+')
         | select | unique | sort | list }}
"""
PATTERNS = [
    "nvidia-driver",
    "nvidia-driver-*",
    "nvidia-dkms-*",
    "kmod-nvidia*",
    "libnvidia-compute-*",
    "cuda-drivers*",
    "cuda-toolkit-*",
    "libcudnn*",
    "libnccl*",
]
# dpkg-query -W -f='${db:Status-Abbrev}\t${Package}\t${Version}\n' on an Ubuntu 24.04 GPU host
DPKG = [
    "ii \tcuda-drivers-580\t580.65.06-1",
    "ii \tcuda-toolkit-12-9\t12.9.1-1",
    "ii \tlibc6\t2.39-0ubuntu8.4",
    "ii \tlibcudnn9-cuda-12\t9.10.2.21-1",
    "ii \tlibnccl2\t2.27.7-1+cuda12.9",
    "ii \tlibnvidia-compute-580-server\t580.65.06-0ubuntu0.24.04.1",
    "ii \tnvidia-dkms-580-server\t1:580.65.06-0ubuntu0.24.04.1",
    "ii \tnvidia-driver-580-server\t580.65.06-0ubuntu0.24.04.1",
    "rc \tnvidia-driver-550\t550.120-0ubuntu1",
    "ii \tnvidia-driver-575-open\t575-0ubuntu1",
]
# rpm -qa --qf 'ii \t%{NAME}\t%{VERSION}-%{RELEASE}\n' on a Rocky 9 GPU host
RPM = [
    "ii \tkmod-nvidia-open-dkms\t570.172.08-1.el9",
    "ii \tnvidia-driver\t570.172.08-1.el9",
    "ii \tnvidia-driver-cuda-libs\t570.172.08-1.el9",
    "ii \tcuda-drivers\t570.172.08-1",
    "ii \tkernel\t5.14.0-570.28.1.el9_6",
]


def old_driver_packages(lines, patterns):
    variables = {"__driver_query": {"stdout_lines": lines}, "driver_package_patterns": patterns}
    for task in yaml.safe_load(OLD_DRIVER_TASKS):
        scope = dict(variables)
        for name, expression in (task.get("vars") or {}).items():
            scope[name] = render(expression, **scope)
        for name, expression in task["set_fact"].items():
            variables[name] = render(expression, **scope)
    return {"packages": variables["driver_packages"], "versions": variables["__driver_package_versions"]}


@pytest.mark.parametrize(
    "lines, patterns",
    [(DPKG, PATTERNS), (RPM, PATTERNS), (DPKG + RPM, ["nvidia-driver", "libnccl?"]), ([], PATTERNS), (DPKG, [])],
)
def test_driver_packages_give_what_the_jinja_gave(lines, patterns):
    assert driver_filters.driver_packages(lines, patterns) == old_driver_packages(lines, patterns)


def test_driver_packages_read_the_driver_version():
    found = driver_filters.driver_packages(DPKG, PATTERNS)
    assert found["versions"] == ["580.65.06"]
    assert "libc6" not in found["packages"] and "nvidia-driver-550" not in found["packages"]
    assert driver_filters.driver_packages(RPM, PATTERNS)["versions"] == ["570.172.08"]
    with pytest.raises(AnsibleFilterError, match="patterns"):
        driver_filters.driver_packages(DPKG, "nvidia-*")


OLD_HOLDS_TASKS = r"""
- loop: >-
    {{ __driver_dpkg_query.stdout_lines | default([]) | select('match', '^\S+ hold$')
       | map('split', ' ') | map('first') | list }}
- set_fact:
    __driver_holds:
      changed: >-
        {{ (__driver_hold_apt.results | default([]) + __driver_release_apt.results | default([]))
           | selectattr('changed', 'defined') | selectattr('changed') | list | length > 0
           or __driver_lock_dnf.changed | default(false) }}
      held: >-
        {{ (__driver_hold_apt.results | default([]) | selectattr('changed', 'defined') | selectattr('changed')
            | map(attribute='item') | list)
           + ((__driver_lock_dnf.changed | default(false) and driver_hold | bool) | ternary(driver_packages, [])) }}
      released: >-
        {{ (__driver_release_apt.results | default([]) | selectattr('changed', 'defined') | selectattr('changed')
            | map(attribute='item') | list)
           + ((__driver_lock_dnf.changed | default(false) and not driver_hold | bool) | ternary(driver_packages, [])) }}
      unsupported: "{{ driver_packages | length > 0 and ansible_facts.pkg_mgr not in ['apt', 'dnf', 'dnf5'] }}"
"""
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
PACKAGES = ["libnvidia-compute-580-server", "nvidia-dkms-580-server", "nvidia-driver-580-server"]


def loop_result(changed_items, items=None):
    items = PACKAGES if items is None else items
    return {
        "changed": bool(changed_items),
        "results": [{"item": i, "changed": i in changed_items, "ansible_loop_var": "item"} for i in items]
        + [{"item": "x", "skipped": True, "changed": False}],
    }


HOLD_STATES = [
    # apt, holding: two packages newly held
    (PACKAGES, True, "apt", loop_result(PACKAGES[:2]), {"results": []}, SKIPPED),
    # apt, releasing: one held package released
    (PACKAGES, False, "apt", {"results": [SKIPPED]}, loop_result(PACKAGES[2:], PACKAGES[2:]), SKIPPED),
    # apt, nothing changes
    (PACKAGES, True, "apt", loop_result([]), {"results": []}, SKIPPED),
    # dnf: versionlock changed, held and released follow driver_hold
    (PACKAGES, True, "dnf", {"results": [SKIPPED]}, {"results": []}, {"changed": True}),
    (PACKAGES, False, "dnf5", {"results": [SKIPPED]}, {"results": []}, {"changed": True}),
    # zypper: no holds
    (PACKAGES, True, "zypper", {"results": [SKIPPED]}, {"results": []}, SKIPPED),
    ([], True, "zypper", {"results": []}, {"results": []}, SKIPPED),
]


@pytest.mark.parametrize("state", HOLD_STATES)
def test_driver_holds_give_what_the_jinja_gave(state):
    packages, hold, pkg_mgr, apt_hold, apt_release, dnf_lock = state
    variables = {
        "driver_packages": packages,
        "driver_hold": hold,
        "ansible_facts": {"pkg_mgr": pkg_mgr},
        "__driver_hold_apt": apt_hold,
        "__driver_release_apt": apt_release,
        "__driver_lock_dnf": dnf_lock,
    }
    old = {
        k: render(v, **variables) for k, v in yaml.safe_load(OLD_HOLDS_TASKS)[1]["set_fact"]["__driver_holds"].items()
    }
    new = driver_filters.driver_holds(
        packages, hold=hold, pkg_mgr=pkg_mgr, apt_hold=apt_hold, apt_release=apt_release, dnf_lock=dnf_lock
    )
    assert new == old


def test_driver_held_gives_what_the_jinja_gave():
    # dpkg-query -W -f='${Package} ${db:Status-Want}\n' nvidia-... on a host with two holds
    lines = [
        "libnvidia-compute-580-server hold",
        "nvidia-dkms-580-server install",
        "nvidia-driver-580-server hold",
        "nvidia-driver-580-server hold extra",
        "",
    ]
    old = render(yaml.safe_load(OLD_HOLDS_TASKS)[0]["loop"], __driver_dpkg_query={"stdout_lines": lines})
    assert driver_filters.driver_held(lines) == old == ["libnvidia-compute-580-server", "nvidia-driver-580-server"]
    assert driver_filters.driver_held([]) == []
