#!/usr/bin/env bash
# Acceptance depth on a real GPU host: runs the acceptance program at levels standard and
# burn_in, prints every measured value as a fraction of its limit, then injects the faults
# the hardware cannot be made to have and checks that each one is flagged (warn or reject):
#   remote-numa   the copies labelled local are made from a buffer on a remote NUMA node
#                 (only where the host has more than one NUMA node; else it says it cannot)
#   contention    a second process hammers host-to-device copies on the same GPU's link
#                 while the acceptance program measures it
#   clock-cap     the GPU clocks are locked low through NVML for a short burn-in, and always
#                 reset afterwards (trap on exit, and explicitly)
# Writes one JSON file per run (report + decision) and summary.txt under OUT_DIR.
# Usage: bash tests/gpu/acceptance-depth.sh OUT_DIR [steps...]
#   steps: standard burn_in remote-numa contention clock-cap (default: all)
# Environment: STACKTUNE_TORCH_PYTHON (default /opt/torch/.venv/bin/python3),
#   BURN_SECONDS (default 60), CAP_SECONDS (default 30), GPU (fault-injection GPU, default 0).
# Needs root for the clock cap (nvmlDeviceSetGpuLockedClocks).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out="${1:?usage: $0 OUT_DIR [steps...]}"
shift
mkdir -p "$out"
steps="${*:-standard burn_in remote-numa contention clock-cap}"
py="${STACKTUNE_TORCH_PYTHON:-/opt/torch/.venv/bin/python3}"
[ -x "$py" ] || py=python3
export PYTHONPATH="$PWD/collections${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
gpu="${GPU:-0}"
summary="$out/summary.txt"
: >"$summary"
hammer_pid=""

reset_clocks() {
  "$py" - <<'PY' || echo "WARNING: could not reset the locked clocks; run: nvidia-smi -rgc"
import pynvml
pynvml.nvmlInit()
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    try:
        pynvml.nvmlDeviceResetGpuLockedClocks(h)
    except pynvml.NVMLError as e:
        print("reset GPU %d: %s" % (i, e))
print("locked clocks reset on every GPU")
PY
}

cleanup() {
  if [ -n "$hammer_pid" ] && kill -0 "$hammer_pid" 2>/dev/null; then kill "$hammer_pid"; wait "$hammer_pid" 2>/dev/null; fi
  if [ -e "$out/.clocks-locked" ]; then reset_clocks && rm -f "$out/.clocks-locked"; fi
}
trap cleanup EXIT INT TERM

# run NAME EXPECT [build_config options as JSON]: EXPECT is pass, flagged (warn or reject) or any
run() {
  local name="$1" expect="$2" opts="${3:-{\}}"
  echo "===== $name ($(date -u +%T)), expecting $expect"
  "$py" - "$out/$name.json" "$expect" "$opts" <<'PY' | tee -a "$summary"
import json
import sys

from ansible_collections.stacktune.gpu.plugins.module_utils.acceptance import levels, runner

path, expect, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
cfg = levels.build_config(**opts)
timeout = 900 + cfg["burn_in_seconds"]
run = runner.run_program(sys.executable, cfg, runner.program_env(), timeout)
fatal, decision = runner.decide(run, timeout)
with open(path, "w") as fh:
    json.dump({"options": opts, "fatal": fatal, "decision": decision, "report": run["report"],
               "stderr_tail": run["stderr"][-4000:]}, fh, indent=1)
name = path.rsplit("/", 1)[-1][:-5]
if fatal:
    print("%s: FATAL %s" % (name, fatal))
    sys.exit(0)
m = decision["measurements"]


def pct(entry):
    if entry.get("fraction") is None:
        return "%s GB/s (%s)" % (entry.get("gbps"), entry.get("status"))
    return "%.1f GB/s = %.0f%% of %s (%.1f GB/s) %s" % (
        entry["gbps"], entry["fraction"] * 100, entry["limit"], entry["limit_gbps"], entry["status"])


for gpu, entries in sorted(m.get("gpus", {}).items()):
    for path_name in ("h2d_local", "d2h_local", "h2d_remote", "d2h_remote", "memory"):
        if path_name in entries:
            print("%s  %s %-10s %s" % (name, gpu, path_name, pct(entries[path_name])))
for pair, entry in sorted(m.get("pairs", {}).items()):
    print("%s  %s p2p %s, small copy %s us" % (name, pair, pct(entry), entry.get("latency_us")))
for gpu, c in sorted(m.get("clocks", {}).items()):
    print("%s  %s SM clock median %s MHz = %.0f%% of %s MHz, power median %s W of %s W, low share %s, reasons %s" % (
        name, gpu, c.get("median_sm_mhz"), (c.get("median_fraction") or 0) * 100, c.get("max_sm_mhz"),
        c.get("median_power_w"), c.get("power_limit_w"), c.get("low_share"), c.get("reasons_seen")))
if m.get("remote_numa"):
    print("%s  remote NUMA: %s" % (name, m["remote_numa"]))
for note in decision["notes"]:
    print("%s  note: %s" % (name, note))
for severity, items in (("reject", decision["rejections"]), ("warn", decision["warnings"])):
    for p in items:
        print("%s  %s %s %s: %s" % (name, severity.upper(), p["check"], p["subject"], p["message"]))
verdict = decision["verdict"]
ok = {"pass": verdict == "pass", "flagged": verdict in ("warn", "reject"), "any": True}[expect]
print("%s: verdict %s (exit code %d), expected %s: %s" % (name, verdict, decision["exit_code"], expect,
                                                          "OK" if ok else "UNEXPECTED"))
PY
}

