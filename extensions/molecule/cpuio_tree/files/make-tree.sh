#!/bin/sh
# Build a constructed host under $1: what the cpu and io layers read and write on an
# intel_pstate server (active mode, HWP) with four CPUs, cpuidle states POLL/C1/C1E/C6,
# an ACPI platform profile, / on an NVMe partition, /data on a SATA partition and /scratch
# on a whole virtio disk, the writeback sysctls and a GRUB configuration. Attribute names
# and formats are the kernel's (the shapes of tests/unit/plugins/module_utils/hardware/test_cpu_io.py);
# the values are chosen for the test. Plain files: nothing here acts like a kernel.
set -eu
root=$1
[ ! -e "$root" ] || { echo "$root exists already" >&2; exit 1; }

w() {  # w PATH TEXT: a file holding TEXT and a newline
  mkdir -p "$root$(dirname "$1")"
  printf '%s\n' "$2" > "$root$1"
}

cpu=/sys/devices/system/cpu
w $cpu/online 0-3
w $cpu/possible 0-3
w $cpu/intel_pstate/status active
w $cpu/intel_pstate/min_perf_pct 21
w $cpu/intel_pstate/max_perf_pct 100
w $cpu/intel_pstate/no_turbo 0
w $cpu/cpuidle/current_driver intel_idle
w $cpu/cpuidle/current_governor menu
w $cpu/smt/control on
w $cpu/smt/active 1
for n in 0 1 2 3; do
  policy=$cpu/cpufreq/policy$n
  w $policy/affected_cpus $n
  w $policy/related_cpus $n
  w $policy/scaling_driver intel_pstate
  w $policy/scaling_governor powersave
  w $policy/scaling_available_governors "performance powersave"
  w $policy/energy_performance_preference balance_performance
  w $policy/energy_performance_available_preferences "default performance balance_performance balance_power power "
  w $policy/cpuinfo_min_freq 800000
  w $policy/cpuinfo_max_freq 3800000
  w $policy/scaling_min_freq 800000
  w $policy/scaling_max_freq 3800000
  w $policy/scaling_cur_freq 1200000
  w $cpu/cpu$n/power/energy_perf_bias 6
  state=0
  for idle in POLL:0 C1:2 C1E:10 C6:133; do
    base=$cpu/cpu$n/cpuidle/state$state
    w $base/name "${idle%%:*}"
    w $base/latency "${idle#*:}"
    w $base/residency $(( ${idle#*:} * 3 ))
    w $base/disable 0
    state=$(( state + 1 ))
  done
done
w /sys/firmware/acpi/platform_profile balanced
w /sys/firmware/acpi/platform_profile_choices "low-power balanced performance"

# disk NAME SYSFS_DIR SCHEDULER READ_AHEAD_KB NR_REQUESTS ROTATIONAL
disk() {
  w "$2/queue/scheduler" "$3"
  w "$2/queue/read_ahead_kb" "$4"
  w "$2/queue/nr_requests" "$5"
  w "$2/queue/rotational" "$6"
  mkdir -p "$root/sys/block"
  ln -s "..${2#/sys}" "$root/sys/block/$1"
}
# dev MAJ:MIN SYSFS_DIR: /sys/dev/block's link to a disk or partition
dev() {
  mkdir -p "$root/sys/dev/block"
  ln -s "../..${2#/sys}" "$root/sys/dev/block/$1"
}
nvme=/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/nvme/nvme0/nvme0n1
sata=/sys/devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda
virtio=/sys/devices/pci0000:00/0000:00:05.0/virtio2/block/vda
disk nvme0n1 $nvme "[none] mq-deadline" 128 1023 0
disk sda $sata "none mq-deadline kyber [bfq]" 128 64 1
disk vda $virtio "[none] mq-deadline" 8192 256 1
w $nvme/nvme0n1p2/partition 2
w $sata/sda1/partition 1
dev 259:2 $nvme/nvme0n1p2
dev 8:1 $sata/sda1
dev 252:0 $virtio
w /proc/self/mountinfo "22 1 259:2 / / rw,relatime - ext4 /dev/nvme0n1p2 rw
30 22 8:1 / /data rw,relatime - xfs /dev/sda1 rw
31 22 252:0 / /scratch rw,relatime - ext4 /dev/vda rw
32 22 0:27 / /dev/shm rw,nosuid,nodev - tmpfs tmpfs rw,size=8388608k"

w /proc/sys/vm/dirty_expire_centisecs 3000
w /proc/sys/vm/dirty_writeback_centisecs 500
w /proc/cmdline "BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 ro quiet"
# where the engine keeps its journal (var/lib/stacktune, left out of the tree's hash)
mkdir -p "$root/var/lib"
w /etc/default/grub 'GRUB_DEFAULT=0
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX=""'
