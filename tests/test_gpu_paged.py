"""GPU tests of the two paged-attention decode implementations (aiter_mha.paged_attention_v1_core, the generic one,
and aiter_mha.pa_fwd_asm, the tuned one) against the float64 four-stage golden model (csrc/reference/decode_golden.py):
both cache layouts (and AITER's 4-D HND, NHD with padded heads or a slice of a fused cache's heads), head sizes
64-256, GQA groups up to 32, partitions through the workspace, ALiBi (inside the soft-cap, as AITER's pa_v1),
soft-cap, sliding window (stale NaN blocks before it must never be read), NaN keys through one partition or many,
empty contexts, and the errors for a too-small workspace or an unsupported shape. Fresh random inputs, NaN-poisoned
outputs, FlashAttention's bar against the golden model (3 x a same-precision naive computation's error + 1e-5).
Skipped without torch.cuda or the built module.
Throughput: scripts/paged_bench.py."""
import math
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mha_paths import gpu_test_modules  # noqa: E402
from _paged_common import X, asm_v_shuffle, max_err, reference, within_bar, workspace_bytes  # noqa: E402

torch, aiter_mha = gpu_test_modules("paged-attention tests")
DEV = "cuda"
TOL = {torch.bfloat16: 1.5e-2, torch.float16: 2e-3}


