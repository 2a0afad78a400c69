"""Dense attention forward for Hopper (sm_90) in Triton's Gluon dialect, after FlashAttention-3.

One program computes one (query tile, batch * head): softmax(q k^T * scale) v for ``BLOCK_M``
query rows, returning O in the input dtype and the float32 row statistics of the portable forward
(natural-log log-sum-exp of the scaled scores, row max m, log2 of the denominator). The same
numerics as the portable kernel of :mod:`kernels.triton_attention`: the running row maximum is
taken over the raw scores and ``p = exp2((s - m) * scale * log2(e))`` (the largest p of a row is
exactly 1); causal masking is aligned to the bottom-right corner (query i sees keys
j <= i + N_k - N_q); a row with no visible key gets O = 0 and LSE = -inf.

How it is built:

- Q, K, V and O are read and written by TMA through 4-D descriptors over the caller's
  (B, H, N, d) tensors, block (1, 1, rows, d): any batch / head / row strides work as long as TMA
  accepts them (last dim contiguous, the other strides and the base 16-byte aligned). Rows past N
  are zero-filled on load and clipped on store, so nothing of a neighbouring head is touched.
- K and V tiles stream through a ``STAGES``-deep shared-memory ring; each slot has a "ready"
  mbarrier (TMA bytes landed) and an "empty" one (the consumer is done with it).
- With ``WARP_SPECIALIZE`` a one-warp producer partition issues all TMA loads
  (``gl.warp_specialize``) while the ``num_warps`` consumer warps (two warpgroups at 8 warps, 64
  query rows each) run the MMAs and the softmax. Without it, the consumer warps issue the loads
  themselves, ``STAGES`` tiles ahead (a plain software pipeline; same loop otherwise).
- S = Q K^T and O += P V are asynchronous warpgroup MMAs (wgmma) from shared memory, P from
  registers (its accumulator layout converted to the wgmma A-operand layout). With ``OVERLAP``
  (FlashAttention-3's intra-warpgroup overlap) tile j's QK^T and tile j - 1's PV are issued back
  to back and tile j's softmax runs while the PV is still on the tensor cores; without it each
  wgmma is waited for at once.
- The ping-pong schedule (FlashAttention-3's inter-warpgroup pingpong,
  :func:`hopper_attention_fwd_pingpong_kernel`) puts the two consumer warpgroups in partitions of
  their own, 64 query rows and a Q buffer each, sharing the producer's K/V ring. In the 8-warp
  consumer both warpgroups run the softmax at the same time, so the tensor cores idle meanwhile;
  here the two take turns at issuing their wgmmas (an mbarrier hand-off), which offsets them by
  half an iteration: one warpgroup's softmax runs while the other's GEMMs occupy the tensor cores.
  Each warpgroup runs the same tiles and instructions on its rows as in the 8-warp consumer (with or
  without ``OVERLAP``), so the results are the same. (A third consumer does not pay: 0.93–1.00× the
  two at d = 64; the measurement is in git history: `git show 051804f:results/kernels/hopper_dispatch_h200.md`.)
- The key loop runs in two parts, like the portable kernel: tiles every row sees in full (no
  element mask) and the causal diagonal / ragged last tile (masked).
- Block-sparse attention (:func:`hopper_attention_fwd_sparse_kernel`, the ping-pong schedule) walks
  the index lists of a block-sparse plan (:mod:`kernels.block_sparse`) made for this kernel's tile
  (``BLOCK_M`` x ``BLOCK_N``): one program per launch slot, in the portable kernels'
  longest-processing-time-first order; the producer loads the K / V tiles the list names, and the
  consumers run its no-mask group, then its partial one, as the two parts of the dense key loop
  (step j of the loop fills ring slot j % STAGES and reads list entry j for its masks). With every
  block on, the lists are the dense kernel's tiles in its order: the same results, bit for bit.

The key-padding mask (bool (B, N_k), True = padding) is read with plain loads in the consumer.
The launcher :func:`hopper_forward` checks its arguments, builds the host-side TMA descriptors and
launches (:func:`launch_forward`, which the eager dispatch calls on arguments it has checked, as it
calls :func:`launch_sparse_forward` for the block-sparse kernel);
:func:`kernels.hopper_support.supported` (re-exported here) says whether a call can take this path
(Triton release whose Gluon API this was written against, an sm_90 device, dtype, head dim,
strides). Compile it offline, without a GPU, with ``python -m kernels.compile_check --hopper``.
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

from .hopper_common import (LOG2E, cta_barrier, padding_args, query_tile, softmax_scale_of, sparse_tile,
                            tma_descriptor, tma_load, tma_store)
from .hopper_support import FORWARD_TILE, cuda_capability, supported

LN2 = gl.constexpr(0.6931471805599453)  # ln(2): ln(x) == log2(x) * LN2

# query rows per program (two consumer warpgroups of 64 rows) and keys per K/V tile: the tile that
# block-sparse plans for this forward are made for
BLOCK_M, BLOCK_N = FORWARD_TILE
NUM_WARPS = 8  # consumer warps (the default partition)
PRODUCER_WARPS = gl.constexpr(1)
PRODUCER_REGS = gl.constexpr(24)  # the fewest registers setmaxnreg allows; the producer only issues TMA copies
# per-thread register cap of the whole CTA (consumer and producer warps): 65536 registers over 12
# warps. The producer gives its share back, so the consumer warps can grow to (65536 - 4 * 32 *
# 24) / 256 = 244 -> 240 registers each
MAXNREG = 168
# the ping-pong schedule: two consumer warpgroups of PP_ROWS query rows each, as partitions
PP_CONSUMERS = 2
PP_ROWS = 64
PP_WARPS = 4  # warps of each consumer partition (the kernel's num_warps: consumer 0 is the default partition)
# setmaxnreg budget of the worker consumer under the launch cap MAXNREG; the default partition
# (consumer 0) gets what is left of the 65536 registers under the cap, the producer counting as a
# warpgroup: 12 warps, (168 * 12 - 240 * 4 - 24 * 4) * 32 / 128 = 240, as much as the worker
PP_CONSUMER_REGS = 240


def stages_for(head_dim: int) -> int:
    """K/V ring depth: 3 at d = 64 (112 KiB of shared memory), 2 at d = 128 (160 KiB)."""
    return 3 if head_dim <= 64 else 2


# ---------------------------------------------------------------------------------------------
# device code
# ---------------------------------------------------------------------------------------------
@gluon.jit
def _load_tile(desc, bufs, ready, b, h, j, slot, pred, BLOCK_N: gl.constexpr, NBYTES: gl.constexpr):
    """TMA copy of key tile ``j`` of head (b, h) into ring slot ``slot``, signalling ``ready[slot]``."""
    bar = ready.index(slot)
    mbarrier.expect(bar, NBYTES, pred=pred)
    tma_load(desc, [b, h, j * BLOCK_N, 0], bar, bufs.index(slot), pred=pred)


@gluon.jit
def _key_tile(indices, j, SPARSE: gl.constexpr):
    """The key tile of step j of a key loop: j itself (dense), or entry j of the block-sparse
    program's index list ``indices``."""
    if SPARSE:
        tile = gl.load(indices + j)
    else:
        tile = j
    return tile


