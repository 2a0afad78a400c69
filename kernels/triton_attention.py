"""Triton kernel bodies shared by dense and block-sparse FlashAttention.

One forward kernel and three backward kernels serve both public functions. Each walks its
reduction axis (key tiles in the forward and dQ pass, query tiles in the dK/dV pass) either over
an arithmetic range (dense, ``SPARSE=False``) or over a compressed index list of the non-zero
tiles of one tile row (block-sparse, ``SPARSE=True``; the list comes from
:class:`kernels.block_sparse.BlockSparseLayout`). Either way the walk is split in two groups:

- *full* tiles: every (query, key) pair inside is allowed by the causal rule and lies inside the
  sequence, so the inner loop carries no masking work (``MASKED=False``);
- *partial* tiles: the causal diagonal and the ragged last key tile, where the element masks are
  applied (``MASKED=True``).

Block-sparse programs take their tile row from the plan's launch order (heaviest rows first,
:func:`_program_slot`); dense ones from the program id (reversed for causal query tiles).

The key-padding mask, when given (``HAS_PAD``), is applied on every key tile of the forward and
dQ pass; the dK/dV pass needs it only once, at the end, because a padded key's dK/dV rows are
exactly zero.

Numerics (after FlashAttention-2, Dao 2023): scores are scaled by ``softmax_scale * log2(e)`` so
that ``exp2`` replaces ``exp``; the running max (of the raw scores) and sum are float32. The
forward stores three float32 statistics per query row in ROWS, (B, H, 3, N_Q): the natural-log
log-sum-exp (``-inf`` for a row that sees no key; the public ``lse``), the row max ``m`` of the raw
scores and ``log2(l)`` of the softmax denominator. The backward recomputes P from them
(``EXACT_P``, float16 and float32 inputs) as ``P = exp2((S - m) * scale * log2(e) - log2(l))``:
``S - m`` is exact for the scores near the max, which carry the probability. One float32
log-sum-exp of magnitude ~|S| * scale instead rounds in steps of up to 2**-8 at |S| * scale ~ 4e4
and shifts every P of a peaked row by up to 0.3 %: well above float16's own rounding of P (2**-12),
about bfloat16's (2**-9). So bfloat16 inputs keep the cheaper ``P = exp2(S * scale * log2(e) -
LSE * log2(e))`` (one subtraction and one row vector less per score tile: 8-13 % of forward + backward at
d = 32 and 64 on the H200); ``tests/kernels/test_peaked_gradients.py`` holds both to the SDPA
back-ends' gradient error. A row that sees no key stores ``m = +inf``, ``log2(l) = 0`` (and
``LSE = -inf``, read as ``+inf``), so its P is 0. dQ is computed in one pass over query tiles and dK/dV in another
pass over key tiles: every output element is written by exactly one program, so the backward is
deterministic and uses no atomics. The dQ pass runs first and also stores, per query row, what the
dK/dV pass's loop reads as it is: STATS, float32 (B, H, 3, N_Q) = [delta, b, m] for ``EXACT_P``
and (B, H, 2, N_Q) = [delta, b] for bfloat16, where ``delta = rowsum(dO * O) - dLSE`` and (m, b)
are P's row terms (:func:`_softmax_rows`: ``b = log2(l)`` for ``EXACT_P``, ``b = LSE * log2(e)``
with ``-inf`` -> ``+inf`` for bfloat16), so that loop converts no statistic per query tile: two
launches. With ``FUSED_DQ`` (the default for calls with dropout, see
:func:`kernels.dropout.fused_backward`) the dK/dV pass also computes dQ, adding each (query tile,
key tile) share into a float32 buffer with atomics, and the dQ pass is skipped: a preprocess kernel
stores STATS and zeroes that buffer, then one pass, with one dropout-mask generation instead of
two, at the price of a dQ whose last bits vary from run to run.

Dropout (see :func:`dropout_keep`) is counter-based: Philox-4x32-7 keyed by a 64-bit seed, with
the counter ``(key index // 16, query index, batch * heads + head, 0)``; its 128 output bits are
sixteen bytes, one per key of the group of 16, so one Philox call serves 16 keys. Every
(b, h, i, j) has its own (counter, byte) pair whatever the tile sizes, so the backward passes
regenerate exactly the forward's mask and no counter wraps even when N_q * N_k > 2**32 (each
counter word stays below 2**32 for any N < 2**32).

No ``tl.make_block_ptr``: all addressing is pointer arithmetic with the caller's strides, so
non-contiguous views (e.g. slices of a fused QKV projection) are read in place.
"""
from __future__ import annotations

import os

import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * LOG2E)   (Python float, for the launchers)
# the same constants for use inside @triton.jit code (compiled kernels only read constexpr globals)
LOG2E_C = tl.constexpr(1.4426950408889634)
LN2_C = tl.constexpr(0.6931471805599453)  # ln(2): log(x) == log2(x) * LN2

# Philox rounds of the dropout random numbers: 7, the fewest that pass BigCrush in Salmon et al. 2011
# (Table 2) and what flash-attn's CUDA Philox runs; on the H200 the dropout forward is 5-6 % faster than
# with 10 rounds (the comparison is in git history: `git show 01687b4^:results/kernels/dropout/README.md`).
PHILOX_ROUNDS = tl.constexpr(7)


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------
@triton.jit
def _load_tile(ptrs, offs_r, n_rows, offs_d, head_dim, EVEN_R: tl.constexpr, EVEN_D: tl.constexpr):
    """Load a (rows, BLOCK_D) tile; rows >= n_rows and head-dim padding read as 0."""
    if EVEN_R:
        if EVEN_D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=offs_d[None, :] < head_dim, other=0.0)
    else:
        if EVEN_D:
            x = tl.load(ptrs, mask=offs_r[:, None] < n_rows, other=0.0)
        else:
            x = tl.load(ptrs, mask=(offs_r[:, None] < n_rows) & (offs_d[None, :] < head_dim), other=0.0)
    return x


@triton.jit
def _rounded(x, PTR, UPCAST: tl.constexpr):
    """float32 ``x`` converted to the element type of ``PTR`` for a store. Triton's interpreter
    truncates float32 -> bfloat16 where the GPU rounds to nearest even; under UPCAST (the
    interpreter with bfloat16 inputs) the rounding is done here, so that CPU results carry the
    GPU's rounding error, not a larger one."""
    if UPCAST:
        if PTR.dtype.element_ty == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            x = bits.to(tl.float32, bitcast=True)
    return x.to(PTR.dtype.element_ty)


