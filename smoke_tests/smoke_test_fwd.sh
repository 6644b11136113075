#!/usr/bin/env bash
# Forward smoke test: AITER's ck matrix (smoke_test_fwd.sh; spec section 5) -- prec x mode x perm x hdim x lse x bias
# x p_drop over nine shapes, ~3500 runs validated on the host (-v=1) -- then a second section of harder cases (group
# mode with empty sequences, GQA with window + dropout + bias, sinks, soft-cap, d != d_v, generic windows, the naive
# GPU reference -v=2) -- and a split-KV / KV-cache sweep (mha_fwd_splitkv: num_splits 0/2/3, paged with pages of
# 16..512 tokens, cache_batch_idx) over AITER's nine shapes. Runs the invocations in parallel, one log each, and prints
#   smoke_test_fwd: N passed, M failed, K skipped (not supported yet), T s
# then the failing command lines; exits non-zero on any failure. A run passes when it exits 0 with "valid:y". With -s
# AITER's own split-kv values are added to its matrix (num_splits {2,3}, page_block_size 128, cache_batch_idx 1),
# which multiplies it by 12 (~41,000 runs); the splitkv section covers the same options in ~1100 runs.
#
# Usage: bash smoke_tests/smoke_test_fwd.sh [-s] [-j N] [-o LOGDIR] [-m matrix|extra|splitkv|all] [benchmark_mha_fwd]
#   -j N   parallel invocations (default: nproc, at most 16); each creates its own CUDA context
#   -o DIR keep the logs there (default: a new directory under ${TMPDIR:-/tmp})
#   -m     run only AITER's matrix, the extra cases or the split-KV sweep; a comma list; all three by default
# The executable defaults to the first `benchmark_mha_fwd` (or `fwd.exe`) found under the current directory, as
# AITER's scripts look for theirs; SMOKE_TIMEOUT (default 600) bounds each run in seconds; SMOKE_SHARD=i/n runs one
# shard of n (every n-th invocation from the i-th), to split the ~4800 runs across calls.
set -u

TEST_SPLITKV=0
JOBS=$(nproc 2>/dev/null || echo 4)
(( JOBS > 16 )) && JOBS=16
LOGDIR=""
SECTIONS=all
while getopts ":sj:o:m:" opt; do
  case "$opt" in
    s) TEST_SPLITKV=1 ;;
    j) JOBS=$OPTARG ;;
    o) LOGDIR=$OPTARG ;;
    m) SECTIONS=$OPTARG ;;
    *) echo "usage: $0 [-s] [-j N] [-o LOGDIR] [-m matrix|extra|splitkv|all] [benchmark_mha_fwd]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

EXE=${1:-}
if [[ -z "$EXE" ]]; then
  EXE=$(find . -name .git -prune -o -name benchmark_mha_fwd -type f -print 2>/dev/null | head -n 1)
  [[ -z "$EXE" ]] && EXE=$(find . -name .git -prune -o -name fwd.exe -print 2>/dev/null | head -n 1)
fi
[[ -n "$EXE" && -x "$EXE" ]] || { echo "benchmark_mha_fwd not found; build it with: bash build_mha.sh fwd" >&2; exit 2; }
EXE=$(cd "$(dirname "$EXE")" && pwd)/$(basename "$EXE")
[[ -z "$LOGDIR" ]] && LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/smoke_test_fwd.XXXXXX")
mkdir -p "$LOGDIR"
# only this script's own run logs (<5-digit id>.log) from an earlier run: -o may name a directory with other files
find "$LOGDIR" -maxdepth 1 -name '[0-9][0-9][0-9][0-9][0-9].log' -delete

KNAME=1
COMMON_ARGS='-v=1 -warmup=0 -repeat=1'

