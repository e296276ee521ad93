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
  - Per GPU and NIC it reads the PCIe path (host bridge, bridge chain, ACS from config
    space) and classes every GPU-NIC pair as C(nvidia-smi topo -m) does (PIX, PXB, PHB,
    NODE, SYS), then says for each GPU-RDMA NIC pair whether GPUDirect RDMA is possible
    and why not (path too long for NCCL's default, ACS redirection on the path, no
    nvidia_peermem and no DMA-BUF route, NIC port not active). On NVSwitch systems it
    reports the fabric manager's state and version and each GPU's fabric state.
  - Derives C(findings) from those facts, for example a PCIe link below its maximum, NVML
    and kernel module driver versions that differ, uncorrected ECC errors, hardware
    throttling, an ASPM power-saving policy, ACS redirection on a GPU-NIC path, a GPU
    without a near RDMA NIC, or a fabric manager whose version differs from the driver.
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
  files_root:
    description:
      - Read sysfs, procfs and the other files under this directory instead of C(/), for tests on a
        constructed tree (the C(cpuio_tree) molecule scenario builds the cpu and io layers' settings
        from the facts of one). NVML and the commands still ask the host the module runs on.
    type: path
    default: /
    version_added: 0.2.0
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
  - ACS is read from PCI config space, of which sysfs gives a process without root only the
    first 64 bytes; run the module with become to read it, otherwise ACS is reported as
    unreadable and the GPUDirect verdicts that depend on it stay undetermined.
  - On NVSwitch systems the module runs C(systemctl show nvidia-fabricmanager.service) and
    C(nv-fabricmanager --version) (or queries the fabricmanager package when the binary is
    missing); elsewhere it runs no command but C(ldconfig -p).
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
            PHB, NODE, SYS), and C(pcie_levels), the same matrix from the PCIe paths in sysfs alone (null where a
            path is unknown).
          type: dict
        nics:
          description: Network interfaces except loopback.
          type: list
          elements: dict
        pcie_paths:
          description: One entry per GPU and per NIC on PCI (address, role, names, sysfs_path, host_bridge,
            numa_node, bridges). C(bridges) lists the bridges above the device, root port first, each with its
            C(acs) (config readability, present, capability and control registers, supported, enabled and
            redirect bits, text); C(acs) is null on bridges that only lead to a NIC without RDMA.
          type: list
          elements: dict
          sample: [{"address": "0000:02:00.0", "role": "gpu", "names": ["gpu0"], "host_bridge": "pci0000:00",
                    "numa_node": 0, "sysfs_path": "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
                    "bridges": [{"address": "0000:00:01.0", "acs": {"present": true, "redirect": []}},
                                {"address": "0000:01:00.0", "acs": {"present": false, "redirect": []}}]}]
        gpudirect:
          description:
            - GPUDirect RDMA readiness. C(applies) is false with a single C(statement) when the host has no RDMA
              NIC (or no GPU); otherwise C(statement) counts the pairs where it is possible.
            - C(pairs) has one entry per GPU and NIC with C(path) (PIX, PXB, PHB, NODE, SYS or null),
              C(nccl_path) (NCCL's name, PHB for NODE), C(common_switch), C(path_bridges), and for RDMA NICs a
              C(verdict) (possible, not_possible, unknown) with C(reasons), C(unknown), C(notes) and a C(text);
              NICs without RDMA get C(not_applicable).
            - C(nearest_nic) gives each GPU's nearest RDMA NIC(s) (any NIC when there is no RDMA NIC);
              C(peer_memory) whether nvidia_peermem is loaded and whether the DMA-BUF route is ready (kernel, open
              kernel module flavour, driver branch); C(rdma_ports) the state and rate of each RDMA port;
              C(iommu_mode) the IOMMU mode.
          type: dict
          sample: {"applies": false, "statement": "no RDMA NIC on this host (/sys/class/infiniband lists none), so
            GPUDirect RDMA does not apply", "pairs": [], "nearest_nic": [], "rdma_nics": []}
        fabric:
          description: NVSwitch fabric. C(nvswitch) (NVSwitches on the PCI bus or GPUs NVLinked to one; null when
            unknown), C(nvswitch_pci), C(gpus_on_nvswitch), C(fabric_manager) (systemd unit state, version and
            where it was read, driver version, C(agree)) and C(gpus) (NVML fabric state, status, clique id,
            cluster UUID and health mask per GPU).
          type: dict
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

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.hostprobe import capture
from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.topology import assemble


def main():
    module = AnsibleModule(
        argument_spec={
            "include_raw": {"type": "bool", "default": False},
            "nics": {"type": "bool", "default": True},
            "libraries": {"type": "bool", "default": True},
            "files_root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )

    def run(argv):
        # argv goes to the program as given: package query formats carry ${...} and %{...}.
        return module.run_command(argv, check_rc=False, environ_update={"LC_ALL": "C"}, expand_user_and_vars=False)

    try:
        raw = capture(
            nics=module.params["nics"], libraries=module.params["libraries"], run=run, root=module.params["files_root"]
        )
        facts = assemble(raw)
    except Exception as exc:  # noqa: BLE001 - report any unexpected failure without a traceback
        module.fail_json(msg="Failed to gather GPU topology facts: %s" % exc)

    result = {"changed": False, "ansible_facts": {"stacktune": facts}}
    if module.params["include_raw"]:
        result["raw"] = raw
    module.exit_json(**result)


if __name__ == "__main__":
    main()
