#!/usr/bin/env bash
# Stop tune.yml while the run-wide block runner serves it (the built-in CPU workloads, no GPU
# needed): SIGINT, SIGTERM and SIGKILL during a block, SIGKILL between two layers. Prints, per case,
# whether a runner process is left, who holds the lock, each layer's journal state and the
# state after rollback. It tunes THIS machine (sysctls, /dev/shm): run it as root on a
# disposable machine, from the repository root, after `make tune` set up .venv:
#   bash tests/integration/runner_signals.sh
cd "$(dirname "$0")/../.." || exit 1
export PATH=$PWD/.venv/bin:$PATH ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$PWD/collections
V='{"stacktune_layers": ["kernel", "memory"], "memory_shm_size": "6G", "stacktune_gate_budget": {"min_blocks": 4, "max_blocks": 4, "max_seconds": 600}}'
state() { for k in vm/swappiness vm/dirty_ratio kernel/numa_balancing; do printf "%s=%s " "$k" "$(cat "/proc/sys/$k")"; done; findmnt -no SIZE /dev/shm; }
runners() { pgrep -fa "stacktune_workload.py" | grep -vc pgrep; }
lock() { python3 -c 'import json;d=json.load(open("/var/lib/stacktune/run.lock"));h=d.get("holder");print("lock:", h and (h["run_id"], h.get("controller",{}).get("pid_ns")))' 2>/dev/null || echo "lock: none"; }
echo "before: $(state)"
echo "== A: a whole run"
ansible-playbook tune.yml -e "$V" -e stacktune_run_id=kill-A > /tmp/kA.log 2>&1; echo "rc=$?"
grep -E "block runner ready|memory: (keep|rollback)|kernel: (keep|rollback)" /tmp/kA.log | cut -c1-160
echo "runners left: $(runners); $(lock); after: $(state)"
ansible-playbook playbooks/rollback.yml > /dev/null 2>&1; echo "rolled back: $(state)"
for case in INT-block TERM-block KILL-block KILL-between; do
  sig=${case%-*}; where=${case#*-}
  echo "== $case"
  setsid ansible-playbook tune.yml -e "$V" -e stacktune_run_id=kill-$case > /tmp/k$case.log 2>&1 &
  pid=$!
  if [ "$where" = block ]; then pat="kernel: block 3 of"; else pat="Measure and gate layer kernel"; fi
  for _i in $(seq 600); do grep -q "$pat" /tmp/k$case.log && break; sleep 0.2; done
  [ "$where" = block ] && sleep 0.5
  echo "runners while running: $(runners)"
  if [ "$sig" = KILL ]; then kill -KILL -- "-$pid"; else kill "-$sig" "$pid"; fi
  wait "$pid" 2>/dev/null; echo "rc=$?"
  for i in $(seq 30); do [ "$(runners)" = 0 ] && break; sleep 1; done
  echo "runners left after ${i}s: $(runners); $(lock)"
  tail -6 /tmp/k$case.log | cut -c1-200
  echo "state: $(state)"
  python3 -c 'import json
for l in ("kernel","memory"):
    try: e=json.load(open("/var/lib/stacktune/layers/%s.json"%l)); print(l, e["state"], (e.get("interrupted") or {}).get("reason"))
    except Exception as x: print(l, x)'
  ansible-playbook playbooks/rollback.yml > /tmp/k$case-rb.log 2>&1; echo "rollback rc=$? state: $(state)"; grep -iE "taken over|took over|lock" /tmp/k$case-rb.log | head -2 | cut -c1-200
done