# AITER's nine shapes for one option set: nine_shapes <prec/mode> <hdim> <options> <trailer> [<kpad option>]
# (the last shape pads K to 32 rows in AITER's matrix; the split-KV sweep leaves that out).
nine_shapes() {
  local pm=$1 hdim=$2 c=$3 t=$4 kpad=${5:-}
  echo "$pm -b=2 -h=2 -h_k=1 -d=16, -d_v=$hdim -s=55 -s_k=256 $c $t"
  echo "$pm -b=1 -h=3 -d=$hdim -s=100 -s_k=51 $c $t"
  echo "$pm -b=2 -h=1 -d=16 -d_v=$hdim -s=99 -s_k=256 $c -mask=1 $t"
  echo "$pm -b=1 -h=2 -h_k=1 -d=$hdim -s=1024 -s_k=256 $c -mask=2 $t"
  echo "$pm -b=2 -h=1 -d=$hdim -d_v=24 -s=3 -s_k=99 $c -mask=2 $t"
  echo "$pm -b=3 -h=2 -h_k=1 -d=$hdim -s=200 -s_k=520 $c -mask=t:128,30 $t"
  echo "$pm -b=2 -h=1 -d=$hdim -s=99 -s_k=32 $c -mask=b:4,35 $t"
  echo "$pm -b=1 -h=2 -h_k=1 -d=$hdim -s=33 -s_k=0 $c -mask=2 $t"
  echo "$pm -b=1 -h=2 -h_k=1 -d=$hdim -s=1 -s_k=10${kpad:+ $kpad} $c -mask=2 $t"
}

# AITER's matrix, one invocation per line.
gen_matrix() {
  local NUM_SPLITS="1" PAGE_BLOCK_SIZE="0" CACHE_BATCH_IDX="0"
  if [[ $TEST_SPLITKV -eq 1 ]]; then
    NUM_SPLITS="$NUM_SPLITS 2 3"
    PAGE_BLOCK_SIZE="$PAGE_BLOCK_SIZE 128"
    CACHE_BATCH_IDX="$CACHE_BATCH_IDX 1"
  fi
  local prec mode perm vlayout=r hdim lse bias p_drop num_splits page_block_size cache_batch_idx
  for prec in "fp16" "bf16"; do
  for mode in 1 0; do
  for perm in 0 1; do
  for hdim in 32 64 128 256; do
  for lse in 0 1; do
  for bias in "n" "e" "a"; do
  for p_drop in 0.0 0.2; do
  for num_splits in $NUM_SPLITS; do
  for page_block_size in $PAGE_BLOCK_SIZE; do
  for cache_batch_idx in $CACHE_BATCH_IDX; do
    local c="-bias=$bias -p_drop=$p_drop -lse=$lse -iperm=$perm -operm=$perm"
    local t="-vlayout=$vlayout -num_splits=$num_splits -page_block_size=$page_block_size"
    t="$t -cache_batch_idx=$cache_batch_idx -kname=$KNAME $COMMON_ARGS"
    nine_shapes "-prec=$prec -mode=$mode" "$hdim" "$c" "$t" "-s_kpad=32"
  done; done; done; done; done
  done; done; done; done; done
}

