"""Persistent block-sparse forward: a fixed set of programs walks one flat list of (query tile, key tile) steps.

The row-per-program forward (``flash_fwd_kernel`` with ``SPARSE``) gives each (query tile, batch * head)
its own program. With very sparse rows that program is short — the local layout visits three key
blocks per query tile — and most of its time is the fixed part: reading its plan entry, loading Q,
filling the software pipeline, the epilogue. Measured on the H200 (session 8, d = 32, bf16, 4K):
the local layout's forward ran at ~35 % of the exponential unit's rate where the dense forward, 32
key tiles per program, runs at ~56 %; FlexAttention's row programs sit at the same place.

Here one program per "slot" (``programs_per_sm`` per multiprocessor) runs a contiguous share of all
the (query tile, key tile) steps of the call, in one loop: the step list is laid out on the host
(:func:`flat_plan`, cached per plan and batch size), every step says which query tile and key tile it
is and whether it starts or ends its query tile. The online-softmax state resets where a tile
starts and is normalised and stored where it ends, inside the loop, so Triton's software pipeline
runs across tile boundaries and the fixed costs of a program are paid once per slot instead of once
per query tile. Q is re-read at every step (from L2: the steps of one tile are consecutive).

Used by :func:`kernels.ops.launch_fwd` (direct launches; the ``triton_op`` form under torch.compile
keeps the row kernel) for block-sparse calls without causal masking, key padding or dropout whose
N_k is a multiple of the key tile and whose every query tile visits at least one key tile;
everything else takes the row kernel. ``$LRA_SPARSE_FORWARD=rows`` turns it off,
``persistent:K`` sets ``K`` programs per multiprocessor (default 4). The steps are taken in the row
kernel's launch order (heaviest tile rows first, heads in groups; see ``_program_tile``), split into
contiguous shares of equal work, so a slot's consecutive steps share K/V tiles (L2 reuse).
"""
from __future__ import annotations

import os
import weakref

import torch
import triton
import triton.language as tl

from .triton_attention import LN2_C, LPT_HEAD_GROUP, _load_tile, _store_tile

ENV = "LRA_SPARSE_FORWARD"
DEFAULT_PROGRAMS_PER_SM = 4
# interpreter (CPU): a few programs, so that the tests see several query tiles per program
CPU_PROGRAMS = 3
_FIRST_BIT, _LAST_BIT = 28, 29
_KEY_TILE_MASK = (1 << _FIRST_BIT) - 1


def parse_setting(text: str | None) -> int:
    """Programs per multiprocessor from a ``$LRA_SPARSE_FORWARD`` value: "persistent" (also unset or
    empty: the default), "persistent:K" (K >= 1), or "rows" (0: the row kernel); else ValueError."""
    value = (text or "").strip() or "persistent"
    if value == "rows":
        return 0
    name, _, count = value.partition(":")
    if name == "persistent" and not count:
        return DEFAULT_PROGRAMS_PER_SM
    if name == "persistent" and count.isdigit() and int(count) >= 1:
        return int(count)
    raise ValueError(f"${ENV}={text!r}: expected 'persistent' (default), 'persistent:K' with K >= 1 programs "
                     "per multiprocessor, or 'rows' (one program per query tile)")


# read once, at import; tests and benchmarks may set the module global
PROGRAMS_PER_SM = parse_setting(os.environ.get(ENV))


def setting() -> str:
    return "rows" if PROGRAMS_PER_SM == 0 else f"persistent:{PROGRAMS_PER_SM}"


def applies(n_k: int, block_n: int, causal: bool, has_pad: bool, dropout_p: float) -> bool:
    """Whether a block-sparse forward may take the persistent kernel (before the plan's own check
    that every query tile visits a key tile, see :func:`flat_plan`)."""
    return PROGRAMS_PER_SM > 0 and not causal and not has_pad and dropout_p == 0.0 and n_k % block_n == 0


def num_programs(device: torch.device) -> int:
    if device.type != "cuda":
        return CPU_PROGRAMS
    return torch.cuda.get_device_properties(device).multi_processor_count * PROGRAMS_PER_SM


# flat plans per row plan (the fwd index tensor of a BlockSparseLayout plan, by id, held weakly),
# then by (B * H, H, programs); an entry goes when its index tensor does
_FLAT: dict[int, tuple[weakref.ref, dict]] = {}


def _cache_of(indices: torch.Tensor) -> dict:
    entry = _FLAT.get(id(indices))
    if entry is None or entry[0]() is not indices:
        key = id(indices)
        entry = (weakref.ref(indices, lambda _ref, key=key: _FLAT.pop(key, None)), {})
        _FLAT[key] = entry
    return entry[1]