@gluon.jit
def _produce_kv(k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, b, h, end, indices,
                STAGES: gl.constexpr, BLOCK_N: gl.constexpr, NBYTES_KV: gl.constexpr, SPARSE: gl.constexpr):
    """K and V of the key tiles of steps [0, end) (:func:`_key_tile`) into the ring, step j into
    slot j % STAGES, each into a slot only after its consumers have released it (the "empty"
    barriers count one arrival per consumer partition)."""
    for j in range(0, end):
        slot = j % STAGES
        tile = _key_tile(indices, j, SPARSE)  # block-sparse: loaded while the slot may still be in use
        # an mbarrier starts in phase 0 with the phase before (parity 1) counted as complete, so
        # the first pass over the ring waits for nothing
        free_phase = ((j // STAGES) & 1) ^ 1
        mbarrier.wait(k_empty.index(slot), free_phase)
        _load_tile(k_desc, k_bufs, k_ready, b, h, tile, slot, True, BLOCK_N, NBYTES_KV)
        mbarrier.wait(v_empty.index(slot), free_phase)
        _load_tile(v_desc, v_bufs, v_ready, b, h, tile, slot, True, BLOCK_N, NBYTES_KV)


@gluon.jit
def _producer(descs, bufs, bars, coords, end, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
              NBYTES_Q: gl.constexpr, NBYTES_KV: gl.constexpr):
    """Worker partition: Q once, then K and V of key tiles [0, end) into the ring, each into a
    slot only after the consumer has released it."""
    q_desc, k_desc, v_desc = descs
    q_smem, k_bufs, v_bufs = bufs
    q_bar, k_ready, v_ready, k_empty, v_empty = bars
    b, h, bh, start_m = coords
    mbarrier.expect(q_bar, NBYTES_Q)
    tma_load(q_desc, [b, h, start_m, 0], q_bar, q_smem)
    _produce_kv(k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, b, h, end, None, STAGES, BLOCK_N,
                NBYTES_KV, False)


@gluon.jit
def _slot(j, STAGES: gl.constexpr):
    """(ring slot, mbarrier phase) of key tile j: slot j % STAGES, filled for the (j // STAGES)-th time."""
    return j % STAGES, (j // STAGES) & 1


@gluon.jit
def _issue_scores(q_tile, ring, j, s_zero, STAGES: gl.constexpr):
    """Waits for K of tile j, then issues S = Q K^T as an asynchronous wgmma (returns its token)."""
    k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    slot, phase = _slot(j, STAGES)
    mbarrier.wait(k_ready.index(slot), phase)
    k_tile = k_bufs.index(slot).reshape([k_desc.block_type.shape[2], k_desc.block_type.shape[3]])
    return warpgroup_mma(q_tile, k_tile.permute((1, 0)), s_zero, use_acc=False, is_async=True)


@gluon.jit
def _issue_pv(p_op, acc, ring, j, STAGES: gl.constexpr):
    """Waits for V of tile j, then issues O += P V as an asynchronous wgmma (P from registers)."""
    k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    slot, phase = _slot(j, STAGES)
    mbarrier.wait(v_ready.index(slot), phase)
    v_tile = v_bufs.index(slot).reshape([v_desc.block_type.shape[2], v_desc.block_type.shape[3]])
    return warpgroup_mma(p_op, v_tile, acc, is_async=True)


@gluon.jit
def _release_k(ring, j, STAGES: gl.constexpr, SELF_LOAD: gl.constexpr):
    """K of tile j is no longer read (its QK^T has completed): tell the producer."""
    k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    if not SELF_LOAD:
        slot, phase = _slot(j, STAGES)
        mbarrier.arrive(k_empty.index(slot), count=1)


@gluon.jit
def _release_kv(ring, b, h, j, end, STAGES: gl.constexpr, NBYTES_KV: gl.constexpr, SELF_LOAD: gl.constexpr):
    """Tile j's slot is no longer read (its PV has completed): hand V back to the producer or,
    without one, refill the slot with tile j + STAGES."""
    k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty = ring
    slot, phase = _slot(j, STAGES)
    if SELF_LOAD:
        # every warpgroup has waited for its own wgmmas on the slot before one thread refills it
        cta_barrier()
        nxt = j + STAGES
        BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
        _load_tile(k_desc, k_bufs, k_ready, b, h, nxt, slot, nxt < end, BLOCK_N, NBYTES_KV)
        _load_tile(v_desc, v_bufs, v_ready, b, h, nxt, slot, nxt < end, BLOCK_N, NBYTES_KV)
    else:
        mbarrier.arrive(v_empty.index(slot), count=1)


# Ping-pong hand-off (PINGPONG = C, the number of consumers: 2; 0 / False: none): C consumer
# partitions, one warpgroup each, issue their wgmma groups in strict rotation A0, B0, (C0,) A1, B1, ...
# (consumer 0 = A first). ``turns`` holds C mbarriers of arrival count 1: turns[c] is consumer c's
# "your turn" barrier, which consumer c - 1 (mod C) arrives on (an arrive lowers to a partition
# barrier plus one thread's arrive, so one arrive per partition) right after issuing a group.
# Consumer c waits for its g-th turn (g = 0, 1, ...) with parity (g & 1) ^ (c == 0):
# - consumer 0, g = 0: parity 1, the phase "before" a fresh mbarrier, complete at once (0 goes first);
#   g >= 1: parity (g - 1) & 1, i.e. phase g - 1 of turns[0], completed by consumer C - 1's (g - 1)-th
#   arrive, which follows its (g - 1)-th group;
# - consumer c >= 1, g: parity g & 1, phase g of turns[c], completed by consumer c - 1's g-th arrive.
# No phase is skipped (parity waits cannot tell phase p from p + 2): consumer c - 1's next arrive on
# turns[c] needs its next turn, which by the rotation needs consumer c's g-th arrive, which comes after
# consumer c's g-th wait; so while consumer c waits for phase g, turns[c] has completed at most phases
# 0..g. All consumers run the same key tiles [0, end), so they take the same number of turns; the
# last consumer's last arrive is never waited for (harmless: nothing reuses the barrier).
# The shared K/V ring's "empty" barriers count C (one arrive from each consumer per tile); phase p of a
# slot completes with exactly one arrive of each, since a consumer's next arrive on that slot is for
# the tile the producer loads only after phase p has completed. No cycle between the turns and the
# ring: a consumer that holds a turn waits at most for the K / V of the tiles of its group (plain:
# K_j for group 2j, V_j for 2j + 1; overlap: K_j and V_(j-1) for group j), which the producer loads
# once every consumer has released tile j - STAGES (STAGES >= 2). Every other consumer has issued at
# least the previous group and, without needing a turn, waits for its wgmmas and releases what they
# read: all of tile j - 1 (plain) or K_(j-1) and V_(j-2) (overlap), so tile j - 2 in either case.
@gluon.jit
def _take_turn(turns, g, WG: gl.constexpr, PINGPONG: gl.constexpr):
    """Ping-pong: waits until consumer ``WG`` may issue its ``g``-th wgmma group (no-op otherwise)."""
    if PINGPONG:
        if WG == 0:
            mbarrier.wait(turns.index(WG), (g & 1) ^ 1)
        else:
            mbarrier.wait(turns.index(WG), g & 1)


@gluon.jit
def _pass_turn(turns, WG: gl.constexpr, PINGPONG: gl.constexpr):
    """Ping-pong: consumer ``WG`` has issued a wgmma group; the next consumer's turn (no-op otherwise)."""
    if PINGPONG:
        mbarrier.arrive(turns.index((WG + 1) % PINGPONG), count=1)


@gluon.jit
def _online_softmax(s, m_i, l_i, j, rows, N_K, causal_offset, qk_scale, pad_row, stride_pn,
                    MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr):
    """Masks the scores ``s`` of key tile j (``MASKED``: causal rule and sequence end; ``HAS_PAD``:
    padding keys) and folds them into the running row max ``m_i`` and sum ``l_i``. Returns (p,
    alpha, m, l): the tile's probabilities (float32, relative to the new max) and the factor that
    rescales what was accumulated before."""
    BLOCK_N: gl.constexpr = s.shape[1]
    cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
    if MASKED:
        if IS_CAUSAL:
            # row i sees keys j <= i + causal_offset
            allowed = (cols[None, :] <= rows[:, None] + causal_offset) & (cols[None, :] < N_K)
        else:
            allowed = (cols[None, :] < N_K) & (rows[:, None] >= 0)
        s = gl.where(allowed, s, float("-inf"))
    if HAS_PAD:
        padded = gl.load(pad_row + cols * stride_pn, mask=cols < N_K, other=1)
        s = gl.where(padded[None, :] == 0, s, float("-inf"))

    # running max of the raw scores: subtracting before scaling makes a row's largest p exactly 1
    m_new = gl.maximum(m_i, gl.max(s, 1))
    if MASKED or HAS_PAD:
        # a row with no visible key so far keeps m = -inf; subtract 0 instead (p = 0, no NaN)
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    p = gl.exp2((s - m_use[:, None]) * qk_scale)
    alpha = gl.exp2((m_i - m_use) * qk_scale)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i


@gluon.jit
def _attend_tiles(acc, m_i, l_i, q_tile, s_zero, ring, b, h, lo, hi, end, indices, rows, N_K, causal_offset,
                  qk_scale, pad_row, stride_pn, turns, STAGES: gl.constexpr, NBYTES_KV: gl.constexpr,
                  MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr, SELF_LOAD: gl.constexpr,
                  WG: gl.constexpr, PINGPONG: gl.constexpr, SPARSE: gl.constexpr):
    """Key loop steps [lo, hi), one after the other: S, softmax, then PV, each wgmma waited for at
    once (the TMA loads of later tiles overlap; the MMAs and the softmax do not). ``s_zero``: a zero
    tile in the layout of S (the QK^T wgmma's accumulator operand, ignored with use_acc=False).
    ``PINGPONG``: each wgmma is one turn of the hand-off (QK^T of step j is group 2j, its PV
    2j + 1), so the other consumer's wgmmas run during this one's softmax. ``SPARSE``: step j's key
    tile is entry j of ``indices`` (:func:`_key_tile`), read for its masks."""
    o_layout: gl.constexpr = acc.type.layout
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    for j in range(lo, hi):
        _take_turn(turns, 2 * j, WG, PINGPONG)
        s = _issue_scores(q_tile, ring, j, s_zero, STAGES)
        _pass_turn(turns, WG, PINGPONG)
        tile = _key_tile(indices, j, SPARSE)  # read while the wgmma runs
        s = warpgroup_mma_wait(0, deps=[s])
        _release_k(ring, j, STAGES, SELF_LOAD)
        p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, tile, rows, N_K, causal_offset, qk_scale, pad_row, stride_pn,
                                             MASKED, IS_CAUSAL, HAS_PAD)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        p_op = gl.convert_layout(p.to(ring[2].dtype), p_layout)
        _take_turn(turns, 2 * j + 1, WG, PINGPONG)
        acc = _issue_pv(p_op, acc, ring, j, STAGES)
        _pass_turn(turns, WG, PINGPONG)
        acc = warpgroup_mma_wait(0, deps=[acc])
        _release_kv(ring, b, h, j, end, STAGES, NBYTES_KV, SELF_LOAD)
    return acc, m_i, l_i


@gluon.jit
def _attend_tiles_overlapped(acc, m_i, l_i, p_op, q_tile, s_zero, ring, b, h, lo, hi, end, indices, rows, N_K,
                             causal_offset, qk_scale, pad_row, stride_pn, turns, STAGES: gl.constexpr,
                             NBYTES_KV: gl.constexpr, MASKED: gl.constexpr, IS_CAUSAL: gl.constexpr,
                             HAS_PAD: gl.constexpr, SELF_LOAD: gl.constexpr, WG: gl.constexpr,
                             PINGPONG: gl.constexpr, SPARSE: gl.constexpr):
    """Key loop steps [lo, hi), lo >= 1, with FlashAttention-3's intra-warpgroup overlap: step j's
    QK^T and step j - 1's PV (``p_op``: step j - 1's P, in registers) are issued together; wgmma
    groups complete in issue order, so waiting until one group is left in flight gives S_j while
    the tensor cores still run PV_{j-1}, and step j's softmax overlaps it. Returns step hi - 1's P
    for the caller to finish. ``PINGPONG``: the two wgmmas of step j are group j of the hand-off
    (step 0's QK^T is group 0, the last PV group ``end``). ``SPARSE``: step j's key tile is entry j
    of ``indices`` (:func:`_key_tile`), read for its masks."""
    o_layout: gl.constexpr = acc.type.layout
    p_layout: gl.constexpr = p_op.type.layout
    for j in range(lo, hi):
        _take_turn(turns, j, WG, PINGPONG)
        s = _issue_scores(q_tile, ring, j, s_zero, STAGES)
        acc = _issue_pv(p_op, acc, ring, j - 1, STAGES)
        _pass_turn(turns, WG, PINGPONG)
        # read while the wgmmas run (read before them, the index stays live across the issue and
        # the d = 128 consumer with a padding mask spills)
        tile = _key_tile(indices, j, SPARSE)
        s = warpgroup_mma_wait(1, deps=[s])
        _release_k(ring, j, STAGES, SELF_LOAD)
        p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, tile, rows, N_K, causal_offset, qk_scale, pad_row, stride_pn,
                                             MASKED, IS_CAUSAL, HAS_PAD)
        # P_{j-1} (an operand of the PV in flight) stays live until that wgmma has completed
        acc, p_op = warpgroup_mma_wait(0, deps=[acc, p_op])
        _release_kv(ring, b, h, j - 1, end, STAGES, NBYTES_KV, SELF_LOAD)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        p_op = gl.convert_layout(p.to(ring[2].dtype), p_layout)
    return acc, m_i, l_i, p_op


@gluon.jit
def _consumer(descs, bufs, bars, coords, ranges, indices, ROWS, PAD, stride_pb, stride_pn, N_Q, N_K, causal_offset,
              qk_scale, turns, STAGES: gl.constexpr, NBYTES_Q: gl.constexpr, NBYTES_KV: gl.constexpr,
              IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr, OVERLAP: gl.constexpr, SELF_LOAD: gl.constexpr,
              NUM_WARPS: gl.constexpr, WG: gl.constexpr, PINGPONG: gl.constexpr, SPARSE: gl.constexpr):
    """Consumer partition: the MMAs, the online softmax and the epilogue (O through TMA from the Q
    buffer, which the last QK^T has finished with; the row statistics with plain stores) of the
    ``BLOCK_M`` query rows from ``start_m`` (``coords``) against the key loop's steps [0, end)
    (``ranges``: steps [0, full_hi) need no element mask): key tiles [0, end), or with ``SPARSE``
    the tiles of the block-sparse index list ``indices`` (:func:`_key_tile`). With ``SELF_LOAD`` it
    also issues the loads (no producer partition; dense only). ``OVERLAP``: FlashAttention-3's
    overlap of a tile's softmax with the previous tile's PV (:func:`_attend_tiles_overlapped`).
    ``PINGPONG``: consumer ``WG`` (0 or 1) of the ping-pong schedule, one warpgroup, which takes
    turns with the other at issuing wgmmas through the ``turns`` mbarriers (:func:`_take_turn`)."""
    gl.static_assert(not (SPARSE and SELF_LOAD), "the block-sparse forward loads through a producer partition")
    q_desc, k_desc, v_desc, o_desc = descs
    q_smem, k_bufs, v_bufs = bufs
    q_bar, k_ready, v_ready, k_empty, v_empty = bars
    b, h, bh, start_m = coords
    full_hi, end = ranges
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    gl.static_assert(BLOCK_M == 16 * NUM_WARPS, "one 16-row wgmma slice per warp along M")
    ring = (k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty)

    # wgmma accumulators: warps stacked along M (4 warps = one warpgroup = 64 rows), instruction
    # N = the whole tile width, K = 16 (16-bit inputs)
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    if SELF_LOAD:
        mbarrier.expect(q_bar, NBYTES_Q)
        tma_load(q_desc, [b, h, start_m, 0], q_bar, q_smem)
        for i in gl.static_range(STAGES):
            _load_tile(k_desc, k_bufs, k_ready, b, h, i, i, i < end, BLOCK_N, NBYTES_KV)
            _load_tile(v_desc, v_bufs, v_ready, b, h, i, i, i < end, BLOCK_N, NBYTES_KV)

    rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    pad_row = PAD + b.to(gl.int64) * stride_pb

    q_tile = q_smem.reshape([BLOCK_M, HEAD_DIM])
    mbarrier.wait(q_bar, 0)
    if OVERLAP:
        p_op = gl.zeros([BLOCK_M, BLOCK_N], k_bufs.dtype, p_layout)
        if end > 0:
            # tile 0: scores and softmax only (through the masked path, right for any tile); its
            # PV goes out with tile 1's QK^T
            _take_turn(turns, 0, WG, PINGPONG)
            s = _issue_scores(q_tile, ring, 0, s_zero, STAGES)
            _pass_turn(turns, WG, PINGPONG)
            tile = _key_tile(indices, 0, SPARSE)
            s = warpgroup_mma_wait(0, deps=[s])
            _release_k(ring, 0, STAGES, SELF_LOAD)
            p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, tile, rows, N_K, causal_offset, qk_scale, pad_row,
                                                 stride_pn, True, IS_CAUSAL, HAS_PAD)
            p_op = gl.convert_layout(p.to(k_bufs.dtype), p_layout)
        acc, m_i, l_i, p_op = _attend_tiles_overlapped(acc, m_i, l_i, p_op, q_tile, s_zero, ring, b, h, 1, full_hi,
                                                       end, indices, rows, N_K, causal_offset, qk_scale, pad_row,
                                                       stride_pn, turns, STAGES, NBYTES_KV, False, IS_CAUSAL, HAS_PAD,
                                                       SELF_LOAD, WG, PINGPONG, SPARSE)
        acc, m_i, l_i, p_op = _attend_tiles_overlapped(acc, m_i, l_i, p_op, q_tile, s_zero, ring, b, h,
                                                       gl.maximum(full_hi, 1), end, end, indices, rows, N_K,
                                                       causal_offset, qk_scale, pad_row, stride_pn, turns, STAGES,
                                                       NBYTES_KV, True, IS_CAUSAL, HAS_PAD, SELF_LOAD, WG, PINGPONG,
                                                       SPARSE)
        if end > 0:
            # the last tile's PV
            _take_turn(turns, end, WG, PINGPONG)
            acc = _issue_pv(p_op, acc, ring, end - 1, STAGES)
            _pass_turn(turns, WG, PINGPONG)
            acc = warpgroup_mma_wait(0, deps=[acc])
            _release_kv(ring, b, h, end - 1, end, STAGES, NBYTES_KV, SELF_LOAD)
    else:
        acc, m_i, l_i = _attend_tiles(acc, m_i, l_i, q_tile, s_zero, ring, b, h, 0, full_hi, end, indices, rows,
                                      N_K, causal_offset, qk_scale, pad_row, stride_pn, turns, STAGES, NBYTES_KV,
                                      False, IS_CAUSAL, HAS_PAD, SELF_LOAD, WG, PINGPONG, SPARSE)
        acc, m_i, l_i = _attend_tiles(acc, m_i, l_i, q_tile, s_zero, ring, b, h, full_hi, end, end, indices, rows,
                                      N_K, causal_offset, qk_scale, pad_row, stride_pn, turns, STAGES, NBYTES_KV,
                                      True, IS_CAUSAL, HAS_PAD, SELF_LOAD, WG, PINGPONG, SPARSE)

    # rows that saw no key (l == 0) give 0, lse = -inf, m = +inf, log2(l) = 0
    seen = l_i > 0.0
    inv_l = gl.where(seen, 1.0 / gl.where(seen, l_i, 1.0), 0.0)
    out = acc * gl.convert_layout(inv_l, gl.SliceLayout(1, o_layout))[:, None]
    log2_l = gl.log2(gl.where(seen, l_i, 1.0))
    lse = gl.where(seen, (m_i * qk_scale + log2_l) * LN2, float("-inf"))
    # the row statistics [lse, m, log2(l)] of the portable kernels (kernels.launch_args.new_row_stats)
    stats = ROWS + bh.to(gl.int64) * 3 * N_Q + rows
    gl.store(stats, lse, mask=rows < N_Q)
    gl.store(stats + N_Q, gl.where(seen, m_i, float("inf")), mask=rows < N_Q)
    gl.store(stats + 2 * N_Q, log2_l, mask=rows < N_Q)

    q_tile.store(out.to(o_desc.dtype))
    fence_async_shared()
    tma_store(o_desc, [b, h, start_m, 0], q_smem)
    tma.store_wait(0)


