#!/bin/sh
# Print one hash of everything stacktune's layers may manage on this host: the files
# (content, mode, owner; absent ones as "absent") and the live values of the sysctls
# and sysfs attributes the scenario asks for. The journal itself is left out.
set -eu
{
  for f in /etc/fstab /etc/nccl.conf /etc/default/irqbalance /etc/default/grub \
           /etc/security/limits.d/60-stacktune-memlock.conf; do
    if [ -e "$f" ]; then printf '%s %s ' "$f" "$(stat -c '%a %u %g' "$f")"; sha256sum < "$f"; else echo "$f absent"; fi
  done
  for d in /etc/sysctl.d /etc/tmpfiles.d /etc/default/grub.d; do
    if [ -d "$d" ]; then
      find "$d" -type f | sort | while read -r f; do printf '%s ' "$f"; sha256sum < "$f"; done
    else
      echo "$d absent"
    fi
  done
  for k in vm/swappiness vm/dirty_ratio vm/dirty_background_ratio kernel/numa_balancing vm/max_map_count vm/overcommit_memory; do
    printf '%s=%s\n' "$k" "$(cat /proc/sys/$k 2>/dev/null || echo unreadable)"
  done
  grep ' /dev/shm ' /proc/mounts || echo "/dev/shm unmounted"
} | sha256sum | cut -d' ' -f1
