#!/usr/bin/env bash
# Build the libraries (compile.py) and the benchmark executables into the current directory, as AITER's
# op_tests/cpp/mha/build_mha.sh does. Usage: bash build_mha.sh [fwd|bwd|fwd_v3|bwd_v3|all]   (default: all)
# fwd builds mha_fwd, mha_fwd_splitkv and mha_batch_prefill; fwd_v3 / bwd_v3 (AITER's asm-only builds) build the
# mha_fwd / mha_bwd instances. Extra compile.py options pass through MHA_COMPILE_ARGS, split as shell words (Python's
# shlex: quotes honoured, nothing expanded or run; --list / --print-toolchain stop after compile.py), e.g. MHA_COMPILE_ARGS="--preset ci --arch sm_90a" or MHA_COMPILE_ARGS="--filter '*bf16_d128*'".
# An --api there replaces the argument's selection (MHA_COMPILE_ARGS="--api fwd_splitkv" with fwd builds only the
# split-KV instances); the benchmarks are then linked only against the libraries it builds.
# The benchmarks are linked by compile.py's nvcc for the library's archs (compile.py --print-toolchain) unless
# MHA_BENCH_GENCODE is set.
# The executables carry an rpath of $ORIGIN and static cudart: they run from any working directory without
# LD_LIBRARY_PATH as long as the .so files stay beside them. fwd.exe / bwd.exe are links for AITER's smoke scripts.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (( $# > 1 )); then
  echo "usage: bash build_mha.sh [fwd|bwd|fwd_v3|bwd_v3|all] (one API; got: $*); compile.py options go in MHA_COMPILE_ARGS" >&2
  exit 2
fi
API=${1:-all}
case "$API" in
  fwd|bwd|fwd_v3|bwd_v3) COMPILE_API=$API ;;
  all|"") COMPILE_API="" ;;
  *) echo "usage: bash build_mha.sh [fwd|bwd|fwd_v3|bwd_v3|all]" >&2; exit 2 ;;
esac
BENCH=${API%_v3}

PYTHON=${PYTHON:-python3}
EXTRA=()
if [[ -n "${MHA_COMPILE_ARGS:-}" ]]; then
  # split as shell words by Python's shlex (quotes honoured; no expansion, no command substitution), re-quoted
  QUOTED=$("$PYTHON" -c '
import shlex, sys
try:
    print(" ".join(shlex.quote(w) for w in shlex.split(sys.argv[1])))
except ValueError as e:
    sys.exit(f"build_mha.sh: cannot split MHA_COMPILE_ARGS: {e}")' "$MHA_COMPILE_ARGS") || exit 2
  eval "EXTRA=($QUOTED)"
fi
# An --api in MHA_COMPILE_ARGS narrows the build (e.g. --api fwd_splitkv with `fwd`) and replaces the argument's; the
# benchmarks the argument names are linked only against libraries that selection builds.
SEL_API="" N_API=0
for ((i = 0; i < ${#EXTRA[@]}; i++)); do
  case "${EXTRA[$i]}" in
    --api=*) SEL_API=${EXTRA[$i]#--api=} N_API=$((N_API + 1)) ;;
    --api) SEL_API=${EXTRA[$((i + 1))]:-} N_API=$((N_API + 1)) ;;
  esac
done
if (( N_API > 1 )); then
  echo "build_mha.sh: MHA_COMPILE_ARGS gives --api more than once; give one comma list (e.g. --api fwd_splitkv,bwd)" >&2
  exit 2
fi
if [[ -n "$SEL_API" ]]; then
  COMPILE_API=""
  HAS_FWD=0 HAS_BWD=0
  IFS=, read -r -a SEL_LIST <<< "$SEL_API"
  for a in "${SEL_LIST[@]}"; do
    case "${a// /}" in fwd|fwd_splitkv|batch_prefill|fwd_v3) HAS_FWD=1 ;; bwd|bwd_v3) HAS_BWD=1 ;; esac
  done
  if [[ "$BENCH" == fwd && $HAS_FWD == 0 ]] || [[ "$BENCH" == bwd && $HAS_BWD == 0 ]]; then
    echo "build_mha.sh $API links benchmark_mha_$BENCH, but MHA_COMPILE_ARGS' --api $SEL_API builds no libmha_$BENCH.so" >&2
    exit 2
  fi
  if [[ "$BENCH" == all || "$BENCH" == "" ]]; then # link what the selection builds
    BENCH=none
    (( HAS_FWD && HAS_BWD )) && BENCH=all
    (( HAS_FWD && !HAS_BWD )) && BENCH=fwd
    (( HAS_BWD && !HAS_FWD )) && BENCH=bwd
  fi
fi
"$PYTHON" "$SCRIPT_DIR/compile.py" ${COMPILE_API:+--api=$COMPILE_API} ${EXTRA[@]+"${EXTRA[@]}"}
for a in ${EXTRA[@]+"${EXTRA[@]}"}; do # compile.py only printed something: nothing to link
  case "$a" in --list|--print-toolchain|-h|--help) exit 0 ;; esac
done

# the nvcc compile.py used and the library's archs
TOOLCHAIN=$("$PYTHON" "$SCRIPT_DIR/compile.py" ${COMPILE_API:+--api=$COMPILE_API} ${EXTRA[@]+"${EXTRA[@]}"} \
            --print-toolchain)
NVCC=$(sed -n 1p <<< "$TOOLCHAIN")
ARCH_FLAGS=${MHA_BENCH_GENCODE:-$(sed -n 2p <<< "$TOOLCHAIN")}
COMMON=(-std=c++17 -O2 -I"$SCRIPT_DIR/include" -I"$SCRIPT_DIR/csrc" -I"$SCRIPT_DIR/benchmark" -cudart static
        -L. -Xlinker -rpath -Xlinker '$ORIGIN')

if [[ "$BENCH" == fwd || "$BENCH" == all || "$BENCH" == "" ]]; then
  echo "[build_mha.sh] linking benchmark_mha_fwd"
  # shellcheck disable=SC2086
  "$NVCC" "${COMMON[@]}" $ARCH_FLAGS "$SCRIPT_DIR/benchmark/benchmark_mha_fwd.cpp" \
    "$SCRIPT_DIR/csrc/reference/naive_attention.cu" "$SCRIPT_DIR/benchmark/device_fill.cu" -lmha_fwd -o benchmark_mha_fwd
  ln -sf benchmark_mha_fwd fwd.exe
fi
if [[ "$BENCH" == bwd || "$BENCH" == all || "$BENCH" == "" ]]; then
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