@gluon.jit
def _kv_ring(k_desc, v_desc, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """The K / V ring in shared memory: ``STAGES`` slots of K and of V and their mbarriers, "ready"
    (TMA bytes landed, one arrival) and "empty" (released once by each of ``CONSUMERS`` consumer
    partitions), initialised."""
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=CONSUMERS)
        mbarrier.init(v_empty.index(i), count=CONSUMERS)
    return k_bufs, v_bufs, (k_ready, v_ready, k_empty, v_empty)


@gluon.jit
def hopper_attention_fwd_kernel(
    q_desc, k_desc, v_desc, o_desc, ROWS, PAD, stride_pb, stride_pn, H, N_Q, N_K, causal_offset, qk_scale,
    STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr, WARP_SPECIALIZE: gl.constexpr,
    OVERLAP: gl.constexpr, num_warps: gl.constexpr,
):
    """Grid (cdiv(N_Q, BLOCK_M), B * H); causal query tiles in reverse order (the last see the
    most keys, so they start first)."""
    BLOCK_M: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    NBYTES_Q: gl.constexpr = q_desc.block_type.nbytes
    NBYTES_KV: gl.constexpr = k_desc.block_type.nbytes

    b, h, pid_bh, start_m, full_hi, end = query_tile(H, N_K, causal_offset, BLOCK_M, BLOCK_N, IS_CAUSAL)

    q_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    k_bufs, v_bufs, ring_bars = _kv_ring(k_desc, v_desc, STAGES, 1)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    # the barriers' initialisation visible to the TMA unit (async proxy) before any copy uses them
    fence_async_shared()

    bufs = (q_smem, k_bufs, v_bufs)
    bars = (q_bar, ) + ring_bars
    coords = (b, h, pid_bh, start_m)
    if WARP_SPECIALIZE:
        gl.warp_specialize([
            (_consumer, ((q_desc, k_desc, v_desc, o_desc), bufs, bars, coords, (full_hi, end), None, ROWS, PAD,
                         stride_pb, stride_pn, N_Q, N_K, causal_offset, qk_scale, None, STAGES, NBYTES_Q, NBYTES_KV,
                         IS_CAUSAL, HAS_PAD, OVERLAP, False, num_warps, 0, False, False)),
            (_producer, ((q_desc, k_desc, v_desc), bufs, bars, coords, end, STAGES, BLOCK_N, NBYTES_Q, NBYTES_KV)),
        ], [PRODUCER_WARPS], [PRODUCER_REGS])
    else:
        _consumer((q_desc, k_desc, v_desc, o_desc), bufs, bars, coords, (full_hi, end), None, ROWS, PAD, stride_pb,
                  stride_pn, N_Q, N_K, causal_offset, qk_scale, None, STAGES, NBYTES_Q, NBYTES_KV, IS_CAUSAL, HAS_PAD,
                  OVERLAP, True, num_warps, 0, False, False)