@triton.jit
def _store_tile(ptrs, x, offs_r, n_rows, offs_d, head_dim, EVEN_R: tl.constexpr, EVEN_D: tl.constexpr):
    if EVEN_R:
        if EVEN_D:
            tl.store(ptrs, x)
        else:
            tl.store(ptrs, x, mask=offs_d[None, :] < head_dim)
    else:
        if EVEN_D:
            tl.store(ptrs, x, mask=offs_r[:, None] < n_rows)
        else:
            tl.store(ptrs, x, mask=(offs_r[:, None] < n_rows) & (offs_d[None, :] < head_dim))


@triton.jit
def _atomic_add_tile(ptrs, x, offs_r, n_rows, offs_d, head_dim, EVEN_R: tl.constexpr, EVEN_D: tl.constexpr):
    """``ptrs += x`` (float32) with relaxed atomics; rows >= n_rows and columns >= head_dim skipped.
    Relaxed ordering suffices: the sum is read only after the kernel has finished."""
    if EVEN_R:
        if EVEN_D:
            tl.atomic_add(ptrs, x, sem="relaxed")
        else:
            tl.atomic_add(ptrs, x, mask=offs_d[None, :] < head_dim, sem="relaxed")
    else:
        if EVEN_D:
            tl.atomic_add(ptrs, x, mask=offs_r[:, None] < n_rows, sem="relaxed")
        else:
            tl.atomic_add(ptrs, x, mask=(offs_r[:, None] < n_rows) & (offs_d[None, :] < head_dim), sem="relaxed")


@triton.jit
def _load_resident(PTR, b64, h64, stride_b, stride_h, stride_r, stride_d, offs_r, n_rows, offs_d, head_dim,
                   EVEN_R: tl.constexpr, EVEN_D: tl.constexpr):
    """The (rows, BLOCK_D) tile a program keeps for its whole loop: rows ``offs_r`` of head (b, h) of
    ``PTR`` with its (batch, head, row, column) strides; rows >= n_rows and columns >= head_dim read as 0."""
    ptrs = PTR + b64 * stride_b + h64 * stride_h + offs_r[:, None] * stride_r + offs_d[None, :] * stride_d
    return _load_tile(ptrs, offs_r, n_rows, offs_d, head_dim, EVEN_R, EVEN_D)


