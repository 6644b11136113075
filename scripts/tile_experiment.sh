#!/usr/bin/env bash
# Tile-size experiment on the GPU machine: builds one bf16 plain instance per tile variant (MHA_TILE_OVERRIDE, see
# csrc/codegen/generate.py) in parallel, then times each on the standard grid points. Keeps nothing; prints a table.
# Usage: bash scripts/tile_experiment.sh "128x128=128,64,4" "128x128=128,128,8@-DFOO=1" ...   (needs CUTLASS_DIR set)
# Text after "@" goes to nvcc (MHA_NVCC_FLAGS) for that variant only. TILE_API=bwd times the backward instead
# (MHA_BWD_TILE_OVERRIDE tiles: "128x128=64,64,8,2,4,4" = kBlockM, kBlockN, warps, SdP / dKV / dQ warp layouts).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
i=0
for spec in "$@"; do
  d="/tmp/tx/v$i"; mkdir -p "$d"; dims=${spec%%=*}; tile=${spec%%@*}; flags=""
  [[ "$spec" == *@* ]] && flags=${spec#*@}
  if [[ "${TILE_API:-fwd}" == bwd ]]; then ovr=(MHA_BWD_TILE_OVERRIDE="$tile"); else ovr=(MHA_TILE_OVERRIDE="$tile"); fi
  ( cd "$d" && env "${ovr[@]}" MHA_NVCC_FLAGS="$flags" MHA_COMPILE_ARGS="--api ${TILE_API:-fwd} --dtypes bf16 --hdims $dims --variants plain --no-python" \
      MHA_BENCH_GENCODE="-gencode=arch=compute_90a,code=sm_90a" bash "$ROOT/build_mha.sh" ${TILE_API:-fwd} > build.log 2>&1 \
      || echo "build failed: $spec" ) &
  i=$((i + 1))
done
wait
i=0
for spec in "$@"; do
  dims=${spec%%=*}; dq=${dims%%x*}; h=$((2048 / dq))
  for s in ${TILE_SEQLENS:-1024 4096 16384}; do
    for c in 0 2; do
      t=$(/tmp/tx/v$i/benchmark_mha_${TILE_API:-fwd} -prec=bf16 -b=$((16384 / s)) -h=$h -s=$s -d=$dq -mask=$c -v=0 -warmup=5 \
          -repeat=20 2>/dev/null | grep -o '[0-9.]* ms, [0-9.]* TFlops')
      echo "$spec s=$s mask=$c $t"
    done
  done
  i=$((i + 1))
done
