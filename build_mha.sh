#!/usr/bin/env bash
# Build the libraries (compile.py) and the benchmark executables into the current directory, as AITER's
# op_tests/cpp/mha/build_mha.sh does. Usage: bash build_mha.sh [fwd|bwd|all]   (default: all)
# Extra compile.py options pass through MHA_COMPILE_ARGS, e.g. MHA_COMPILE_ARGS="--preset ci --arch sm_90a".
# The executables carry an rpath of $ORIGIN and static cudart: they run from any working directory without
# LD_LIBRARY_PATH as long as the .so files stay beside them. fwd.exe / bwd.exe are links for AITER's smoke scripts.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
API=${1:-all}
case "$API" in
  fwd|bwd) COMPILE_API=$API ;;
  all|"") COMPILE_API="" ;;
  *) echo "usage: bash build_mha.sh [fwd|bwd|all]" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
# shellcheck disable=SC2086
"$PYTHON" "$SCRIPT_DIR/compile.py" ${COMPILE_API:+--api=$COMPILE_API} ${MHA_COMPILE_ARGS:-}

NVCC=${NVCC:-$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")}
ARCH_FLAGS=${MHA_BENCH_GENCODE:-"-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90a,code=sm_90a"}
COMMON=(-std=c++17 -O2 -I"$SCRIPT_DIR/include" -I"$SCRIPT_DIR/csrc" -I"$SCRIPT_DIR/benchmark" -cudart static
        -L. -Xlinker -rpath -Xlinker '$ORIGIN')

if [[ "$API" == fwd || "$API" == all || "$API" == "" ]]; then
  echo "[build_mha.sh] linking benchmark_mha_fwd"
  # shellcheck disable=SC2086
  "$NVCC" "${COMMON[@]}" $ARCH_FLAGS "$SCRIPT_DIR/benchmark/benchmark_mha_fwd.cpp" \
    "$SCRIPT_DIR/csrc/reference/naive_attention.cu" "$SCRIPT_DIR/benchmark/device_fill.cu" -lmha_fwd -o benchmark_mha_fwd
  ln -sf benchmark_mha_fwd fwd.exe
fi
if [[ "$API" == bwd || "$API" == all || "$API" == "" ]]; then
  if [[ -f "$SCRIPT_DIR/benchmark/benchmark_mha_bwd.cpp" ]]; then
    echo "[build_mha.sh] linking benchmark_mha_bwd"
    # shellcheck disable=SC2086
    "$NVCC" "${COMMON[@]}" $ARCH_FLAGS "$SCRIPT_DIR/benchmark/benchmark_mha_bwd.cpp" \
      "$SCRIPT_DIR/benchmark/device_fill.cu" -lmha_bwd -o benchmark_mha_bwd
    ln -sf benchmark_mha_bwd bwd.exe
  else
    echo "[build_mha.sh] benchmark/benchmark_mha_bwd.cpp is absent, nothing to link"
  fi
fi