@triton.jit
def dropout_keep(seed, bh, rows, start_n, threshold, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Dropout keep-mask (bool, (BLOCK_M, BLOCK_N)) of query rows ``rows`` x keys
    ``start_n + [0, BLOCK_N)`` of (batch * heads + head) ``bh``; ``start_n`` is a multiple of 16.

    Philox-4x32 (Salmon et al., 2011; ``PHILOX_ROUNDS`` = 7 rounds) keyed by the 64-bit
    ``seed``, one call per query row and group of 16 consecutive keys: counter ``(j // 16, i, bh,
    0)``; its four 32-bit output words are sixteen bytes, and key ``j`` takes byte ``j % 4`` (0 =
    lowest) of word ``(j % 16) // 4``. A key is kept iff its byte is ``>= threshold``
    (``round(dropout_p * 256)``). The (BLOCK_M, BLOCK_N // 16) words are interleaved along the
    key axis with ``tl.join`` + ``tl.reshape``.
    Every pass builds its mask with this one function (the dK/dV pass transposes the result), so
    all of them agree bit for bit.
    """
    tl.static_assert(BLOCK_N % 16 == 0, "dropout_keep: BLOCK_N must be a multiple of 16")
    zero = tl.zeros((BLOCK_M, BLOCK_N // 16), dtype=tl.uint32)
    groups = start_n // 16 + tl.arange(0, BLOCK_N // 16)
    c0 = zero + groups[None, :].to(tl.uint32)
    c1 = zero + rows[:, None].to(tl.uint32)
    c2 = zero + bh.to(tl.uint32)
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, c2, zero, n_rounds=PHILOX_ROUNDS)
    # key 16g + 4r + s takes byte s = 2c + e of word r = 2a + b. tl.join appends a trailing axis, so
    # nest from the most significant index bit to the least: [m, g, a, b] = word 2a + b, then its
    # 16-bit halves c, then their bytes e; the row-major reshape puts (g, a, b, c, e) at key
    # 16g + 8a + 4b + 2c + e. (Broadcasting each word over its 16 keys and selecting word and byte
    # arithmetically avoids the shared-memory layout conversion this reshape costs, but makes each
    # thread of a quad evaluate Philox for all its keys itself: 1.3-1.5x slower on the H200.)
    words = tl.join(tl.join(r0, r2), tl.join(r1, r3))
    halves = tl.join(words & 0xFFFF, words >> 16)
    octets = tl.reshape(tl.join(halves & 0xFF, halves >> 8), (BLOCK_M, BLOCK_N))
    return octets.to(tl.int32) >= threshold


@triton.jit
def _causal_ranges(start_m, N_Q, N_K, causal_offset, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   IS_CAUSAL: tl.constexpr):
    """Key-tile ranges for query tile rows [start_m, start_m + BLOCK_M): [0, full_hi) needs no
    element mask, [full_hi, end) is partial (causal diagonal or ragged tail), beyond is invisible."""
    n_tiles = tl.cdiv(N_K, BLOCK_N)
    n_even = N_K // BLOCK_N
    if IS_CAUSAL:
        # row i sees keys j <= i + causal_offset
        full_hi = tl.minimum(tl.maximum(start_m + causal_offset + 1, 0) // BLOCK_N, n_even)
        end = tl.minimum(tl.cdiv(tl.maximum(start_m + BLOCK_M + causal_offset, 0), BLOCK_N), n_tiles)
    else:
        full_hi = n_even
        end = n_tiles
    return full_hi, end


# block-sparse launch: heads are scheduled in groups of this many (batch * head) pairs, all of a
# group's heaviest tile rows first (see _program_slot)
LPT_HEAD_GROUP = tl.constexpr(16)


@triton.jit
def _program_slot(H, n_rows, REVERSE: tl.constexpr, SPARSE: tl.constexpr):
    """(batch * heads + head, plan slot) of this program. Dense: the slot is the tile row (a query
    tile, or a key tile in the dK/dV pass). Block-sparse: the slot addresses the plan's counts and
    index list, and its tile row is ``CNT[h, slot, 2]`` — loaded by the kernel itself, not here:
    torch.compile's mutation analysis of a user Triton kernel (``torch.library.wrap_triton``) takes a
    pointer passed into a ``@triton.jit`` call whose result feeds a store address for one the kernel
    writes, so a ``CNT`` argument here made Inductor copy the counts' tensor (in the dense form: q's
    placeholder, i.e. all of QKV) before every launch and back after it.

    Dense (grid ``(n_rows, B * H)``): the row is ``program_id(0)``, reversed if ``REVERSE`` (causal
    query tiles: the last see the most keys), and ``program_id(1)`` the (batch, head).

    Block-sparse (grid ``(n_rows * B * H,)``), longest-processing-time-first: the (batch, head)
    pairs are taken in groups of ``LPT_HEAD_GROUP``; inside a group, programs go rank by rank over
    the plan's launch slots (the plan is stored in launch order: slot ``s`` holds tile row
    ``CNT[h, s, 2]``, rows by descending number of tiles to visit, see
    :mod:`kernels.block_sparse`), the group's heads interleaved. So the heavy rows (BigBird's
    global rows, ~4x the work of the others) start first instead of finishing last, while the
    programs in flight share the K/V of a few heads (L2 reuse). The mapping depends on the program
    id only: each output tile is computed exactly as before, only the order of independent
    programs changes.
    """
    if SPARSE:
        pid = tl.program_id(0)
        bh_total = tl.num_programs(0) // n_rows
        g0 = (pid // (LPT_HEAD_GROUP * n_rows)) * LPT_HEAD_GROUP
        g_size = tl.minimum(bh_total - g0, LPT_HEAD_GROUP)
        within = pid - g0 * n_rows
        pid_bh = g0 + within % g_size
        slot = within // g_size
    else:
        pid_bh = tl.program_id(1)
        if REVERSE:
            slot = tl.num_programs(0) - 1 - tl.program_id(0)
        else:
            slot = tl.program_id(0)
    return pid_bh, slot


@triton.jit
def _first_entry(idx_base, lo, hi, SPARSE: tl.constexpr):
    """Block-sparse: list entry ``lo`` of a tile row (0 when the range is empty), the first value of
    the index that the loops carry one step ahead (see :func:`_fwd_tiles`). Dense: 0, unused."""
    if SPARSE:
        first = tl.load(idx_base + lo, mask=lo < hi, other=0)
    else:
        first = 0
    return first


# ---------------------------------------------------------------------------------------------
# forward
# ---------------------------------------------------------------------------------------------
@triton.jit
def _fwd_tiles(acc, l_i, m_i, q, k_ptrs0, v_ptrs0, stride_kn, stride_vn, pad_ptrs0, stride_pn, idx_base, lo, hi,
               offs_m, offs_n, offs_d, N_K, HEAD_DIM, causal_offset, qk_scale, seed, bh, drop_threshold,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_N: tl.constexpr,
               EVEN_D: tl.constexpr, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr,
               HAS_DROPOUT: tl.constexpr, SPARSE: tl.constexpr, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr):
    """Online-softmax accumulation over key tiles [lo, hi) (positions, or list entries if SPARSE).
    k_ptrs0/v_ptrs0/pad_ptrs0 address the key tile starting at key 0; tiles are reached by offsets.

    Block-sparse: the list entry of the next step is loaded one step ahead and carried (``nxt``).
    Loaded in the step that uses it, the index makes the K/V copies an indirect load, which Triton
    3.6's software pipeliner schedules without overlap below 5 stages (every copy waited for in the
    step that issued it: ``async_wait {num = 0}`` in the Triton-GPU IR at 2-4 stages for sm_90);
    carried, the copies pipeline exactly as in the dense loop (the same wait
    counts at every stage count: ``tests/kernels/test_sparse_pipelining.py``). The same in the dK/dV
    and dQ loops."""
    nxt = _first_entry(idx_base, lo, hi, SPARSE)
    for it in tl.range(lo, hi):
        if SPARSE:
            start_n = nxt * BLOCK_N
            nxt = tl.load(idx_base + tl.minimum(it + 1, hi - 1))
        else:
            start_n = it * BLOCK_N
        cols = start_n + offs_n
        k = _load_tile(k_ptrs0 + start_n * stride_kn, cols, N_K, offs_d, HEAD_DIM, EVEN_N or not MASKED, EVEN_D)
        if UPCAST:
            k = k.to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
        if MASKED:
            if IS_CAUSAL:
                allowed = cols[None, :] <= offs_m[:, None] + causal_offset
                if not EVEN_N:
                    allowed = allowed & (cols[None, :] < N_K)
            else:
                allowed = (cols[None, :] < N_K) & (offs_m[:, None] >= 0)
            qk = tl.where(allowed, qk, float("-inf"))
        if HAS_PAD:
            padded = tl.load(pad_ptrs0 + start_n * stride_pn, mask=cols < N_K, other=1)
            qk = tl.where(padded[None, :] == 0, qk, float("-inf"))
        # m: the running row maximum of the raw scores. Subtracting before scaling makes the largest
        # score's p exactly 1 (an FMA of qk * scale - m * scale would leave its rounding residual),
        # so a row whose mass sits on one key outputs that key's v exactly and its backward's
        # rowsum(dO * O) matches dP there (tests/kernels/test_peaked_gradients.py)
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        if MASKED or HAS_PAD:
            # a row with no allowed key so far keeps m = -inf; subtract 0 instead (p = 0, no NaN)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_use = m_new
        p = tl.math.exp2((qk - m_use[:, None]) * qk_scale)
        alpha = tl.math.exp2((m_i - m_use) * qk_scale)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if HAS_DROPOUT:
            keep = dropout_keep(seed, bh, offs_m, start_n, drop_threshold, BLOCK_M, BLOCK_N)
            p = tl.where(keep, p, 0.0)
        v = _load_tile(v_ptrs0 + start_n * stride_vn, cols, N_K, offs_d, HEAD_DIM, EVEN_N or not MASKED, EVEN_D)
        if UPCAST:
            v = v.to(tl.float32)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PREC)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def flash_fwd_kernel(
    Q, K, V, O, ROWS, PAD, SEED, IDX, CNT,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_pb, stride_pn,
    stride_ih, stride_it, stride_ch, stride_ct,
    H, N_Q, N_K, HEAD_DIM, causal_offset, qk_scale, drop_threshold, drop_scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    SPARSE: tl.constexpr, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr,
):
    """Forward: one program per (query tile, batch * head); out and the row statistics ROWS, a
    contiguous float32 (B, H, 3, N_Q) buffer: [lse, m, log2(l)] (see the module docstring)."""
    # float scalars: float32 whatever the caller typed them as (Inductor types a Python float as
    # fp64 when it launches the kernel itself under the triton_op form, which would make the
    # softmax statistics and the accumulator float64)
    qk_scale = tl.cast(qk_scale, tl.float32)
    drop_scale = tl.cast(drop_scale, tl.float32)
    pid_bh, slot = _program_slot(H, tl.cdiv(N_Q, BLOCK_M), IS_CAUSAL, SPARSE)
    pid_m = slot
    if SPARSE:  # the slot's tile row, loaded here (see _program_slot)
        pid_m = tl.load(CNT + (pid_bh % H).to(tl.int64) * stride_ch + slot * stride_ct + 2)
    b = pid_bh // H
    h = pid_bh % H
    b64 = b.to(tl.int64)
    h64 = h.to(tl.int64)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)

    q = _load_resident(Q, b64, h64, stride_qb, stride_qh, stride_qm, stride_qd, offs_m, N_Q, offs_d, HEAD_DIM,
                       EVEN_M, EVEN_D)
    if UPCAST:
        q = q.to(tl.float32)
    k_ptrs0 = K + b64 * stride_kb + h64 * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
    v_ptrs0 = V + b64 * stride_vb + h64 * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
    pad_ptrs0 = PAD + b64 * stride_pb + offs_n * stride_pn
    if HAS_DROPOUT:
        seed = tl.load(SEED)
    else:
        seed = 0

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)

    if SPARSE:
        idx_base = IDX + h64 * stride_ih + slot * stride_it
        cnt_base = CNT + h64 * stride_ch + slot * stride_ct
        full_hi = tl.load(cnt_base)
        end = tl.load(cnt_base + 1)
    else:
        idx_base = IDX
        full_hi, end = _causal_ranges(start_m, N_Q, N_K, causal_offset, BLOCK_M, BLOCK_N, IS_CAUSAL)
    acc, l_i, m_i = _fwd_tiles(
        acc, l_i, m_i, q, k_ptrs0, v_ptrs0, stride_kn, stride_vn, pad_ptrs0, stride_pn,
        idx_base, 0, full_hi, offs_m, offs_n, offs_d, N_K, HEAD_DIM, causal_offset, qk_scale, seed, pid_bh,
        drop_threshold, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_N, EVEN_D, False, IS_CAUSAL, HAS_PAD, HAS_DROPOUT, SPARSE,
        DOT_PREC, UPCAST)
    if IS_CAUSAL or not EVEN_N or SPARSE:
        acc, l_i, m_i = _fwd_tiles(
            acc, l_i, m_i, q, k_ptrs0, v_ptrs0, stride_kn, stride_vn, pad_ptrs0, stride_pn,
            idx_base, full_hi, end, offs_m, offs_n, offs_d, N_K, HEAD_DIM, causal_offset, qk_scale, seed, pid_bh,
            drop_threshold, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_N, EVEN_D, True, IS_CAUSAL, HAS_PAD, HAS_DROPOUT, SPARSE,
            DOT_PREC, UPCAST)

    # epilogue: rows that saw no key (l == 0) give 0, lse = -inf, m = +inf, log2(l) = 0
    seen = l_i > 0.0
    inv_l = tl.where(seen, 1.0 / tl.where(seen, l_i, 1.0), 0.0)
    if HAS_DROPOUT:
        inv_l = inv_l * drop_scale
    out = acc * inv_l[:, None]
    log2_l = tl.math.log2(tl.where(seen, l_i, 1.0))
    lse = tl.where(seen, (m_i * qk_scale + log2_l) * LN2_C, float("-inf"))
    row_max = tl.where(seen, m_i, float("inf"))
    o_ptrs = O + b64 * stride_ob + h64 * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
    _store_tile(o_ptrs, _rounded(out, O, UPCAST), offs_m, N_Q, offs_d, HEAD_DIM, EVEN_M, EVEN_D)
    rows_ptrs = ROWS + pid_bh.to(tl.int64) * 3 * N_Q + offs_m
    if EVEN_M:
        tl.store(rows_ptrs, lse)
        tl.store(rows_ptrs + N_Q, row_max)
        tl.store(rows_ptrs + 2 * N_Q, log2_l)
    else:
        tl.store(rows_ptrs, lse, mask=offs_m < N_Q)
        tl.store(rows_ptrs + N_Q, row_max, mask=offs_m < N_Q)
        tl.store(rows_ptrs + 2 * N_Q, log2_l, mask=offs_m < N_Q)


@triton.jit
def _row_delta(o, do, DLSE, row, row_ok, HAS_DLSE: tl.constexpr, EVEN_M: tl.constexpr):
    """delta = rowsum(dO * O) - dLSE (``HAS_DLSE``) of query rows ``row`` (flat (batch * head, N_Q)
    indices; ``row_ok``: within N_Q) from their O and dO tiles: the backward's own row statistic."""
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    if HAS_DLSE:
        if EVEN_M:
            delta = delta - tl.load(DLSE + row)
        else:
            delta = delta - tl.load(DLSE + row, mask=row_ok, other=0.0)
    return delta


