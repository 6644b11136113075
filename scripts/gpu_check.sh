#!/usr/bin/env bash
# One GPU-machine session: build everything, run the smoke sweep and pytest, time the forward against PyTorch SDPA
# (flash / cuDNN) in the same call, and leave logs under $OUT. Expects .carry/ with the nvidia-cutlass wheel and
# peer_sdpa.py (the machine has no network). Usage: bash scripts/gpu_check.sh [quick]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
python3 - <<'PY'
import glob, zipfile
z = zipfile.ZipFile(glob.glob(".carry/nvidia_cutlass-*.whl")[0])
z.extractall("/tmp/cl", [n for n in z.namelist() if n.startswith("cutlass_library/source/include/")])
PY
export CUTLASS_DIR=/tmp/cl/cutlass_library/source
nvidia-smi -L | tee "$OUT/gpu.txt"

echo "== full build (MAX_JOBS=16)"
/usr/bin/time -f "full build wall %e s" env MAX_JOBS=16 bash build_mha.sh fwd 2>&1 | tee "$OUT/build.log" | tail -n 4
ls -la libmha_fwd.so libmha_bwd.so aiter_mha*.so 2>&1 | tee -a "$OUT/build.log"
cuobjdump --dump-sass libmha_fwd.so > "$OUT/fwd.sass" 2>/dev/null
echo "SASS: HMMA $(grep -c HMMA "$OUT/fwd.sass")  LDSM $(grep -c LDSM "$OUT/fwd.sass")  LDGSTS $(grep -c LDGSTS "$OUT/fwd.sass") LDL $(grep -c 'LDL' "$OUT/fwd.sass")"

echo "== smoke"
bash smoke_tests/smoke_test_fwd_basic.sh ./benchmark_mha_fwd > "$OUT/smoke.log" 2>&1; echo "smoke rc=$?"; tail -n 5 "$OUT/smoke.log"

echo "== pytest"
python3 -m pytest tests -q -rs -x > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?"; tail -n 8 "$OUT/pytest.log"

echo "== perf (ours; AITER FLOP count: halved for causal)"
for mask in 0 2; do
  ./benchmark_mha_fwd -prec=bf16 -b=2 -h=16 -s=8192 -d=128 -mask=$mask -v=0 -warmup=5 -repeat=30 -kname=1 | tee -a "$OUT/perf.log"
done
echo "== peer (PyTorch SDPA, same call)"
python3 .carry/peer_sdpa.py --hdims 128 --seqlens 8192 --no-bwd --backends cudnn,flash --decode '' 2>&1 | tail -n 6 | tee "$OUT/peer.log"

if [[ "${1:-}" != quick ]]; then
  echo "== ci preset build (MAX_JOBS=16)"
  mkdir -p /tmp/ci && cd /tmp/ci && /usr/bin/time -f "ci build wall %e s" env MAX_JOBS=16 python3 "$OLDPWD/compile.py" --preset ci --no-python 2>&1 | tail -n 2
  ls -la /tmp/ci/*.so
fi