@gluon.jit
def _pingpong_producer(descs, bufs, bars, coords, end, indices, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
                       NBYTES_Q: gl.constexpr, NBYTES_KV: gl.constexpr, CONSUMERS: gl.constexpr,
                       SPARSE: gl.constexpr):
    """Worker partition of the ping-pong schedule: each consumer's Q tile (consumer c: rows from
    start_m + c * rows of one tile) into its own buffer, then the shared K / V ring."""
    q_desc, k_desc, v_desc = descs
    q_bufs, k_bufs, v_bufs = bufs
    q_bars, k_ready, v_ready, k_empty, v_empty = bars
    b, h, bh, start_m = coords
    QROWS: gl.constexpr = q_desc.block_type.shape[2]
    for c in gl.static_range(CONSUMERS):
        mbarrier.expect(q_bars.index(c), NBYTES_Q)
        tma_load(q_desc, [b, h, start_m + c * QROWS, 0], q_bars.index(c), q_bufs.index(c))
    _produce_kv(k_desc, v_desc, k_bufs, v_bufs, k_ready, v_ready, k_empty, v_empty, b, h, end, indices, STAGES,
                BLOCK_N, NBYTES_KV, SPARSE)


@gluon.jit
def _pingpong(descs, ROWS, PAD, stride_pb, stride_pn, N_Q, N_K, causal_offset, qk_scale, coords, ranges, indices,
              STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr, OVERLAP: gl.constexpr,
              CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr, NUM_WARPS: gl.constexpr, SPARSE: gl.constexpr):
    """The body of the ping-pong kernels (:func:`hopper_attention_fwd_pingpong_kernel`,
    :func:`hopper_attention_fwd_sparse_kernel`) once the program knows its query tile: the shared
    memory and mbarriers, then the partitions, running the key loop's steps [0, end) (``ranges``:
    (full_hi, end)) over key tiles [0, end) or, with ``SPARSE``, over the tiles of the index list
    ``indices``."""
    gl.static_assert(CONSUMERS == 2, "two consumer warpgroups")
    q_desc, k_desc, v_desc, o_desc = descs
    b, h, pid_bh, start_m = coords
    end = ranges[1]
    QROWS: gl.constexpr = q_desc.block_type.shape[2]
    HEAD_DIM: gl.constexpr = q_desc.block_type.shape[3]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    ELEM_BYTES: gl.constexpr = q_desc.dtype.primitive_bitwidth // 8
    NBYTES_Q: gl.constexpr = QROWS * HEAD_DIM * ELEM_BYTES
    NBYTES_KV: gl.constexpr = BLOCK_N * HEAD_DIM * ELEM_BYTES

    q_bufs = gl.allocate_shared_memory(q_desc.dtype, [CONSUMERS] + q_desc.block_type.shape, q_desc.layout)
    k_bufs, v_bufs, ring_bars = _kv_ring(k_desc, v_desc, STAGES, CONSUMERS)  # a slot is released by each consumer
    q_bars = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    for c in gl.static_range(CONSUMERS):
        mbarrier.init(q_bars.index(c), count=1)
        mbarrier.init(turns.index(c), count=1)
    fence_async_shared()

    bars0 = (q_bars.index(0), ) + ring_bars
    bars1 = (q_bars.index(1), ) + ring_bars
    producer_bufs = (q_bufs, k_bufs, v_bufs)
    producer_bars = (q_bars, ) + ring_bars
    # the constexprs of _consumer stay literal in each argument tuple (a constexpr that travels in a
    # tuple variable reaches the callee as a runtime value)
    gl.warp_specialize([
        (_consumer, (descs, (q_bufs.index(0), k_bufs, v_bufs), bars0, (b, h, pid_bh, start_m), ranges, indices,
                     ROWS, PAD, stride_pb, stride_pn, N_Q, N_K, causal_offset, qk_scale, turns, STAGES, NBYTES_Q,
                     NBYTES_KV, IS_CAUSAL, HAS_PAD, OVERLAP, False, NUM_WARPS, 0, CONSUMERS, SPARSE)),
        (_consumer, (descs, (q_bufs.index(1), k_bufs, v_bufs), bars1, (b, h, pid_bh, start_m + QROWS), ranges,
                     indices, ROWS, PAD, stride_pb, stride_pn, N_Q, N_K, causal_offset, qk_scale, turns, STAGES,
                     NBYTES_Q, NBYTES_KV, IS_CAUSAL, HAS_PAD, OVERLAP, False, NUM_WARPS, 1, CONSUMERS, SPARSE)),
        (_pingpong_producer, ((q_desc, k_desc, v_desc), producer_bufs, producer_bars, (b, h, pid_bh, start_m),
                              end, indices, STAGES, BLOCK_N, NBYTES_Q, NBYTES_KV, CONSUMERS, SPARSE)),
    ], [NUM_WARPS, PRODUCER_WARPS], [CONSUMER_REGS, PRODUCER_REGS])