@triton.jit
def _softmax_rows(rows_base, rows, N_Q, EVEN_M: tl.constexpr, EXACT_P: tl.constexpr):
    """(m, b) of query rows ``rows`` of one (batch, head), whose [lse, m, log2(l)] statistics start
    at ``rows_base`` (the forward's ROWS), for :func:`_probabilities`: ``EXACT_P``: m and log2(l);
    else b = LSE * log2(e) (``-inf`` -> ``+inf``) and m unused (the same vector). Rows past N_Q
    read as a row that sees no key (P = 0)."""
    if EXACT_P:
        if EVEN_M:
            row_max = tl.load(rows_base + N_Q + rows)
            row_b = tl.load(rows_base + 2 * N_Q + rows)
        else:
            row_max = tl.load(rows_base + N_Q + rows, mask=rows < N_Q, other=float("inf"))
            row_b = tl.load(rows_base + 2 * N_Q + rows, mask=rows < N_Q, other=0.0)
    else:
        if EVEN_M:
            lse = tl.load(rows_base + rows)
        else:
            lse = tl.load(rows_base + rows, mask=rows < N_Q, other=float("-inf"))
        row_b = tl.where(lse == float("-inf"), float("inf"), lse * LOG2E_C)
        row_max = row_b
    return row_max, row_b


@triton.jit
def _stats_base(STATS, bh, N_Q, EXACT_P: tl.constexpr):
    """Where the backward statistics of (batch * heads + head) ``bh`` start in STATS, contiguous
    float32 rows [delta, b, m] (``EXACT_P``: (B, H, 3, N_Q)) or [delta, b] (else: (B, H, 2, N_Q);
    P needs no m there)."""
    if EXACT_P:
        base = STATS + bh.to(tl.int64) * 3 * N_Q
    else:
        base = STATS + bh.to(tl.int64) * 2 * N_Q
    return base


@triton.jit
def _store_stats(stats_base, rows, N_Q, delta, row_max, row_b, EVEN_M: tl.constexpr, EXACT_P: tl.constexpr):
    """The backward statistics of query rows ``rows`` into STATS at ``stats_base``
    (:func:`_stats_base`): delta at row 0, P's row terms (m, b) of :func:`_softmax_rows` at rows 1
    (b) and 2 (m, ``EXACT_P`` only); rows past N_Q are not stored."""
    if EVEN_M:
        tl.store(stats_base + rows, delta)
        tl.store(stats_base + N_Q + rows, row_b)
        if EXACT_P:
            tl.store(stats_base + 2 * N_Q + rows, row_max)
    else:
        tl.store(stats_base + rows, delta, mask=rows < N_Q)
        tl.store(stats_base + N_Q + rows, row_b, mask=rows < N_Q)
        if EXACT_P:
            tl.store(stats_base + 2 * N_Q + rows, row_max, mask=rows < N_Q)