# Harder cases of our own: every feature the library runs, alone and combined, at awkward sizes.
gen_extra() {
  local t="-kname=$KNAME $COMMON_ARGS" prec mode mask bias d
  for prec in fp16 bf16; do
    # group mode with empty sequences (s_q = 0, s_k = 0), masks and LSE
    for mask in 0 1 2 t:16,4 b:8,0 g:16,8; do
      echo "-prec=$prec -mode=1 -b=3 -h=2 -s=0,5,300 -s_k=7,0,300 -mask=$mask -lse=1 $t"
    done
    echo "-prec=$prec -mode=1 -b=2 -h=2 -s=0,0 -s_k=5,9 -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=4 -h=2 -h_k=1 -s=0,17,0,55 -s_k=64,0,33,200 -s_kpad=64,16,40,256 -mask=2 -lse=1 $t"
    # GQA 8:1, sliding window, dropout and bias in group mode, with kpad
    for bias in e e:1 e:2 a a:1; do
      echo "-prec=$prec -mode=1 -b=4 -h=16 -h_k=2 -s=300 -s_k=400 -s_kpad=512 -mask=b:64,16 -bias=$bias -p_drop=0.3 -lse=1 $t"
      echo "-prec=$prec -mode=0 -b=2 -h=8 -h_k=1 -s=257 -s_k=300 -mask=t:32,8 -bias=$bias -p_drop=0.3 -lse=1 -iperm=0 $t"
    done
    # ALiBi under every mask kind (bottom-right, top-left, vertical for causal)
    for mask in 0 1 2 t:20,10 b:20,10 g:30,5 xt:64 xb:-1; do
      echo "-prec=$prec -mode=0 -b=2 -h=6 -h_k=3 -s=130 -s_k=190 -mask=$mask -bias=a:1 -lse=1 $t"
      echo "-prec=$prec -mode=1 -b=3 -h=5 -s=130 -s_k=190 -mask=$mask -bias=a -lse=1 $t"
    done
    # head dims: d != d_v and every multiple-of-8 boundary class
    for d in "-d=192 -d_v=128" "-d=128 -d_v=192" "-d=16 -d_v=128" "-d=8 -d_v=8" "-d=24 -d_v=40" "-d=72" "-d=96" \
             "-d=160 -d_v=64" "-d=248 -d_v=256" "-d=256 -d_v=24"; do
      echo "-prec=$prec -mode=0 -b=2 -h=2 $d -s=257 -s_k=513 -mask=2 -lse=1 $t"
      echo "-prec=$prec -mode=1 -b=3 -h=2 -h_k=1 $d -s=77 -s_k=129 -bias=e -p_drop=0.2 -lse=1 $t"
    done
    echo "-prec=$prec -mode=0 -b=1 -h=2 -d=256 -s=1013 -s_k=1013 -mask=1 -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=2 -h=2 -d=256 -s=1013 -s_k=1013 -mask=0 -bias=e:1 -lse=1 $t"
    # sinks: sink tokens left of a window, sink logits, both, and rows that see nothing (LSE = sink)
    echo "-prec=$prec -mode=0 -b=2 -h=2 -s=300 -mask=t:64,0,4 -lse=1 $t"
    echo "-prec=$prec -mode=0 -b=2 -h=4 -h_k=2 -s=200 -s_k=500 -mask=b:32,0,8 -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=3 -h=2 -s=300 -s_k=250 -mask=b:16,4,16 -p_drop=0.2 -bias=e -lse=1 $t"
    echo "-prec=$prec -mode=0 -b=2 -h=3 -s=129 -init_sink=1 -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=3 -h=3 -s=129 -s_k=77 -init_sink=1 -mask=t:64,0,4 -lse=1 $t"
    echo "-prec=$prec -mode=0 -b=1 -h=2 -s=33 -s_k=0 -init_sink=1 -lse=1 $t"
    echo "-prec=$prec -mode=0 -b=1 -h=2 -s=100 -s_k=50 -init_sink=1 -mask=b:0,0 -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=3 -h=2 -s=0,5,300 -s_k=7,0,300 -init_sink=1 -mask=t:32,0,2 -p_drop=0.2 -lse=1 $t"
    # soft-cap, alone and with the other score modifiers
    echo "-prec=$prec -mode=0 -b=2 -h=2 -s=200 -logits_soft_cap=30 -init=nf -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=3 -h=4 -h_k=2 -s=200 -s_k=150 -logits_soft_cap=30 -bias=e:2 -mask=2 -lse=1 $t"
    echo "-prec=$prec -mode=0 -b=2 -h=2 -s=200 -logits_soft_cap=5 -scale_s=1 -bias=a -mask=t:50,50 -lse=1 $t"
    # dropout: seed / offset from device memory, large p, other seeds
    echo "-prec=$prec -mode=0 -b=2 -h=2 -s=300 -p_drop=0.5 -drop_prefs=1 -drop_seed=123 -drop_offset=456 -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=3 -h=2 -s=300 -p_drop=0.9 -drop_seed=7 -drop_offset=99999999999 -lse=1 $t"
    # generic window (bottom-right (left, right) = (y, x)), s == s_k and s != s_k
    echo "-prec=$prec -mode=0 -b=2 -h=2 -s=256 -s_k=256 -mask=g:16,8 -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=3 -h=2 -s=256 -s_k=256 -mask=g:16,8 -bias=a -p_drop=0.2 -lse=1 $t"
    echo "-prec=$prec -mode=0 -b=2 -h=2 -s=100 -s_k=300 -mask=g:0,0 -lse=1 $t"
    # awkward lengths, layouts and init methods
    for s in 1 3 17 55 1013; do
      echo "-prec=$prec -mode=0 -b=2 -h=3 -h_k=1 -s=$s -s_k=$((s * 2 + 1)) -mask=b:10,0 -lse=1 -iperm=0 -operm=1 $t"
    done
    echo "-prec=$prec -mode=0 -b=2 -h=2 -s=64 -init=ui -bias=e -lse=1 $t"
    echo "-prec=$prec -mode=0 -b=2 -h=2 -s=64 -init=tf -mask=1 -lse=1 -iperm=1 -operm=0 $t"
    echo "-prec=$prec -mode=1 -b=5 -h=2 -s=100 -init=nf -p_drop=0.2 -lse=1 $t"
    # the asm path when asked for (falls back to ck where it does not apply): its head dims (64 / 128 / 256 and the
    # ones they pad), no mask / bottom-right / top-left causal / sliding windows, GQA, bhsd, partial row and key
    # blocks, group mode
    echo "-prec=$prec -mode=0 -b=2 -h=4 -s=512 -mask=2 -lse=1 -fwd_v3=1 $t"
    for d in 64 96 128 192 256; do
      echo "-prec=$prec -mode=0 -b=2 -h=6 -h_k=2 -d=$d -s=1013 -s_k=777 -mask=0 -lse=1 -fwd_v3=1 $t"
      echo "-prec=$prec -mode=0 -b=3 -h=8 -d=$d -s=600 -s_k=1500 -mask=2 -lse=1 -iperm=0 -operm=0 -fwd_v3=1 $t"
      echo "-prec=$prec -mode=0 -b=1 -h=4 -d=$d -s=300 -s_k=300 -mask=1 -lse=1 -fwd_v3=1 $t"
      # group mode: padded key segments, sequences shorter than a block (cp.async), blocks ending past a sequence
      echo "-prec=$prec -mode=1 -b=4 -h=6 -h_k=2 -d=$d -s=700 -s_k=500 -s_kpad=600 -mask=2 -lse=1 -fwd_v3=1 $t"
      echo "-prec=$prec -mode=1 -b=3 -h=4 -d=$d -s=50,300,129 -s_k=100,20,500 -mask=1 -lse=1 -iperm=0 -operm=0 -fwd_v3=1 $t"
    done
    echo "-prec=$prec -mode=0 -b=2 -h=4 -s=1000 -mask=b:300,0 -lse=1 -fwd_v3=1 $t"
    echo "-prec=$prec -mode=1 -b=3 -h=4 -h_k=2 -d=64 -s=700 -s_k=900 -mask=t:50,100 -lse=1 -fwd_v3=1 $t"
    # the naive GPU reference (-v=2) on combined features, and on a size the host reference is slow for
    echo "-prec=$prec -mode=1 -b=4 -h=8 -h_k=2 -s=300 -s_k=400 -s_kpad=512 -mask=b:64,16,4 -bias=e:1 -p_drop=0.3 -init_sink=1 -logits_soft_cap=20 -lse=1 -kname=$KNAME -warmup=0 -repeat=1 -v=2"
    echo "-prec=$prec -mode=0 -b=2 -h=4 -s=2048 -mask=2 -bias=a:1 -p_drop=0.1 -lse=1 -kname=$KNAME -warmup=0 -repeat=1 -v=2"
    echo "-prec=$prec -mode=1 -b=3 -h=2 -s=0,5,300 -s_k=7,0,300 -d=192 -d_v=128 -mask=g:16,8 -lse=1 -kname=$KNAME -warmup=0 -repeat=1 -v=2"
  done
}

