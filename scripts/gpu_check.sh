#!/usr/bin/env bash
# One GPU-machine session: build everything, run the smoke sweeps and pytest, time the forward against PyTorch SDPA
# (flash / cuDNN) in the same call, and leave logs under $OUT. Expects .carry/ with the nvidia-cutlass wheel and
# peer_sdpa.py (the machine has no network).
# Usage: bash scripts/gpu_check.sh [build] [smoke] [pytest] [perf] [paged] [decode] [bwd] [bwdsmoke] [bwdperf]
#   [sanitize]
# (default: the first four). smoke: the basic script, then smoke_test_fwd.sh (about 900 s in full with 16 jobs on
# an H200: pass SMOKE_SHARD=1/2, then 2/2, to fit 600 s calls; SMOKE_LIMIT bounds it). paged: the split-KV smoke
# section, the paged-attention tests with AITER's repro and stress, kvcache_check, tests/cpp/paged_check.cu (also
# under compute-sanitizer), scripts/paged_bench.cu; decode: scripts/decode_bench.py;
# bwd: a few validated benchmark_mha_bwd runs and the backward GPU tests; bwdsmoke: smoke_test_bwd.sh (SMOKE_SHARD
# honoured); bwdperf: the backward grid against SDPA (BWD_HDIMS / BWD_SEQLENS narrow it). MHA_COMPILE_ARGS passes
# compile.py options through build_mha.sh. sanitize: scripts/sanitize_runs.txt under compute-sanitizer memcheck,
# racecheck and synccheck (each run must also validate), then kvcache_check under memcheck (~200 s on an H100; on the
# bf16 d64 / d128 build its d96 / d256 cases fail as "not in this build": read its ERROR SUMMARY and max_err lines).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
STEPS=${*:-build smoke pytest perf}
has() { [[ " $STEPS " == *" $1 "* ]]; }
if [[ ! -d /tmp/cl ]]; then
python3 - <<'PY'
import glob, zipfile
z = zipfile.ZipFile(glob.glob(".carry/nvidia_cutlass-*.whl")[0])
z.extractall("/tmp/cl", [n for n in z.namelist() if n.startswith("cutlass_library/source/include/")])
PY
fi
export CUTLASS_DIR=/tmp/cl/cutlass_library/source
nvidia-smi -L | tee "$OUT/gpu.txt"

if has build; then
  echo "== build (MAX_JOBS=16)"
  /usr/bin/time -f "build wall %e s" env MAX_JOBS=16 bash build_mha.sh all > "$OUT/build.log" 2>&1; echo "build rc=$?"
  grep -E "error|wall|done" "$OUT/build.log" | head -n 20
  cuobjdump --dump-sass libmha_fwd.so > /tmp/fwd.sass 2>/dev/null
  echo "SASS: HMMA $(grep -c HMMA /tmp/fwd.sass)  LDSM $(grep -c LDSM /tmp/fwd.sass)  LDGSTS $(grep -c LDGSTS /tmp/fwd.sass)"
fi
if has smoke; then
  echo "== smoke"
  bash smoke_tests/smoke_test_fwd_basic.sh ./benchmark_mha_fwd > "$OUT/smoke_basic.log" 2>&1; echo "basic rc=$?"
  tail -n 3 "$OUT/smoke_basic.log"
  timeout ${SMOKE_LIMIT:-480} bash smoke_tests/smoke_test_fwd.sh -j 16 -o /tmp/smoke_logs ./benchmark_mha_fwd > "$OUT/smoke.log" 2>&1
  echo "smoke rc=$?"; grep -A 30 "^smoke_test_fwd:" "$OUT/smoke.log" | head -n 40
fi
if has pytest; then
  echo "== pytest"
  timeout 300 python3 -m pytest tests -q -rs -m "not smoke" -x > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?"
  tail -n 12 "$OUT/pytest.log"
fi
if has paged; then
  echo "== split-KV smoke section + paged-attention tests"
  timeout 300 bash smoke_tests/smoke_test_fwd.sh -j 16 -m splitkv -o /tmp/smoke_splitkv ./benchmark_mha_fwd \
    > "$OUT/smoke_splitkv.log" 2>&1; echo "splitkv smoke rc=$?"; grep -E "^smoke_test_fwd|FAILED" "$OUT/smoke_splitkv.log" | head
  AITER_RUN_REPRO_SHAPES=1 AITER_RUN_STRESS=1 timeout 300 python3 -m pytest tests/test_gpu_paged.py \
    tests/test_pa_merged.py tests/test_gpu_kvcache.py -q -s -rs > "$OUT/paged.log" 2>&1; echo "paged pytest rc=$?"
  grep -E "perf repro|passed|failed" "$OUT/paged.log" | tail -n 4
  # the torch-free paged-attention check, also under compute-sanitizer (seconds)
  nvcc -std=c++17 -O2 -Iinclude -Icsrc -gencode=arch=compute_90a,code=sm_90a -cudart static tests/cpp/paged_check.cu \
    csrc/paged/paged_attention.cu csrc/api/error.cpp csrc/api/l2_flush.cu -o /tmp/paged_check && /tmp/paged_check |
    tee "$OUT/paged_check.log" | tail -n 1
  for t in memcheck racecheck; do
    compute-sanitizer --tool $t --error-exitcode 9 /tmp/paged_check > "$OUT/paged_check_$t.log" 2>&1; echo "$t rc=$?"
  done
  # torch-free throughput of both implementations, each call timed by the library (scripts/paged_bench.cu)
  nvcc -std=c++17 -O2 -Iinclude -Icsrc -gencode=arch=compute_90a,code=sm_90a -cudart static scripts/paged_bench.cu \
    csrc/paged/paged_attention.cu csrc/api/error.cpp csrc/api/l2_flush.cu -o /tmp/paged_bench &&
    timeout 120 /tmp/paged_bench | tee "$OUT/paged_bench.log"