@triton.jit
def _load_stats(stats_base, rows, N_Q, EVEN_M: tl.constexpr, EXACT_P: tl.constexpr):
    """(delta, m, b) of query rows ``rows`` from STATS at ``stats_base`` (:func:`_stats_base`), as
    stored, for :func:`_probabilities` (without ``EXACT_P`` m is b, unused). Rows past N_Q read as
    a row that sees no key: delta 0 and m = +inf, b = 0 (``EXACT_P``) or b = +inf, so P = 0."""
    if EVEN_M:
        delta = tl.load(stats_base + rows)
        row_b = tl.load(stats_base + N_Q + rows)
        if EXACT_P:
            row_max = tl.load(stats_base + 2 * N_Q + rows)
        else:
            row_max = row_b
    else:
        delta = tl.load(stats_base + rows, mask=rows < N_Q, other=0.0)
        if EXACT_P:
            row_b = tl.load(stats_base + N_Q + rows, mask=rows < N_Q, other=0.0)
            row_max = tl.load(stats_base + 2 * N_Q + rows, mask=rows < N_Q, other=float("inf"))
        else:
            row_b = tl.load(stats_base + N_Q + rows, mask=rows < N_Q, other=float("inf"))
            row_max = row_b
    return delta, row_max, row_b


@triton.jit
def _probabilities(s, m, b, qk_scale, EXACT_P: tl.constexpr):
    """P of raw scores ``s`` from :func:`_softmax_rows`' (m, b), broadcast to ``s``'s shape."""
    if EXACT_P:
        p = tl.math.exp2((s - m) * qk_scale - b)
    else:
        p = tl.math.exp2(s * qk_scale - b)
    return p


# ---------------------------------------------------------------------------------------------
# backward: preprocess of the one-pass (FUSED_DQ) backward
# ---------------------------------------------------------------------------------------------
@triton.jit
def flash_bwd_preprocess_kernel(
    O, DO, ROWS, DLSE, STATS, DQ_ACC,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_dob, stride_doh, stride_dom, stride_dod,
    H, N_Q, HEAD_DIM,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, HAS_DLSE: tl.constexpr, EXACT_P: tl.constexpr,
):
    """The query rows' backward statistics into STATS (delta and P's row terms from the forward's
    ROWS, see :func:`flash_bwd_dq_kernel`), and zeroes the same rows of the one-pass backward's
    float32 dQ accumulator DQ_ACC (contiguous (B, H, N_Q, HEAD_DIM)), which the dK/dV kernel then
    adds into: one launch fewer than a separate fill. (The two-pass backward has no preprocess: its
    dQ kernel stores STATS.)"""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b64 = (pid_bh // H).to(tl.int64)
    h64 = (pid_bh % H).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    o = _load_tile(O + b64 * stride_ob + h64 * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                   offs_m, N_Q, offs_d, HEAD_DIM, False, False)
    do = _load_tile(DO + b64 * stride_dob + h64 * stride_doh + offs_m[:, None] * stride_dom
                    + offs_d[None, :] * stride_dod, offs_m, N_Q, offs_d, HEAD_DIM, False, False)
    row = pid_bh.to(tl.int64) * N_Q + offs_m
    row_ok = offs_m < N_Q
    delta = _row_delta(o, do, DLSE, row, row_ok, HAS_DLSE, False)
    row_max, row_b = _softmax_rows(ROWS + pid_bh.to(tl.int64) * 3 * N_Q, offs_m, N_Q, False, EXACT_P)
    _store_stats(_stats_base(STATS, pid_bh, N_Q, EXACT_P), offs_m, N_Q, delta, row_max, row_b, False, EXACT_P)
    tl.store(DQ_ACC + row[:, None] * HEAD_DIM + offs_d[None, :], tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32),
             mask=row_ok[:, None] & (offs_d[None, :] < HEAD_DIM))


# ---------------------------------------------------------------------------------------------
# backward: dK, dV (one program per key tile, loop over query tiles)
# ---------------------------------------------------------------------------------------------
@triton.jit
def _dkdv_tiles(dk, dv, k, v, q_ptrs0, do_ptrs0, stride_qm, stride_dom, stats_base, idx_base, lo, hi,
                start_n, offs_n, offs_m0, offs_d, N_Q, HEAD_DIM, causal_offset, qk_scale, seed, bh, drop_threshold,
                drop_scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_M: tl.constexpr,
                EVEN_D: tl.constexpr, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, HAS_DROPOUT: tl.constexpr,
                SPARSE: tl.constexpr, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr, dq_ptrs0, key_ok, sm_scale,
                FUSED_DQ: tl.constexpr, MASK_KEYS: tl.constexpr, EXACT_P: tl.constexpr, DQ_TMA: tl.constexpr):
    """dK/dV accumulation of one key tile over query tiles [lo, hi) (positions, or list entries).

    ``FUSED_DQ``: also add each query tile's dQ share ``dS @ K * sm_scale`` into the float32
    accumulator at ``dq_ptrs0`` (rows ``offs_m0`` of the head, row stride HEAD_DIM) with atomics
    (``DQ_TMA``: ``dq_ptrs0`` is a (B * H, N_Q, HEAD_DIM) tensor descriptor of the accumulator and
    each share is one TMA reduce-add of the tile, head ``bh``; rows past N_Q are clipped by TMA);
    ``MASK_KEYS``: first zero dS on the keys that ``key_ok`` rules out (ragged tail, padding): their
    recomputed probabilities are not zero here (the dK/dV rows of those keys are discarded, but
    their dQ share must be dropped). Block-sparse: the next list entry is carried one step ahead, as
    in :func:`_fwd_tiles`."""
    nxt = _first_entry(idx_base, lo, hi, SPARSE)
    for it in tl.range(lo, hi):
        if SPARSE:
            start_m = nxt * BLOCK_M
            nxt = tl.load(idx_base + tl.minimum(it + 1, hi - 1))
        else:
            start_m = it * BLOCK_M
        rows = start_m + offs_m0
        q = _load_tile(q_ptrs0 + start_m * stride_qm, rows, N_Q, offs_d, HEAD_DIM, EVEN_M, EVEN_D)
        do = _load_tile(do_ptrs0 + start_m * stride_dom, rows, N_Q, offs_d, HEAD_DIM, EVEN_M, EVEN_D)
        if UPCAST:
            q = q.to(tl.float32)
            do = do.to(tl.float32)
        delta, row_max, row_b = _load_stats(stats_base, rows, N_Q, EVEN_M, EXACT_P)
        # transposed scores: (BLOCK_N keys, BLOCK_M queries)
        qkT = tl.dot(k, tl.trans(q), input_precision=DOT_PREC)
        pT = _probabilities(qkT, row_max[None, :], row_b[None, :], qk_scale, EXACT_P)
        if MASKED:
            if IS_CAUSAL:
                pT = tl.where(offs_n[:, None] <= rows[None, :] + causal_offset, pT, 0.0)
        dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PREC)
        if HAS_DROPOUT:
            keepT = tl.trans(dropout_keep(seed, bh, rows, start_n, drop_threshold, BLOCK_M, BLOCK_N))
            pT_used = tl.where(keepT, pT * drop_scale, 0.0)
            dpT = tl.where(keepT, dpT * drop_scale, 0.0)
        else:
            pT_used = pT
        dv = tl.dot(pT_used.to(do.dtype), do, dv, input_precision=DOT_PREC)
        dsT = pT * (dpT - delta[None, :])
        dk = tl.dot(dsT.to(q.dtype), q, dk, input_precision=DOT_PREC)
        if FUSED_DQ:
            # the dQ pass's ds @ k of this (query tile, key tile) pair, scaled as that pass scales
            if MASK_KEYS:
                dsT = tl.where(key_ok[:, None], dsT, 0.0)
            dq = tl.dot(tl.trans(dsT.to(k.dtype)), k, input_precision=DOT_PREC) * sm_scale
            if DQ_TMA:
                dq_ptrs0.atomic_add([bh, start_m, 0], tl.reshape(dq, [1, BLOCK_M, BLOCK_D]))
            else:
                _atomic_add_tile(dq_ptrs0 + start_m * HEAD_DIM, dq, rows, N_Q, offs_d, HEAD_DIM, EVEN_M, EVEN_D)
    return dk, dv


