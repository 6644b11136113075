#!/usr/bin/env bash
# ncu profile of our backward kernel and, with REPS="ours fa2", of PyTorch's FlashAttention-2 backward on the same
# shape (GPU machine; torch there is only the peer). Writes <rep>_details.txt, <rep>_src.csv (per-SASS-line stall
# samples) and <rep>_raw.csv (every metric) under $OUT; compare them to find where the cycles go.
# Usage: bash scripts/ncu_bwd.sh BUILD_DIR [S] [D]   (bf16, b=1, h=2048/D, non-causal)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
DIR=$1; S=${2:-4096}; D=${3:-128}; H=$((2048 / D))
cat > /tmp/fa2_bwd.py <<PY
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
q, k, v = (torch.randn(1, $H, $S, $D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    for _ in range(2):
        o = F.scaled_dot_product_attention(q, k, v); o.backward(torch.randn_like(o))
torch.cuda.synchronize()
PY
"$DIR"/benchmark_mha_bwd -prec=bf16 -b=1 -h=$H -s=$S -d=$D -v=0 2>&1 | tail -1
timeout 200 ncu --kernel-name regex:bwd_kernel --launch-skip 1 --launch-count 1 --set full --import-source no -f \
  -o /tmp/ours "$DIR"/benchmark_mha_bwd -prec=bf16 -b=1 -h=$H -s=$S -d=$D -v=0 -warmup=1 -repeat=1 > /tmp/ncu_ours.log 2>&1
if [[ "${REPS:-ours}" == *fa2* ]]; then
  timeout 200 ncu --kernel-name regex:flash_bwd_dq_dk_dv --launch-skip 1 --launch-count 1 --set full -f -o /tmp/fa2 \
    python3 /tmp/fa2_bwd.py > /tmp/ncu_fa2.log 2>&1
fi
for r in ${REPS:-ours}; do
  ncu --import /tmp/$r.ncu-rep --page details > "$OUT/${r}_details.txt" 2>&1
  ncu --import /tmp/$r.ncu-rep --page source --csv --print-source sass > "$OUT/${r}_src.csv" 2>&1
  ncu --import /tmp/$r.ncu-rep --page raw --csv > "$OUT/${r}_raw.csv" 2>&1
done
grep -E "Duration|Executed Instructions  " "$OUT"/*_details.txt