@gluon.jit
def hopper_attention_fwd_pingpong_kernel(
    q_desc, k_desc, v_desc, o_desc, ROWS, PAD, stride_pb, stride_pn, H, N_Q, N_K, causal_offset, qk_scale,
    STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr, OVERLAP: gl.constexpr,
    CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr,
):
    """The ping-pong schedule (FlashAttention-3's inter-warpgroup pingpong): grid as
    :func:`hopper_attention_fwd_kernel` with ``CONSUMERS`` * ``PP_ROWS`` query rows per program, in
    ``CONSUMERS`` + 1 partitions: consumer 0 (the default partition, ``num_warps`` = 4: one
    warpgroup) and consumers 1.. (worker warpgroups of ``CONSUMER_REGS`` registers), each owning
    ``PP_ROWS`` = 64 rows with its own Q buffer (q / o descriptors of 64-row blocks), and the
    one-warp TMA producer. The consumers share the K / V ring (a slot is released by each: "empty"
    arrival count ``CONSUMERS``) and take turns at issuing their wgmmas through ``CONSUMERS``
    mbarriers (:func:`_take_turn`), so that one warpgroup's softmax runs while another's GEMMs hold
    the tensor cores."""
    TILE_M: gl.constexpr = CONSUMERS * q_desc.block_type.shape[2]
    BLOCK_N: gl.constexpr = k_desc.block_type.shape[2]
    # key tiles [0, end) for all TILE_M rows: every consumer runs the same tiles and masks (the rows
    # of an earlier consumer see no more keys than those of a later one, so its extra diagonal tiles
    # are fully masked), as the 8-warp consumer does for its 128 rows
    b, h, pid_bh, start_m, full_hi, end = query_tile(H, N_K, causal_offset, TILE_M, BLOCK_N, IS_CAUSAL)
    _pingpong((q_desc, k_desc, v_desc, o_desc), ROWS, PAD, stride_pb, stride_pn, N_Q, N_K, causal_offset, qk_scale,
              (b, h, pid_bh, start_m), (full_hi, end), None, STAGES, IS_CAUSAL, HAS_PAD, OVERLAP, CONSUMERS,
              CONSUMER_REGS, num_warps, False)


