#!/usr/bin/env bash
# Tile-size experiment on the GPU machine: builds one bf16 plain instance per tile variant (MHA_TILE_OVERRIDE, see
# csrc/codegen/generate.py) in parallel, then times each on the standard grid points. Keeps nothing; prints a table.
# Usage: bash scripts/tile_experiment.sh "128x128=128,64,4" "128x128=128,128,8@-DFOO=1" ...   (needs CUTLASS_DIR set)
# Text after "@" goes to nvcc (MHA_NVCC_FLAGS) for that variant only.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
i=0
for spec in "$@"; do
  d="/tmp/tx/v$i"; mkdir -p "$d"; dims=${spec%%=*}; tile=${spec%%@*}; flags=""
  [[ "$spec" == *@* ]] && flags=${spec#*@}
  ( cd "$d" && MHA_NVCC_FLAGS="$flags" MHA_TILE_OVERRIDE="$tile" MHA_COMPILE_ARGS="--api fwd --dtypes bf16 --hdims $dims --variants plain --no-python" \
      MHA_BENCH_GENCODE="-gencode=arch=compute_90a,code=sm_90a" bash "$ROOT/build_mha.sh" fwd > build.log 2>&1 \
      || echo "build failed: $spec" ) &
  i=$((i + 1))
done
wait
i=0
for spec in "$@"; do
  dims=${spec%%=*}; dq=${dims%%x*}; h=$((2048 / dq))
  for s in ${TILE_SEQLENS:-1024 4096 16384}; do
    for c in 0 2; do
      t=$(/tmp/tx/v$i/benchmark_mha_fwd -prec=bf16 -b=$((16384 / s)) -h=$h -s=$s -d=$dq -mask=$c -v=0 -warmup=5 \
          -repeat=20 2>/dev/null | grep -o '[0-9.]* TFlops')
      echo "$spec s=$s mask=$c $t"
    done
  done
  i=$((i + 1))
done