# Split-KV and KV-cache sweep: AITER's nine shapes under each cache option, rotating the other options.
gen_splitkv() {
  local t="-kname=$KNAME $COMMON_ARGS" prec mode hdim i=0 kv bias perm
  local kvs=("-num_splits=2" "-num_splits=3 -page_block_size=128" "-page_block_size=16" "-num_splits=2 -page_block_size=32"
             "-num_splits=0 -page_block_size=512" "-num_splits=3 -cache_batch_idx=1" "-cache_batch_idx=1"
             "-num_splits=0 -page_block_size=64")
  local biases=("n" "e" "a" "n" "a:1" "e:1")
  for prec in fp16 bf16; do
  for mode in 0 1; do
  for hdim in 32 64 128 256; do
  for kv in "${kvs[@]}"; do
    bias=${biases[$((i % 6))]}; perm=$((i % 2)); i=$((i + 1))
    [[ "$mode" == 1 && "$kv" == *cache_batch_idx* ]] && continue # AITER ignores it in group mode
    local c="-bias=$bias -lse=1 -iperm=$perm -operm=$((1 - perm)) $kv"
    nine_shapes "-prec=$prec -mode=$mode" "$hdim" "$c" "$t"
  done; done; done; done
  # decode shapes: one query, GQA packing (32 q heads on 8 KV heads), long caches, windows and sinks
  for prec in fp16 bf16; do
    for kv in "-num_splits=0" "-num_splits=7 -page_block_size=16" "-num_splits=0 -page_block_size=256" "-cache_batch_idx=1 -num_splits=5"; do
      echo "-prec=$prec -b=3 -h=32 -h_k=8 -s=1 -s_k=4099 $kv -lse=1 $t"
      echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=4 -s_k=3000 $kv -mask=2 -lse=1 $t"
      echo "-prec=$prec -b=2 -h=16 -h_k=2 -s=1 -s_k=2500 $kv -mask=b:300,0,4 -logits_soft_cap=20 -lse=1 $t"
      echo "-prec=$prec -b=2 -h=8 -h_k=8 -s=3 -s_k=1800 $kv -mask=b:100,0 -bias=a -lse=1 $t"
    done
    echo "-prec=$prec -mode=1 -b=3 -h=32 -h_k=8 -s=1,2,3 -s_k=900,17,2000 -num_splits=4 -page_block_size=16 -mask=2 -lse=1 $t"
    # one split over >= 128 key blocks with batch % 4 == 0: clusters of 4 tiles for placement on sm_90; 8 splits:
    # the largest in-cluster merge
    echo "-prec=$prec -b=4 -h=32 -h_k=8 -s=1 -s_k=4500 -num_splits=1 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=16 -h_k=4 -s=2 -s_k=1999 -num_splits=8 -mask=2 -lse=1 $t"
    # more than 8 splits merge inside the split grid on sm_90: group mode + pages, d64, d_v 96, splits without keys
    # and CTAs without a chunk to merge (one head per tile: 32 chunks, 64 splits)
    echo "-prec=$prec -mode=1 -b=3 -h=8 -h_k=2 -s=1,2,1 -s_k=4000,100,2500 -num_splits=33 -page_block_size=16 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=16 -h_k=4 -s=1 -s_k=3000 -d=64 -num_splits=24 -lse=1 $t"
    echo "-prec=$prec -b=1 -h=8 -h_k=8 -s=1 -s_k=300 -num_splits=64 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=1 -s_k=9000 -d=128 -d_v=96 -num_splits=20 -page_block_size=32 $t"
    # 2-8 splits of a decode step (up to 8 rows per tile) whose shared memory fits one CTA are its warps on sm_90: the
    # most (6 at d128, 3 at d256), d256 with 4 (a cluster instead), warps without a key block, sinks and a window
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=1 -s_k=2100 -num_splits=6 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=16 -h_k=4 -s=1 -s_k=1500 -d=256 -num_splits=3 -page_block_size=16 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=16 -h_k=4 -s=1 -s_k=1500 -d=256 -num_splits=4 -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=3 -h=32 -h_k=8 -s=1,1,1 -s_k=40,0,70 -num_splits=4 -logits_soft_cap=20 -lse=1 $t"
    echo "-prec=$prec -b=3 -h=16 -h_k=2 -s=1 -s_k=2500 -num_splits=5 -mask=b:300,0,4 -page_block_size=32 -lse=1 $t"
    # dense warp splits taking key blocks in turn (sinks left of a window), and a grid of 512 decode warps (an H100
    # refills each warp's ring late there: fwd_kernel.cuh, ring_flags)
    echo "-prec=$prec -b=3 -h=16 -h_k=2 -s=1 -s_k=2500 -num_splits=5 -mask=b:300,0,4 -lse=1 $t"
    echo "-prec=$prec -b=16 -h=32 -h_k=8 -s=1 -s_k=1500 -num_splits=4 -lse=1 $t"
    echo "-prec=$prec -b=16 -h=32 -h_k=8 -s=1 -s_k=1200 -num_splits=0 -mask=b:700,0,4 -lse=1 $t"
    # warps issuing their first block at kernel entry on sm_90 (kRingEarly: dense batch-mode caches): warps without a
    # key block, a causal mask over 8 rows, no GQA packing (one head per tile), the other layout
    echo "-prec=$prec -b=16 -h=32 -h_k=8 -s=1 -s_k=96 -num_splits=4 -lse=1 $t"
    echo "-prec=$prec -b=16 -h=32 -h_k=8 -s=2 -s_k=1500 -num_splits=0 -mask=b -lse=1 $t"
    echo "-prec=$prec -b=4 -h=8 -h_k=8 -s=1 -s_k=2048 -num_splits=4 -lse=1 $t"
    echo "-prec=$prec -b=6 -h=32 -h_k=8 -s=1 -s_k=4096 -num_splits=3 -iperm=0 -operm=0 -lse=1 $t"
    # the same from one-warp split CTAs (grid splits: merged in the grid, in a cluster, or one split): a partial
    # block first in the last split only, splits without a key block, one KV head, one split over full blocks
    echo "-prec=$prec -b=1 -h=32 -h_k=8 -s=1 -s_k=8000 -num_splits=64 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=1 -s_k=100 -num_splits=8 -iperm=0 -operm=0 -lse=1 $t"
    echo "-prec=$prec -b=1 -h=32 -h_k=1 -s=1 -s_k=5000 -num_splits=20 -lse=1 $t"
    echo "-prec=$prec -b=40 -h=32 -h_k=8 -s=1 -s_k=3328 -num_splits=1 -lse=1 $t"
    # 9 to 16 rows split over the keys: the transposed step of two 8-row tiles on sm_90 (3 or 4 queries of 4 packed
    # heads, 12 and 16 heads of one KV head, 16 queries of one head with ALiBi) in warps of one CTA, a cluster of 8,
    # the split grid and the combine kernel's partials, pages, group mode, the other layout, windows and soft-cap
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=3 -s_k=3000 -num_splits=4 -lse=1 $t"
    echo "-prec=$prec -b=3 -h=32 -h_k=8 -s=4 -s_k=2049 -num_splits=8 -mask=b -lse=1 $t"
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=4 -s_k=1500 -num_splits=12 -mask=b:300,0,4 -logits_soft_cap=20 -iperm=0 -operm=0 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=16 -h_k=1 -s=1 -s_k=1700 -num_splits=40 -page_block_size=16 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=24 -h_k=2 -s=1 -s_k=999 -num_splits=3 -mask=b:100,0 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=8 -h_k=8 -s=16 -s_k=1800 -num_splits=5 -mask=b -bias=a -lse=1 $t"
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=4 -s_k=70 -num_splits=6 -d=64 -mask=b -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=3 -h=32 -h_k=8 -s=3,4,2 -s_k=900,17,2000 -num_splits=0 -page_block_size=16 -mask=b -lse=1 $t"
    echo "-prec=$prec -b=4 -h=32 -h_k=8 -s=4 -s_k=1024 -num_splits=0 -lse=1 $t"
    echo "-prec=$prec -b=1 -h=32 -h_k=8 -s=3 -s_k=8192 -num_splits=0 -mask=b -cache_batch_idx=1 -lse=1 $t"
    # 17 to 64 rows split short over the keys: the decode tile's 16-row blocks on sm_90 (5 to 16 queries of 4 packed
    # heads, 24 heads of one KV head, 40 queries of one head with ALiBi), a last block of 4 rows, warps of one CTA, a
    # cluster of 8, the split grid, pages, group mode, the other layout; and splits past the rule's length (the 64 x
    # 64 tile)
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=8 -s_k=3000 -num_splits=4 -lse=1 $t"
    echo "-prec=$prec -b=3 -h=32 -h_k=8 -s=5 -s_k=2049 -num_splits=8 -mask=b -lse=1 $t"
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=16 -s_k=1500 -num_splits=12 -mask=b:300,0,4 -logits_soft_cap=20 -iperm=0 -operm=0 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=48 -h_k=2 -s=1 -s_k=999 -num_splits=3 -mask=b:100,0 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=8 -h_k=8 -s=40 -s_k=1800 -num_splits=5 -mask=b -bias=a -lse=1 $t"
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=6 -s_k=700 -num_splits=6 -d=64 -mask=b -page_block_size=16 -lse=1 $t"
    echo "-prec=$prec -mode=1 -b=3 -h=32 -h_k=8 -s=8,5,2 -s_k=900,17,2000 -num_splits=0 -page_block_size=16 -mask=b -lse=1 $t"
    echo "-prec=$prec -b=4 -h=32 -h_k=8 -s=8 -s_k=1024 -num_splits=0 -lse=1 $t"
    echo "-prec=$prec -b=1 -h=32 -h_k=8 -s=12 -s_k=8192 -num_splits=0 -mask=b -cache_batch_idx=1 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=16 -s_k=6000 -num_splits=2 -lse=1 $t"
    # and from paged caches (block tables, per-batch key counts): grid splits, warp splits, pages past a block
    echo "-prec=$prec -b=1 -h=32 -h_k=8 -s=1 -s_k=4096 -num_splits=0 -page_block_size=16 -lse=1 $t"
    echo "-prec=$prec -b=16 -h=32 -h_k=8 -s=1 -s_k=2048 -num_splits=0 -page_block_size=64 -iperm=0 -operm=0 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=1 -s_k=4096 -num_splits=100 -page_block_size=256 -lse=1 $t"
    # pages that are not a multiple of the decode tile's 32-key blocks: 8-row and one-row tensor-copy boxes on sm_90
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=1 -s_k=1000 -num_splits=3 -page_block_size=24 -lse=1 $t"
    echo "-prec=$prec -b=2 -h=32 -h_k=8 -s=1 -s_k=333 -num_splits=2 -page_block_size=7 -lse=1 $t"
  done
}