@triton.jit
def flash_bwd_dkdv_kernel(
    Q, K, V, DO, DK, DV, DQ_ACC, STATS, PAD, SEED, IDX, CNT,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dkb, stride_dkh, stride_dkn, stride_dkd,
    stride_dvb, stride_dvh, stride_dvn, stride_dvd,
    stride_pb, stride_pn,
    stride_ih, stride_it, stride_ch, stride_ct,
    H, N_Q, N_K, HEAD_DIM, causal_offset, qk_scale, sm_scale, drop_threshold, drop_scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    SPARSE: tl.constexpr, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr,
    FUSED_DQ: tl.constexpr, EXACT_P: tl.constexpr, DQ_TMA: tl.constexpr,
):
    """dK and dV: one program per (key tile, batch * head), looping over query tiles. Reads the query
    rows' backward statistics STATS ([delta, b, m], see :func:`flash_bwd_dq_kernel`), stored by the
    dQ kernel launched before it (or, with ``FUSED_DQ``, by the preprocess kernel).

    ``FUSED_DQ`` (the one-pass backward, the default under dropout): the loop also computes
    dQ, adding every (query tile, key tile) share into ``DQ_ACC``, a zero-initialised contiguous
    float32 (B, H, N_Q, HEAD_DIM) buffer, with ``tl.atomic_add`` (the dQ kernel is then not
    launched); otherwise ``DQ_ACC`` is unused. ``DQ_TMA`` (sm_90 and later): ``DQ_ACC`` is a tensor
    descriptor of that buffer as (B * H, N_Q, HEAD_DIM), block (1, BLOCK_M, BLOCK_D), and each share
    is added by one TMA reduce-add instead of per-element atomics. The order of those float32
    additions varies from run to run, so dQ is not deterministic in its last bits; dK and dV are
    computed exactly as without."""
    # float scalars: float32 (see flash_fwd_kernel)
    qk_scale = tl.cast(qk_scale, tl.float32)
    sm_scale = tl.cast(sm_scale, tl.float32)
    drop_scale = tl.cast(drop_scale, tl.float32)
    # dense: natural order (causal key tiles are not reversed)
    pid_bh, slot = _program_slot(H, tl.cdiv(N_K, BLOCK_N), False, SPARSE)
    pid_n = slot
    if SPARSE:  # the slot's tile row, loaded here (see _program_slot)
        pid_n = tl.load(CNT + (pid_bh % H).to(tl.int64) * stride_ch + slot * stride_ct + 2)
    b64 = (pid_bh // H).to(tl.int64)
    h64 = (pid_bh % H).to(tl.int64)
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)

    k = _load_resident(K, b64, h64, stride_kb, stride_kh, stride_kn, stride_kd, offs_n, N_K, offs_d, HEAD_DIM,
                       EVEN_N, EVEN_D)
    v = _load_resident(V, b64, h64, stride_vb, stride_vh, stride_vn, stride_vd, offs_n, N_K, offs_d, HEAD_DIM,
                       EVEN_N, EVEN_D)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    q_ptrs0 = Q + b64 * stride_qb + h64 * stride_qh + offs_m0[:, None] * stride_qm + offs_d[None, :] * stride_qd
    do_ptrs0 = DO + b64 * stride_dob + h64 * stride_doh + offs_m0[:, None] * stride_dom + offs_d[None, :] * stride_dod
    stats_base = _stats_base(STATS, pid_bh, N_Q, EXACT_P)
    if HAS_DROPOUT:
        seed = tl.load(SEED)
    else:
        seed = 0
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    if FUSED_DQ:
        if DQ_TMA:
            dq_ptrs0 = DQ_ACC
        else:
            dq_ptrs0 = DQ_ACC + pid_bh.to(tl.int64) * N_Q * HEAD_DIM + offs_m0[:, None] * HEAD_DIM + offs_d[None, :]
        # the keys whose dS must stay out of dQ: past N_K, or padding
        key_ok = offs_n < N_K
        if HAS_PAD:
            key_pad = tl.load(PAD + b64 * stride_pb + offs_n * stride_pn, mask=offs_n < N_K, other=1)
            key_ok = key_ok & (key_pad == 0)
    else:
        dq_ptrs0 = DQ_ACC
        key_ok = offs_n < N_K

    n_m_tiles = tl.cdiv(N_Q, BLOCK_M)
    if SPARSE:
        idx_base = IDX + h64 * stride_ih + slot * stride_it
        cnt_base = CNT + h64 * stride_ch + slot * stride_ct
        full_lo = 0
        full_hi = tl.load(cnt_base)
        part_lo = full_hi
        part_hi = tl.load(cnt_base + 1)
    else:
        idx_base = IDX
        if IS_CAUSAL:
            # query i sees key j iff j <= i + causal_offset: rows before start_n - offset see nothing
            part_lo = tl.maximum(start_n - causal_offset, 0) // BLOCK_M
            full_lo = tl.minimum(tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - causal_offset, 0), BLOCK_M), n_m_tiles)
            part_hi = full_lo
        else:
            full_lo = 0
            part_lo = 0
            part_hi = 0
        full_hi = n_m_tiles
    dk, dv = _dkdv_tiles(dk, dv, k, v, q_ptrs0, do_ptrs0, stride_qm, stride_dom, stats_base, idx_base,
                         full_lo, full_hi, start_n, offs_n, offs_m0, offs_d, N_Q, HEAD_DIM, causal_offset, qk_scale,
                         seed, pid_bh, drop_threshold, drop_scale, BLOCK_M,
                         BLOCK_N, BLOCK_D, EVEN_M, EVEN_D, False, IS_CAUSAL, HAS_DROPOUT, SPARSE, DOT_PREC, UPCAST,
                         dq_ptrs0, key_ok, sm_scale, FUSED_DQ,
                         FUSED_DQ and (HAS_PAD or not EVEN_N), EXACT_P, DQ_TMA)
    if IS_CAUSAL or SPARSE:
        dk, dv = _dkdv_tiles(dk, dv, k, v, q_ptrs0, do_ptrs0, stride_qm, stride_dom, stats_base,
                             idx_base, part_lo, part_hi, start_n, offs_n, offs_m0, offs_d, N_Q, HEAD_DIM,
                             causal_offset, qk_scale, seed, pid_bh, drop_threshold, drop_scale, BLOCK_M,
                             BLOCK_N, BLOCK_D, EVEN_M, EVEN_D, True, IS_CAUSAL, HAS_DROPOUT, SPARSE, DOT_PREC, UPCAST,
                             dq_ptrs0, key_ok, sm_scale, FUSED_DQ,
                             FUSED_DQ and (HAS_PAD or not EVEN_N), EXACT_P, DQ_TMA)
    dk = dk * sm_scale
    if HAS_PAD:
        # a padded key gets no probability from any query: its dK and dV are exactly zero
        padded = tl.load(PAD + b64 * stride_pb + offs_n * stride_pn, mask=offs_n < N_K, other=1)
        dk = tl.where(padded[:, None] == 0, dk, 0.0)
        dv = tl.where(padded[:, None] == 0, dv, 0.0)
    _store_tile(DK + b64 * stride_dkb + h64 * stride_dkh + offs_n[:, None] * stride_dkn + offs_d[None, :] * stride_dkd,
                _rounded(dk, DK, UPCAST), offs_n, N_K, offs_d, HEAD_DIM, EVEN_N, EVEN_D)
    _store_tile(DV + b64 * stride_dvb + h64 * stride_dvh + offs_n[:, None] * stride_dvn + offs_d[None, :] * stride_dvd,
                _rounded(dv, DV, UPCAST), offs_n, N_K, offs_d, HEAD_DIM, EVEN_N, EVEN_D)


