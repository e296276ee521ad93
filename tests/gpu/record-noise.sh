#!/usr/bin/env bash
# Record the gate's real noise on a GPU host: identical blocks (one process run each) of
# every built-in GPU workload, and all-reduce blocks with real NCCL changes interleaved.
# The JSON files become the unit-test fixtures under tests/unit/fixtures/blocks/.
# Usage: bash tests/gpu/record-noise.sh part1|part2 [OUT_DIR]   (OUT_DIR default: $OUT or /tmp)
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${2:-${OUT:-/tmp}}"
py="${PYTHON:-/opt/torch/.venv/bin/python3}"
export PYTHONUNBUFFERED=1
rec() { python3 benchmarks/record_blocks.py --python "$py" "$@"; }
nvidia-smi --query-gpu=index,name,driver_version,pstate,clocks.sm,power.limit --format=csv,noheader | tee "$out/gpus-$1.txt"
case "$1" in
  part1)
    rec --workload gemm --blocks 12 --steps 400 --out "$out/gemm.json"
    rec --workload h2d_pinned --blocks 12 --steps 400 --out "$out/h2d_pinned.json"
    rec --workload h2d_pageable --blocks 10 --steps 150 --out "$out/h2d_pageable.json"
    if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
      rec --workload allreduce --size 64 --blocks 8 --steps 400 \
          --arm base --arm nch4:NCCL_MAX_NCHANNELS=4 --arm p2poff:NCCL_P2P_DISABLE=1 --out "$out/allreduce.json"
    fi
    ;;
  part2)
    rec --workload dataloader --blocks 10 --steps 400 --out "$out/dataloader.json"
    rec --workload train_step --blocks 10 --steps 300 --out "$out/train_step.json"
    ;;
  *) echo "usage: $0 part1|part2 [OUT_DIR]" >&2; exit 2 ;;
esac