numa_nodes() {
  local n count=0
  for n in /sys/devices/system/node/node[0-9]*; do
    [ -s "$n/cpulist" ] && [ -n "$(tr -d '\n' <"$n/cpulist")" ] && count=$((count + 1))
  done
  echo "$count"
}

for step in $steps; do
  case "$step" in
    standard) run standard pass '{"level": "standard"}' ;;
    burn_in) run burn_in pass "{\"level\": \"burn_in\", \"rounds\": 3, \"burn_in_seconds\": ${BURN_SECONDS:-60}}" ;;
    remote-numa)
      if [ "$(numa_nodes)" -gt 1 ]; then
        run remote_numa flagged "{\"level\": \"standard\", \"gpus\": [$gpu], \"remote_buffer\": true}"
      else
        echo "remote_numa: cannot inject: the host has $(numa_nodes) NUMA node(s) with CPUs" | tee -a "$summary"
      fi
      ;;
    contention)
      # a second process copying 256 MiB host-to-device in a loop on the same GPU
      "$py" - "$gpu" <<'PY' &
import sys
import time

import torch

g = int(sys.argv[1])
host = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, pin_memory=True)
dev = torch.empty_like(host, device="cuda:%d" % g)
end = time.time() + 600
while time.time() < end:
    for _ in range(20):
        dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize(g)
PY
      hammer_pid=$!
      sleep 8  # the hammer's CUDA start-up
      run contention flagged "{\"level\": \"standard\", \"gpus\": [$gpu]}"
      kill "$hammer_pid" 2>/dev/null; wait "$hammer_pid" 2>/dev/null; hammer_pid=""
      ;;
    clock-cap)
      touch "$out/.clocks-locked"
      if "$py" - "$gpu" <<'PY' | tee -a "$summary"
import sys

import pynvml

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(int(sys.argv[1]))
top = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
mem = pynvml.nvmlDeviceGetSupportedMemoryClocks(h)[0]
clocks = sorted(pynvml.nvmlDeviceGetSupportedGraphicsClocks(h, mem))
low = min(clocks, key=lambda c: abs(c - 0.45 * top))
pynvml.nvmlDeviceSetGpuLockedClocks(h, clocks[0], low)
print("clock-cap: GPU %s SM clock locked to %d-%d MHz (max %d MHz)" % (sys.argv[1], clocks[0], low, top))
PY
      then
        run clock_cap flagged "{\"level\": \"burn_in\", \"rounds\": 3, \"gpus\": [$gpu], \"burn_in_seconds\": ${CAP_SECONDS:-30}}"
      else
        echo "clock_cap: could not lock the clocks (root and a GPU that supports it are needed)" | tee -a "$summary"
      fi
      reset_clocks && rm -f "$out/.clocks-locked"
      ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
echo "===== summary ($summary)"
grep -E ": verdict |cannot inject|could not lock|FATAL" "$summary"
