"""Dense attention backward for Hopper (sm_90) in Triton's Gluon dialect, after FlashAttention-2/3.

The gradients of :func:`kernels.hopper_attention.hopper_forward` (and of the portable forward of
:mod:`kernels.triton_attention`, whose row statistics it reads): given dO, the forward's O and its
row statistics ``row_stats`` (B, H, 3, N_q) float32 = [lse, m = row max of the raw scores,
log2 l], with the same math as the portable backward:

    P  = softmax probabilities, recomputed from row_stats (``EXACT_P``, see below)
    delta = rowsum(dO * O)
    dS = P * (dP - delta),  dP = dO V^T
    dV = P^T dO,  dK = dS^T Q * scale,  dQ = dS K * scale

P is recomputed per dtype as the portable kernels do (:func:`kernels.launch_args.exact_probabilities`):
float16 (``EXACT_P``) ``P = exp2((S - m) * scale * log2 e - log2 l)``; bfloat16 ``P = exp2(S *
scale * log2 e - lse * log2 e)`` with lse = -inf read as +inf. A row that sees no key has m = +inf
(or lse = -inf), so its P is 0 and it passes no gradient.

Two kernels, so that every output element is written by exactly one program (deterministic, no
atomics), launched in this order on one stream:

- ``hopper_attention_bwd_dq_kernel``: one program per (query tile of ``DQ_BLOCK_M``, batch *
  head). Q and dO stay in shared memory; K and V tiles of ``DQ_BLOCK_N`` keys stream through a
  TMA ring. Per key tile: S = Q K^T and dP = dO V^T (two asynchronous wgmmas from shared memory),
  P and dS in registers, dQ += dS K (wgmma, dS from registers); the key tiles that no mask touches
  are software-pipelined (:func:`_dq_tiles_pipelined`: P's and dS's math beside dP's and the
  previous tile's dQ wgmmas), the masked ones (causal diagonal, sequence end) follow one at a time.
  It first computes delta for its rows (plain loads of O and dO) and stores it for the second
  kernel. dQ leaves through TMA from the Q buffer.
- ``hopper_attention_bwd_dkdv_kernel``: one program per (key tile of ``DKV_BLOCK_N``, batch *
  head). K and V stay in shared memory; Q and dO tiles of ``DKV_BLOCK_M`` queries stream through
  a TMA ring. Per query tile, transposed so that keys run along the wgmma M dimension: S^T = K Q^T
  and P^T from it; dP^T = V dO^T, dV += P^T dO and dK += dS^T Q (P^T, dS^T from registers).
  Without causal masking the softmax math runs beside the tensor cores: at d = 64 the tiles are
  software-pipelined (:func:`_dkdv_tiles_pipelined`: P^T's math beside the previous tile's dK,
  dS^T's beside dV), at d = 128 dS^T's math runs beside dV's wgmma. Query rows' statistics and
  delta are plain loads. dK and dV leave through TMA from the K and V buffers.

Both are single-partition software pipelines by default: the consumer warps issue the TMA loads
themselves, ``STAGES`` tiles ahead, refilling a ring slot once every warpgroup has waited for the
wgmmas that read it. The dK/dV kernel has a warp-specialised variant (``WARP_SPECIALIZE``, as the
forward's): a one-warp producer partition issues the K / V loads and every Q / dO load, each into a
slot once the consumer partition (the 8 warps) has released it through the slot's "empty" mbarrier
after the wgmmas that read it completed; the consumer runs the same instructions on the same
tiles, so the gradients are the same bits. Masking follows the portable kernels: causal is
bottom-right aligned (query i sees keys j <= i + N_k - N_q), tiles on the causal diagonal or past
the sequence end take the masked path; padded keys (key_padding_mask True) get dK = dV = 0, and
their dS is dropped from dQ; rows past N_q read as rows that see no key. TMA zero-fills rows past
N on load and clips them on store.

The one-pass form (``hopper_backward(one_pass=True)``: a preprocess kernel stores delta, then the
dK/dV kernel with ``ONE_PASS``) also computes each query tile's dQ^T = K^T dS^T in the dK/dV loop
and adds it into a float32 (B * H, rows, d) sum by one TMA reduce-add per tile from a shared-memory
tile (:func:`_add_dq_share`); the order of those additions varies, so dQ's last bits do too.

:func:`hopper_backward` validates (``ValueError`` with the reason, via
:func:`kernels.hopper_support.supported`), builds the TMA descriptors and launches. Compile
offline with ``python -m kernels.compile_check --hopper``.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

# the warp-specialised dK/dV kernel has the forward's partitions: 8 consumer warps and a one-warp TMA
# producer, under the same launch cap (its consumer warps get 240 registers each)
from .hopper_attention import MAXNREG, PRODUCER_REGS, PRODUCER_WARPS
from .hopper_common import (LOG2E, cta_barrier, padding_args, query_tile, reduce_descriptor, softmax_scale_of,
                            tma_descriptor, tma_load, tma_reduce_add, tma_store)
from .hopper_support import cuda_capability, supported
from .launch_args import exact_probabilities

LOG2E_C = gl.constexpr(LOG2E)

NUM_WARPS = 8  # two warpgroups of 64 rows along the wgmma M dimension
DQ_BLOCK_M = 128  # query rows per dQ program (wgmma M)
DQ_BLOCK_N = 64  # keys per K/V tile of the dQ ring
DKV_BLOCK_N = 128  # keys per dK/dV program (wgmma M of the transposed products)
DKV_BLOCK_M = 64  # query rows per Q/dO tile of the dK/dV ring (wgmma N of S^T, dP^T; K of dK, dV)
STAGES = 3  # ring depth of both kernels: at d = 128, 160 KiB of shared memory each
# query rows per Q/dO tile of the one-pass dK/dV kernel, by head dim: dK, dV and the tile's dQ^T share
# (d x rows, float32) are resident together, so d = 128 takes tiles of 32 rows
ONE_PASS_BLOCK_M = {64: 64, 128: 32}


# ---------------------------------------------------------------------------------------------
# shared device helpers
# ---------------------------------------------------------------------------------------------
@gluon.jit
def _softmax_rows(base, rows, N_Q, EXACT_P: gl.constexpr):
    """(m, b) of query rows ``rows`` (any layout) of one (batch, head), whose [lse, m, log2 l]
    statistics (the forward's contiguous (B, H, 3, N_Q) tensor) start at ``base``, for
    :func:`_probabilities`. ``EXACT_P``: the row max and log2 l; else b = lse * log2 e (-inf ->
    +inf) and m unused. Rows past N_Q read as rows that see no key (P = 0)."""
    ok = rows < N_Q
    if EXACT_P:
        row_m = gl.load(base + N_Q + rows, mask=ok, other=float("inf"))
        row_b = gl.load(base + 2 * N_Q + rows, mask=ok, other=0.0)
    else:
        lse = gl.load(base + rows, mask=ok, other=float("-inf"))
        row_b = gl.where(lse == float("-inf"), float("inf"), lse * LOG2E_C)
        row_m = row_b
    return row_m, row_b


@gluon.jit
def _probabilities(s, row_m, row_b, qk_scale, EXACT_P: gl.constexpr):
    """P of raw scores ``s`` given :func:`_softmax_rows`' (m, b) broadcast to its shape."""
    if EXACT_P:
        p = gl.exp2((s - row_m) * qk_scale - row_b)
    else:
        p = gl.exp2(s * qk_scale - row_b)
    return p


@gluon.jit
def _load_pair(desc_a, desc_b, bufs_a, bufs_b, bar, b, h, row, slot, pred, NBYTES: gl.constexpr):
    """TMA copies of the tiles at ``row`` of two (B, H, N, d) tensors into ring slot ``slot``,
    both signalling ``bar`` (``NBYTES``: the two tiles' bytes together)."""
    mbarrier.expect(bar, NBYTES, pred=pred)
    tma_load(desc_a, [b, h, row, 0], bar, bufs_a.index(slot), pred=pred)
    tma_load(desc_b, [b, h, row, 0], bar, bufs_b.index(slot), pred=pred)


@gluon.jit
def _init_ring(ready, STAGES: gl.constexpr):
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)


