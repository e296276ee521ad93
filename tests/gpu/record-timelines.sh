#!/usr/bin/env bash
# Record the GPU host's timelines that the diagnosis, the search and the gate's replays are
# tested on (benchmarks/gpu_timeline.py), into RUN_DIR (default /tmp/stacktune-timelines; packed
# into $OUT/timelines.tgz when OUT is set). Every arm that changes the host is put back at the end
# (--finally), whatever happens.
#   bash tests/gpu/record-timelines.sh profiles   # diagnosis: two user programs, three built-ins, sampler A/A
#   bash tests/gpu/record-timelines.sh search     # power-limit arms with energy, THP and sysctl arms, a DataLoader stream
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
RUN_DIR="${RUN_DIR:-/tmp/stacktune-timelines}"
mkdir -p "$RUN_DIR"
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
tl() { echo "===== $* ($(date -u +%T))"; "$py" benchmarks/gpu_timeline.py "$@"; echo "===== rc=$?"; }
gpu_prog="$py tests/gpu/transformer_program.py"
loader_prog="$py tests/gpu/train_step_program.py --steps 100000"
thp=/sys/kernel/mm/transparent_hugepage/enabled
[ $# -gt 0 ] || set -- profiles search
for what in "$@"; do
  case "$what" in
    profiles)
      nvidia-smi --query-gpu=name,power.limit,power.default_limit,clocks.max.sm --format=csv
      tl --label transformer --command "$gpu_prog" --warmup-s 10 --seconds 25 --sample-hz 2 --out "$RUN_DIR/h200_transformer.json"
      tl --label resnet18_loader --command "$loader_prog" --warmup-s 10 --seconds 25 --sample-hz 2 --out "$RUN_DIR/h200_resnet18_loader.json"
      for w in gemm train_step dataloader; do
        tl --label "builtin_$w" --workload "$w" --warmup-s 6 --seconds 20 --sample-hz 2 --out "$RUN_DIR/h200_builtin_$w.json"
      done
      tl --label sampler_aa --command "$gpu_prog" --warmup-s 8 --sample-hz 2 --arm on=@sampler-on --arm off=@sampler-off \
        --rounds 6 --window-s 4 --settle-s 0.3 --out "$RUN_DIR/h200_sampler_aa.json"
      ;;
    search)
      limit=$(nvidia-smi --query-gpu=power.limit --format=csv,noheader,nounits | head -1 | cut -d. -f1)
      echo "power limit found: $limit W"
      arms=(); for w in 700 650 600 550 500 450 400 350; do arms+=(--arm "$w=nvidia-smi -pl $w"); done
      tl --label power_curve --command "$gpu_prog" --warmup-s 8 "${arms[@]}" --rounds 3 --window-s 3 --settle-s 1 \
        --finally "nvidia-smi -pl $limit" --out "$RUN_DIR/h200_power_curve.json"
      nvidia-smi --query-gpu=power.limit --format=csv,noheader
      thp_was=$(grep -o '\[[a-z]*\]' "$thp" | tr -d '[]')
      dirty_was=$(cat /proc/sys/vm/dirty_ratio)
      echo "THP found: $thp_was; vm.dirty_ratio found: $dirty_was"
      tl --label settle_thp_sysctl --command "$gpu_prog" --warmup-s 8 \
        --arm "thp_always=echo always > $thp" --arm "thp_never=echo never > $thp" \
        --arm "dirty_40=sysctl -qw vm.dirty_ratio=40" --arm "dirty_10=sysctl -qw vm.dirty_ratio=10" \
        --rounds 3 --window-s 3 --settle-s 0 \
        --finally "echo $thp_was > $thp; sysctl -qw vm.dirty_ratio=$dirty_was" --out "$RUN_DIR/h200_settle_thp_sysctl.json"
      echo "THP now: $(cat $thp); vm.dirty_ratio now: $(cat /proc/sys/vm/dirty_ratio)"
      tl --label resnet18_stream --command "$loader_prog" --warmup-s 10 --seconds 110 --out "$RUN_DIR/h200_resnet18_stream.json"
      ;;
  esac
done
if [ -n "${OUT:-}" ]; then tar -C "$RUN_DIR" -czf "$OUT/timelines-$(date -u +%H%M%S).tgz" .; fi