# ---------------------------------------------------------------------------------------------
# backward: dQ (one program per query tile, loop over key tiles)
# ---------------------------------------------------------------------------------------------
@triton.jit
def _dq_tiles(dq, q, do, row_max, row_b, delta, k_ptrs0, v_ptrs0, stride_kn, stride_vn, pad_ptrs0,
              stride_pn, idx_base, lo, hi,
              offs_m, offs_n0, offs_d, N_K, HEAD_DIM, causal_offset, qk_scale, seed, bh, drop_threshold, drop_scale,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_N: tl.constexpr,
              EVEN_D: tl.constexpr, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr,
              HAS_DROPOUT: tl.constexpr, SPARSE: tl.constexpr, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr,
              EXACT_P: tl.constexpr):
    """dQ accumulation of one query tile over key tiles [lo, hi) (positions, or list entries).
    Block-sparse: the next list entry is carried one step ahead, as in :func:`_fwd_tiles`."""
    nxt = _first_entry(idx_base, lo, hi, SPARSE)
    for it in tl.range(lo, hi):
        if SPARSE:
            start_n = nxt * BLOCK_N
            nxt = tl.load(idx_base + tl.minimum(it + 1, hi - 1))
        else:
            start_n = it * BLOCK_N
        cols = start_n + offs_n0
        k = _load_tile(k_ptrs0 + start_n * stride_kn, cols, N_K, offs_d, HEAD_DIM, EVEN_N or not MASKED, EVEN_D)
        v = _load_tile(v_ptrs0 + start_n * stride_vn, cols, N_K, offs_d, HEAD_DIM, EVEN_N or not MASKED, EVEN_D)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
        p = _probabilities(qk, row_max[:, None], row_b[:, None], qk_scale, EXACT_P)
        if MASKED:
            if IS_CAUSAL:
                allowed = cols[None, :] <= offs_m[:, None] + causal_offset
                if not EVEN_N:
                    allowed = allowed & (cols[None, :] < N_K)
            else:
                allowed = (cols[None, :] < N_K) & (offs_m[:, None] >= 0)
            p = tl.where(allowed, p, 0.0)
        if HAS_PAD:
            padded = tl.load(pad_ptrs0 + start_n * stride_pn, mask=cols < N_K, other=1)
            p = tl.where(padded[None, :] == 0, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PREC)
        if HAS_DROPOUT:
            keep = dropout_keep(seed, bh, offs_m, start_n, drop_threshold, BLOCK_M, BLOCK_N)
            dp = tl.where(keep, dp * drop_scale, 0.0)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=DOT_PREC)
    return dq


