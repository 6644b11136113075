#!/usr/bin/env bash
# Where a decode call's time goes: builds the bf16 d128 split-KV instances with per-CTA %globaltimer stamps
# (-DMHA_STAMPS, csrc/ck/stamps.cuh) into a scratch directory, then runs benchmark_mha_fwd on each shape (32 query /
# 8 KV heads, one query, the library's split count, L2 swept before every call) and prints the stamps of its last
# call. The build's timings mean nothing (the host synchronises to read the stamps); the stamps do. The first line
# says how long after the spin kernel before the timed call (l2_flush.cu) the first CTA started; MHA_STAMPS_RAW=FILE
# also writes every CTA's row (CTA index, SM id, each point in ns after the first start) for offline analysis, and
# MHA_STAMPS_LAND=FILE one row per warp (the first 4096): its index, SM id, then for each of its first 64 key blocks
# the ns after the first start at which its wait began and ended (-1 -1 past its last block; a wait that ended at
# once found the block already landed). Splits that merge inside the grid (b=1..4 decode steps) also stamp their
# partial stored, counted in ("merge"), every split in ("m:lse") and their chunks stored ("m:stored"); d:partial and
# d:arrive are the loop end -> partial stored and partial stored -> counted in intervals.
# Usage: bash scripts/decode_stamps.sh ["B KEYS [more benchmark flags]" ...]   (default: "16 1024" "1 8192")
# Builds with scripts/decode_build.sh (CUTLASS_DIR or the .carry wheel); STAMPS_DIR (default /tmp/mha_stamps) holds
# the build, STAMPS_FLAGS adds nvcc flags (experiments).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${STAMPS_DIR:-/tmp/mha_stamps}
bash "$ROOT/scripts/decode_build.sh" "$DIR" "-DMHA_STAMPS ${STAMPS_FLAGS:-}" > /dev/null
[[ $# -gt 0 ]] || set -- "16 1024" "1 8192"
for shape in "$@"; do
  read -r b keys extra <<< "$shape"
  echo "== b=$b keys=$keys ${extra:-}"
  # shellcheck disable=SC2086 # extra flags split on purpose
  MHA_STAMPS=25 "$DIR/benchmark_mha_fwd" -prec=bf16 -b="$b" -h=32 -h_k=8 -d=128 -s=1 -s_k="$keys" -num_splits=0 \
    -iperm=1 -operm=1 -v=0 -warmup=5 -repeat=20 -flush_cache=1 ${extra:-} | grep "^\[stamps\]"
done
