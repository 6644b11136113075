"""The single source of truth for kernel instances: the list, their names, the instance .cu files, the flat dispatch
tables and the build.ninja that compiles them. compile.py (top level) drives it; nothing here imports torch.

An instance is one template instantiation of a kernel family for (api, dtype, head dim); a call with smaller head dims
is served by the smallest instance that covers it (zero-padded). Rows filtered out of a build stay in the table with a
null launch pointer so the library can say which compile.py option adds them.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os

APIS = ("fwd", "bwd", "fwd_splitkv", "batch_prefill", "fwd_v3", "bwd_v3")
# --api token -> the instance kinds it builds. As in AITER, "fwd" builds everything libmha_fwd.so serves: mha_fwd,
# mha_fwd_splitkv and mha_batch_prefill (which runs on the split-KV instances). AITER's "fwd_v3" / "bwd_v3" build its
# asm kernels only; here they build the mha_fwd / mha_bwd instances (compile.py says so).
API_INSTANCES = {
    "fwd": ("fwd", "fwd_splitkv"),
    "fwd_splitkv": ("fwd_splitkv",),
    "batch_prefill": ("fwd_splitkv",),
    "fwd_v3": ("fwd",),
    "bwd": ("bwd",),
    "bwd_v3": ("bwd",),
}
DTYPES = ("fp16", "bf16")
# arch name -> (nvcc -gencode value, compute capability)
ARCHS = {
    "sm_80": ("arch=compute_80,code=sm_80", 80),
    "sm_86": ("arch=compute_86,code=sm_86", 86),
    "sm_89": ("arch=compute_89,code=sm_89", 89),
    "sm_90a": ("arch=compute_90a,code=sm_90a", 90),
    "sm_100a": ("arch=compute_100a,code=sm_100a", 100),
    "sm_120a": ("arch=compute_120a,code=sm_120a", 120),
}
CPP_DTYPE = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
ENUM_DTYPE = {"fp16": "mha::DType::fp16", "bf16": "mha::DType::bf16"}



def apply_tile_override(table: dict, env: str, drop=None) -> None:
    """Experiments: env="128x128=128,128,8;64x64=128,64,4" replaces rows of a tile table without editing it (and
    removes each overridden key from `drop`, a table that would otherwise take precedence)."""
    for item in filter(None, os.environ.get(env, "").split(";")):
        dims, tile = item.split("=")
        key = tuple(int(x) for x in dims.split("x"))
        table[key] = tuple(int(x) for x in tile.split(","))
        if drop is not None:
            drop.pop(key, None)


# ck forward instances: (hdim_q, hdim_v) -> (kBlockM, kBlockN, warps). Mirrors the comment in csrc/ck/fwd_traits.cuh.
# A call runs on the cheapest instance whose head dims cover both of its own (zero-padded in between).
# Measured on H200, bf16, 16k tokens (scripts/tile_experiment.sh): d64 128x64 beats 128x128 by 8-18% (304-335 vs
# 275-306 TFLOP/s non-causal); d128 128x48 beats 128x64 and 128x32 by 1-4% at 4k (plain; the full variant: below);
# d256 64x64 with 4 warps beats 128x64 with 8 warps at 1k (300 vs 295 non-causal, 253 vs 225 causal). 8 warps lose
# at d<=128.
CK_FWD_TILES = {
    (32, 32): (128, 64, 4),
    (64, 64): (128, 64, 4),
    (96, 96): (128, 64, 4),
    (128, 128): (128, 48, 4),
    (160, 160): (128, 64, 8),
    (192, 128): (128, 64, 8),
    (192, 192): (128, 64, 8),
    (256, 256): (64, 64, 4),
}
# The "full" instances (soft-cap, bias, sinks, ALiBi and dropout in one kernel; d128's "dropout" instance takes the
# same tile) hold more live registers than the plain one. At d128 their 128 x 48 tile spilled 572 B (bf16), 128 x 32 spills 132 B and is faster for every feature
# (H100 GPU-7e34a2ec, bf16, 16k tokens, s = 1k / 4k / 16k, same call, 48 / 32 / 64w8 / 64w8 / 32 / 48 order: dropout
# 0.1 +21-26%, elementwise bias +9-17%, soft-cap 30 +13-20%; 128 x 64 with 8 warps: -3% to +15%).
# The other head dims keep their plain tile, though it spills too (bf16: d64 220 B, d96 436 B, d256 136 B): the
# tiles that spill less (d64 / d96 128 x 32 or 64 x 64, 48 / 24-32 B; d256 64 x 32 or 128 x 32 with 8 warps, 24 B)
# are slower (H100 GPU-9c17dea6, same call, s = 1k / 16k: dropout 0.1 0.80-0.99, soft-cap 0.76-1.02, bias 0.79-1.08
# of the plain tile; only d256 64 x 32 with bias and d96 128 x 32 at 1k read 1.01-1.03).
CK_FWD_TILES_FULL = {
    (128, 128): (128, 32, 4),
}
# Experiments: MHA_TILE_OVERRIDE="128x128=128,128,8;64x64=128,64,4" replaces tiles (every variant's) without
# editing these tables.
apply_tile_override(CK_FWD_TILES, "MHA_TILE_OVERRIDE", drop=CK_FWD_TILES_FULL)


def fwd_tiles(variant="plain") -> dict:
    """The forward tile per head-dim pair for one variant."""
    tiles = dict(CK_FWD_TILES)
    if variant in ("full", "dropout"):
        tiles.update(CK_FWD_TILES_FULL)
    return tiles


# asm ("v3") forward instances, sm_90a only (csrc/asm/sm90_fwd.cuh): (hdim_q, hdim_v) -> (kBlockM, kBlockN, warps).
# Three warpgroups: a TMA producer and two wgmma consumers of 64 rows each. "plain" only (no mask, causal).
# block_n is the wide block (176 keys); the d64 / d128 instances also hold a 128-key kernel for short causal calls
# (csrc/asm/sm90_fwd.cuh, Sm90FwdInstance, has the measurements).
# d256: 80-key blocks (Q 64 KB + two stages of K / V 40 KB each: 225 KB of shared memory), 64 for masked calls under
# 2048 rows and windows under 512 keys; d192 / d_v 128: 128-key blocks (Q 48 KB + two stages of K 48 KB and V 32 KB:
# 209 KB).
ASM_FWD_TILES = {
    (64, 64): (128, 176, 12),
    (128, 128): (128, 176, 12),
    (192, 128): (128, 128, 12),
    (256, 256): (128, 80, 12),
}
# Experiments: MHA_ASM_TILE_OVERRIDE="128x128=128,176,12" replaces asm tiles.
apply_tile_override(ASM_FWD_TILES, "MHA_ASM_TILE_OVERRIDE")
# asm ("v3") backward instances, sm_90a only (csrc/asm/sm90_bwd.cuh): (hdim_q, hdim_v) -> (kBlockM, kBlockN, warps).
# A TMA producer warpgroup and two wgmma consumers of 64 keys each; query blocks of 128 rows at d64, 64 at d128
# (Sm90BwdTraits fixes them: the table only names them). "plain" only (no mask, causal; batch mode).
ASM_BWD_TILES = {
    (64, 64): (128, 128, 12),
    (128, 128): (64, 128, 12),
}
ASM_ARCH = "sm_90a"
# Split-KV / paged-KV instances (mha_fwd_splitkv, mha_batch_prefill), "full", two per head-dim pair (and a "plain"
# decode tile at SPLIT_PLAIN_DIMS, below):
# - decode: 16 rows (one query of a packed GQA group of up to 16 heads, or a few speculative tokens) and one warp,
#   so the tensor cores and shared memory do 16 rows of work per K/V byte instead of 64; 32-key blocks (16 above
#   hdim 128) keep one warp's registers spill-free. On sm_90 the K / V blocks arrive by tensor copies into a ring of
#   stages (csrc/ck/decode_ring.cuh), six CTAs per SM (d128: two 16 KB stages each).
# - prefill: 64 x 64 with 4 warps, for batch prefill and split-KV calls with many query rows.
def splitkv_tiles(hdim: int, hdim_v: int) -> list[tuple[int, int, int]]:
    return [(16, 32 if max(hdim, hdim_v) <= 128 else 16, 1), (64, 64, 4)]
# A "plain" decode instance (no soft-cap, bias, ALiBi, sinks or dropout compiled in) at these head dims, for the split
# calls without them (mha_fwd.cpp, find_lean_or_full): the full one's skipped score-modifier code still shapes the
# loop (one-query step: d64 159 -> 138 registers, d128 191 -> 182, d256 217 -> 207; d256's 16-row step spilled 128 B,
# now none). bf16, 32 query / 8 KV heads, L2 swept, KV GB/s, same call, a / p / p / a:
# - d128, H100 GPU-8ef9dbf6, three passes: b=16 1k 2342-2391 -> 2358-2401 (+0.7%), bshd 2358-2397 -> 2371-2415 (+1%),
#   b=1 8k 1662-1677 -> 1677-1691 (+1%, every pass), b=16 2k / 8k and b=64 1k +0.1-0.3%;
# - d64 / d256, H100 GPU-f87ed8ae, two passes: b=16 1k +1.0% / +0.4%, b=1 8k 1109-1128 -> 1149-1160 (+3%) / +0.8%,
#   b=16 8k and b=64 1k even to +0.3%, 4 queries (16 rows) b=16 1k +2.5% / +2.6%.
SPLIT_PLAIN_DIMS = {(64, 64), (128, 128), (256, 256)}
# ck backward instances: (hdim_q, hdim_v) -> (kBlockM, kBlockN, warps, SdP / dKV / dQ warps along M / N / M), see
# csrc/ck/bwd_traits.cuh. One CTA keeps kBlockN keys' dK and dV in registers. "plain" serves calls without bias,
# ALiBi or dropout (masks, GQA, group mode and deterministic dQ are run-time); "full" adds them.
# Measured on H200 (bf16, same-call A/B, TFLOP/s at s=1k / 4k / 16k, non-causal):
# - d <= 64: 128 x 128 beats 64 x 128 (d64: 208 / 256 / 275 vs 192 / 231 / 243); SdP warps 2 along M = 4 along M.
# - d128: 64 x 128 with the dQ GEMM 2 warps along M (215 / 271 / 290) beats 4 along M (211 / 265 / 283).
# - d > 128: 64 x 64 with dK / dV and dQ 2 warps along M / N (d256: 187 / 228 / 242) beats 4 (173 / 210 / 223).
# - d96 and d160 keep 4 warps along the dQ / dKV N side: 2 warps' 64 columns do not divide 96 or 160.
CK_BWD_TILES = {
    (32, 32): (128, 128, 8, 2, 4, 4),
    (64, 64): (128, 128, 8, 2, 4, 4),
    (96, 96): (64, 128, 8, 2, 4, 4),
    (128, 128): (64, 128, 8, 2, 4, 2),
    (160, 160): (64, 64, 8, 4, 4, 4),
    (192, 128): (64, 64, 8, 4, 2, 2),
    (192, 192): (64, 64, 8, 4, 2, 2),
    (256, 256): (64, 64, 8, 4, 2, 2),
}
# d <= 64 stays on 64 x 128 tiles (97 KB with two Q / dO stages) for the "full" variant, whose dropout / bias code
# spills 384 B on 128 x 128 (none on 64 x 128; 1.6 KB before the Philox layout of philox.h), where it is 8-19% slower
# (H100 GPU-197138b8, bf16, d64, s = 1k / 2k, same call ABBA: ALiBi + dropout 0.81-0.84, bias + dbias 0.89-0.93, bias +
# dropout 0.84-0.87 of 64 x 128), and in builds that include a 99 KB-shared-memory arch (sm_86, sm_89,
# sm_120a), which cannot run 128 x 128 (162 KB). The "dropout" variant takes 128 x 128 since the fifty-fifth session:
# with the Philox layout of philox.h it spills 160 B there (none on 64 x 128) and is faster (H100 GPU-4bbeca80, bf16,
# 16k tokens, dropout 0.1, same call ABBA, s = 1k / 4k / 16k: +8-9% without a mask, +5-8% causal; 0.83-1.20 of
# FlashAttention-2 from 0.76-1.14).
SMALL_SMEM_ARCHS = ("sm_86", "sm_89", "sm_120a")
CK_BWD_TILES_SMALL = {
    (32, 32): (64, 128, 8, 2, 4, 4),
    (64, 64): (64, 128, 8, 2, 4, 4),
}
# Experiments: MHA_BWD_TILE_OVERRIDE="128x128=64,64,8,2,4,4" replaces backward tiles.
apply_tile_override(CK_BWD_TILES, "MHA_BWD_TILE_OVERRIDE", drop=CK_BWD_TILES_SMALL)


def bwd_tiles(archs=(), variant="plain") -> dict:
    """The backward tile per head-dim pair for one variant of a build targeting `archs`."""
    tiles = dict(CK_BWD_TILES)
    if variant == "full" or any(a in SMALL_SMEM_ARCHS for a in archs):
        tiles.update(CK_BWD_TILES_SMALL)
    return tiles
# "plain" serves calls without soft-cap, bias, ALiBi, sinks or dropout; "full" serves every call.
VARIANTS = ("plain", "full")
# The backward has two more: "alibi" (ALiBi only) and "dropout" (dropout only), each with just its feature's code and
# registers. H200, bf16, TFLOP/s at s=1k / 16k non-causal, d128: ALiBi 136 / 160 on "full" -> 189 / 239, dropout
# 120 / 141 -> 145 / 173 (191 / 242 with the Philox layout of philox.h); d64 ALiBi (128 x 128 tile, "full" has
# 64 x 128) 99 / 110 -> 152 / 183. The value is the BwdKernelTraits feature mask: 1 elementwise bias (+ dbias),
# 2 ALiBi, 4 dropout.
BWD_VARIANTS = {"plain": 0, "alibi": 2, "dropout": 4, "full": 7}
# The forward has "alibi" too (FwdKernelTraits feature mask 2; 1 there is soft-cap, bias and sinks). H200, bf16,
# TFLOP/s at s=1k / 16k non-causal, ALiBi on "full" -> "alibi": d64 84 / 88 -> 244 / 264, d128 101 / 108 -> 268 /
# 292, d256 179 / 186 -> 292 / 309. And "dropout" (mask 4), at d128 only (FWD_VARIANT_DIMS): with the Philox layout of
# philox.h the dropout-only kernel is 12-16% faster than "full" there (H100 GPU-737e5539, bf16, 16k tokens, dropout
# 0.1, same call ABBA, s = 1k / 4k / 16k: 218.7 / 234.0 / 236.7 -> 244.7 / 262.6 / 269.6 TFLOP/s, causal 168.9 / 202.9
# / 218.5 -> 193.6 / 234.5 / 252.6; FlashAttention-2 231 / 271 / 282, causal 188 / 234 / 258) but even at d64 and
# d256 (-0.7% to +3.3%), so those head dims would only add build time. On 128 x 48 (the plain tile) it read 0.94-0.98
# of "full" on 128 x 32.
FWD_VARIANTS = {"plain": 0, "alibi": 2, "dropout": 4, "full": 7}
# Lean forward variants built for some head-dim pairs only (the others take "full"); the dispatch (mha_fwd.cpp) runs a
# lean instance only at the head dims the full one would run, never a larger padded one.
FWD_VARIANT_DIMS = {"dropout": {(128, 128)}}
ALL_VARIANTS = ("plain", "full", "alibi", "dropout")

PRESETS = {
    # smallest useful set: one instance, enough to build, link and run bf16 hdim<=128 forward
    "ci": dict(apis=("fwd", "bwd"), dtypes=("bf16",), hdims=("128x128",), variants=("plain",)),
    "all": dict(apis=("fwd", "bwd"), dtypes=DTYPES, hdims=None, variants=ALL_VARIANTS),
}


@dataclasses.dataclass(frozen=True)
class Instance:
    api: str
    family: str  # "ck" | "asm_v3"
    dtype: str
    hdim: int
    hdim_v: int
    block_m: int
    block_n: int
    warps: int
    variant: str  # "plain" | "full"; bwd also "alibi" | "dropout" (BWD_VARIANTS)
    atoms: tuple = ()  # bwd: SdP / dKV / dQ warp layouts (CK_BWD_TILES)

    @property
    def dims(self) -> str:
        return f"{self.hdim}x{self.hdim_v}"

    @property
    def name(self) -> str:
        d = f"d{self.hdim}" if self.hdim == self.hdim_v else f"d{self.hdim}_dv{self.hdim_v}"
        return (f"fmha_{self.api}_{self.family}_{self.dtype}_{d}_b{self.block_m}x{self.block_n}_w{self.warps}"
                f"_{self.variant}")

    @property
    def fn(self) -> str:
        return (f"launch_{self.api}_{self.family}_{self.dtype}_d{self.hdim}_dv{self.hdim_v}_m{self.block_m}"
                f"_{self.variant}")

    @property
    def compile_hint(self) -> str:
        arch = f" --arch {ASM_ARCH}" if self.family == "asm_v3" else ""
        return f"--api {self.api} --dtypes {self.dtype} --hdims {self.dims} --variants {self.variant}{arch}"


def all_instances(archs=()) -> list[Instance]:
    """Every instance; `archs` (the build's targets) picks the backward tiles (bwd_tiles)."""
    out = []
    for dtype in DTYPES:
        for hq, hv in CK_FWD_TILES:
            for variant in FWD_VARIANTS:
                if (hq, hv) not in FWD_VARIANT_DIMS.get(variant, {(hq, hv)}):
                    continue
                bm, bn, w = fwd_tiles(variant)[(hq, hv)]
                out.append(Instance("fwd", "ck", dtype, hq, hv, bm, bn, w, variant))
        for (hq, hv), (bm, bn, w) in ASM_FWD_TILES.items():
            out.append(Instance("fwd", "asm_v3", dtype, hq, hv, bm, bn, w, "plain"))
        for (hq, hv) in CK_FWD_TILES:
            for tile in splitkv_tiles(hq, hv):
                out.append(Instance("fwd_splitkv", "ck", dtype, hq, hv, *tile, "full"))
                if tile[0] == 16 and (hq, hv) in SPLIT_PLAIN_DIMS:
                    out.append(Instance("fwd_splitkv", "ck", dtype, hq, hv, *tile, "plain"))
        for hq, hv in CK_BWD_TILES:
            for variant in BWD_VARIANTS:
                bm, bn, w, *atoms = bwd_tiles(archs, variant)[(hq, hv)]
                out.append(Instance("bwd", "ck", dtype, hq, hv, bm, bn, w, variant, tuple(atoms)))
        for (hq, hv), (bm, bn, w) in ASM_BWD_TILES.items():
            out.append(Instance("bwd", "asm_v3", dtype, hq, hv, bm, bn, w, "plain"))
    return out


def known_hdims() -> list[str]:
    """Accepted --hdims tokens: an instance's hdim_q ("192": every instance with it) or "QxV" exactly."""
    inst = all_instances()
    return sorted({str(i.hdim) for i in inst} | {i.dims for i in inst}, key=lambda t: [int(x) for x in t.split("x")])


def select(instances, apis, dtypes, hdims, pattern, variants=None):
    """Instances passing every filter (None = no filter on that key)."""
    kinds = None if apis is None else {k for a in apis for k in API_INSTANCES[a]}
    keep = []
    for i in instances:
        if kinds is not None and i.api not in kinds:
            continue
        if dtypes is not None and i.dtype not in dtypes:
            continue
        if hdims is not None and str(i.hdim) not in hdims and i.dims not in hdims:
            continue
        if variants is not None and i.variant not in variants:
            continue
        if pattern and not fnmatch.fnmatch(i.name, pattern):
            continue
        keep.append(i)
    return keep


def write_if_changed(path: str, text: str) -> None:
    """Leaves the file (and its timestamp) alone when the text is unchanged, so ninja rebuilds nothing."""
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


HEADER = "// Generated by csrc/codegen/generate.py; do not edit.\n"


def instance_source(i: Instance) -> str:
    """The instance's launch function and its dynamic shared memory per block (`<fn>_smem`, checked by csrc/api
    against the device's limit before a launch)."""
    if i.api in ("fwd", "fwd_splitkv") and i.family == "ck":
        split = "true" if i.api == "fwd_splitkv" else "false"
        traits = (f"mha::ck::FwdKernelTraits<{CPP_DTYPE[i.dtype]}, {i.hdim}, {i.hdim_v}, {i.block_m}, {i.block_n}, "
                  f"{i.warps}, {FWD_VARIANTS[i.variant]}, {split}>")
        include, params, run = "ck/fwd_launch.cuh", "FwdParams", "run_fwd"
    elif i.api == "bwd" and i.family == "ck":
        a_sdp, a_dkv, a_dq = i.atoms
        traits = (f"mha::ck::BwdKernelTraits<{CPP_DTYPE[i.dtype]}, {i.hdim}, {i.hdim_v}, {i.block_m}, {i.block_n}, "
                  f"{i.warps}, {a_sdp}, {a_dkv}, {a_dq}, {BWD_VARIANTS[i.variant]}>")
        include, params, run = "ck/bwd_launch.cuh", "BwdParams", "run_bwd"
    elif i.api == "fwd" and i.family == "asm_v3":
        traits = f"mha::asm90::Sm90FwdInstance<{CPP_DTYPE[i.dtype]}, {i.hdim}, {i.block_n}, {i.hdim_v}>"
        include, params, run = "asm/sm90_fwd.cuh", "FwdParams", "asm90::run_fwd_sm90"
    elif i.api == "bwd" and i.family == "asm_v3":
        traits = f"mha::asm90::Sm90BwdTraits<{CPP_DTYPE[i.dtype]}, {i.hdim}>"
        include, params, run = "asm/sm90_bwd.cuh", "BwdParams", "asm90::run_bwd_sm90"
    else:
        raise ValueError(f"no source template for {i.name}")
    if i.family == "ck":
        run = "ck::" + run
    check = ""
    if i.api == "bwd" and i.family == "asm_v3": # csrc/api sizes the workspace by the table's block_m / hdim
        check = (f"static_assert({traits}::kBlockM == {i.block_m} && {traits}::kBlockN == {i.block_n} && "
                 f"{traits}::kHeadDim == {i.hdim}, \"ASM_BWD_TILES must name Sm90BwdTraits' tile\");\n")
    return (HEADER + f'#include "{include}"\n\nnamespace mha::gen {{\n' + check +
            f"extern const int {i.fn}_smem = {traits}::kSmemBytes;\n\n"
            f"cudaError_t {i.fn}(const mha::{params}& p, cudaStream_t stream)\n{{\n"
            f"    return mha::{run}<{traits}>(p, stream);\n}}\n}} // namespace mha::gen\n")


def bwd_table_source(instances, built, archs) -> str:
    bwd = [i for i in instances if i.api == "bwd"]
    lines = [HEADER, '#include "api/registry.h"\n', "namespace mha::gen {"]
    for i in bwd:
        if i in built:
            lines += [f"cudaError_t {i.fn}(const mha::BwdParams&, cudaStream_t);", f"extern const int {i.fn}_smem;"]
    lines += ["} // namespace mha::gen\n", "namespace mha {", "const BwdInstance kBwdInstances[] = {"]
    fam = {"ck": "Family::ck", "asm_v3": "Family::asm_v3"}
    for i in bwd:
        fn = f"&mha::gen::{i.fn}" if i in built else "nullptr"
        smem = f"&mha::gen::{i.fn}_smem" if i in built else "nullptr"
        lines.append(f'    {{{fam[i.family]}, {ENUM_DTYPE[i.dtype]}, {i.hdim}, {i.hdim_v}, {BWD_VARIANTS[i.variant]}, '
                     f'{i.block_m}, '
                     f'{i.block_n}, "{i.name}", '
                     f'"{i.compile_hint}", {fn}, {smem}}},')
    if not bwd:
        lines.append('    {Family::ck, DType::bf16, 0, 0, 0, 0, 0, "none", "", nullptr, nullptr},')
    lines.append("};")
    lines.append(f"const int kNumBwdInstances = {len(bwd)};")
    ccs = ", ".join(str(ARCHS[a][1]) for a in archs)
    lines.append(f"static const int kArchCcs[] = {{{ccs}}};")
    lines.append(f'const BuildInfo kBwdBuildInfo = {{"{",".join(archs)}", kArchCcs, {len(archs)}}};')
    lines.append("} // namespace mha\n")
    return "\n".join(lines)


def fwd_table_source(instances, built, archs) -> str:
    fwd = [i for i in instances if i.api in ("fwd", "fwd_splitkv")]
    lines = [HEADER, '#include "api/registry.h"\n', "namespace mha::gen {"]
    for i in fwd:
        if i in built:
            lines += [f"cudaError_t {i.fn}(const mha::FwdParams&, cudaStream_t);", f"extern const int {i.fn}_smem;"]
    lines += ["} // namespace mha::gen\n", "namespace mha {", "const FwdInstance kFwdInstances[] = {"]
    fam = {"ck": "Family::ck", "asm_v3": "Family::asm_v3"}
    for i in fwd:
        fn = f"&mha::gen::{i.fn}" if i in built else "nullptr"
        smem = f"&mha::gen::{i.fn}_smem" if i in built else "nullptr"
        split = "true" if i.api == "fwd_splitkv" else "false"
        feats = FWD_VARIANTS[i.variant]
        lines.append(f'    {{{fam[i.family]}, {ENUM_DTYPE[i.dtype]}, {i.hdim}, {i.hdim_v}, {feats}, {split}, '
                     f'{i.block_m}, "{i.name}", "{i.compile_hint}", {fn}, {smem}}},')
    if not fwd:
        lines.append('    {Family::ck, DType::bf16, 0, 0, 0, false, 0, "none", "", nullptr, nullptr},')
    lines.append("};")
    lines.append(f"const int kNumFwdInstances = {len(fwd)};")
    ccs = ", ".join(str(ARCHS[a][1]) for a in archs)
    lines.append(f"static const int kArchCcs[] = {{{ccs}}};")
    lines.append(f'const BuildInfo kBuildInfo = {{"{",".join(archs)}", kArchCcs, {len(archs)}}};')
    lines.append("} // namespace mha\n")
    return "\n".join(lines)


def arch_columns(archs) -> tuple[str, str, str]:
    """The table's sm80/86/89, sm90 and sm100 cells for a build's archs: `y` where its code runs (an sm_80 cubin
    runs on sm_86 / sm_89 too, an sm_86 one on sm_89), else the GPUs it covers, else `n`."""
    a = set(archs)
    if "sm_80" in a:
        ampere = "y"
    else:
        ampere = ", ".join(g for g, need in (("sm86", ("sm_86",)), ("sm89", ("sm_86", "sm_89"))) if a & set(need))
    return ampere or "n", "y" if "sm_90a" in a else "n", "y" if "sm_100a" in a else "n"


def support_table(built, archs=("sm_80", "sm_90a", "sm_100a")) -> str:
    """AITER's README table shape, one column per architecture group; `archs`: the build's targets."""
    cols = arch_columns(archs)
    rows = ["| api | family | dtype | hdim_q / hdim_v | mode | mask | bias | dropout | lse | sm80/86/89 | sm90 | sm100 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fwd = [i for i in built if i.api == "fwd"]
    for fam, dtype in sorted({(i.family, i.dtype) for i in fwd}):
        mine = [i for i in fwd if (i.family, i.dtype) == (fam, dtype)]
        for variant in FWD_VARIANTS:
            dims = sorted({(i.hdim, i.hdim_v) for i in mine if i.variant == variant})
            if not dims:
                continue
            feats = {"full": "elementwise, alibi | y (+ soft-cap, sinks)", "alibi": "alibi | n",
                     "dropout": "n | y"}.get(variant, "n | n")
            hd = ", ".join(f"{q}" if q == v else f"{q}/{v}" for q, v in dims)
            if fam == "ck":
                span = (f"{hd} (the calls full's {hd} instance serves)" if variant in FWD_VARIANT_DIMS else
                        f"up to {hd}; any multiple of 8 below")
                rows.append(f"| fwd | {fam} ({variant}) | {dtype} | {span} | batch, "
                            f"group | no_mask, causal t/b, windows t/b, generic | {feats} | y | "
                            f"{cols[0]} | {cols[1]} | {cols[2]} |")
            else: # use_asm_v3 = true; other calls fall back to ck
                rows.append(f"| fwd | {fam} ({variant}) | {dtype} | up to {hd}; any multiple of 8 below | batch, "
                            f"group | no_mask, causal t/b | n | n | y | n | {cols[1]} | n |")
    if not fwd:
        rows.append("| fwd | - | - | - | - | - | - | - | - | n | n | n |")
    bwd = [i for i in built if i.api == "bwd"]
    for dtype in sorted({i.dtype for i in bwd if i.family == "asm_v3"}):
        dims = sorted({(i.hdim, i.hdim_v) for i in bwd if i.family == "asm_v3" and i.dtype == dtype})
        hd = ", ".join(f"{q}" if q == v else f"{q}/{v}" for q, v in dims)
        # use_asm_v3 = true; other calls fall back to ck
        rows.append(f"| bwd | asm_v3 (plain) | {dtype} | up to {hd}; any multiple of 8 below | batch, group | no_mask, "
                    f"causal t/b | n | n | - | n | {cols[1]} | n |")
    bwd = [i for i in bwd if i.family == "ck"]
    for dtype, variant in sorted({(i.dtype, i.variant) for i in bwd}):
        dims = sorted({(i.hdim, i.hdim_v) for i in bwd if (i.dtype, i.variant) == (dtype, variant)})
        hd = ", ".join(f"{q}" if q == v else f"{q}/{v}" for q, v in dims)
        feats = {"full": "elementwise (+ dbias), alibi | y", "alibi": "alibi | n",
                 "dropout": "n | y"}.get(variant, "n | n")
        rows.append(f"| bwd | ck ({variant}) | {dtype} | up to {hd}; any multiple of 8 below | batch, group "
                    f"| no_mask, causal t/b, windows t/b, generic | {feats} | - | "
                    + {"y": "up to d192 (sm80), d64 (sm86/89 in builds for them): shared memory",
                       "n": "n"}.get(cols[0], f"d64 ({cols[0]}): shared memory")
                    + f" | {cols[1]} | {cols[2]} |")
    if not bwd:
        rows.append("| bwd | - | - | - | - | - | - | - | - | n | n | n |")
    skv = [i for i in built if i.api == "fwd_splitkv"]
    for dtype, variant in sorted({(i.dtype, i.variant) for i in skv}):
        dims = sorted({(i.hdim, i.hdim_v) for i in skv if (i.dtype, i.variant) == (dtype, variant)})
        hd = ", ".join(f"{q}" if q == v else f"{q}/{v}" for q, v in dims)
        # the plain instances are decode tiles (16 rows) only, at SPLIT_PLAIN_DIMS, for calls without features; beside
        # a full tile of a smaller head dim they serve only the calls that would run full's tile of theirs
        span = (f"{hd} (decode tiles, calls without features; beside full, only where no larger than its tile)"
                if variant == "plain" else
                f"up to {hd}; any multiple of 8 below")
        feats = "n | n" if variant == "plain" else "elementwise, alibi | batch_prefill only"
        rows.append(f"| fwd_splitkv, batch_prefill | ck ({variant}) | {dtype} | {span} | batch, group; "
                    "dense, paged (any page size), cache_batch_idx | no_mask, causal t/b, windows t/b, generic | "
                    f"{feats} | y | {cols[0]} | {cols[1]} | {cols[2]} |")
    if not skv:
        rows.append("| fwd_splitkv, batch_prefill | - | - | - | - | - | - | - | - | n | n | n |")
    return "\n".join(rows)