# ---------------------------------------------------------------------------------------------
# dQ (and delta): one program per query tile, loop over key tiles
# ---------------------------------------------------------------------------------------------
@gluon.jit
def _row_delta(O, DO, o_strides, do_strides, b, h, start_m, N_Q, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
               NUM_WARPS: gl.constexpr):
    """delta = rowsum(dO * O) of query rows [start_m, start_m + BLOCK_M) (0 past N_Q), float32,
    from plain loads (d contiguous); layout: rows of a blocked layout."""
    layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[4, 8],
                                            warps_per_cta=[NUM_WARPS, 1], order=[1, 0])
    rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    ok = (rows[:, None] < N_Q) & (cols[None, :] < HEAD_DIM)
    sob, soh, som = o_strides
    sdb, sdh, sdm = do_strides
    o_ptrs = O + b.to(gl.int64) * sob + h.to(gl.int64) * soh + rows.to(gl.int64)[:, None] * som + cols[None, :]
    do_ptrs = DO + b.to(gl.int64) * sdb + h.to(gl.int64) * sdh + rows.to(gl.int64)[:, None] * sdm + cols[None, :]
    o = gl.load(o_ptrs, mask=ok, other=0.0).to(gl.float32)
    do = gl.load(do_ptrs, mask=ok, other=0.0).to(gl.float32)
    return rows, gl.sum(o * do, 1)


