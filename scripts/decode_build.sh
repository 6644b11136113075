#!/usr/bin/env bash
# A decode-only build for experiments: the bf16 d128 split-KV instances (sm_90a) and benchmark_mha_fwd, into DIR,
# with extra nvcc flags (experiment macros). About a minute on 2 cores. Compare builds with scripts/decode_ab.py.
# Usage: bash scripts/decode_build.sh DIR ["NVCC FLAGS"]
# Needs CUTLASS_DIR, or .carry/nvidia_cutlass-*.whl (unpacked to /tmp/cl as scripts/gpu_check.sh does).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:?usage: decode_build.sh DIR [NVCC_FLAGS]}
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
if [[ -z "${CUTLASS_DIR:-}" ]]; then
  [[ -d /tmp/cl ]] || python3 - "$ROOT" <<'PY'
import glob, sys, zipfile
z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/.carry/nvidia_cutlass-*.whl")[0])
z.extractall("/tmp/cl", [n for n in z.namelist() if n.startswith("cutlass_library/source/include/")])
PY
  export CUTLASS_DIR=/tmp/cl/cutlass_library/source
fi
export PATH=/usr/local/cuda/bin:$PATH
(cd "$DIR" && MHA_NVCC_FLAGS="${2:-}" \
  MHA_COMPILE_ARGS="--api fwd_splitkv --dtypes bf16 --hdims 128 --arch sm_90a --no-python --build-dir $DIR/build" \
  MHA_BENCH_GENCODE="-gencode=arch=compute_90a,code=sm_90a" bash "$ROOT/build_mha.sh" fwd > build.log 2>&1) ||
  { tail -n 20 "$DIR/build.log"; exit 1; }
rm -rf "$DIR/build" "$DIR/fwd.exe" # keeps DIR small enough to carry to the GPU machine
echo "$DIR/benchmark_mha_fwd"