def flat_plan(indices: torch.Tensor, counts: torch.Tensor, bh_total: int, heads: int,
              programs: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(row_bh, meta, starts) int32 of a forward row plan (``indices`` / ``counts`` of
    :func:`kernels.block_sparse._tile_plan`, stored by launch slot) for ``bh_total`` (batch, head)
    pairs, or None when some query tile visits no key tile (the row kernel writes those rows' zeros).

    Step ``s``: query tile ``row_bh[s] // bh_total`` of (batch * H + head) ``row_bh[s] % bh_total``,
    key tile ``meta[s] & (2**28 - 1)``, bit 28 set on its tile's first step, bit 29 on its last.
    Program ``p`` runs steps ``[starts[p], starts[p + 1])``. Cached per ``indices`` tensor."""
    key = (bh_total, heads, programs)
    per_plan = _cache_of(indices)
    if key in per_plan:
        return per_plan[key]
    device = indices.device
    n_heads_plan, rows, _width = indices.shape
    group = int(LPT_HEAD_GROUP.value if hasattr(LPT_HEAD_GROUP, "value") else LPT_HEAD_GROUP)
    # the row kernel's program order (kernels.triton_attention._program_tile), as a list of (bh, slot)
    u = torch.arange(rows * bh_total, device=device, dtype=torch.int64)
    g0 = (u // (group * rows)) * group
    g_size = torch.clamp(bh_total - g0, max=group)
    within = u - g0 * rows
    bh = g0 + within % g_size
    slot = within // g_size
    head = bh % heads if n_heads_plan > 1 else torch.zeros_like(bh)
    steps = counts[head, slot, 1].long()
    if bool((steps == 0).any()):
        per_plan[key] = None
        return None
    row = counts[head, slot, 2].long()
    total = int(steps.sum())
    item = torch.repeat_interleave(torch.arange(u.numel(), device=device), steps)
    first_step = torch.cumsum(steps, 0) - steps
    j = torch.arange(total, device=device) - first_step[item]
    key_tile = indices[head[item], slot[item], j].long()
    meta = key_tile | ((j == 0).long() << _FIRST_BIT) | ((j == steps[item] - 1).long() << _LAST_BIT)
    row_bh = row[item] * bh_total + bh[item]
    # contiguous shares of about equal work; a tile row is never split
    targets = (torch.arange(1, programs, device=device) * total) // programs
    cut = torch.searchsorted(first_step, targets)
    item_start = torch.cat([first_step, torch.tensor([total], device=device)])
    starts = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), item_start[cut],
                        torch.tensor([total], device=device)])
    if int(row_bh.max()) >= 2**31:
        raise ValueError(f"block-sparse forward: {rows} query tiles x {bh_total} (batch, head) pairs overflow "
                         "the persistent kernel's 32-bit step list; set $LRA_SPARSE_FORWARD=rows")
    plan = (row_bh.to(torch.int32).contiguous(), meta.to(torch.int32).contiguous(), starts.to(torch.int32).contiguous())
    per_plan[key] = plan
    return plan


@triton.jit
def flash_fwd_persistent_kernel(
    Q, K, V, O, LSE, ROW_BH, META, STARTS,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    BH, H, N_Q, N_K, HEAD_DIM, qk_scale,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    EVEN_M: tl.constexpr, EVEN_D: tl.constexpr, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr,
):
    """Steps ``[STARTS[p], STARTS[p + 1])`` of the flat plan (see :func:`flat_plan`); no element
    masks (no causal, padding or dropout; N_K a multiple of BLOCK_N), every query tile visits at
    least one key tile, so every row's running max is finite once its tile's first step is done."""
    qk_scale = tl.cast(qk_scale, tl.float32)
    pid = tl.program_id(0)
    step_lo = tl.load(STARTS + pid)
    step_hi = tl.load(STARTS + pid + 1)
    rows_in_tile = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for s in tl.range(step_lo, step_hi):
        row_bh = tl.load(ROW_BH + s)
        meta = tl.load(META + s)
        row = row_bh // BH
        bh = row_bh % BH
        b64 = (bh // H).to(tl.int64)
        h64 = (bh % H).to(tl.int64)
        start_n = (meta & 0x0FFFFFFF) * BLOCK_N
        first = ((meta >> 28) & 1) != 0
        last = ((meta >> 29) & 1) != 0
        offs_m = row * BLOCK_M + rows_in_tile
        cols = start_n + offs_n
        q = _load_tile(Q + b64 * stride_qb + h64 * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                       offs_m, N_Q, offs_d, HEAD_DIM, EVEN_M, EVEN_D)
        k = _load_tile(K + b64 * stride_kb + h64 * stride_kh + cols[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                       cols, N_K, offs_d, HEAD_DIM, True, EVEN_D)
        v = _load_tile(V + b64 * stride_vb + h64 * stride_vh + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                       cols, N_K, offs_d, HEAD_DIM, True, EVEN_D)
        if UPCAST:
            q = q.to(tl.float32)
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        # a tile's first step starts its statistics afresh
        m_i = tl.where(first, float("-inf"), m_i)
        l_i = tl.where(first, 0.0, l_i)
        acc = tl.where(first, 0.0, acc)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PREC)
        m_i = m_new
        if last:
            out = acc / l_i[:, None]
            o_ptrs = O + b64 * stride_ob + h64 * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
            _store_tile(o_ptrs, out.to(O.dtype.element_ty), offs_m, N_Q, offs_d, HEAD_DIM, EVEN_M, EVEN_D)
            lse = (m_i + tl.math.log2(l_i)) * LN2_C
            lse_ptrs = LSE + bh.to(tl.int64) * N_Q + offs_m
            if EVEN_M:
                tl.store(lse_ptrs, lse)
            else:
                tl.store(lse_ptrs, lse, mask=offs_m < N_Q)