fi
if has decode; then
  echo "== decode benchmark (ours vs PyTorch SDPA, same call)"
  for layout in bhsd bshd; do # SDPA's contiguous (b, h, s, d) tensors, then the (b, s, h, d) memory of both sides
    timeout 290 python3 scripts/decode_bench.py --exe ./benchmark_mha_fwd --layout $layout 2>&1 |
      grep -v -E "Warning|t = event" | tee -a "$OUT/decode.log"
  done
fi
if has perf; then
  echo "== perf grid (ours vs PyTorch SDPA flash / cuDNN, same call)"
  timeout 300 python3 scripts/perf_grid.py --exe ./benchmark_mha_fwd --peer .carry/peer_sdpa.py 2>&1 | tee "$OUT/perf.log"
fi
if has bwd; then
  echo "== backward: validated benchmark runs + GPU tests"
  for a in "-prec=bf16 -b=2 -h=4 -s=259 -d=128" "-prec=fp16 -b=1 -h=4 -h_k=1 -s=500 -s_k=251 -d=64 -mask=1" \
           "-prec=bf16 -b=2 -h=2 -s=516 -s_k=253 -d=256 -mask=2" "-prec=bf16 -b=2 -h=3 -h_k=1 -s=244 -s_k=499 -d=32 -mask=b:4,35" \
           "-prec=fp16 -mode=1 -b=3 -h=4 -h_k=2 -s=200 -s_k=300 -d=96 -mask=t:128,30 -p_drop=0.2" \
           "-prec=bf16 -b=2 -h=2 -s=300 -d=128 -bias=e -dbias=1 -mask=2" "-prec=bf16 -b=2 -h=2 -s=300 -d=192 -d_v=128 -bias=a" \
           "-prec=bf16 -b=1 -h=8 -h_k=2 -s=700 -d=128 -mask=2 -deterministic=1" "-prec=fp16 -b=1 -h=2 -s=1 -s_k=77 -d=16 -d_v=160"; do
    timeout 120 ./benchmark_mha_bwd $a -v=1 -warmup=0 -repeat=1 -kname=1 2>&1 | tr '\n' ' ' | cut -c1-330; echo
  done
  timeout 300 python3 -m pytest tests/test_gpu_bwd.py -q -x -rs > "$OUT/pytest_bwd.log" 2>&1; echo "bwd pytest rc=$?"
  grep -E "passed|failed|Error|assert" "$OUT/pytest_bwd.log" | head -n 12
fi
if has bwdsmoke; then
  echo "== smoke_test_bwd.sh"
  timeout ${SMOKE_LIMIT:-480} bash smoke_tests/smoke_test_bwd.sh -j 16 -o /tmp/smoke_bwd ./benchmark_mha_bwd > "$OUT/smoke_bwd.log" 2>&1
  echo "bwd smoke rc=$?"; grep -E "^smoke_test_bwd|FAIL" "$OUT/smoke_bwd.log" | head -n 20
fi
if has bwdperf; then
  echo "== backward perf grid (ours vs PyTorch SDPA flash / cuDNN backward, same call)"
  timeout 400 python3 scripts/perf_grid.py --bwd --exe ./benchmark_mha_bwd --peer .carry/peer_sdpa.py \
    --hdims ${BWD_HDIMS:-64,128,256} --seqlens ${BWD_SEQLENS:-512,1024,2048,4096,8192,16384} 2>&1 | tee "$OUT/perf_bwd.log"
fi
if has sanitize; then
  echo "== compute-sanitizer over scripts/sanitize_runs.txt"
  for tool in memcheck racecheck synccheck; do
    n=0; bad=0
    while read -r which args; do
      [[ $which == F || $which == B ]] || continue
      exe=./benchmark_mha_fwd; [[ $which == B ]] && exe=./benchmark_mha_bwd
      out=$(timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $exe $args -v=1 -warmup=0 -repeat=1 \
        -kname=1 </dev/null 2>&1); rc=$?
      n=$((n + 1))
      echo "$tool $which $args rc=$rc" >> "$OUT/sanitize.log"; echo "$out" | tail -n 3 >> "$OUT/sanitize.log"
      if [[ $rc -ne 0 || "$out" != *"valid:y"* ]] ||
        ! grep -q "ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0 hazards" <<<"$out"; then
        bad=$((bad + 1)); echo "-- $tool rc=$rc: $which $args"; echo "$out" | grep -v "^=========     " | tail -n 8
      fi
    done < scripts/sanitize_runs.txt
    echo "$tool: $n runs, $bad bad"
  done
  g++ -std=c++17 -O2 -Wall -Iinclude -I/usr/local/cuda/include tests/cpp/kvcache_check.cpp -L. -lmha_fwd \
    -L/usr/local/cuda/lib64 -lcudart -Wl,-rpath,"$PWD" -o /tmp/kvcache_check &&
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/kvcache_check > "$OUT/kvcache_memcheck.log" 2>&1
  echo "kvcache_check memcheck rc=$?"; grep -E "FAIL|kvcache_check:|ERROR SUMMARY" "$OUT/kvcache_memcheck.log" | head
fi
