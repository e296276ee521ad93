#!/usr/bin/env bash
# GPU tier on a real NVIDIA host that has no package registry: installs the carried
# ansible-core wheels (.whl/, see docs/gpu-host.md), then runs, recording everything
# under RUN_DIR (default /tmp/stacktune-gpu-run; packed into $OUT/gpu-run.tgz when OUT is
# set): the topology capture, the GPU pytest tier, the facts
# playbook, the GPU workloads, tune.yml with the gate on the GPU workload, verify/drift,
# rollback with state hashes before and after, and acceptance (normal and perturbed).
# Usage: bash tests/gpu/gpu-host-run.sh [steps...]   (default: all steps)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
RUN_DIR="${RUN_DIR:-/tmp/stacktune-gpu-run}"
mkdir -p "$RUN_DIR"
log="$RUN_DIR/gpu-host-run.log"
exec > >(tee -a "$log") 2>&1
steps="${*:-capture pytest facts bench tune acceptance}"  # also: user-gpu user-loader user-thp diagnose search safety failures signals signals-diagnose cost cost-default gate-a gate-b calibrate nccl acceptance-depth cpuio record1 record-user live-windows live-gate live-user cores
py="${PYTHON:-python3}"
if [ -d .whl ] && ! "$py" -c 'import ansible' 2>/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export ANSIBLE_CONFIG="$PWD/ansible.cfg" ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1
ap() { "$py" -m ansible.cli.playbook "$@"; }   # ansible-playbook without relying on PATH scripts
state_hash() {
  { for k in vm/swappiness vm/dirty_ratio vm/dirty_background_ratio kernel/numa_balancing vm/max_map_count; do
      printf '%s=%s\n' "$k" "$(cat /proc/sys/$k)"; done
    grep ' /dev/shm ' /proc/mounts
    for f in /proc/irq/*/smp_affinity_list; do printf '%s=%s\n' "$f" "$(cat "$f" 2>/dev/null)"; done
    for f in /etc/fstab /etc/nccl.conf /etc/security/limits.d/60-stacktune-memlock.conf; do
      [ -e "$f" ] && sha256sum "$f" || echo "$f absent"; done
    ls /etc/sysctl.d /etc/tmpfiles.d 2>/dev/null
    nvidia-smi --query-gpu=persistence_mode,power.limit --format=csv,noheader
  } | tee "$RUN_DIR/state-$1.txt" | sha256sum | cut -c1-16
}
# the GPU host has no package manager state worth holding (image, no apt index): the driver layer is left out
[ -n "${TUNE_VARS:-}" ] || TUNE_VARS='{"stacktune_bench_size": 4096, "stacktune_layers": ["bios", "memory", "kernel", "numa_irq", "gpu_settings", "nccl"]}'
run() { echo; echo "===== $* ($(date -u +%T))"; "$@"; echo "===== rc=$? $1"; }
# the block gate's runs: each layer on the workloads that can see it (all-reduce for memory,
# kernel and nccl on this 2-GPU host; pinned copies for the null layers)
GATE_VARS='{"stacktune_gate_default_policy": "no_regression",
  "stacktune_gate_policies": {"memory": "no_regression", "nccl": "no_regression", "kernel": "improve"},
  "stacktune_gate_workloads": {"memory": ["allreduce"], "kernel": ["allreduce"], "nccl": ["allreduce"],
                               "default": ["h2d_pinned"]},
  "stacktune_gate_budget": {"min_blocks": 4, "max_blocks": 6, "max_seconds": 600}}'
make_nulls() {  # null_1 ... null_5: copies of the test-only null layer, each its own layer name
  rm -rf /tmp/stacktune-null; mkdir -p /tmp/stacktune-null
  for i in 1 2 3 4 5; do
    cp -r tests/gpu/roles/null_layer "/tmp/stacktune-null/null_$i"
    grep -rl null_layer "/tmp/stacktune-null/null_$i" | xargs sed -i "s/null_layer/null_$i/g"
  done
}
for step in $steps; do
  case "$step" in
    capture) run env PYTHONPATH="collections:${PYTHONPATH:-}" "$py" tests/gpu/capture_topology.py "$RUN_DIR/h200.json" ;;
    pytest) run "$py" -m pytest -m gpu -o addopts="" -p no:cacheprovider --import-mode=importlib -q tests/gpu ;;
    facts) run ap playbooks/facts.yml -e stacktune_report_dir="$RUN_DIR/reports" ;;
    bench) run env PYTHONPATH="collections:${PYTHONPATH:-}" "$py" benchmarks/gpu_workloads.py ;;
    tune)
      echo "state hash before tune: $(state_hash before)"
      run ap tune.yml -e stacktune_report_dir="$RUN_DIR/reports" -e stacktune_bench_workload=gemm -e "$TUNE_VARS"
      run ap tune.yml -e stacktune_report_dir="$RUN_DIR/reports" -e stacktune_bench_workload=gemm -e "$TUNE_VARS"
      run ap playbooks/verify.yml
      run ap playbooks/drift.yml
      echo "state hash after tune: $(state_hash tuned)"
      run ap playbooks/rollback.yml
      echo "state hash after rollback: $(state_hash after)"
      diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-after.txt" && echo "ROLLBACK EXACT: state after rollback == before tune"
      ;;
    safety)
      # bad input refused before any change, check-mode fidelity per setting, idempotence, exact rollback
      echo "state hash before: $(state_hash before)"
      for bad in '{"kernel_sysctl": {"vm.no_such_knob": "1"}}' '{"gpu_settings_power_limit_watts": -300}' \
                 '{"numa_irq_cpus_override": {"0000:00:00.0": "7-3"}}' '{"stacktune_layers": ["../../etc/cron.d"]}' \
                 '{"memory_shm_size": "-8G"}' '{"nccl_conf_path": "/root/.ssh/authorized_keys"}'; do
        ap tune.yml -e "$bad" > "$RUN_DIR/bad.log" 2>&1
        echo "bad input $bad: rc=$? $(grep -o 'Tuning failed on .*' "$RUN_DIR/bad.log" | head -1 | cut -c1-300)"
      done
      echo "state hash after bad input: $(state_hash bad)"
      diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-bad.txt" && echo "BAD INPUT CHANGED NOTHING"
      ls -d /var/lib/stacktune /var/lib/node_exporter /var/lib/prometheus 2>&1
      reports="$RUN_DIR/reports"
      run ap tune.yml --check -e stacktune_gate=false -e "$TUNE_VARS" -e stacktune_run_id=gpu-check -e stacktune_report_dir="$reports"
      echo "state hash after check mode: $(state_hash checked)"
      diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-checked.txt" && echo "CHECK MODE CHANGED NOTHING"
      run ap tune.yml -e stacktune_gate=false -e "$TUNE_VARS" -e stacktune_run_id=gpu-tune -e stacktune_report_dir="$reports"
      "$py" - "$reports/gpu-check/localhost.json" "$reports/gpu-tune/localhost.json" <<'PY'
import json, sys
check, real = (json.load(open(p)) for p in sys.argv[1:3])
real_layers = {layer["layer"]: layer for layer in real["layers"]}
total = 0
for layer in check["layers"]:
    want = {s["id"]: s["changed"] for s in layer["settings"]}
    got = {s["id"]: s["changed"] for s in real_layers[layer["layer"]]["settings"]}
    total += len(want)
    print("%-13s predicted %s" % (layer["layer"], "==" if want == got else "!="), "real:", got)
    assert want == got, layer["layer"]
print("CHECK FIDELITY: %d layers, %d settings predicted exactly" % (len(check["layers"]), total))
PY
      echo "state hash after tune: $(state_hash tuned)"
      run ap tune.yml -e stacktune_gate=false -e "$TUNE_VARS" -e stacktune_run_id=gpu-again -e stacktune_report_dir="$reports"
      run ap playbooks/verify.yml
      run ap playbooks/rollback.yml
      echo "state hash after rollback: $(state_hash after)"
      diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-after.txt" && echo "ROLLBACK EXACT: state after rollback == before tune"
      ;;
    gate-a)
      # The block gate on two GPUs: memory (no_regression) and nccl with NCCL_P2P_DISABLE=1 judged
      # on the all-reduce, and copies of a null layer (a file nothing reads) on pinned copies.
      make_nulls
      echo "state hash before the gate runs: $(state_hash before)"
      run ap tune.yml -e stacktune_run_id=gate-a -e stacktune_report_dir="$RUN_DIR/reports" -e "$GATE_VARS" -e '{
        "stacktune_layers": ["memory", "nccl", "/tmp/stacktune-null/null_1", "/tmp/stacktune-null/null_2"],
        "nccl_env": {"NCCL_P2P_DISABLE": "1"}, "nccl_allow_tuning_knobs": true}'
      run ap playbooks/rollback.yml
      ;;
    gate-b)
      # NCCL_MAX_NCHANNELS=4 in the nccl layer on the all-reduce,
      # three more null layers
      make_nulls
      run ap tune.yml -e stacktune_run_id=gate-b -e stacktune_report_dir="$RUN_DIR/reports" -e "$GATE_VARS" -e '{
        "stacktune_layers": ["nccl", "/tmp/stacktune-null/null_3", "/tmp/stacktune-null/null_4",
                             "/tmp/stacktune-null/null_5"],
        "nccl_env": {"NCCL_MAX_NCHANNELS": "4"}, "nccl_allow_tuning_knobs": true}'
      run ap playbooks/rollback.yml
      echo "state hash after rollback: $(state_hash after)"
      [ -e "$RUN_DIR/state-before.txt" ] && diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-after.txt" \
        && echo "ROLLBACK EXACT: state after rollback == before the gate runs"
      ;;
    failures)
      # A layer that breaks the user's own training is a rollback, and Ctrl-C during a block
      # leaves the host as it was: the ResNet-18 DataLoader program (tests/gpu/train_step_program.py)
      # with /dev/shm shrunk to 128M by the memory layer, then kernel and nccl gated after it.
      prog="$PWD/tests/gpu/train_step_program.py"
      fail_vars='{"stacktune_layers": ["memory", "kernel", "nccl"], "memory_shm_size": "128M",
        "stacktune_bench_workload": "command", "stacktune_bench_command": ["python3", "'"$prog"'", "--steps", "80"],
        "stacktune_bench_warmup": 10, "stacktune_bench_steps": 70,
        "stacktune_gate_default_policy": "no_regression",
        "stacktune_gate_policies": {"memory": "no_regression", "kernel": "no_regression", "nccl": "no_regression"},
        "stacktune_gate_budget": {"min_blocks": 2, "max_blocks": 2, "max_seconds": 400}}'
      echo "state hash before: $(state_hash before)"; echo "/dev/shm before: $(findmnt -no SIZE /dev/shm)"
      run ap tune.yml -e stacktune_run_id=shm-failure -e stacktune_report_dir="$RUN_DIR/reports" -e "$fail_vars"
      echo "/dev/shm after the run: $(findmnt -no SIZE /dev/shm)"
      "$py" -c 'import json,sys
for layer in ("memory", "kernel", "nccl"):
    e = json.load(open("/var/lib/stacktune/layers/%s.json" % layer)); d = e.get("decision") or {}
    print("journal %s: state %s, decision %s: %s" % (layer, e["state"], d.get("decision"), d.get("summary")))'
      run ap playbooks/rollback.yml
      echo "state hash after rollback: $(state_hash after)"
      diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-after.txt" && echo "ROLLBACK EXACT: state after rollback == before tune"
      ;;
    signals)
      prog="$PWD/tests/gpu/train_step_program.py"
      echo "state hash before: $(state_hash before)"
      # Ctrl-C (SIGINT) and a scheduler's timeout (SIGTERM) to ansible-playbook during the second
      # block, the one without the kernel layer; then a run that measures the layer again
      kvars='{"stacktune_layers": ["kernel"], "stacktune_bench_workload": "command",
        "stacktune_bench_command": ["python3", "'"$prog"'", "--steps", "80"], "stacktune_bench_warmup": 10,
        "stacktune_bench_steps": 70, "stacktune_gate_budget": {"min_blocks": 2, "max_blocks": 2, "max_seconds": 400}}'
      for sig in INT TERM; do
        # started directly (not through the ap function), so that $! is ansible-playbook itself
        "$py" -m ansible.cli.playbook tune.yml -e stacktune_run_id="sig$sig" -e stacktune_report_dir="$RUN_DIR/reports" \
          -e "$kvars" > "$RUN_DIR/sig$sig.log" 2>&1 &
        pid=$!
        for _i in $(seq 240); do grep -q "block 1 of" "$RUN_DIR/sig$sig.log" && break; sleep 0.5; done
        sleep 5; echo "SIG$sig at $(date -u +%T), in the block without the layer: swappiness $(cat /proc/sys/vm/swappiness)"
        kill -"$sig" "$pid"; wait "$pid"; echo "ansible-playbook exit status $? at $(date -u +%T)"
        tail -n 8 "$RUN_DIR/sig$sig.log"
        sleep 2; echo "left on the host: $(pgrep -fa 'train_step_program|AnsiballZ' | grep -vc pgrep) processes"
        echo "state hash after SIG$sig: $(state_hash "sig$sig")"
        diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-sig$sig.txt" && echo "SIG$sig EXACT: state == before tune"
        "$py" -c 'import json
e = json.load(open("/var/lib/stacktune/layers/kernel.json")); print("journal kernel:", e["state"], e.get("interrupted"))
print("lock:", json.load(open("/var/lib/stacktune/run.lock"))["holder"])'
      done
      run ap tune.yml -e stacktune_run_id=after-signals -e stacktune_report_dir="$RUN_DIR/reports" -e "$kvars"
      run ap playbooks/rollback.yml
      echo "state hash after the last rollback: $(state_hash final)"
      diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-final.txt" && echo "ROLLBACK EXACT: state after rollback == before tune"
      ;;
    signals-diagnose)
      # the default tune stopped while its program is diagnosed and its block runner starts in
      # the background: SIGINT, SIGTERM, SIGKILL of the controller's process group; after each,
      # what is left on the host; then a whole default tune and rollback (DIAG_SIGNALS picks
      # some cases and skips that tune)
      echo "state hash before: $(state_hash before)"
      left() { pgrep -fa 'stacktune|AnsiballZ|async_wrapper' | grep -v -e pgrep -e gpu-host-run | cut -c1-150; }
      for sig in ${DIAG_SIGNALS:-INT TERM KILL}; do
        setsid "$py" -m ansible.cli.playbook tune.yml -e stacktune_run_id="diag-$sig" -e stacktune_report_dir="$RUN_DIR/reports" \
          -e "$TUNE_VARS" > "$RUN_DIR/diag-$sig.log" 2>&1 &
        pid=$!
        # the output shows a task once it ends: the host is taken and the program started
        # about 1-2 s after the preflight checks, its first step about 8 s later
        for _i in $(seq 600); do grep -q "Show the preflight checks" "$RUN_DIR/diag-$sig.log" && break; sleep 0.2; done
        sleep 12; echo "SIG$sig at $(date -u +%T) during the diagnosis; on the host:"; left
        if [ "$sig" = KILL ]; then kill -KILL -- "-$pid"; else kill -"$sig" "$pid"; fi
        wait "$pid"; echo "ansible-playbook exit status $? at $(date -u +%T)"
        tail -n 6 "$RUN_DIR/diag-$sig.log" | cut -c1-300
        for i in $(seq 40); do left | grep -qv watchdog || break; sleep 0.5; done
        echo "after $((i / 2)) s, left on the host:"; left
        "$py" -c 'import json
d = json.load(open("/var/lib/stacktune/run.lock")); h = d.get("holder"); print("lock:", h and h.get("run_id"))'
        echo "state hash after SIG$sig: $(state_hash "diag$sig")"
        diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-diag$sig.txt" && echo "SIG$sig EXACT: state == before tune"
      done
      [ -z "${DIAG_SIGNALS:-}" ] || continue  # DIAG_SIGNALS="INT TERM": only those cases
      t0=$(date +%s)
      run ap tune.yml -e stacktune_run_id=after-diag-signals -e stacktune_report_dir="$RUN_DIR/reports" -e "$TUNE_VARS"
      echo "default tune.yml after the signals: $(( $(date +%s) - t0 )) s"
      run ap playbooks/rollback.yml
      echo "state hash after the last rollback: $(state_hash final)"
      diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-final.txt" && echo "ROLLBACK EXACT: state after rollback == before tune"
      ;;
    cost)
      # What a block costs: a fresh interpreter against the block runner, per workload; then the
      # gate on GEMM blocks both ways; then a default tune (all layers but driver) with the runner
      run env PYTHONPATH="collections:${PYTHONPATH:-}" "$py" benchmarks/block_cost.py --python "${TORCH_PYTHON:-python3}" \
        --workloads gemm,h2d_pinned,train_step,dataloader --blocks 3 --size gemm=4096 --json "$RUN_DIR/block-cost.json"
      for runner in false true; do
        t0=$(date +%s)
        run ap tune.yml -e stacktune_run_id="gemm-runner-$runner" -e stacktune_report_dir="$RUN_DIR/reports" -e '{
          "stacktune_layers": ["kernel"], "stacktune_gate_workloads": {"kernel": ["gemm"], "default": ["gemm"]},
          "stacktune_bench_size": 4096, "stacktune_bench_runner": '"$runner"'}'
        echo "kernel layer gated on gemm, runner $runner: $(( $(date +%s) - t0 )) s"
        run ap playbooks/rollback.yml
      done
      ;;
    cost-default)
      echo "state hash before: $(state_hash before)"
      t0=$(date +%s)
      run ap tune.yml -e stacktune_run_id=default-runner -e stacktune_report_dir="$RUN_DIR/reports" -e "$TUNE_VARS"
      echo "default tune.yml (all layers but driver) with the block runner: $(( $(date +%s) - t0 )) s"
      run ap playbooks/rollback.yml
      echo "state hash after rollback: $(state_hash after)"
      diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-after.txt" && echo "ROLLBACK EXACT: state after rollback == before tune"
      ;;
    cores)
      # tune.yml with the default gate, then rollback, with every other supported ansible-core
      # (the wheels under .whl/cores/<major.minor>/, CORES picks some: CORES="2.16 2.20"), each
      # shadowing the main one on PYTHONPATH; the state after each rollback is the state before
      for dir in .whl/cores/*/; do
        core="$(basename "$dir")"
        [ -z "${CORES:-}" ] || [[ " $CORES " == *" $core "* ]] || continue
        "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "/tmp/site-$core" "$dir"*.whl || exit 1
        echo "state hash before: $(state_hash before)"
        t0=$(date +%s)
        run env PYTHONPATH="/tmp/site-$core:${PYTHONPATH:-}" "$py" -m ansible.cli.playbook --version
        run env PYTHONPATH="/tmp/site-$core:${PYTHONPATH:-}" "$py" -m ansible.cli.playbook tune.yml \
          -e stacktune_run_id="core-$core" -e stacktune_report_dir="$RUN_DIR/reports" -e "$TUNE_VARS"
        echo "ansible-core $core: tune.yml (all layers but driver) $(( $(date +%s) - t0 )) s"
        run env PYTHONPATH="/tmp/site-$core:${PYTHONPATH:-}" "$py" -m ansible.cli.playbook playbooks/rollback.yml
        echo "state hash after rollback: $(state_hash after)"
        diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-after.txt" && echo "ROLLBACK EXACT ($core): state after rollback == before tune"
      done
      ;;
    record1)
      # blocks as the gate runs them on this one-GPU host (forked from the block runner), for
      # tests/unit/fixtures/blocks/h200x1_*.json
      mkdir -p "$RUN_DIR/blocks"
      for spec in "train_step 8 400" "dataloader 8 200" "dataloader 6 400" "h2d_pinned 8 400" "gemm 6 1800"; do
        read -r wl blocks steps <<< "$spec"
        run env PYTHONPATH="collections:${PYTHONPATH:-}" "$py" benchmarks/record_blocks.py --runner \
          --python "${TORCH_PYTHON:-python3}" --workload "$wl" --blocks "$blocks" --steps "$steps" \
          --out "$RUN_DIR/blocks/h200x1_${wl}_${steps}.json"
      done
      ;;
    live-windows)
      # windows of ONE running train_step (live mode, batch 128): A/A, then the power limit
      # switched 700/450 W between windows; fixtures tests/unit/fixtures/live/h200x1_live_*.json
      mkdir -p "$RUN_DIR/live"
      run env PYTHONPATH="collections:${PYTHONPATH:-}" "$py" benchmarks/live_windows.py --workload train_step \
        --windows 10 --seconds 3 --out "$RUN_DIR/live/h200x1_live_train_step_aa.json"
      run env PYTHONPATH="collections:${PYTHONPATH:-}" "$py" benchmarks/live_windows.py --workload train_step \
        --windows 6 --seconds 3 --drop-s 1 --on 'nvidia-smi -pl 450' --off 'nvidia-smi -pl 700' \
        --out "$RUN_DIR/live/h200x1_live_train_step_power.json"
      nvidia-smi -pl 700 >/dev/null
      ;;
    live-gate)
      # the gate's live trial on the gpu_settings layer: a 450 W limit on a 700 W host (slower:
      # rolled back), then the host at 450 W and the layer to 700 W (faster: kept)
      for pair in "700 450" "450 700"; do
        read -r from to <<< "$pair"
        nvidia-smi -pl "$from" >/dev/null
        t0=$(date +%s)
        run ap tune.yml -e stacktune_run_id="live-power-$from-to-$to" -e stacktune_report_dir="$RUN_DIR/reports" \
          -e "{\"stacktune_layers\": [\"gpu_settings\"], \"gpu_settings_power_limit_watts\": $to}"
        echo "live gate, power limit $from -> $to W: tune.yml took $(( $(date +%s) - t0 )) s"
        nvidia-smi --query-gpu=power.limit --format=csv,noheader
        run ap playbooks/rollback.yml
        nvidia-smi --query-gpu=power.limit --format=csv,noheader
      done
      nvidia-smi -pl 700 >/dev/null
      ;;
    diagnose)
      # the diagnosis of two users' programs and the built-in default (read-only: state hash unchanged)
      echo "state hash before: $(state_hash before)"
      for prog in transformer_program.py "train_step_program.py --steps 100000000"; do
        t0=$(date +%s)
        # shellcheck disable=SC2086  # $prog is the program and its arguments, split on purpose
        run ap playbooks/diagnose.yml -e "{\"stacktune_bench_live_command\": [\"$py\", $(printf '"%s", ' $PWD/tests/gpu/$prog | sed 's/, $//')]}"
        echo "diagnose.yml on $prog: $(( $(date +%s) - t0 )) s"
      done
      t0=$(date +%s)
      run ap playbooks/diagnose.yml
      echo "diagnose.yml on the built-in workload: $(( $(date +%s) - t0 )) s"
      echo "state hash after: $(state_hash after)"
      diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-after.txt" && echo "DIAGNOSE CHANGED NOTHING"
      ;;
    search)
      # a search of the power limit in one running GPU-bound program: the throughput objective,
      # then efficiency with max_slowdown 0.05 (SEARCH_MAX_SLOWDOWN); each then rolled back (the
      # limit back to 700 W)
      nvidia-smi -pl 700 >/dev/null
      prog="$PWD/tests/gpu/transformer_program.py"
      for objective in ${SEARCH_OBJECTIVES:-throughput efficiency}; do
        t0=$(date +%s)
        run ap tune.yml -e stacktune_run_id="search-$objective" -e stacktune_report_dir="$RUN_DIR/reports" -e "{\"stacktune_layers\":
          [\"gpu_settings\"], \"gpu_settings_power_limit_watts\": [700, 650, 600, 550, 500, 450],
          \"stacktune_search_objective\": \"$objective\", \"stacktune_gate_max_slowdown\": ${SEARCH_MAX_SLOWDOWN:-0.05},
          \"stacktune_bench_workload\": \"command\", \"stacktune_bench_command\": [\"$py\", \"$prog\", \"--steps\", \"120\"],
          \"stacktune_bench_live_command\": [\"$py\", \"$prog\"]}"
        echo "search ($objective, max_slowdown ${SEARCH_MAX_SLOWDOWN:-0.05}): tune.yml took $(( $(date +%s) - t0 )) s; limit now $(nvidia-smi --query-gpu=power.limit --format=csv,noheader)"
        run ap playbooks/rollback.yml
        echo "after rollback: $(nvidia-smi --query-gpu=power.limit --format=csv,noheader)"
      done
      nvidia-smi -pl 700 >/dev/null
      ;;
    user-gpu|user-loader)
      # the default layers (TUNE_VARS) gated on a user's own program streamed live: the GPU-bound
      # bf16 transformer (user-gpu) or the DataLoader-bound ResNet-18 (user-loader); every live
      # change measured, nccl not measured on a one-GPU program; then verify and rollback
      if [ "$step" = user-gpu ]; then name=gpu prog="$PWD/tests/gpu/transformer_program.py"; else name=loader prog="$PWD/tests/gpu/train_step_program.py"; fi
      echo "state hash before: $(state_hash before)"
      t0=$(date +%s)
      run ap tune.yml -e stacktune_run_id="user-$name" -e stacktune_report_dir="$RUN_DIR/reports" -e "$TUNE_VARS" -e "{
        \"stacktune_bench_workload\": \"command\", \"stacktune_bench_command\": [\"$py\", \"$prog\", \"--steps\", \"120\"],
        \"stacktune_bench_live_command\": [\"$py\", \"$prog\", \"--steps\", \"100000000\"]}"
      echo "default layers on the user's $name-bound program streamed live: tune.yml took $(( $(date +%s) - t0 )) s"
      run ap playbooks/verify.yml
      run ap playbooks/rollback.yml
      echo "state hash after rollback: $(state_hash after)"
      diff "$RUN_DIR/state-before.txt" "$RUN_DIR/state-after.txt" && echo "ROLLBACK EXACT (user-$name): state after rollback == before tune"
      ;;
    user-thp)
      # a search the user asked for on a layer the diagnosis says cannot move the program: THP's
      # three values on the GPU-bound transformer; the search runs (never skipped), then rollback
      prog="$PWD/tests/gpu/transformer_program.py"
      echo "THP before: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
      t0=$(date +%s)
      run ap tune.yml -e stacktune_run_id=user-thp -e stacktune_report_dir="$RUN_DIR/reports" -e "{
        \"stacktune_layers\": [\"memory\"], \"memory_thp_enabled\": [\"always\", \"never\", \"madvise\"],
        \"stacktune_bench_workload\": \"command\", \"stacktune_bench_command\": [\"$py\", \"$prog\", \"--steps\", \"120\"],
        \"stacktune_bench_live_command\": [\"$py\", \"$prog\", \"--steps\", \"100000000\"]}"
      echo "THP search on the user's GPU-bound program: tune.yml took $(( $(date +%s) - t0 )) s; THP now $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
      run ap playbooks/rollback.yml
      echo "THP after rollback: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
      ;;
    live-user)
      # a user's own program streamed through a live trial (the ResNet-18 DataLoader program,
      # one process for the whole trial): a 450 W limit on a 700 W host
      nvidia-smi -pl 700 >/dev/null
      prog="$PWD/tests/gpu/train_step_program.py"
      t0=$(date +%s)
      run ap tune.yml -e stacktune_run_id=live-user-450 -e stacktune_report_dir="$RUN_DIR/reports" -e "{\"stacktune_layers\":
        [\"gpu_settings\"], \"gpu_settings_power_limit_watts\": 450, \"stacktune_bench_workload\": \"command\",
        \"stacktune_bench_command\": [\"$py\", \"$prog\", \"--steps\", \"140\"],
        \"stacktune_bench_live_command\": [\"$py\", \"$prog\", \"--steps\", \"100000000\"]}"
      echo "live gate on the user's program, power limit 700 -> 450 W: tune.yml took $(( $(date +%s) - t0 )) s"
      run ap playbooks/rollback.yml
      nvidia-smi -pl 700 >/dev/null
      ;;
    record-user)
      # a user's own training program (ResNet-18 with a 4-worker DataLoader) as the gate's command
      # workload runs it, with and without pinned memory (a real change), for
      # tests/unit/fixtures/blocks/h200x1_user_resnet18.json
      mkdir -p "$RUN_DIR/blocks"
      run env PYTHONPATH="collections:${PYTHONPATH:-}" "$py" benchmarks/record_blocks.py --workload command \
        --command "python3 $PWD/tests/gpu/train_step_program.py --steps 140" --steps 120 --warmup 20 \
        --blocks "${USER_BLOCKS:-6}" --arm base --arm nopin:PIN_MEMORY=0 --out "$RUN_DIR/blocks/h200x1_user_resnet18.json"
      ;;
    cpuio)
      # the opt-in cpu and io layers: what the host exposes (facts) and what they would change
      run ap playbooks/facts.yml -e stacktune_report_dir="$RUN_DIR/reports"
      run ap tune.yml --check --diff -e stacktune_run_id=cpuio-check -e stacktune_report_dir="$RUN_DIR/reports" \
        -e '{"stacktune_layers": ["cpu", "io"]}'
      ;;
    acceptance-depth)
      # bandwidth against the link, memory health, sustained load, and injected faults
      run bash tests/gpu/acceptance-depth.sh "$RUN_DIR/acceptance-depth"
      ;;
    nccl)
      # which transport NCCL picks between the GPUs, as is and with P2P (then SHM) switched off
      mkdir -p "$RUN_DIR/nccl"
      run env PYTHONPATH="collections:${PYTHONPATH:-}" "$py" tests/gpu/record_nccl.py "${TORCH_PYTHON:-/opt/torch/.venv/bin/python3}" \
        "${HOST_TAG:-h200}" "$RUN_DIR/nccl"
      # the module as a playbook task would run it
      run "$py" -m ansible.cli.adhoc localhost -m stacktune.gpu.nccl_transport \
        -a "python=${TORCH_PYTHON:-/opt/torch/.venv/bin/python3}"
      ;;
    calibrate)
      run ap playbooks/calibrate.yml -e '{"stacktune_calibrate_workloads": ["allreduce", "h2d_pinned"], "stacktune_calibrate_blocks": 8}'
      ;;
    acceptance)
      run ap playbooks/acceptance.yml -e stacktune_report_dir="$RUN_DIR/reports" -e acceptance_level=standard
      run ap playbooks/acceptance.yml -e stacktune_report_dir="$RUN_DIR/reports" -e acceptance_level=standard -e acceptance_perturb_round=2
      ;;
  esac
done
if [ -n "${OUT:-}" ]; then tar -C "$RUN_DIR" -czf "$OUT/gpu-run.tgz" . && cp "$log" "$OUT/"; fi