@gluon.jit
def hopper_attention_fwd_sparse_kernel(
    q_desc, k_desc, v_desc, o_desc, ROWS, PAD, IDX, CNT, stride_pb, stride_pn, stride_ih, stride_it, stride_ch,
    stride_ct, H, N_Q, N_K, causal_offset, qk_scale,
    STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, HAS_PAD: gl.constexpr, OVERLAP: gl.constexpr,
    CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr,
):
    """Block-sparse attention in the ping-pong schedule of :func:`hopper_attention_fwd_pingpong_kernel`:
    grid (query tiles * B * H,), one program per launch slot of a forward plan made for this
    kernel's tile (``CONSUMERS`` * ``PP_ROWS`` query rows, ``BLOCK_N`` keys; IDX / CNT and their
    head and slot strides, :func:`kernels.hopper_common.sparse_tile`). The producer loads the K / V
    tiles of the slot's index list; both consumers run its first group without element masks and
    its second (causal diagonal, ragged last tile) with them, as the dense kernel's two key-loop
    parts. A slot with an empty list stores O = 0 and LSE = -inf for its rows."""
    TILE_M: gl.constexpr = CONSUMERS * q_desc.block_type.shape[2]
    b, h, pid_bh, start_m, full_hi, end, indices = sparse_tile(H, N_Q, IDX, CNT, stride_ih, stride_it, stride_ch,
                                                               stride_ct, TILE_M)
    _pingpong((q_desc, k_desc, v_desc, o_desc), ROWS, PAD, stride_pb, stride_pn, N_Q, N_K, causal_offset, qk_scale,
              (b, h, pid_bh, start_m), (full_hi, end), indices, STAGES, IS_CAUSAL, HAS_PAD, OVERLAP, CONSUMERS,
              CONSUMER_REGS, num_warps, True)


