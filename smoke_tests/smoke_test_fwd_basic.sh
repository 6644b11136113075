#!/usr/bin/env bash
# Forward smoke sweep for the features built so far (batch mode, fp16/bf16, hdim <= 128, masks 0/1/2, GQA, LSE,
# both layouts, awkward sequence lengths), each run validated on the host (-v=1). Then the invalid calls, which must
# exit non-zero with a reason. Prints a summary and exits non-zero on any failure.
# Usage: bash smoke_tests/smoke_test_fwd_basic.sh [path/to/benchmark_mha_fwd]
set -u
EXE=${1:-$(find . -maxdepth 2 -name benchmark_mha_fwd -type f | head -n 1)}
[[ -x "$EXE" ]] || { echo "benchmark_mha_fwd not found; build it with: bash build_mha.sh fwd" >&2; exit 2; }
COMMON_ARGS='-v=1 -warmup=0 -repeat=1 -kname=1'
pass=0; fail=0; failed=()

expect_valid() {
  local out; out=$("$EXE" $COMMON_ARGS "$@" 2>&1); local rc=$?
  echo "$out" | head -n 1
  if [[ $rc -eq 0 && "$out" == *"valid:y"* ]]; then pass=$((pass+1)); else fail=$((fail+1)); failed+=("$*"); fi
}
expect_rejected() {
  local out; out=$("$EXE" $COMMON_ARGS "$@" 2>&1); local rc=$?
  echo "$out" | tail -n 1
  if [[ $rc -ne 0 && -n "$out" && "$out" != *"valid:y"* ]]; then pass=$((pass+1)); else fail=$((fail+1)); failed+=("rejected? $*"); fi
}

for prec in fp16 bf16; do
for hdim in 64 128 32 72; do
for perm in 0 1; do
for lse in 0 1; do
  base="-prec=$prec -d=$hdim -iperm=$perm -operm=$perm -lse=$lse"
  expect_valid $base -b=2 -h=2 -h_k=1 -s=55 -s_k=256
  expect_valid $base -b=1 -h=3 -s=100 -s_k=51
  expect_valid $base -b=2 -h=1 -s=99 -s_k=256 -mask=1
  expect_valid $base -b=1 -h=2 -h_k=1 -s=1024 -s_k=256 -mask=2
  expect_valid $base -b=2 -h=4 -h_k=2 -s=3 -s_k=99 -mask=2
  expect_valid $base -b=3 -h=2 -h_k=1 -s=200 -s_k=520 -mask=t:128,30
  expect_valid $base -b=2 -h=1 -s=99 -s_k=32 -mask=b:4,35
  expect_valid $base -b=1 -h=2 -h_k=1 -s=33 -s_k=0 -mask=2
  expect_valid $base -b=1 -h=2 -h_k=1 -s=1 -s_k=10 -mask=2
  expect_valid $base -b=1 -h=2 -s=1013 -s_k=1013 -mask=1
done; done; done; done
# the acceptance list (defaults: b=2 h=8 s=1024 d=128 bf16)
A="-prec=bf16 -b=2 -h=8 -s=1024 -d=128"
expect_valid $A
expect_valid -prec=fp16 -b=2 -h=8 -s=1024 -d=128
for extra in "-d=64" "-mask=1" "-mask=2" "-h_k=2" "-h_k=1" "-iperm=0 -operm=0" "-s=55 -s_k=256" "-s=1 -s_k=10" \
             "-s=33 -s_k=0" "-s=1024 -s_k=256 -mask=2" "-lse=1" "-d=128 -d_v=64" "-d=64 -d_v=128"; do
  expect_valid $A $extra
done
expect_rejected $A -h=3 -h_k=2
expect_rejected $A -d=0
expect_rejected $A -mask=9

echo "smoke_test_fwd_basic: $pass passed, $fail failed"
for f in "${failed[@]}"; do echo "  FAILED: $f"; done
[[ $fail -eq 0 ]]