def make_case(seed, num_seqs, heads, kv_heads, head, block, max_ctx, dtype, num_blocks=None):
    g = torch.Generator(device="cpu").manual_seed(seed)
    per_seq = math.ceil(max_ctx / block)
    nb = num_blocks or num_seqs * per_seq + 3
    q = (torch.rand(num_seqs, heads, head, generator=g) * 2 - 1).to(dtype).to(DEV)
    k5 = (torch.rand(nb, kv_heads, head // X, block, X, generator=g) * 2 - 1).to(dtype).to(DEV)
    v4 = (torch.rand(nb, kv_heads, head, block, generator=g) * 2 - 1).to(dtype).to(DEV)
    tables = torch.randint(0, nb, (num_seqs, per_seq), generator=g, dtype=torch.int32).to(DEV)
    lens = torch.randint(1, max_ctx + 1, (num_seqs,), generator=g, dtype=torch.int32)
    lens[0] = max_ctx
    return q, k5, v4, tables, lens.to(DEV)


def run_v1(q, k5, v4, tables, lens, max_ctx, scale, layout="HND", partition=256, alibi=None, softcap=0.0,
           window=0, ws_bytes=None):
    if layout == "NHD":  # [nb, bs, hk, d] views of the same logical caches
        nb, hk, dx, bs, x = k5.shape
        k = k5.permute(0, 3, 1, 2, 4).reshape(nb, bs, hk, dx * x).contiguous()
        v = v4.permute(0, 3, 1, 2).contiguous()
    else:
        k, v = k5, v4
    out = torch.full_like(q, float("nan"))
    need = workspace_bytes(q.shape[0], q.shape[1], q.shape[2], max_ctx, partition)
    ws = torch.empty(max(need if ws_bytes is None else ws_bytes, 16), dtype=torch.uint8, device=DEV)
    aiter_mha.paged_attention_v1_core(out, ws, q, k, v, scale, tables, None, lens, max_ctx, alibi, "auto", layout,
                                      softcap, None, None, partition_size=partition, sliding_window=window)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_v1_gqa_partitions(dtype, layout):
    q, k5, v4, tables, lens = make_case(1, 5, 32, 8, 128, 16, 1000, dtype)
    out = run_v1(q, k5, v4, tables, lens, 1000, 128 ** -0.5, layout)
    assert within_bar(out, reference(q, k5, v4, tables, lens, 128 ** -0.5))


@pytest.mark.parametrize("head,block,heads,kv,partition", [(64, 32, 8, 8, 64), (256, 8, 8, 1, 512),
                                                           (96, 16, 64, 2, 128), (8, 8, 4, 2, 8)])
def test_v1_shapes_and_modifiers(head, block, heads, kv, partition):
    q, k5, v4, tables, lens = make_case(head + block, 3, heads, kv, head, block, 700, torch.bfloat16)
    alibi = (torch.rand(heads, device=DEV) * 0.1).float()
    out = run_v1(q, k5, v4, tables, lens, 700, 0.3, "HND", partition, alibi=alibi, softcap=20.0, window=333)
    ref = reference(q, k5, v4, tables, lens, 0.3, alibi=alibi, softcap=20.0, window=333)
    assert within_bar(out, ref)


# The tensor-core kernel's edges: head sizes off the 32-dim padding (80, 120) and at 256 with 16-row groups and
# 1024-token partitions (the largest shared-memory ring), an NHD block size that is no multiple of 8 with partitions
# that are no multiple of the 32-token tile, GQA groups of 3 and 16, a sliding window that skips whole tiles of a
# partition, fp16.
@pytest.mark.parametrize("head,block,heads,kv,partition,layout,window,dtype", [
    (80, 16, 6, 2, 48, "HND", 0, torch.bfloat16), (120, 12, 6, 2, 36, "NHD", 100, torch.bfloat16),
    (256, 16, 32, 2, 1024, "HND", 0, torch.float16), (256, 32, 32, 2, 1024, "NHD", 150, torch.bfloat16),
    (128, 8, 16, 1, 160, "NHD", 77, torch.float16), (64, 64, 8, 8, 128, "HND", 90, torch.bfloat16)])
def test_v1_tiles_layouts_and_windows(head, block, heads, kv, partition, layout, window, dtype):
    q, k5, v4, tables, lens = make_case(head * 7 + block, 4, heads, kv, head, block, 1100, dtype)
    out = run_v1(q, k5, v4, tables, lens, 1100, head ** -0.5, layout, partition, window=window)
    ref = reference(q, k5, v4, tables, lens, head ** -0.5, window=window)
    assert within_bar(out, ref)


# Grid-dependent launches: a large batch merges the caller's partitions (k of them per CTA, fewer partials in the
# workspace), a small one splits each partition over a thread-block cluster (sm_90; ranks past a short context idle).
@pytest.mark.parametrize("seqs,head,block,heads,kv,ctx,partition,layout,window,dtype", [
    (48, 128, 16, 32, 8, 900, 128, "HND", 0, torch.bfloat16), (40, 64, 32, 16, 2, 2000, 64, "NHD", 700, torch.float16),
    (1, 128, 16, 32, 8, 1000, 256, "HND", 0, torch.bfloat16), (2, 256, 16, 8, 1, 1500, 1024, "NHD", 0, torch.float16),
    (3, 96, 8, 12, 3, 700, 512, "HND", 250, torch.bfloat16)])
def test_v1_merged_and_clustered_partitions(seqs, head, block, heads, kv, ctx, partition, layout, window, dtype):
    q, k5, v4, tables, lens = make_case(seqs * 31 + head, seqs, heads, kv, head, block, ctx, dtype)
    alibi = (torch.rand(heads, device=DEV) * 0.1).float()
    out = run_v1(q, k5, v4, tables, lens, ctx, head ** -0.5, layout, partition, alibi=alibi, window=window)
    ref = reference(q, k5, v4, tables, lens, head ** -0.5, alibi=alibi, window=window)
    assert within_bar(out, ref)


def test_v1_alibi_is_added_before_the_soft_cap():
    # AITER's pa_v1: cap * tanh((scale * q.k + alibi) / cap); a small cap and steep slopes make the two orders differ
    q, k5, v4, tables, lens = make_case(61, 3, 8, 2, 128, 16, 400, torch.bfloat16)
    alibi = torch.linspace(0.05, 0.4, 8, device=DEV).float()
    out = run_v1(q, k5, v4, tables, lens, 400, 128 ** -0.5, alibi=alibi, softcap=2.0)
    assert within_bar(out, reference(q, k5, v4, tables, lens, 128 ** -0.5, alibi=alibi, softcap=2.0))
    # the other order (cap, then ALiBi: the MHA kernels') is far from it, so the check above tells them apart
    other = reference(q, k5, v4, tables, lens, 128 ** -0.5, alibi=alibi, softcap=2.0, alibi_first=False)
    assert max_err(out, other) > 5 * TOL[torch.bfloat16]


@pytest.mark.parametrize("kind", ["HND4", "NHD padded", "NHD head slice"])
def test_v1_token_major_caches_with_their_strides(kind):
    # AITER's pa_v1 reads 'HND' 4-D caches as K and V [num_blocks, num_kv_heads, block_size, head_size]; NHD views
    # with padded heads (NaN pads) or a slice of a fused cache's heads take their own token strides
    q, k5, v4, tables, lens = make_case(71, 4, 16, 4, 128, 16, 900, torch.bfloat16)
    nb, hk, dx, bs, x = k5.shape
    d = dx * x
    k_thd = k5.permute(0, 1, 3, 2, 4).reshape(nb, hk, bs, d)  # [nb, hk, bs, d]
    v_thd = v4.permute(0, 1, 3, 2)
    if kind == "HND4":
        k, v, layout = k_thd.contiguous(), v_thd.contiguous(), "HND"
    elif kind == "NHD padded":
        k = torch.full((nb, bs, hk, d + 8), float("nan"), dtype=q.dtype, device=DEV)[..., :d]
        v = torch.full((nb, bs, hk, d + 8), float("nan"), dtype=q.dtype, device=DEV)[..., :d]
        k.copy_(k_thd.permute(0, 2, 1, 3)), v.copy_(v_thd.permute(0, 2, 1, 3))
        layout = "NHD"
    else:
        k = torch.full((nb, bs, 3 * hk, d), float("nan"), dtype=q.dtype, device=DEV)[:, :, hk:2 * hk]
        v = torch.full((nb, bs, 3 * hk, d), float("nan"), dtype=q.dtype, device=DEV)[:, :, 2 * hk:]
        k.copy_(k_thd.permute(0, 2, 1, 3)), v.copy_(v_thd.permute(0, 2, 1, 3))
        layout = "NHD"
    assert not k.is_contiguous() or kind == "HND4"
    out = torch.full_like(q, float("nan"))
    ws = torch.empty(workspace_bytes(4, 16, 128, 900, 256), dtype=torch.uint8, device=DEV)
    alibi = (torch.rand(16, device=DEV) * 0.1).float()
    aiter_mha.paged_attention_v1_core(out, ws, q, k, v, 128 ** -0.5, tables, None, lens, 900, alibi, "auto", layout,
                                      30.0, None, None, partition_size=256, sliding_window=500)
    torch.cuda.synchronize()
    ref = reference(q, k5, v4, tables, lens, 128 ** -0.5, alibi=alibi, softcap=30.0, window=500)
    assert within_bar(out, ref)


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("block,partition", [(16, 256), (32, 64)])
def test_v1_blocks_before_the_window_are_never_read(layout, block, partition):
    # an engine may free the blocks that lie wholly before a sliding window: their table entries then point at a
    # NaN block here (before the fix, up to 31 tokens before the window were read, and 0 x NaN in P V gave NaN)
    window = 100
    q, k5, v4, tables, lens = make_case(91 + block, 6, 16, 4, 128, block, 1000, torch.bfloat16)
    nb = k5.shape[0]
    tables = tables % (nb - 1)  # block nb - 1: the poison
    k5[nb - 1], v4[nb - 1] = float("nan"), float("nan")
    stale = tables.clone()
    for s, n in enumerate(lens.tolist()):
        lo = max(0, n - window)
        stale[s, :lo // block] = nb - 1  # blocks wholly before the window
    assert (stale == nb - 1).sum() > 6
    out = run_v1(q, k5, v4, stale, lens, 1000, 128 ** -0.5, layout, partition=partition, window=window)
    assert torch.isfinite(out).all()
    assert within_bar(out, reference(q, k5, v4, tables, lens, 128 ** -0.5, window=window))


@pytest.mark.parametrize("partition", [64, 1024])
def test_v1_nan_in_a_visible_key_gives_nan_whatever_the_partitions(partition):
    # a NaN key score among finite ones reaches the output through one partition or through the partition combine
    # (the combine once dropped NaN partitions). A partition of NaN scores only counts as empty (fmaxf drops NaN),
    # with one partition or many.
    q, k5, v4, tables, lens = make_case(93, 2, 8, 2, 128, 16, 900, torch.bfloat16)
    lens[:] = 900
    tables = torch.arange(tables.numel(), dtype=torch.int32, device=DEV).reshape(tables.shape)  # no shared blocks
    k5[tables[1, 40].item(), 1] = float("nan")  # tokens 640-655 of sequence 1 (partition 10 of 64 tokens), KV head 1
    out = run_v1(q, k5, v4, tables, lens, 900, 128 ** -0.5, partition=partition)
    assert torch.isnan(out[1, 4:8]).all(), out[1, 4:8]  # the group of KV head 1
    assert torch.isfinite(out[1, :4]).all() and torch.isfinite(out[0]).all()


def test_v1_nonpositive_softcap_and_window_are_off():
    # AITER's pa_v1 treats logits_soft_cap <= 0 and sliding_window <= 0 as off
    q, k5, v4, tables, lens = make_case(77, 3, 8, 2, 128, 16, 600, torch.bfloat16)
    off = run_v1(q, k5, v4, tables, lens, 600, 128 ** -0.5)
    assert torch.equal(run_v1(q, k5, v4, tables, lens, 600, 128 ** -0.5, softcap=-1.0, window=-1), off)
    assert within_bar(off, reference(q, k5, v4, tables, lens, 128 ** -0.5))


def test_v1_empty_context_gives_zeros():
    q, k5, v4, tables, lens = make_case(3, 3, 4, 2, 64, 16, 300, torch.bfloat16)
    lens[1] = 0
    out = run_v1(q, k5, v4, tables, lens, 300, 0.125, partition=64)
    assert torch.all(out[1] == 0)
    assert within_bar(out, reference(q, k5, v4, tables, lens, 0.125))


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_v1_context_lens_clamp_to_the_table(layout):
    # context_lens are device data: a length past what a block-table row addresses (640 tokens here) reads that row
    # only (before the clamp: the next sequence's entries), a negative one is an empty context (zeros)
    q, k5, v4, tables, lens = make_case(7, 4, 16, 4, 128, 16, 640, torch.bfloat16)
    lens[0], lens[2] = 5000, -3
    out = run_v1(q, k5, v4, tables, lens, 640, 128 ** -0.5, layout)
    assert torch.all(out[2] == 0)
    ref = reference(q, k5, v4, tables, lens.clamp(0, 640), 128 ** -0.5)
    assert within_bar(out, ref)


@pytest.mark.parametrize("seqs", [1, 64])
def test_v1_context_past_max_context_len_reads_its_partitions(seqs):
    # a context longer than max_context_len (a caller error the kernel cannot see) reads the tokens of the caller's
    # partitions only (2 x 256 here), as before the launch merged partitions (64 sequences) or took the context as
    # one partition over a cluster (1 sequence)
    q, k5, v4, tables, lens = make_case(11 + seqs, seqs, 32, 8, 128, 16, 1024, torch.bfloat16)
    lens[0] = 900
    out = run_v1(q, k5, v4, tables, lens, 500, 128 ** -0.5)
    ref = reference(q, k5, v4, tables, lens.clamp(0, 512), 128 ** -0.5)
    assert within_bar(out, ref)


def test_v1_rejects_small_workspace_and_bad_shapes():
    q, k5, v4, tables, lens = make_case(4, 2, 8, 2, 128, 16, 600, torch.bfloat16)
    need = workspace_bytes(2, 8, 128, 600, 256)
    with pytest.raises(ValueError, match="workspace too small"):
        run_v1(q, k5, v4, tables, lens, 600, 0.1, ws_bytes=need - 1)
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        aiter_mha.paged_attention_v1_core(torch.empty_like(q), torch.empty(16, dtype=torch.uint8, device=DEV), q, k5,
                                          v4, 0.1, tables, None, lens, 600, None, "fp8", "HND", 0.0, None, None)
    with pytest.raises(ValueError, match="partition_size"):
        run_v1(q, k5, v4, tables, lens, 600, 0.1, partition=24)
    assert aiter_mha.paged_attention_workspace_bytes(2, 8, 128, 600, 256) == need


def test_binding_refuses_unsafe_workspace_and_tables():
    # the workspace's size is taken as numel x element size: a broadcast view (one byte behind `need` elements) or
    # a strided one must be refused, not written past; block_tables rows padded past the view's width would let a
    # long context read entries outside it (the library takes one row stride), so the rows must be contiguous
    q, k5, v4, tables, lens = make_case(21, 3, 8, 2, 128, 16, 600, torch.bfloat16)
    need = workspace_bytes(3, 8, 128, 600, 256)
    for ws in (torch.zeros(1, dtype=torch.uint8, device=DEV).expand(need),
               torch.zeros(2 * need, dtype=torch.uint8, device=DEV)[::2]):
        with pytest.raises(ValueError, match="workspace_buffer must be contiguous"):
            aiter_mha.paged_attention_v1_core(torch.empty_like(q), ws, q, k5, v4, 0.1, tables, None, lens, 600, None,
                                              "auto", "HND", 0.0, None, None, partition_size=256)
    wide = torch.zeros(3, 2 * tables.shape[1], dtype=torch.int32, device=DEV)
    wide[:, :tables.shape[1]] = tables
    view = wide[:, :tables.shape[1]]
    with pytest.raises(ValueError, match="block_tables must be a contiguous"):
        run_v1(q, k5, v4, view, lens, 600, 0.1)
    with pytest.raises(ValueError, match="block_tables must be a contiguous"):
        aiter_mha.pa_fwd_asm(q, k5, asm_v_shuffle(v4), view, lens, view.stride(0))
    # one sequence: the row stride given must be the table's width (a larger one would read past the row)
    with pytest.raises(ValueError, match="block_tables_stride0"):
        aiter_mha.pa_fwd_asm(q[:1], k5, asm_v_shuffle(v4), tables[:1].contiguous(), lens[:1], 1000)


def test_size_one_dims_with_any_stride():
    # PyTorch up to 2.9 exports the stride of a size-1 dim as 1 through DLPack: one sequence, one KV head (MQA), so
    # such strides reach the library, which never steps along those dims
    q, k5, v4, tables, lens = make_case(22, 1, 8, 1, 128, 16, 700, torch.bfloat16)
    q = q.as_strided(q.shape, (1,) + q.stride()[1:])
    k5 = k5.as_strided(k5.shape, (k5.stride(0), 1) + k5.stride()[2:])
    v4 = v4.as_strided(v4.shape, (v4.stride(0), 1) + v4.stride()[2:])
    ref = reference(q, k5, v4, tables, lens, 128 ** -0.5)
    out = run_v1(q, k5, v4, tables, lens, 700, 128 ** -0.5)
    assert within_bar(out, ref)
    out = torch.full_like(q, float("nan"))
    aiter_mha.pa_fwd_asm(q, k5, asm_v_shuffle(v4), tables, lens, tables.shape[1], out_=out)
    torch.cuda.synchronize()
    assert within_bar(out, ref)


# 6 sequences: clusters of 2 splits; 40: one split; 64
# query heads per 2 KV heads: two groups of 16 rows per KV head; 8 / 8: one real row of 16
@pytest.mark.parametrize("heads,kv,seqs,dtype", [(32, 4, 6, torch.bfloat16), (8, 8, 6, torch.bfloat16),
                                                 (64, 2, 6, torch.bfloat16), (32, 8, 40, torch.bfloat16),
                                                 (32, 4, 6, torch.float16)])
def test_asm_matches_reference(heads, kv, seqs, dtype):
    q, k5, v4, tables, lens = make_case(5 + heads + seqs, seqs, heads, kv, 128, 16, 1500, dtype)
    lens[1] = 1
    lens[2] = 17
    out = torch.full_like(q, float("nan"))
    aiter_mha.pa_fwd_asm(q, k5, asm_v_shuffle(v4), tables, lens, tables.shape[1], out_=out)
    torch.cuda.synchronize()
    assert within_bar(out, reference(q, k5, v4, tables, lens, 128 ** -0.5))
    fresh = torch.from_dlpack(aiter_mha.pa_fwd_asm(q, k5, asm_v_shuffle(v4), tables, lens, tables.shape[1]))
    torch.cuda.synchronize()
    assert torch.equal(fresh, out)


def test_asm_fresh_output_orders_a_consumer_on_another_stream():
    # the returned array is filled on a side stream held up by a spin; torch reading it on its own stream must wait
    # for the kernel (the buffer's completion event), not see the fresh allocation's old contents
    q, k5, v4, tables, lens = make_case(91, 16, 32, 8, 128, 16, 2000, torch.bfloat16)
    va = asm_v_shuffle(v4)
    ref = reference(q, k5, v4, tables, lens, 128 ** -0.5)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # the inputs are ready
    for _ in range(3):
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # tens of milliseconds
        buf = aiter_mha.pa_fwd_asm(q, k5, va, tables, lens, tables.shape[1], stream=side.cuda_stream)
        got = torch.from_dlpack(buf).clone()  # on the current (default) stream
        torch.cuda.synchronize()
        assert within_bar(got, ref)


def test_asm_context_lens_clamp_to_the_table():
    q, k5, v4, tables, lens = make_case(8, 4, 32, 8, 128, 16, 800, torch.bfloat16)
    lens[1], lens[3] = 1 << 30, -5  # 800 tokens (the table's 50 blocks); an empty context
    out = torch.full_like(q, float("nan"))
    aiter_mha.pa_fwd_asm(q, k5, asm_v_shuffle(v4), tables, lens, tables.shape[1], out_=out)
    torch.cuda.synchronize()
    assert torch.all(out[3] == 0)
    assert within_bar(out, reference(q, k5, v4, tables, lens.clamp(0, 800), 128 ** -0.5))


@pytest.mark.parametrize("seqs", [1, 24])  # a 16-CTA cluster per KV head; one split
def test_asm_cuda_graph_replays_the_eager_call(seqs):
    # serving engines capture the decode step: the replay must write what the eager call wrote, bit for bit
    q, k5, v4, tables, lens = make_case(11 + seqs, seqs, 32, 8, 128, 16, 2000, torch.bfloat16)
    va = asm_v_shuffle(v4)
    eager, graphed = torch.full_like(q, float("nan")), torch.full_like(q, float("nan"))
    aiter_mha.pa_fwd_asm(q, k5, va, tables, lens, tables.shape[1], out_=eager)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        aiter_mha.pa_fwd_asm(q, k5, va, tables, lens, tables.shape[1], out_=graphed,
                             stream=torch.cuda.current_stream().cuda_stream)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(graphed, eager)
    assert within_bar(eager, reference(q, k5, v4, tables, lens, 128 ** -0.5))


def test_asm_first_call_inside_a_graph_capture():
    # a fresh process whose first pa_fwd_asm call (and so the cluster-size query) happens inside a global-mode capture
    code = f"""
import sys, torch
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from _mha_paths import load_binding
from _paged_common import asm_v_shuffle
m, why = load_binding()
assert m is not None, why
g = torch.Generator(device="cuda").manual_seed(3)
q = torch.rand(1, 32, 128, device="cuda", generator=g).bfloat16()
k5 = torch.rand(160, 8, 16, 16, 8, device="cuda", generator=g).bfloat16()
va = asm_v_shuffle(torch.rand(160, 8, 128, 16, device="cuda", generator=g).bfloat16())
tables = torch.randperm(160, device="cuda", generator=g).int().view(1, 160)
lens = torch.tensor([2500], dtype=torch.int32, device="cuda")
graphed, eager = torch.full_like(q, float("nan")), torch.full_like(q, float("nan"))
gr = torch.cuda.CUDAGraph()
with torch.cuda.graph(gr):
    m.pa_fwd_asm(q, k5, va, tables, lens, 160, out_=graphed, stream=torch.cuda.current_stream().cuda_stream)
gr.replay()
m.pa_fwd_asm(q, k5, va, tables, lens, 160, out_=eager)
torch.cuda.synchronize()
assert torch.equal(graphed, eager) and not torch.isnan(eager).any()
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_asm_rejects_other_head_sizes():
    q, k5, v4, tables, lens = make_case(6, 2, 8, 8, 64, 16, 64, torch.bfloat16)
    with pytest.raises(ValueError, match="ASM PA only supports head_size=128"):
        aiter_mha.pa_fwd_asm(q, k5, v4, tables, lens, tables.shape[1])