# ---------------------------------------------------------------------------------------------
# launcher
# ---------------------------------------------------------------------------------------------
def hopper_forward(q, k, v, key_padding_mask=None, causal: bool = False, softmax_scale: float | None = None,
                   warp_specialize: bool = True, overlap: bool = True, pingpong: bool = False, out=None):
    """(out (B, H, N_q, d) in q's dtype, row statistics (B, H, 3, N_q) float32) of
    softmax(q k^T * scale) v: per query row [lse, m, log2(l)] as the portable forward stores them
    (:func:`kernels.launch_args.new_row_stats`; the lse is ``[:, :, 0]``), which the backward
    (:func:`kernels.hopper_attention_bwd.hopper_backward` or the portable one) reads.

    q: (B, H, N_q, d), k and v: (B, H, N_k, d) CUDA tensors on an sm_90 device, float16 or
    bfloat16, d in (64, 128), any strides TMA accepts (see :func:`kernels.hopper_support.supported`;
    raises ``ValueError`` with its reason otherwise). key_padding_mask: optional bool (B, N_k), True
    = padding key. causal: bottom-right aligned. softmax_scale: default 1 / sqrt(d), must be > 0
    (the running max is taken over the unscaled scores). ``warp_specialize=False`` runs the
    single-partition pipeline instead of the producer / consumer partitions; ``overlap=False``
    waits for each wgmma at once instead of overlapping a tile's softmax with the previous tile's PV.
    ``pingpong=True`` runs the ping-pong schedule (:func:`hopper_attention_fwd_pingpong_kernel`: two
    consumer warpgroups in their own partitions that alternate at the tensor cores, with or without
    ``overlap``); it is warp-specialised by construction, so it needs ``warp_specialize=True``.
    ``out``: the (B, H, N_q, d) tensor to write O into (q's dtype and device, any strides TMA
    accepts, e.g. :func:`kernels.launch_args.new_output`'s layout); default a new contiguous one.
    Checks every argument (``ValueError`` before any launch), then launches through
    :func:`launch_forward`.
    """
    import torch
    import triton

    if pingpong and not warp_specialize:
        raise ValueError("the ping-pong schedule is warp-specialised: pingpong=True needs warp_specialize=True")
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    if k.shape != v.shape or tuple(k.shape) != (B, H, n_k, d):
        raise ValueError(f"k and v must be (B, H, N_k, d) matching q {tuple(q.shape)}, got k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if min(B, H, n_q, n_k) < 1 or B * H > 65535:
        raise ValueError(f"need B, H, N_q, N_k >= 1 and B * H <= 65535 (grid axis 1), got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if out is None:
        out = torch.empty((B, H, n_q, d), dtype=q.dtype, device=q.device)
    elif out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"out must be {q.dtype} {tuple(q.shape)} on {q.device} like q, got {out.dtype} "
                         f"{tuple(out.shape)} on {out.device}")
    capability = cuda_capability(q.get_device()) if q.is_cuda else (0, 0)
    ok, why = supported(triton.__version__, capability, q.dtype, d,
                        strides=(q.stride(), k.stride(), v.stride(), out.stride()),
                        data_ptrs=(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()),
                        names=("q", "k", "v", "out"))
    if not ok:
        raise ValueError(why)
    return launch_forward(q, k, v, out, key_padding_mask, causal, softmax_scale_of(d, softmax_scale),
                          warp_specialize=warp_specialize, overlap=overlap, pingpong=pingpong)


def launch_forward(q, k, v, out, key_padding_mask, causal: bool, scale: float, *, warp_specialize: bool = True,
                   overlap: bool = True, pingpong: bool = False):
    """The launch of :func:`hopper_forward` on arguments already checked as it checks them (shapes,
    dtypes, the schedule, TMA's rules for q, k, v and ``out`` on an sm_90 device; ``scale`` the softmax
    scale itself, > 0): (out, row statistics). The eager dispatch (:mod:`kernels.hopper_dispatch`)
    calls it directly, having checked all that once (:func:`kernels.validation.check_attention_inputs`,
    :func:`kernels.hopper_support.takes_hopper_forward`)."""
    import torch
    import triton

    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    row_stats = torch.empty((B, H, 3, n_q), dtype=torch.float32, device=q.device)
    pad, stride_pb, stride_pn = padding_args(key_padding_mask, B, n_k, row_stats)
    if pingpong:
        hopper_attention_fwd_pingpong_kernel[(triton.cdiv(n_q, PP_CONSUMERS * PP_ROWS), B * H)](
            tma_descriptor(q, PP_ROWS), tma_descriptor(k, BLOCK_N), tma_descriptor(v, BLOCK_N),
            tma_descriptor(out, PP_ROWS),
            row_stats, pad, stride_pb, stride_pn, H, n_q, n_k, n_k - n_q, scale * LOG2E,
            STAGES=stages_for(d), IS_CAUSAL=bool(causal), HAS_PAD=key_padding_mask is not None,
            OVERLAP=bool(overlap), CONSUMERS=PP_CONSUMERS, CONSUMER_REGS=PP_CONSUMER_REGS, num_warps=PP_WARPS,
            maxnreg=MAXNREG)
        return out, row_stats
    options = {"num_warps": NUM_WARPS}
    if warp_specialize:
        options["maxnreg"] = MAXNREG
    hopper_attention_fwd_kernel[(triton.cdiv(n_q, BLOCK_M), B * H)](
        tma_descriptor(q, BLOCK_M), tma_descriptor(k, BLOCK_N), tma_descriptor(v, BLOCK_N),
        tma_descriptor(out, BLOCK_M),
        row_stats, pad, stride_pb, stride_pn, H, n_q, n_k, n_k - n_q, scale * LOG2E,
        STAGES=stages_for(d), IS_CAUSAL=bool(causal), HAS_PAD=key_padding_mask is not None,
        WARP_SPECIALIZE=bool(warp_specialize), OVERLAP=bool(overlap), **options)
    return out, row_stats


def launch_sparse_forward(q, k, v, out, key_padding_mask, causal: bool, scale: float, indices, counts, *,
                          overlap: bool = True):
    """Block-sparse attention through :func:`hopper_attention_fwd_sparse_kernel`: (out, row
    statistics) as :func:`launch_forward` returns them, for the arguments it takes (checked as it
    says), with ``indices`` and ``counts`` the forward plan of a block-sparse call made for this
    kernel's tile (:data:`kernels.hopper_support.FORWARD_TILE`, 128 query rows x 128 keys:
    :meth:`kernels.BlockSparseLayout.plans` with such a forward tile), on q's device. The eager
    dispatch (:mod:`kernels.hopper_dispatch`) calls it for block-sparse calls whose plan is made for
    that tile. ``overlap``: as in :func:`hopper_forward` (the schedule is the ping-pong one)."""
    import torch
    import triton

    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    n_rows = triton.cdiv(n_q, PP_CONSUMERS * PP_ROWS)
    if indices.dim() != 3 or counts.dim() != 3 or counts.shape[1] != n_rows or indices.shape[1] != n_rows:
        raise ValueError(f"the plan must have one slot per {PP_CONSUMERS * PP_ROWS}-row query tile ({n_rows}), got "
                         f"indices {tuple(indices.shape)}, counts {tuple(counts.shape)}")
    row_stats = torch.empty((B, H, 3, n_q), dtype=torch.float32, device=q.device)
    pad, stride_pb, stride_pn = padding_args(key_padding_mask, B, n_k, row_stats)
    # a layout shared by the heads has one plan for all (head stride 0)
    stride_ih = indices.stride(0) if indices.shape[0] > 1 else 0
    stride_ch = counts.stride(0) if counts.shape[0] > 1 else 0
    hopper_attention_fwd_sparse_kernel[(n_rows * B * H, )](
        tma_descriptor(q, PP_ROWS), tma_descriptor(k, BLOCK_N), tma_descriptor(v, BLOCK_N),
        tma_descriptor(out, PP_ROWS),
        row_stats, pad, indices, counts, stride_pb, stride_pn, stride_ih, indices.stride(1), stride_ch,
        counts.stride(1), H, n_q, n_k, n_k - n_q, scale * LOG2E,
        STAGES=stages_for(d), IS_CAUSAL=bool(causal), HAS_PAD=key_padding_mask is not None,
        OVERLAP=bool(overlap), CONSUMERS=PP_CONSUMERS, CONSUMER_REGS=PP_CONSUMER_REGS, num_warps=PP_WARPS,
        maxnreg=MAXNREG)
    return out, row_stats
