#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_topology_facts
short_description: Gather NVIDIA GPU, PCIe, NUMA, NIC, driver and library facts
version_added: 0.1.0
description:
  - Reads NVML (through C(pynvml) from the nvidia-ml-py package), sysfs, procfs and
    C(ldconfig -p) and returns them as C(ansible_facts.stacktune).
  - Per GPU it reports the name, UUID, PCI bus id, PCIe generation and width (current and
    maximum, from NVML and sysfs), NUMA node and local CPUs, NVLink state, power limits,
    clocks, ECC counters, row remapping, persistence and compute mode, MIG mode,
    temperature and clocks event (throttle) reasons; for the host the kernel, OS, CPU
    model and microcode, BIOS, IOMMU mode, PCIe ASPM policy and NUMA nodes; the NVIDIA
    driver as seen by NVML and by the kernel module, the CUDA driver version, the CUDA
    runtime, cuDNN and NCCL libraries found on the host, and the network interfaces with
    their NUMA node and RDMA device.
  - Derives C(findings) from those facts, for example a PCIe link below its maximum, NVML
    and kernel module driver versions that differ, uncorrected ECC errors, hardware
    throttling or an ASPM power-saving policy.
  - A host without NVML or without an NVIDIA GPU gets C(gpus=[]), C(gpu_count=0) and a
    C(reason); the module does not fail there. A single NVML query that the GPU does not
    support leaves that value null.
  - Every input can be returned as C(raw) (O(include_raw=true)); the facts are built from
    that raw data alone, so a recording replays to the same facts on any machine.
author: stacktune maintainers (@stacktune)
requirements:
  - nvidia-ml-py (C(pynvml)) on the target for GPU facts; without it the module still
    returns host, library and NIC facts.
options:
  include_raw:
    description:
      - Also return C(raw), every file, directory listing, NVML value and command output
        the facts were built from.
    type: bool
    default: false
  nics:
    description:
      - Gather network interfaces (type, PCI address, NUMA node, driver, speed, RDMA device).
    type: bool
    default: true
  libraries:
    description:
      - Look for the CUDA runtime, cuDNN and NCCL with C(ldconfig -p) and in the Python
        environments under C(/opt), C(/usr/local) and the module's own interpreter.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  facts:
    support: full
    description: Returns C(ansible_facts.stacktune).
  platform:
    platforms: posix
    support: full
    description: Linux hosts (sysfs and procfs); tested on Debian and Ubuntu.
  idempotent:
    support: full
    description: Never changes the host; always reports C(changed=false).
notes:
  - C(numa_node) of a GPU is the PCI device's node from sysfs (the node whose CPUs are
    local to it); when sysfs reports none, NVML's NUMA node, then the one node holding all
    of the GPU's local CPUs.
  - An idle GPU lowers its PCIe link speed to save power; a speed-only drop on an idle GPU
    is reported as C(info), a lane-count drop or a drop under load as C(warning).
seealso:
  - name: NVML API reference
    description: The NVIDIA Management Library queries behind the GPU facts.
    link: https://docs.nvidia.com/deploy/nvml-api/
"""

EXAMPLES = r"""
- name: Gather GPU topology facts
  stacktune.gpu.gpu_topology_facts:

- name: Show the facts as a table
  ansible.builtin.debug:
    msg: "{{ (ansible_facts['stacktune'] | stacktune.gpu.topology_table).splitlines() }}"

- name: Refuse to go on with critical findings
  ansible.builtin.assert:
    that: ansible_facts['stacktune'] | stacktune.gpu.topology_findings('critical') | length == 0
    fail_msg: "{{ ansible_facts['stacktune'] | stacktune.gpu.topology_findings('critical')
                  | map(attribute='message') }}"

- name: Record every input for an offline replay (bug reports, unit tests)
  stacktune.gpu.gpu_topology_facts:
    include_raw: true
    nics: false
  register: topology
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    stacktune:
      description:
        - GPU topology facts. Every key is present; unknown values are null.
        - See docs/facts.md in the collection for every field.
      returned: always
      type: dict
      contains:
        schema_version:
          description: Version of this layout.
          type: int
          sample: 1
        collected_at:
          description: UTC time of collection.
          type: str
          sample: "2026-11-29T14:00:00Z"
        reason:
          description: Why C(gpus) is empty; null when GPUs were found.
          type: str
          sample: "NVML unavailable: NVML initialisation failed: NVML Shared Library Not Found;
            no NVIDIA GPU on the PCI bus"
        gpu_count:
          description: Number of GPUs NVML reports.
          type: int
          sample: 8
        host:
          description: Kernel, OS, CPU model and microcode, BIOS, board, kernel command line, IOMMU, ASPM policy,
            NUMA nodes and CPU count.
          type: dict
        driver:
          description: NVIDIA driver version from NVML and from the kernel module, whether they agree, and the
            CUDA driver version.
          type: dict
          sample: {"nvml_version": "580.159.04", "kernel_module_version": "580.159.04", "agree": true,
                   "cuda_driver_version": "13.0"}
        libraries:
          description: CUDA runtime, cuDNN and NCCL versions found on the host and where each was read.
          type: dict
        gpus:
          description: One entry per GPU (index, name, uuid, serial, vbios, pci_bus_id, numa_node, local_cpulist,
            local_cpus, pcie, nvlink, power, clocks, ecc, persistence_mode, compute_mode, mig, temperature_c,
            throttle_reasons, memory).
          type: list
          elements: dict
        topology:
          description: C(p2p_levels), the GPU-to-GPU matrix as C(nvidia-smi topo -m) names it (X, NV#, PIX, PXB,
            PHB, NODE, SYS).
          type: dict
        nics:
          description: Network interfaces except loopback.
          type: list
          elements: dict
        findings:
          description: Problems derived from the facts, most severe first.
          type: list
          elements: dict
          sample: [{"id": "pcie_link_degraded", "severity": "warning", "subject": "gpu0",
                    "message": "GPU 0 (0000:17:00.0) PCIe link runs at Gen3 x8, below its maximum Gen5 x16",
                    "evidence": {"gen_current": 3, "gen_max": 5, "width_current": 8, "width_max": 16}}]
raw:
  description: Every input the facts were built from (files, directory listings, links, NVML values, command
    outputs, options).
  returned: when O(include_raw=true)
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.stacktune.gpu.plugins.module_utils._hostprobe import capture
from ansible_collections.stacktune.gpu.plugins.module_utils._topology import assemble


def main():
    module = AnsibleModule(
        argument_spec={
            "include_raw": {"type": "bool", "default": False},
            "nics": {"type": "bool", "default": True},
            "libraries": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )

    def run(argv):
        return module.run_command(argv, check_rc=False, environ_update={"LC_ALL": "C"})

    try:
        raw = capture(nics=module.params["nics"], libraries=module.params["libraries"], run=run)
        facts = assemble(raw)
    except Exception as exc:  # noqa: BLE001 - report any unexpected failure without a traceback
        module.fail_json(msg="Failed to gather GPU topology facts: %s" % exc)

    result = {"changed": False, "ansible_facts": {"stacktune": facts}}
    if module.params["include_raw"]:
        result["raw"] = raw
    module.exit_json(**result)


if __name__ == "__main__":
    main()
