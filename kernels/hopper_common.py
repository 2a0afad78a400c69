"""What the Hopper Gluon forward (:mod:`kernels.hopper_attention`) and backward
(:mod:`kernels.hopper_attention_bwd`) share: the Gluon names that differ between Triton releases, the
query tile a program works on (dense, or a block-sparse plan's slot), and the launchers' argument
helpers (softmax scale, key padding, host TMA descriptors)."""
from __future__ import annotations

import functools
import math

from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import tma

from .triton_attention import LPT_HEAD_GROUP

LOG2E = 1.4426950408889634  # log2(e): the launchers pass scale * log2(e) for exp2

# TMA builtins: Triton 3.6 names them async_copy_global_to_shared / async_copy_shared_to_global;
# later releases renamed them async_load / async_store (the old names raise)
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
# CTA-wide (partition-wide under warp specialisation) barrier: gl.thread_barrier in 3.6, gl.barrier later
cta_barrier = getattr(gl, "barrier", None) or gl.thread_barrier


@builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """TMA reduce-add of a shared-memory tile into global memory (``cp.reduce.async.bulk.tensor``
    .add): the op later releases expose as ``tma.async_atomic_add``; Triton 3.6's Gluon has the op
    in its builder but no function for it."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


tma_reduce_add = getattr(tma, "async_atomic_add", None) or _tma_reduce_add


@gluon.jit
def query_tile(H, N_K, causal_offset, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, IS_CAUSAL: gl.constexpr):
    """(b, h, b * H + h, first query row, full_hi, end) of this program, whose grid is (query tiles,
    B * H): causal query tiles in reverse order (the last see the most keys, so they start first);
    key tiles [0, full_hi) need no element mask, [full_hi, end) do, the rest are invisible."""
    if IS_CAUSAL:
        pid_m = gl.num_programs(0) - 1 - gl.program_id(0)
    else:
        pid_m = gl.program_id(0)
    bh = gl.program_id(1)
    start_m = pid_m * BLOCK_M
    n_tiles = gl.cdiv(N_K, BLOCK_N)
    n_even = N_K // BLOCK_N
    if IS_CAUSAL:
        # row i sees keys j <= i + causal_offset
        full_hi = gl.minimum(gl.maximum(start_m + causal_offset + 1, 0) // BLOCK_N, n_even)
        end = gl.minimum(gl.cdiv(gl.maximum(start_m + BLOCK_M + causal_offset, 0), BLOCK_N), n_tiles)
    else:
        full_hi = n_even
        end = n_tiles
    return bh // H, bh % H, bh, start_m, full_hi, end


@gluon.jit
def sparse_tile(H, N_Q, IDX, CNT, stride_ih, stride_it, stride_ch, stride_ct, BLOCK_M: gl.constexpr):
    """(b, h, b * H + h, first query row, full_hi, end, index list) of this block-sparse program,
    whose grid is one flat axis of (query tiles) * B * H programs: a launch slot of a forward plan
    (:mod:`kernels.block_sparse`; IDX (Hl, slots, width) and CNT (Hl, slots, 3) int32, head strides
    0 for a layout shared by the heads), taken in the portable kernels' longest-processing-time-first
    order (``_program_slot`` in :mod:`kernels.triton_attention`: heads in groups of
    ``LPT_HEAD_GROUP``, each group's heaviest slots first). The slot's query tile is ``CNT[h, slot,
    2]``; list entries [0, full_hi) are key tiles that need no element mask, [full_hi, end) partial
    ones (causal diagonal, ragged last tile)."""
    n_rows = gl.cdiv(N_Q, BLOCK_M)
    pid = gl.program_id(0)
    bh_total = gl.num_programs(0) // n_rows
    g0 = (pid // (LPT_HEAD_GROUP * n_rows)) * LPT_HEAD_GROUP
    g_size = gl.minimum(bh_total - g0, LPT_HEAD_GROUP)
    within = pid - g0 * n_rows
    bh = g0 + within % g_size
    slot = within // g_size
    h = bh % H
    counts = CNT + h.to(gl.int64) * stride_ch + slot * stride_ct
    full_hi = gl.load(counts)
    end = gl.load(counts + 1)
    row = gl.load(counts + 2)
    indices = IDX + h.to(gl.int64) * stride_ih + slot * stride_it
    return bh // H, h, bh, row * BLOCK_M, full_hi, end, indices


def softmax_scale_of(head_dim: int, softmax_scale: float | None) -> float:
    """The scale a launcher uses (default 1 / sqrt(d)); > 0, since the running max is taken over the
    unscaled scores."""
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    if not scale > 0.0:
        raise ValueError(f"softmax_scale must be > 0, got {scale}")
    return scale


def padding_args(key_padding_mask, batch: int, n_k: int, placeholder) -> tuple:
    """(mask tensor, batch stride, key stride) of a launch: the checked bool (B, N_k) mask, or
    ``placeholder`` with zero strides when there is none (never read: HAS_PAD=False)."""
    import torch

    if key_padding_mask is None:
        return placeholder, 0, 0
    if key_padding_mask.dtype != torch.bool or tuple(key_padding_mask.shape) != (batch, n_k):
        raise ValueError(f"key_padding_mask must be bool (B, N_k) = ({batch}, {n_k}), got "
                         f"{key_padding_mask.dtype} {tuple(key_padding_mask.shape)}")
    return (key_padding_mask, *key_padding_mask.stride())


def tma_descriptor(t, rows: int):
    """Host-side TMA descriptor over the (B, H, N, d) float16 / bfloat16 tensor ``t``, block
    (1, 1, rows, d), in the shared-memory layout the kernels' wgmma operands use."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    block = (1, 1, rows, t.shape[-1])
    return TensorDescriptor(t, list(t.shape), list(t.stride()), list(block), _shared_layout(block, t.dtype))


def reduce_descriptor(t, rows: int):
    """Host-side TMA descriptor over the float32 (G, R, d) tensor ``t`` (a sum that tiles are
    reduce-added into), block (1, rows, d)."""
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    block = (1, rows, t.shape[-1])
    return TensorDescriptor(t, list(t.shape), list(t.stride()), list(block), _shared_layout(block, torch.float32))


@functools.lru_cache(maxsize=32)
def _shared_layout(block: tuple, dtype):
    """The shared-memory layout of a TMA block of ``dtype`` (torch float16, bfloat16 or float32;
    the wgmma operands' for the 16-bit ones): computed once per block and dtype (about 6 us of host
    time each, four descriptors per forward call)."""
    import torch

    gl_dtype = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for(list(block), gl_dtype)