# One invocation: "<id> <args>". Writes <id>.log and prints "<status> <id>" (pass, fail or skip). xargs calls it.
# shellcheck disable=SC2317
run_one() {
  local id=${1%% *} args=${1#* }
  local log="$LOGDIR/$id.log" rc status
  # shellcheck disable=SC2086 # the arguments are split on purpose
  { echo "\$ $EXE $args"; $TIMEOUT "$EXE" $args; } > "$log" 2>&1
  rc=$?
  echo "rc=$rc" >> "$log"
  if [[ $rc -eq 0 ]] && grep -q "valid:y" "$log"; then
    status=pass
  else
    status=fail
    echo "FAILED: $EXE $args" >&2
  fi
  echo "$status $id"
}
export -f run_one
TIMEOUT=""
command -v timeout > /dev/null && TIMEOUT="timeout ${SMOKE_TIMEOUT:-600}"
export EXE LOGDIR TIMEOUT

start=$(date +%s)
{
  [[ ",$SECTIONS," == *,matrix,* || "$SECTIONS" == all ]] && gen_matrix
  [[ ",$SECTIONS," == *,extra,* || "$SECTIONS" == all ]] && gen_extra
  [[ ",$SECTIONS," == *,splitkv,* || "$SECTIONS" == all ]] && gen_splitkv
} | awk '{ printf "%05d %s\n", NR, $0 }' > "$LOGDIR/all_invocations.txt"
# SMOKE_SHARD=i/n runs every n-th invocation starting at the i-th (1-based), to split a long sweep across sessions.
if [[ -n "${SMOKE_SHARD:-}" ]]; then
  awk -v s="$SMOKE_SHARD" 'BEGIN { split(s, p, "/") } (NR - p[1]) % p[2] == 0' "$LOGDIR/all_invocations.txt"
else
  cat "$LOGDIR/all_invocations.txt"
fi > "$LOGDIR/invocations.txt"
total=$(wc -l < "$LOGDIR/invocations.txt")
echo "smoke_test_fwd: $total runs of $EXE, $JOBS in parallel, logs in $LOGDIR"

# shellcheck disable=SC2016 # $1 belongs to the inner shell
xargs -d '\n' -P "$JOBS" -n 1 bash -c 'run_one "$1"' _ < "$LOGDIR/invocations.txt" > "$LOGDIR/results.txt"

passed=$(grep -c '^pass ' "$LOGDIR/results.txt")
failed=$(grep -c '^fail ' "$LOGDIR/results.txt")
skipped=$(grep -c '^skip ' "$LOGDIR/results.txt")
missing=$((total - passed - failed - skipped)) # a worker that died without a status
failed=$((failed + missing))
echo "smoke_test_fwd: $passed passed, $failed failed, $skipped skipped (not supported yet), $(( $(date +%s) - start )) s"
if (( failed > 0 )); then
  awk -v exe="$EXE" -v dir="$LOGDIR" 'NR == FNR { if ($1 == "fail") failed[$2] = 1; next }
    ($1 in failed) { id = $1; sub(/^[^ ]* /, ""); print "  FAILED: " exe " " $0 "   (log: " dir "/" id ".log)" }' \
    "$LOGDIR/results.txt" "$LOGDIR/invocations.txt"
  (( missing > 0 )) && echo "  $missing runs left no status"
  exit 1
fi
exit 0