@triton.jit
def flash_bwd_dq_kernel(
    Q, K, V, O, DO, DQ, ROWS, DLSE, STATS, PAD, SEED, IDX, CNT,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_dob, stride_doh, stride_dom, stride_dod,
    stride_dqb, stride_dqh, stride_dqm, stride_dqd,
    stride_pb, stride_pn,
    stride_ih, stride_it, stride_ch, stride_ct,
    H, N_Q, N_K, HEAD_DIM, causal_offset, qk_scale, sm_scale, drop_threshold, drop_scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, HAS_DROPOUT: tl.constexpr,
    SPARSE: tl.constexpr, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr, HAS_DLSE: tl.constexpr,
    EXACT_P: tl.constexpr,
):
    """dQ: one program per (query tile, batch * head), looping over key tiles; launched before the
    dK/dV kernel, whose per-row statistics it computes and stores for its own query rows into STATS,
    a contiguous float32 buffer (:func:`_stats_base`): ``STATS[:, :, 0]`` = delta = rowsum(dO * O) -
    dLSE (``HAS_DLSE``), ``STATS[:, :, 1]`` = b and, ``EXACT_P`` only, ``STATS[:, :, 2]`` = m: P's
    row terms, computed once per row from the forward's row statistics ROWS (:func:`_softmax_rows`),
    which this kernel's own loop uses too. So STATS is (B, H, 3, N_Q) for ``EXACT_P`` and (B, H, 2,
    N_Q) for bfloat16. Every query tile row of every (batch, head) has a program, with or without
    key tiles to visit (causal rows that see no key, block-sparse rows without blocks), so every row
    is written (rows past N_Q read as zero dO and O)."""
    # float scalars: float32 (see flash_fwd_kernel)
    qk_scale = tl.cast(qk_scale, tl.float32)
    sm_scale = tl.cast(sm_scale, tl.float32)
    drop_scale = tl.cast(drop_scale, tl.float32)
    pid_bh, slot = _program_slot(H, tl.cdiv(N_Q, BLOCK_M), IS_CAUSAL, SPARSE)
    pid_m = slot
    if SPARSE:  # the slot's tile row, loaded here (see _program_slot)
        pid_m = tl.load(CNT + (pid_bh % H).to(tl.int64) * stride_ch + slot * stride_ct + 2)
    b64 = (pid_bh // H).to(tl.int64)
    h64 = (pid_bh % H).to(tl.int64)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)

    q = _load_resident(Q, b64, h64, stride_qb, stride_qh, stride_qm, stride_qd, offs_m, N_Q, offs_d, HEAD_DIM,
                       EVEN_M, EVEN_D)
    do = _load_resident(DO, b64, h64, stride_dob, stride_doh, stride_dom, stride_dod, offs_m, N_Q, offs_d, HEAD_DIM,
                        EVEN_M, EVEN_D)
    o = _load_resident(O, b64, h64, stride_ob, stride_oh, stride_om, stride_od, offs_m, N_Q, offs_d, HEAD_DIM,
                       EVEN_M, EVEN_D)
    row = pid_bh.to(tl.int64) * N_Q + offs_m
    delta = _row_delta(o, do, DLSE, row, offs_m < N_Q, HAS_DLSE, EVEN_M)
    row_max, row_b = _softmax_rows(ROWS + pid_bh.to(tl.int64) * 3 * N_Q, offs_m, N_Q, EVEN_M, EXACT_P)
    stats_base = _stats_base(STATS, pid_bh, N_Q, EXACT_P)
    _store_stats(stats_base, offs_m, N_Q, delta, row_max, row_b, EVEN_M, EXACT_P)
    stats = stats_base + offs_m  # delta's row
    # the loop reads delta back from STATS (after a barrier: other threads of the program stored it)
    # instead of taking the reduction's result, whose layout the compiler would carry into the loop:
    # on sm_90 the float32 d=128 variant then spills (~340 spill stores against ~4; compile_check
    # --ptx --resources)
    tl.debug_barrier()
    if EVEN_M:
        delta = tl.load(stats)
    else:
        delta = tl.load(stats, mask=offs_m < N_Q, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    k_ptrs0 = K + b64 * stride_kb + h64 * stride_kh + offs_n0[:, None] * stride_kn + offs_d[None, :] * stride_kd
    v_ptrs0 = V + b64 * stride_vb + h64 * stride_vh + offs_n0[:, None] * stride_vn + offs_d[None, :] * stride_vd
    pad_ptrs0 = PAD + b64 * stride_pb + offs_n0 * stride_pn
    if HAS_DROPOUT:
        seed = tl.load(SEED)
    else:
        seed = 0
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    if SPARSE:
        idx_base = IDX + h64 * stride_ih + slot * stride_it
        cnt_base = CNT + h64 * stride_ch + slot * stride_ct
        full_hi = tl.load(cnt_base)
        end = tl.load(cnt_base + 1)
    else:
        idx_base = IDX
        full_hi, end = _causal_ranges(start_m, N_Q, N_K, causal_offset, BLOCK_M, BLOCK_N, IS_CAUSAL)
    dq = _dq_tiles(dq, q, do, row_max, row_b, delta, k_ptrs0, v_ptrs0, stride_kn, stride_vn, pad_ptrs0, stride_pn,
                   idx_base, 0, full_hi, offs_m, offs_n0, offs_d, N_K, HEAD_DIM, causal_offset, qk_scale, seed,
                   pid_bh, drop_threshold, drop_scale, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_N, EVEN_D,
                   False, IS_CAUSAL, HAS_PAD, HAS_DROPOUT, SPARSE, DOT_PREC, UPCAST, EXACT_P)
    if IS_CAUSAL or not EVEN_N or SPARSE:
        dq = _dq_tiles(dq, q, do, row_max, row_b, delta, k_ptrs0, v_ptrs0, stride_kn, stride_vn, pad_ptrs0, stride_pn,
                       idx_base, full_hi, end, offs_m, offs_n0, offs_d, N_K, HEAD_DIM, causal_offset, qk_scale, seed,
                       pid_bh, drop_threshold, drop_scale, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_N, EVEN_D, True, IS_CAUSAL,
                       HAS_PAD, HAS_DROPOUT, SPARSE, DOT_PREC, UPCAST, EXACT_P)
    dq = dq * sm_scale
    _store_tile(DQ + b64 * stride_dqb + h64 * stride_dqh + offs_m[:, None] * stride_dqm + offs_d[None, :] * stride_dqd,
                _rounded(dq, DQ, UPCAST), offs_m, N_Q, offs_d, HEAD_DIM, EVEN_M, EVEN_D)


# ---------------------------------------------------------------------------------------------
# dropout keep-mask (testing helper)
# ---------------------------------------------------------------------------------------------
@triton.jit
def dropout_mask_kernel(OUT, SEED, H, N_Q, N_K, drop_threshold, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """OUT[b, h, i, j] (uint8, contiguous) = the keep decision the attention kernels make."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_bh = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    keep = dropout_keep(tl.load(SEED), pid_bh, rows, pid_n * BLOCK_N, drop_threshold, BLOCK_M, BLOCK_N)
    ptrs = OUT + pid_bh.to(tl.int64) * N_Q * N_K + rows[:, None].to(tl.int64) * N_K + cols[None, :]
    tl.store(ptrs, keep.to(tl.uint8), mask=(rows[:, None] < N_Q) & (cols[None, :] < N_K))


def _built_for_interpreter() -> bool:
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # a Triton without this class: the interpreter is on as asked
        return os.environ.get("TRITON_INTERPRET") == "1"
    return isinstance(flash_fwd_kernel, InterpretedFunction)


# Whether these kernels run in Triton's interpreter (fixed when triton.jit decorated them, by
# TRITON_INTERPRET=1): the only way they take CPU tensors.
INTERPRETED = _built_for_interpreter()