@gluon.jit
def _dq_tiles(dq, q_tile, do_tile, row_m, row_b, delta, ring, b, h, lo, hi, end, rows, N_K, causal_offset,
              qk_scale, pad_row, stride_pn, s_zero, STAGES: gl.constexpr, NBYTES_KV: gl.constexpr,
              MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr, EXACT_P: gl.constexpr):
    """dQ accumulation over key tiles [lo, hi) (ring slot j % STAGES; tiles up to ``end`` are
    loaded). ``MASKED``: causal rule and sequence end; ``HAS_PAD``: padding keys. P's math runs
    beside dP's wgmma; dQ's wgmma is waited for before the slot is refilled (the next tiles' TMA
    loads overlap the compute)."""
    k_desc, v_desc, k_bufs, v_bufs, ready = ring
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[3]
    s_layout: gl.constexpr = s_zero.type.layout
    ds_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dq.type.layout, k_width=2)
    for j in range(lo, hi):
        slot = j % STAGES
        mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
        k_tile = k_bufs.index(slot).reshape([BLOCK_N, HEAD_DIM])
        v_tile = v_bufs.index(slot).reshape([BLOCK_N, HEAD_DIM])
        s = warpgroup_mma(q_tile, k_tile.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        dp = warpgroup_mma(do_tile, v_tile.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        # wgmma groups complete in issue order: S is ready while dP's wgmma still runs beside P's math
        s = warpgroup_mma_wait(1, deps=[s])
        p = _probabilities(s, row_m[:, None], row_b[:, None], qk_scale, EXACT_P)
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        if MASKED:
            if IS_CAUSAL:
                allowed = (cols[None, :] <= rows[:, None] + causal_offset) & (cols[None, :] < N_K)
            else:
                allowed = (cols[None, :] < N_K) & (rows[:, None] >= 0)
            p = gl.where(allowed, p, 0.0)
        if HAS_PAD:
            padded = gl.load(pad_row + cols * stride_pn, mask=cols < N_K, other=1)
            p = gl.where(padded[None, :] == 0, p, 0.0)
        dp = warpgroup_mma_wait(0, deps=[dp])
        ds = p * (dp - delta[:, None])
        ds_op = gl.convert_layout(ds.to(k_bufs.dtype), ds_layout)
        dq = warpgroup_mma(ds_op, k_tile, dq, is_async=True)
        dq, ds_op = warpgroup_mma_wait(0, deps=[dq, ds_op])
        _refill_kv(ring, b, h, j, end, STAGES, NBYTES_KV)
    return dq


@gluon.jit
def _dq_pipelined_step(dq, ds_prev, q_tile, do_tile, row_m, row_b, delta, ring, b, h, j, end, N_K, qk_scale, pad_row,
                       stride_pn, s_zero, STAGES: gl.constexpr, NBYTES_KV: gl.constexpr, HAS_PAD: gl.constexpr,
                       EXACT_P: gl.constexpr, FIRST: gl.constexpr):
    """Key tile j of :func:`_dq_tiles_pipelined`: S(j) and dP(j) issued with dQ(j - 1) (``ds_prev``:
    dS of tile j - 1 in registers; none for the ``FIRST`` tile); returns (dQ, dS of tile j), every
    wgmma completed and slot j - 1 refilled."""
    k_desc, v_desc, k_bufs, v_bufs, ready = ring
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[3]
    s_layout: gl.constexpr = s_zero.type.layout
    ds_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dq.type.layout, k_width=2)
    slot = j % STAGES
    mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
    k_tile = k_bufs.index(slot).reshape([BLOCK_N, HEAD_DIM])
    v_tile = v_bufs.index(slot).reshape([BLOCK_N, HEAD_DIM])
    s = warpgroup_mma(q_tile, k_tile.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    dp = warpgroup_mma(do_tile, v_tile.permute((1, 0)), s_zero, use_acc=False, is_async=True)
    if FIRST:
        s = warpgroup_mma_wait(1, deps=[s])
    else:
        k_prev = k_bufs.index((j - 1) % STAGES).reshape([BLOCK_N, HEAD_DIM])
        dq = warpgroup_mma(ds_prev, k_prev, dq, is_async=True)
        # S(j) done; dP(j) and dQ(j - 1) run beside P's math
        s = warpgroup_mma_wait(2, deps=[s])
    p = _probabilities(s, row_m[:, None], row_b[:, None], qk_scale, EXACT_P)
    if HAS_PAD:
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        padded = gl.load(pad_row + cols * stride_pn, mask=cols < N_K, other=1)
        p = gl.where(padded[None, :] == 0, p, 0.0)
    if FIRST:
        dp = warpgroup_mma_wait(0, deps=[dp])
    else:
        # dP(j) done; dQ(j - 1) runs beside dS's math
        dp = warpgroup_mma_wait(1, deps=[dp])
    ds = p * (dp - delta[:, None])
    ds_op = gl.convert_layout(ds.to(k_bufs.dtype), ds_layout)
    if not FIRST:
        dq, ds_prev = warpgroup_mma_wait(0, deps=[dq, ds_prev])
        _refill_kv(ring, b, h, j - 1, end, STAGES, NBYTES_KV)
    return dq, ds_op


@gluon.jit
def _dq_tiles_pipelined(dq, q_tile, do_tile, row_m, row_b, delta, ring, b, h, lo, hi, end, N_K, qk_scale, pad_row,
                        stride_pn, s_zero, STAGES: gl.constexpr, NBYTES_KV: gl.constexpr, HAS_PAD: gl.constexpr,
                        EXACT_P: gl.constexpr):
    """:func:`_dq_tiles` over the unmasked key tiles [lo, hi) (lo < hi) with the softmax math beside
    the tensor cores: tile j issues S(j), dP(j) and dQ(j - 1) and waits for S alone (wgmma groups
    complete in issue order), so P's math runs beside dP(j) and dQ(j - 1), then for dP alone, so
    dS's math runs beside dQ(j - 1); slot j - 1 is refilled once dQ(j - 1) completes. dS(j) stays in
    registers until tile j + 1 (or the end) issues dQ(j)."""
    k_desc, v_desc, k_bufs, v_bufs, ready = ring
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = k_desc.block_type.shape[3]
    dq, ds_op = _dq_pipelined_step(dq, None, q_tile, do_tile, row_m, row_b, delta, ring, b, h, lo, end, N_K,
                                   qk_scale, pad_row, stride_pn, s_zero, STAGES, NBYTES_KV, HAS_PAD, EXACT_P, True)
    for j in range(lo + 1, hi):
        dq, ds_op = _dq_pipelined_step(dq, ds_op, q_tile, do_tile, row_m, row_b, delta, ring, b, h, j, end, N_K,
                                       qk_scale, pad_row, stride_pn, s_zero, STAGES, NBYTES_KV, HAS_PAD, EXACT_P,
                                       False)
    k_last = k_bufs.index((hi - 1) % STAGES).reshape([BLOCK_N, HEAD_DIM])
    dq = warpgroup_mma(ds_op, k_last, dq, is_async=True)
    dq, ds_op = warpgroup_mma_wait(0, deps=[dq, ds_op])
    _refill_kv(ring, b, h, hi - 1, end, STAGES, NBYTES_KV)
    return dq


@gluon.jit
def _refill_kv(ring, b, h, j, end, STAGES: gl.constexpr, NBYTES_KV: gl.constexpr):
    """Key tile j's ring slot, once every wgmma that read it has completed in this warpgroup, refilled
    with tile j + STAGES (if there is one) after both warpgroups are done with it."""
    k_desc, v_desc, k_bufs, v_bufs, ready = ring
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    slot = j % STAGES
    cta_barrier()
    nxt = j + STAGES
    _load_pair(k_desc, v_desc, k_bufs, v_bufs, ready.index(slot), b, h, nxt * BLOCK_N, slot, nxt < end, NBYTES_KV)


@gluon.jit
def hopper_attention_bwd_preprocess_kernel(O, DO, DELTA, stride_ob, stride_oh, stride_om, stride_dob, stride_doh,
                                           stride_dom, H, N_Q, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
                                           num_warps: gl.constexpr):
    """delta = rowsum(dO * O) of one (query tile, batch * head) into DELTA (contiguous (B, H, N_Q)
    float32) for the one-pass dK/dV kernel. Grid (cdiv(N_Q, BLOCK_M), B * H)."""
    bh = gl.program_id(1)
    rows, delta = _row_delta(O, DO, (stride_ob, stride_oh, stride_om), (stride_dob, stride_doh, stride_dom), bh // H,
                             bh % H, gl.program_id(0) * BLOCK_M, N_Q, BLOCK_M, HEAD_DIM, num_warps)
    gl.store(DELTA + bh.to(gl.int64) * N_Q + rows, delta, mask=rows < N_Q)


@gluon.jit
def hopper_attention_bwd_dq_kernel(
    q_desc, k_desc, v_desc, do_desc, dq_desc, O, DO, ROWS, DELTA, PAD,
    stride_ob, stride_oh, stride_om, stride_dob, stride_doh, stride_dom, stride_pb, stride_pn,
    H, N_Q, N_K, causal_offset, qk_scale, sm_scale,
    STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr, EXACT_P: gl.constexpr,
    num_warps: gl.constexpr,
):
    """dQ of one (query tile, batch * head), and delta of its rows into DELTA (contiguous (B, H,
    N_Q) float32) for the dK/dV kernel. Grid (cdiv(N_Q, BLOCK_M), B * H); causal query tiles in
    reverse order (the last see the most keys)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    NBYTES_Q: gl.constexpr = q_desc.block_type.nbytes
    NBYTES_KV: gl.constexpr = k_desc.block_type.nbytes
    gl.static_assert(BLOCK_M == 16 * num_warps, "one 16-row wgmma slice per warp along M")

    b, h, bh, start_m, full_hi, end = query_tile(H, N_K, causal_offset, BLOCK_M, BLOCK_N, IS_CAUSAL)

    q_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    do_smem = gl.allocate_shared_memory(do_desc.dtype, do_desc.block_type.shape, do_desc.layout)
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    _init_ring(ready, STAGES)
    fence_async_shared()

    mbarrier.expect(q_bar, 2 * NBYTES_Q)
    tma_load(q_desc, [b, h, start_m, 0], q_bar, q_smem)
    tma_load(do_desc, [b, h, start_m, 0], q_bar, do_smem)
    for i in gl.static_range(STAGES):
        _load_pair(k_desc, v_desc, k_bufs, v_bufs, ready.index(i), b, h, i * BLOCK_N, i, i < end, 2 * NBYTES_KV)

    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)

    # delta while the loads are in flight; stored for the dK/dV kernel
    delta_rows, delta = _row_delta(O, DO, (stride_ob, stride_oh, stride_om), (stride_dob, stride_doh, stride_dom),
                                   b, h, start_m, N_Q, BLOCK_M, HEAD_DIM, num_warps)
    gl.store(DELTA + bh.to(gl.int64) * N_Q + delta_rows, delta, mask=delta_rows < N_Q)
    delta = gl.convert_layout(delta, row_layout)

    rows = start_m + gl.arange(0, BLOCK_M, layout=row_layout)
    row_m, row_b = _softmax_rows(ROWS + bh.to(gl.int64) * 3 * N_Q, rows, N_Q, EXACT_P)
    pad_row = PAD + b.to(gl.int64) * stride_pb
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout)

    q_tile = q_smem.reshape([BLOCK_M, HEAD_DIM])
    do_tile = do_smem.reshape([BLOCK_M, HEAD_DIM])
    ring = (k_desc, v_desc, k_bufs, v_bufs, ready)
    mbarrier.wait(q_bar, 0)
    # the key tiles every row of the tile sees whole, pipelined; then the masked ones (causal
    # diagonal, sequence end), one at a time
    if full_hi > 0:
        dq = _dq_tiles_pipelined(dq, q_tile, do_tile, row_m, row_b, delta, ring, b, h, 0, full_hi, end, N_K, qk_scale,
                                 pad_row, stride_pn, s_zero, STAGES, 2 * NBYTES_KV, HAS_PAD, EXACT_P)
    dq = _dq_tiles(dq, q_tile, do_tile, row_m, row_b, delta, ring, b, h, full_hi, end, end, rows, N_K,
                   causal_offset, qk_scale, pad_row, stride_pn, s_zero, STAGES, 2 * NBYTES_KV, True, IS_CAUSAL,
                   HAS_PAD, EXACT_P)

    # dQ out through the Q buffer (every wgmma reading it has completed in every warpgroup)
    dq = dq * sm_scale
    cta_barrier()
    q_tile.store(dq.to(dq_desc.dtype))
    fence_async_shared()
    tma_store(dq_desc, [b, h, start_m, 0], q_smem)
    tma.store_wait(0)


# ---------------------------------------------------------------------------------------------
# dK, dV: one program per key tile, loop over query tiles
# ---------------------------------------------------------------------------------------------
@gluon.jit
def _release_slot(ring, b, h, first, j, count, STAGES: gl.constexpr, NBYTES_QDO: gl.constexpr,
                  SELF_LOAD: gl.constexpr):
    """Ring entry j's slot, once every wgmma that read it has completed in this warpgroup:
    ``SELF_LOAD`` refills it with entry j + STAGES (if loaded at all) after both warpgroups are
    done; otherwise its "empty" barrier hands it back to the producer partition."""
    q_desc, do_desc, q_bufs, do_bufs, ready, empty = ring
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    slot = j % STAGES
    if SELF_LOAD:
        cta_barrier()
        nxt = j + STAGES
        _load_pair(q_desc, do_desc, q_bufs, do_bufs, ready.index(slot), b, h, (first + nxt) * BLOCK_M, slot,
                   nxt < count, NBYTES_QDO)
    else:
        # an arrive is a partition barrier and one thread's arrival: both warpgroups are done
        mbarrier.arrive(empty.index(slot), count=1)


@gluon.jit
def _add_dq_share(dqt, dq_sum, start_m, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr):
    """Adds a query tile's dQ^T share (HEAD_DIM x BLOCK_M, float32) into the float32 dQ sum by one
    TMA reduce-add from shared memory (``dq_sum`` = (the sum's descriptor, (G, rows, HEAD_DIM) with
    block (1, BLOCK_M, HEAD_DIM); its (1, BLOCK_M, HEAD_DIM) shared-memory tile; the (batch, head)
    row G)). The previous tile's reduce-add, still in flight, must have read the tile before this
    share overwrites it (``store_wait``)."""
    dq_desc, dq_smem, bh = dq_sum
    tma.store_wait(0)
    cta_barrier()
    dq_smem.reshape([BLOCK_M, HEAD_DIM]).store(gl.permute(dqt, [1, 0]))
    fence_async_shared()
    cta_barrier()
    tma_reduce_add(dq_desc, [bh, start_m, 0], dq_smem)


@gluon.jit
def _dkdv_tiles(dk, dv, k_tile, v_tile, ring, b, h, first, lo, hi, count, keys, stats_base, delta_base, N_Q,
                causal_offset,
                qk_scale, st_zero, STAGES: gl.constexpr, NBYTES_QDO: gl.constexpr, MASKED: gl.constexpr,
                EXACT_P: gl.constexpr, SELF_LOAD: gl.constexpr, OVERLAP: gl.constexpr, one_pass=None,
                ONE_PASS: gl.constexpr = False):
    """dK/dV accumulation over ring entries [lo, hi): entry j is query tile ``first + j`` in slot
    j % STAGES; entries up to ``count`` are loaded. ``MASKED``: the causal rule (keys past N_K and
    padded keys need none here: their rows are zeroed or clipped at the end). Every wgmma completes
    within its tile; then the slot is released (:func:`_release_slot`). ``OVERLAP``: dP^T is issued
    before dV and waited for alone, so dV's wgmma runs beside dS^T's math (else each wgmma is waited
    for at once). The schedule where :func:`_dkdv_tiles_pipelined` would spill (d = 128) or does
    not apply (causal). ``ONE_PASS`` (``one_pass`` = (keep: the keys that pass gradient to dQ, in
    ``keys``' layout; the dS^T buffer in shared memory; the float32 dQ sum of this (batch, head); a
    zero dQ^T tile)): also each query tile's dQ share, dQ^T = K^T dS^T; dS^T goes through shared
    memory, which both dK's and dQ^T's wgmmas read; the share is added by :func:`_add_dq_share`
    (single-partition kernel only: the slot release's barrier also keeps the next tile's dS^T store
    behind this tile's wgmma)."""
    q_desc, do_desc, q_bufs, do_bufs, ready, empty = ring
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    st_layout: gl.constexpr = st_zero.type.layout
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dk.type.layout, k_width=2)
    for j in range(lo, hi):
        slot = j % STAGES
        start_m = (first + j) * BLOCK_M
        # the query rows run along the columns of the transposed tiles
        rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, st_layout))
        row_m, row_b = _softmax_rows(stats_base, rows, N_Q, EXACT_P)
        delta = gl.load(delta_base + rows, mask=rows < N_Q, other=0.0)
        mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
        q_tile = q_bufs.index(slot).reshape([BLOCK_M, HEAD_DIM])
        do_tile = do_bufs.index(slot).reshape([BLOCK_M, HEAD_DIM])
        # S^T first and P^T from it, then dV's wgmma runs beside dP^T's: S^T and dP^T are never
        # live together (with dK, dV resident that keeps d = 128 within the register file)
        st = warpgroup_mma(k_tile, q_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(0, deps=[st])
        pt = _probabilities(st, row_m[None, :], row_b[None, :], qk_scale, EXACT_P)
        if MASKED:
            # query i sees key j iff j <= i + causal_offset
            pt = gl.where(keys[:, None] <= rows[None, :] + causal_offset, pt, 0.0)
        pt_op = gl.convert_layout(pt.to(q_bufs.dtype), op_layout)
        if OVERLAP:
            dpt = warpgroup_mma(v_tile, do_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
            dv = warpgroup_mma(pt_op, do_tile, dv, is_async=True)
            dpt = warpgroup_mma_wait(1, deps=[dpt])
        else:
            dv = warpgroup_mma(pt_op, do_tile, dv, is_async=True)
            dpt = warpgroup_mma(v_tile, do_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
            dv, dpt, pt_op = warpgroup_mma_wait(0, deps=[dv, dpt, pt_op])
        dst = pt * (dpt - delta[None, :])
        if ONE_PASS:
            keep, dst_smem, dq_sum, dqt_zero = one_pass
            # keys past N_K (zero-filled, so P^T is not 0 there) and padded keys give dQ nothing
            dst = gl.where(keep[:, None], dst, 0.0)
            # dS^T through shared memory, the A operand of dK and the B operand of dQ^T
            dst_smem.store(dst.to(q_bufs.dtype))
            fence_async_shared()
            cta_barrier()
            dk = warpgroup_mma(dst_smem, q_tile, dk, is_async=True)
            dqt = warpgroup_mma(k_tile.permute((1, 0)), dst_smem, dqt_zero, use_acc=False, is_async=True)
            if OVERLAP:
                dk, dv, pt_op, dqt = warpgroup_mma_wait(0, deps=[dk, dv, pt_op, dqt])
            else:
                dk, dqt = warpgroup_mma_wait(0, deps=[dk, dqt])  # dV completed with dP^T
            _add_dq_share(dqt, dq_sum, start_m, BLOCK_M, HEAD_DIM)
        else:
            dst_op = gl.convert_layout(dst.to(q_bufs.dtype), op_layout)
            dk = warpgroup_mma(dst_op, q_tile, dk, is_async=True)
            dk, dv, dst_op, pt_op = warpgroup_mma_wait(0, deps=[dk, dv, dst_op, pt_op])
        _release_slot(ring, b, h, first, j, count, STAGES, NBYTES_QDO, SELF_LOAD)
    return dk, dv


@gluon.jit
def _dkdv_pipelined_step(dk, dv, dst_prev, k_tile, v_tile, ring, b, h, first, j, count, stats_base, delta_base, N_Q,
                         qk_scale, st_zero, STAGES: gl.constexpr, NBYTES_QDO: gl.constexpr, EXACT_P: gl.constexpr,
                         SELF_LOAD: gl.constexpr, FIRST: gl.constexpr):
    """Tile j of :func:`_dkdv_tiles_pipelined`: S^T(j) issued with dK(j - 1) (``dst_prev``: dS^T of
    tile j - 1 in registers; none for the ``FIRST`` tile), then dP^T(j) with dV(j); returns (dK, dV,
    dS^T of tile j), every wgmma completed."""
    q_desc, do_desc, q_bufs, do_bufs, ready, empty = ring
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    st_layout: gl.constexpr = st_zero.type.layout
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dk.type.layout, k_width=2)
    slot = j % STAGES
    rows = (first + j) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, st_layout))
    row_m, row_b = _softmax_rows(stats_base, rows, N_Q, EXACT_P)
    delta = gl.load(delta_base + rows, mask=rows < N_Q, other=0.0)
    mbarrier.wait(ready.index(slot), (j // STAGES) & 1)
    q_tile = q_bufs.index(slot).reshape([BLOCK_M, HEAD_DIM])
    do_tile = do_bufs.index(slot).reshape([BLOCK_M, HEAD_DIM])
    st = warpgroup_mma(k_tile, q_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
    if FIRST:
        st = warpgroup_mma_wait(0, deps=[st])
    else:
        q_prev = q_bufs.index((j - 1) % STAGES).reshape([BLOCK_M, HEAD_DIM])
        dk = warpgroup_mma(dst_prev, q_prev, dk, is_async=True)
        # S^T(j) done, dK(j - 1) runs beside P^T(j)'s math
        st = warpgroup_mma_wait(1, deps=[st])
    pt = _probabilities(st, row_m[None, :], row_b[None, :], qk_scale, EXACT_P)
    pt_op = gl.convert_layout(pt.to(q_bufs.dtype), op_layout)
    dpt = warpgroup_mma(v_tile, do_tile.permute((1, 0)), st_zero, use_acc=False, is_async=True)
    dv = warpgroup_mma(pt_op, do_tile, dv, is_async=True)
    if FIRST:
        dpt = warpgroup_mma_wait(1, deps=[dpt])
    else:
        # dK(j - 1), the last reader of slot j - 1, and dP^T(j) done; dV(j) runs beside dS^T(j)'s math
        dpt, dk, dst_prev = warpgroup_mma_wait(1, deps=[dpt, dk, dst_prev])
        _release_slot(ring, b, h, first, j - 1, count, STAGES, NBYTES_QDO, SELF_LOAD)
    dst = pt * (dpt - delta[None, :])
    dst_op = gl.convert_layout(dst.to(q_bufs.dtype), op_layout)
    dv, pt_op = warpgroup_mma_wait(0, deps=[dv, pt_op])
    return dk, dv, dst_op


@gluon.jit
def _dkdv_tiles_pipelined(dk, dv, k_tile, v_tile, ring, b, h, first, lo, hi, count, stats_base, delta_base, N_Q,
                          qk_scale, st_zero, STAGES: gl.constexpr, NBYTES_QDO: gl.constexpr, EXACT_P: gl.constexpr,
                          SELF_LOAD: gl.constexpr):
    """:func:`_dkdv_tiles` over unmasked entries [lo, hi) (lo < hi) with the softmax math beside the
    tensor cores (FlashAttention-3's intra-warpgroup overlap, as the forward's
    ``_attend_tiles_overlapped``): tile j issues S^T(j) together with dK(j - 1) and waits for S^T
    alone (wgmma groups complete in issue order), so dK(j - 1) runs beside P^T(j)'s math; then it
    issues dP^T(j) with dV(j) and waits for dP^T alone, so dV(j) runs beside dS^T(j)'s math. That
    wait also completes dK(j - 1), the last reader of slot j - 1, which is released there. dS^T(j)
    stays in registers until tile j + 1 (or the end) issues dK(j)."""
    q_desc, do_desc, q_bufs, do_bufs, ready, empty = ring
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    dk, dv, dst_op = _dkdv_pipelined_step(dk, dv, None, k_tile, v_tile, ring, b, h, first, lo, count, stats_base,
                                          delta_base, N_Q, qk_scale, st_zero, STAGES, NBYTES_QDO, EXACT_P, SELF_LOAD,
                                          True)
    for j in range(lo + 1, hi):
        dk, dv, dst_op = _dkdv_pipelined_step(dk, dv, dst_op, k_tile, v_tile, ring, b, h, first, j, count,
                                              stats_base, delta_base, N_Q, qk_scale, st_zero, STAGES, NBYTES_QDO,
                                              EXACT_P, SELF_LOAD, False)
    q_last = q_bufs.index((hi - 1) % STAGES).reshape([BLOCK_M, HEAD_DIM])
    dk = warpgroup_mma(dst_op, q_last, dk, is_async=True)
    dk, dst_op = warpgroup_mma_wait(0, deps=[dk, dst_op])
    _release_slot(ring, b, h, first, hi - 1, count, STAGES, NBYTES_QDO, SELF_LOAD)
    return dk, dv


@gluon.jit
def _dkdv_range(N_Q, start_n, causal_offset, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                IS_CAUSAL: gl.constexpr):
    """(first, full_lo, count) of the key tile from ``start_n``: query tiles [first, full_lo) are on
    the causal diagonal (masked), [full_lo, n_m) see the whole key tile, those before ``first`` see
    none of it; ``count`` = n_m - first of them stream through the ring."""
    n_m = gl.cdiv(N_Q, BLOCK_M)
    if IS_CAUSAL:
        first = gl.maximum(start_n - causal_offset, 0) // BLOCK_M
        full_lo = gl.minimum(gl.cdiv(gl.maximum(start_n + BLOCK_N - 1 - causal_offset, 0), BLOCK_M), n_m)
    else:
        first = 0
        full_lo = 0
    return first, full_lo, n_m - first


@gluon.jit
def _dkdv_producer(descs, bufs, bars, coords, STAGES: gl.constexpr, NBYTES_K: gl.constexpr,
                   NBYTES_Q: gl.constexpr):
    """Worker partition of the warp-specialised dK/dV kernel: K and V once, then the Q and dO tiles
    of ring entries [0, count) (query tile ``first + j``), each pair into slot j % STAGES only
    after the consumer has released it."""
    q_desc, k_desc, v_desc, do_desc = descs
    k_smem, v_smem, q_bufs, do_bufs = bufs
    kv_bar, ready, empty = bars
    b, h, start_n, first, count = coords
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    mbarrier.expect(kv_bar, 2 * NBYTES_K)
    tma_load(k_desc, [b, h, start_n, 0], kv_bar, k_smem)
    tma_load(v_desc, [b, h, start_n, 0], kv_bar, v_smem)
    for j in range(0, count):
        slot = j % STAGES
        # an mbarrier starts in phase 0 with the phase before (parity 1) counted as complete, so
        # the first pass over the ring waits for nothing
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        _load_pair(q_desc, do_desc, q_bufs, do_bufs, ready.index(slot), b, h, (first + j) * BLOCK_M, slot, True,
                   2 * NBYTES_Q)


@gluon.jit
def _dkdv_consumer(descs, bufs, bars, coords, ranges, ROWS, DELTA, PAD, stride_pb, stride_pn, N_Q, N_K,
                   causal_offset, qk_scale, sm_scale, STAGES: gl.constexpr, NBYTES_K: gl.constexpr,
                   NBYTES_Q: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr, EXACT_P: gl.constexpr,
                   SELF_LOAD: gl.constexpr, NUM_WARPS: gl.constexpr, DQ_ACC=None, ONE_PASS: gl.constexpr = False):
    """The dK/dV of one key tile: the wgmmas and the gradient math over the ring's query tiles, and
    the epilogue (dK, dV through TMA from the K and V buffers). With ``SELF_LOAD`` it also issues
    every load (K, V and the first ``STAGES`` ring entries here, each later entry when a slot is
    done: no producer partition). ``ONE_PASS`` (with ``SELF_LOAD``): also every query tile's dQ
    share into ``DQ_ACC`` (float32 (B * H, N_Q rounded up to whole query tiles, d)), unscaled."""
    q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc = descs
    k_smem, v_smem, q_bufs, do_bufs = bufs
    kv_bar, ready, empty = bars
    b, h, bh, start_n = coords
    first, full_lo, count = ranges
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    gl.static_assert(BLOCK_N == 16 * NUM_WARPS, "one 16-key wgmma slice per warp along M")

    if SELF_LOAD:
        mbarrier.expect(kv_bar, 2 * NBYTES_K)
        tma_load(k_desc, [b, h, start_n, 0], kv_bar, k_smem)
        tma_load(v_desc, [b, h, start_n, 0], kv_bar, v_smem)
        for i in gl.static_range(STAGES):
            _load_pair(q_desc, do_desc, q_bufs, do_bufs, ready.index(i), b, h, (first + i) * BLOCK_M, i, i < count,
                       2 * NBYTES_Q)

    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                        instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                         instr_shape=[16, HEAD_DIM, 16])
    keys = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, st_layout))
    st_zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, st_layout)
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, acc_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, acc_layout)

    k_tile = k_smem.reshape([BLOCK_N, HEAD_DIM])
    v_tile = v_smem.reshape([BLOCK_N, HEAD_DIM])
    ring = (q_desc, do_desc, q_bufs, do_bufs, ready, empty)
    stats_base = ROWS + bh.to(gl.int64) * 3 * N_Q
    delta_base = DELTA + bh.to(gl.int64) * N_Q
    if HAS_PAD:
        # the keys' padding flags, read before the loops (fewer scalars live across them)
        acc_keys = start_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, acc_layout))
        key_ok = gl.load(PAD + b.to(gl.int64) * stride_pb + acc_keys * stride_pn, mask=acc_keys < N_K, other=1) == 0
    one_pass = None
    if ONE_PASS:
        gl.static_assert(SELF_LOAD, "the one-pass form runs in the single-partition kernel")
        # dQ^T (d x BLOCK_M): d along wgmma M, two warpgroups of 64 rows at d = 128; at d = 64 the
        # warpgroups take half the query columns each
        DQT_WARPS_M: gl.constexpr = NUM_WARPS if HEAD_DIM >= 16 * NUM_WARPS else 4
        dqt_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[DQT_WARPS_M, NUM_WARPS // DQT_WARPS_M],
            instr_shape=[16, BLOCK_M // (NUM_WARPS // DQT_WARPS_M), 16])
        keep = keys < N_K
        if HAS_PAD:
            keep = keep & (gl.load(PAD + b.to(gl.int64) * stride_pb + keys * stride_pn, mask=keys < N_K, other=1) == 0)
        dst_smem = gl.allocate_shared_memory(q_desc.dtype, [BLOCK_N, BLOCK_M],
                                             gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], q_desc.dtype))
        dq_smem = gl.allocate_shared_memory(gl.float32, DQ_ACC.block_type.shape, DQ_ACC.layout)
        one_pass = (keep, dst_smem, (DQ_ACC, dq_smem, bh), gl.zeros([HEAD_DIM, BLOCK_M], gl.float32, dqt_layout))
    mbarrier.wait(kv_bar, 0)
    # schedules by what fits the registers (sm_90 compile, `python -m kernels.compile_check --hopper`):
    # the pipelined one spills inside the loop at d = 128, the overlap of dV alone where causal
    if ONE_PASS:
        if IS_CAUSAL:
            dk, dv = _dkdv_tiles(dk, dv, k_tile, v_tile, ring, b, h, first, 0, full_lo - first, count, keys,
                                 stats_base, delta_base, N_Q, causal_offset, qk_scale, st_zero, STAGES, 2 * NBYTES_Q,
                                 True, EXACT_P, SELF_LOAD, False, one_pass, True)
        dk, dv = _dkdv_tiles(dk, dv, k_tile, v_tile, ring, b, h, first, full_lo - first, count, count, keys,
                             stats_base, delta_base, N_Q, causal_offset, qk_scale, st_zero, STAGES, 2 * NBYTES_Q,
                             False, EXACT_P, SELF_LOAD, True, one_pass, True)
    elif IS_CAUSAL:
        dk, dv = _dkdv_tiles(dk, dv, k_tile, v_tile, ring, b, h, first, 0, full_lo - first, count, keys, stats_base,
                             delta_base, N_Q, causal_offset, qk_scale, st_zero, STAGES, 2 * NBYTES_Q, True, EXACT_P,
                             SELF_LOAD, False)
        dk, dv = _dkdv_tiles(dk, dv, k_tile, v_tile, ring, b, h, first, full_lo - first, count, count, keys,
                             stats_base, delta_base, N_Q, causal_offset, qk_scale, st_zero, STAGES, 2 * NBYTES_Q,
                             False, EXACT_P, SELF_LOAD, False)
    elif HEAD_DIM <= 64:
        # every query tile sees the whole key tile: count >= 1 entries, none masked
        dk, dv = _dkdv_tiles_pipelined(dk, dv, k_tile, v_tile, ring, b, h, first, 0, count, count, stats_base,
                                       delta_base, N_Q, qk_scale, st_zero, STAGES, 2 * NBYTES_Q, EXACT_P, SELF_LOAD)
    else:
        dk, dv = _dkdv_tiles(dk, dv, k_tile, v_tile, ring, b, h, first, 0, count, count, keys, stats_base,
                             delta_base, N_Q, causal_offset, qk_scale, st_zero, STAGES, 2 * NBYTES_Q, False, EXACT_P,
                             SELF_LOAD, True)

    dk = dk * sm_scale
    if HAS_PAD:
        # a padded key gets no probability from any query: its dK and dV are exactly zero
        dk = gl.where(key_ok[:, None], dk, 0.0)
        dv = gl.where(key_ok[:, None], dv, 0.0)
    # dK and dV out through the K and V buffers (every wgmma reading them has completed; the
    # producer wrote them once, before the ring)
    cta_barrier()
    k_tile.store(dk.to(dk_desc.dtype))
    v_tile.store(dv.to(dv_desc.dtype))
    fence_async_shared()
    tma_store(dk_desc, [b, h, start_n, 0], k_smem)
    tma_store(dv_desc, [b, h, start_n, 0], v_smem)
    tma.store_wait(0)


@gluon.jit
def hopper_attention_bwd_dkdv_kernel(
    q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc, ROWS, DELTA, PAD, stride_pb, stride_pn,
    H, N_Q, N_K, causal_offset, qk_scale, sm_scale, DQ_ACC,
    STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr, EXACT_P: gl.constexpr,
    WARP_SPECIALIZE: gl.constexpr, num_warps: gl.constexpr, ONE_PASS: gl.constexpr = False,
):
    """dK and dV of one (key tile, batch * head); reads the DELTA the dQ kernel (``ONE_PASS``: the
    preprocess kernel) stored. ``ONE_PASS`` (not with ``WARP_SPECIALIZE``) also adds each query
    tile's dQ share into DQ_ACC (:func:`_dkdv_consumer`). Grid
    (cdiv(N_K, BLOCK_N), B * H). With ``WARP_SPECIALIZE`` a one-warp producer partition
    (:func:`_dkdv_producer`) issues every TMA load and the ``num_warps`` consumer warps
    (:func:`_dkdv_consumer`, the default partition) hand each ring slot back through its "empty"
    mbarrier once the wgmmas that read it have completed; without it the consumer warps issue the
    loads themselves. Both run the same instructions on the same tiles."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    NBYTES_Q: gl.constexpr = q_desc.block_type.nbytes
    NBYTES_K: gl.constexpr = k_desc.block_type.nbytes

    pid_n = gl.program_id(0)
    bh = gl.program_id(1)
    b = bh // H
    h = bh % H
    start_n = pid_n * BLOCK_N
    first, full_lo, count = _dkdv_range(N_Q, start_n, causal_offset, BLOCK_M, BLOCK_N, IS_CAUSAL)

    k_smem = gl.allocate_shared_memory(k_desc.dtype, k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, v_desc.block_type.shape, v_desc.layout)
    q_bufs = gl.allocate_shared_memory(q_desc.dtype, [STAGES] + q_desc.block_type.shape, q_desc.layout)
    do_bufs = gl.allocate_shared_memory(do_desc.dtype, [STAGES] + do_desc.block_type.shape, do_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    _init_ring(ready, STAGES)
    if WARP_SPECIALIZE:
        # released once per slot use by the consumer partition
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        _init_ring(empty, STAGES)
    else:
        empty = ready  # never arrived on: the consumer refills the slots itself
    fence_async_shared()

    bufs = (k_smem, v_smem, q_bufs, do_bufs)
    bars = (kv_bar, ready, empty)
    # the constexprs stay literal in each argument tuple (a constexpr that travels in a tuple
    # variable reaches the callee as a runtime value)
    if WARP_SPECIALIZE:
        gl.warp_specialize([
            (_dkdv_consumer, ((q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc), bufs, bars, (b, h, bh, start_n),
                              (first, full_lo, count), ROWS, DELTA, PAD, stride_pb, stride_pn, N_Q, N_K,
                              causal_offset, qk_scale, sm_scale, STAGES, NBYTES_K, NBYTES_Q, IS_CAUSAL, HAS_PAD,
                              EXACT_P, False, num_warps)),
            (_dkdv_producer, ((q_desc, k_desc, v_desc, do_desc), bufs, bars, (b, h, start_n, first, count), STAGES,
                              NBYTES_K, NBYTES_Q)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])
    else:
        _dkdv_consumer((q_desc, k_desc, v_desc, do_desc, dk_desc, dv_desc), bufs, bars, (b, h, bh, start_n),
                       (first, full_lo, count), ROWS, DELTA, PAD, stride_pb, stride_pn, N_Q, N_K, causal_offset,
                       qk_scale, sm_scale, STAGES, NBYTES_K, NBYTES_Q, IS_CAUSAL, HAS_PAD, EXACT_P, True, num_warps,
                       DQ_ACC, ONE_PASS)


# ---------------------------------------------------------------------------------------------
# launcher
# ---------------------------------------------------------------------------------------------
def hopper_backward(grad_out, q, k, v, out, row_stats, key_padding_mask=None, causal: bool = False,
                    softmax_scale: float | None = None, warp_specialize: bool = False, one_pass: bool = False):
    """(dq, dk, dv), contiguous, in q's dtype: the gradients of softmax(q k^T * scale) v.

    q, out, grad_out: (B, H, N_q, d); k, v: (B, H, N_k, d); CUDA tensors on an sm_90 device,
    float16 or bfloat16, d in (64, 128), any strides TMA accepts (last dim contiguous, the others
    and the base 16-byte aligned: :func:`kernels.hopper_support.supported`; ``ValueError`` with its
    reason otherwise). row_stats: the forward's float32 (B, H, 3, N_q) [lse, m, log2 l]
    (:func:`kernels.launch_args.new_row_stats`). key_padding_mask: optional bool (B, N_k), True =
    padding key. causal: bottom-right aligned. softmax_scale: default 1 / sqrt(d), > 0.
    ``warp_specialize=True`` runs the dK/dV kernel with a one-warp TMA producer partition
    (``WARP_SPECIALIZE``); the gradients are the same bits either way. ``one_pass=True`` computes
    dQ in the dK/dV kernel instead of a second pass (``ONE_PASS``: each query tile's share added
    into a float32 sum by atomic reductions, so dQ's last bits may differ between runs); it runs
    the single-partition kernel (``warp_specialize=True`` with it: ``ValueError``).
    """
    import torch
    import triton

    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    if k.shape != v.shape or tuple(k.shape) != (B, H, n_k, d):
        raise ValueError(f"k and v must be (B, H, N_k, d) matching q {tuple(q.shape)}, got k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    for name, t in (("out", out), ("grad_out", grad_out)):
        if tuple(t.shape) != (B, H, n_q, d):
            raise ValueError(f"{name} must be (B, H, N_q, d) = {tuple(q.shape)}, got {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype == out.dtype == grad_out.dtype):
        raise ValueError(f"q, k, v, out, grad_out must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}, "
                         f"{out.dtype}, {grad_out.dtype}")
    if min(B, H, n_q, n_k) < 1 or B * H > 65535:
        raise ValueError(f"need B, H, N_q, N_k >= 1 and B * H <= 65535 (grid axis 1), got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if row_stats.dtype != torch.float32 or tuple(row_stats.shape) != (B, H, 3, n_q):
        raise ValueError(f"row_stats must be float32 (B, H, 3, N_q) = ({B}, {H}, 3, {n_q}), got "
                         f"{row_stats.dtype} {tuple(row_stats.shape)}")
    capability = cuda_capability(q.get_device()) if q.is_cuda else (0, 0)
    ok, why = supported(triton.__version__, capability, q.dtype, d,
                        strides=(q.stride(), k.stride(), v.stride(), grad_out.stride()),
                        data_ptrs=(q.data_ptr(), k.data_ptr(), v.data_ptr(), grad_out.data_ptr()),
                        names=("q", "k", "v", "grad_out"))
    if not ok:
        raise ValueError(why)
    if one_pass and warp_specialize:
        raise ValueError("one_pass=True runs the single-partition dK/dV kernel: pass warp_specialize=False")
    scale = softmax_scale_of(d, softmax_scale)

    out = out if out.stride(-1) == 1 else out.contiguous()  # read with plain loads, d contiguous
    row_stats = row_stats.contiguous()
    dk = torch.empty((B, H, n_k, d), dtype=q.dtype, device=q.device)
    dv = torch.empty((B, H, n_k, d), dtype=q.dtype, device=q.device)
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    pad, stride_pb, stride_pn = padding_args(key_padding_mask, B, n_k, delta)
    flags = dict(STAGES=STAGES, IS_CAUSAL=bool(causal), HAS_PAD=key_padding_mask is not None,
                 EXACT_P=exact_probabilities(q.dtype), num_warps=NUM_WARPS)
    causal_offset = n_k - n_q
    if one_pass:
        return _one_pass(grad_out, q, k, v, out, row_stats, delta, dk, dv, pad, stride_pb, stride_pn, causal_offset,
                         scale, flags)
    dq = torch.empty((B, H, n_q, d), dtype=q.dtype, device=q.device)
    hopper_attention_bwd_dq_kernel[(triton.cdiv(n_q, DQ_BLOCK_M), B * H)](
        tma_descriptor(q, DQ_BLOCK_M), tma_descriptor(k, DQ_BLOCK_N), tma_descriptor(v, DQ_BLOCK_N),
        tma_descriptor(grad_out, DQ_BLOCK_M), tma_descriptor(dq, DQ_BLOCK_M), out, grad_out, row_stats, delta, pad,
        out.stride(0), out.stride(1), out.stride(2), grad_out.stride(0), grad_out.stride(1), grad_out.stride(2),
        stride_pb, stride_pn, H, n_q, n_k, causal_offset, scale * LOG2E, scale, **flags)
    dkdv_options = {"maxnreg": MAXNREG} if warp_specialize else {}
    hopper_attention_bwd_dkdv_kernel[(triton.cdiv(n_k, DKV_BLOCK_N), B * H)](
        tma_descriptor(q, DKV_BLOCK_M), tma_descriptor(k, DKV_BLOCK_N), tma_descriptor(v, DKV_BLOCK_N),
        tma_descriptor(grad_out, DKV_BLOCK_M), tma_descriptor(dk, DKV_BLOCK_N), tma_descriptor(dv, DKV_BLOCK_N),
        row_stats, delta, pad, stride_pb, stride_pn, H, n_q, n_k, causal_offset, scale * LOG2E, scale, delta,
        WARP_SPECIALIZE=bool(warp_specialize), **flags, **dkdv_options)
    return dq, dk, dv


def _one_pass(grad_out, q, k, v, out, row_stats, delta, dk, dv, pad, stride_pb, stride_pn, causal_offset, scale,
              flags):
    """:func:`hopper_backward`'s ``one_pass`` launches (inputs validated there): delta by the
    preprocess kernel, then the one-pass dK/dV kernel with a zeroed float32 dQ sum, which is scaled
    and cast to dQ at the end."""
    import torch
    import triton

    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    block_m = ONE_PASS_BLOCK_M[d]
    hopper_attention_bwd_preprocess_kernel[(triton.cdiv(n_q, DQ_BLOCK_M), B * H)](
        out, grad_out, delta, out.stride(0), out.stride(1), out.stride(2), grad_out.stride(0), grad_out.stride(1),
        grad_out.stride(2), H, n_q, BLOCK_M=DQ_BLOCK_M, HEAD_DIM=d, num_warps=NUM_WARPS)
    dq_sum = torch.zeros((B * H, triton.cdiv(n_q, block_m) * block_m, d), dtype=torch.float32, device=q.device)
    hopper_attention_bwd_dkdv_kernel[(triton.cdiv(n_k, DKV_BLOCK_N), B * H)](
        tma_descriptor(q, block_m), tma_descriptor(k, DKV_BLOCK_N), tma_descriptor(v, DKV_BLOCK_N),
        tma_descriptor(grad_out, block_m), tma_descriptor(dk, DKV_BLOCK_N), tma_descriptor(dv, DKV_BLOCK_N),
        row_stats, delta, pad, stride_pb, stride_pn, H, n_q, n_k, causal_offset, scale * LOG2E, scale,
        reduce_descriptor(dq_sum, block_m), WARP_SPECIALIZE=False, ONE_PASS=True, **flags)
    dq = (dq_sum[:, :n_q].view(B, H, n_q, d) * scale).to(q.dtype)
    return dq, dk, dv
