"""The launches of one attention call: outputs and work buffers, strides, flags and grids.

:func:`forward` and :func:`backward` build every kernel argument and launch through
``launch(kernel)[grid](*args, **kwargs)``, where ``launch`` is :func:`eager` (the kernel itself:
Triton's own launch) or :func:`traced` (``torch.library.wrap_triton``: under torch.compile the
triton_op form, whose launches Inductor then makes from its generated code). The kernels are looked
up in :mod:`kernels.triton_attention` at every call.

Launch arguments that both directions must agree on come in as arguments: ``tiles`` (12 ints, see
:class:`kernels.tiles.Tiles`), the dropout seed tensor and the block-sparse index lists. Outputs
are freshly allocated: the forward's laid out like q (:func:`new_output`), the gradients contiguous
(or written into the caller's tensors, e.g. the packed path's dQKV); inputs may have any strides.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Callable, Optional

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from . import triton_attention as kern
from .dropout import effective_dropout_p, fused_backward, keep_threshold
from .hopper_support import cuda_capability
from .tiles import PassTiles, Tiles, cdiv, padded_head_dim

Tensor = torch.Tensor


def eager(kernel):
    """Launch ``kernel`` through Triton (``kernel[grid](...)``)."""
    return kernel


def traced(kernel):
    """Launch ``kernel`` through ``torch.library.wrap_triton`` (traceable by torch.compile)."""
    return torch.library.wrap_triton(kernel)


_NO_GUARD = contextlib.nullcontext()  # reusable


def device_guard(t: Tensor):
    """The CUDA device of ``t`` made current for the launches (they run on the current device's
    context and stream); no guard when it already is (the common case: one cheap device query).
    ``is_cuda`` and ``get_device()`` read the tensor's device without building a ``torch.device``."""
    if not t.is_cuda:
        return _NO_GUARD
    index = t.get_device()
    if index == torch.cuda.current_device():
        return _NO_GUARD
    return torch.cuda.device(index)


def new_output(q: Tensor) -> Tensor:
    """An uninitialised (B, H, N_q, d) output in q's dtype, laid out in memory like q: when q is a
    (B, N, H, d)-ordered view (heads inside tokens, e.g. a slice of a fused QKV projection) the output
    is a (B, H, N, d) view of a contiguous (B, N, H, d) tensor, so that ``out.transpose(1, 2)`` is
    contiguous and the caller's merge of the heads costs no copy (PyTorch's cuDNN attention does the
    same); otherwise contiguous (B, H, N, d). Also the fake kernels' shape function."""
    B, H, n_q, d = q.shape
    if H > 1 and q.stride(1) < q.stride(2):
        return q.new_empty((B, n_q, H, d)).transpose(1, 2)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def new_row_stats(q: Tensor) -> Tensor:
    """The forward's float32 row statistics, contiguous (B, H, 3, N_q): ``[:, :, 0]`` the natural-log
    log-sum-exp (the public ``lse``), ``[:, :, 1]`` the row max of the raw scores and ``[:, :, 2]``
    log2 of the softmax denominator, from which the backward recomputes P exactly
    (:mod:`kernels.triton_attention`). Also the fake kernels' shape function."""
    B, H, n_q, _ = q.shape
    return q.new_empty((B, H, 3, n_q), dtype=torch.float32)


def lse_of(row_stats: Tensor) -> Tensor:
    """The log-sum-exp (B, H, N_q), a view of the forward's row statistics."""
    return row_stats[:, :, 0]


def backward_buffers(B: int, H: int, n_q: int, d: int, device: torch.device, fused_dq: bool,
                     exact_p: bool) -> tuple[Tensor, Optional[Tensor]]:
    """The backward's float32 work buffers, contiguous as the kernels address them: the query rows'
    statistics that the dK/dV loop reads as they are (written by the dQ kernel, or the preprocess
    kernel of the one-pass form), ``[:, :, 0]`` delta = rowsum(dO * O) - dLSE, ``[:, :, 1]`` P's
    b and, with ``exact_p`` (:func:`exact_probabilities`), ``[:, :, 2]`` the row max m: (B, H, 3,
    N_q), else (B, H, 2, N_q) (:mod:`kernels.triton_attention`); and with the one-pass dropout
    backward dQ's sum (B, H, N_q, d) (zeroed by the preprocess kernel), else None."""
    stats = torch.empty((B, H, 3 if exact_p else 2, n_q), dtype=torch.float32, device=device)
    dq_acc = torch.empty((B, H, n_q, d), dtype=torch.float32, device=device) if fused_dq else None
    return stats, dq_acc


def _sparse_strides(idx: Optional[Tensor], cnt: Optional[Tensor]) -> tuple[int, int, int, int]:
    """(head, tile) strides of an index list and its counts; head stride 0 for a shared layout."""
    if idx is None:
        return 0, 0, 0, 0
    head_i = idx.stride(0) if idx.shape[0] > 1 else 0
    head_c = cnt.stride(0) if cnt.shape[0] > 1 else 0
    return head_i, idx.stride(1), head_c, cnt.stride(1)


def _grid(n_rows: int, bh: int, sparse: bool) -> tuple[int, ...]:
    """Dense: (tile rows, batch * heads). Block-sparse: one flat axis that the kernels map onto
    (tile row, batch * head) in longest-processing-time-first order (``_program_slot``)."""
    return (n_rows * bh,) if sparse else (n_rows, bh)


def _dropout_args(dropout_p: float) -> tuple[int, float]:
    if dropout_p > 0.0:
        return keep_threshold(dropout_p), 1.0 / (1.0 - effective_dropout_p(dropout_p))
    return 0, 1.0


def _dot_flags(dtype: torch.dtype, cuda: bool) -> dict:
    """DOT_PREC: exact IEEE products for float32 inputs (no TF32 rounding); for 16-bit inputs the
    setting does not apply: on CUDA it is spelled out as Triton's default ("tf32", the same code as
    None) because Inductor's recompilation of the kernels under the triton_op form fails on a None
    constexpr; the interpreter keeps None.
    UPCAST: Triton's interpreter multiplies bfloat16 dot operands as raw integers, so on CPU the
    kernels convert bfloat16 tiles to float32 after loading (bf16 products are exact in float32)."""
    return dict(DOT_PREC="ieee" if dtype == torch.float32 else ("tf32" if cuda else None),
                UPCAST=dtype == torch.bfloat16 and not cuda)


def _pass_flags(dtype: torch.dtype, cuda: bool, n_q: int, n_k: int, d: int, t: PassTiles) -> dict:
    """The tile and shape constexprs of one pass, and its launch options."""
    d_pad = padded_head_dim(d)
    return dict(BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_D=d_pad, EVEN_M=n_q % t.block_m == 0,
                EVEN_N=n_k % t.block_n == 0, EVEN_D=d_pad == d, **_dot_flags(dtype, cuda),
                num_warps=t.num_warps, num_stages=t.num_stages)


# The launches' grids, scalar arguments and keyword arguments (constexprs, launch options) follow
# from a call's signature alone; eager calls look them up in a cache (the ``_cached`` forms below),
# so a call computes only its buffers and its tensors' strides. Under tracing the sizes may be
# symbolic (not hashable), so the traced launches compute them every time.

def _forward_launch(tiles: tuple, dtype: torch.dtype, cuda: bool, B: int, H: int, n_q: int, n_k: int, d: int,
                    causal: bool, has_pad: bool, dropout_p: float, sparse: bool,
                    softmax_scale: float) -> tuple[tuple, tuple, dict]:
    """(grid, scalar arguments, keyword arguments) of the forward launch."""
    t = Tiles.from_list(tiles).fwd
    drop_threshold, drop_scale = _dropout_args(dropout_p)
    scalars = (H, n_q, n_k, d, n_k - n_q, softmax_scale * kern.LOG2E, drop_threshold, drop_scale)
    flags = dict(_pass_flags(dtype, cuda, n_q, n_k, d, t), IS_CAUSAL=causal, HAS_PAD=has_pad,
                 HAS_DROPOUT=dropout_p > 0.0, SPARSE=sparse)
    return _grid(cdiv(n_q, t.block_m), B * H, sparse), scalars, flags


PRE_BLOCK_M = 64  # query rows per program of the preprocess kernel


def exact_probabilities(dtype: torch.dtype) -> bool:
    """Whether the backward recomputes P from the row max and log2 of the denominator (``EXACT_P``)
    rather than from one float32 log-sum-exp: for every dtype but bfloat16, whose own rounding of P is
    as coarse as that log-sum-exp's (:mod:`kernels.triton_attention`)."""
    return dtype != torch.bfloat16


def dq_by_tma_reduce(q: Tensor, launch: Callable) -> bool:
    """Whether the one-pass backward's dK/dV kernel adds its dQ shares by TMA reduce-adds (``DQ_TMA``:
    one bulk operation per tile instead of per-element atomics, fewer registers): an eager launch on
    an sm_90 or later GPU, with float32 dQ rows a multiple of 16 bytes (head dim divisible by 4), as a
    TMA descriptor needs. Under torch.compile (``traced``) the per-element atomics stay."""
    return (launch is eager and q.is_cuda and q.shape[3] % 4 == 0
            and cuda_capability(q.get_device()) >= (9, 0))


def _backward_launch(tiles: tuple, dtype: torch.dtype, cuda: bool, B: int, H: int, n_q: int, n_k: int, d: int,
                     causal: bool, has_pad: bool, dropout_p: float, sparse: bool, softmax_scale: float,
                     fused_dq: bool, has_dlse: bool, dq_tma: bool = False) -> tuple[tuple, dict, tuple, dict, tuple]:
    """(grid and keyword arguments of the first launch -- the dQ kernel, or the preprocess kernel of
    the one-pass form --, grid and keyword arguments of the dK/dV launch, the scalar arguments of
    the dQ and dK/dV launches). ``dq_tma``: the one-pass form adds dQ by TMA reduce-adds
    (:func:`dq_by_tma_reduce`)."""
    all_tiles = Tiles.from_list(tiles)
    drop_threshold, drop_scale = _dropout_args(dropout_p)
    scalars = (H, n_q, n_k, d, n_k - n_q, softmax_scale * kern.LOG2E, softmax_scale, drop_threshold, drop_scale)
    flags = dict(IS_CAUSAL=causal, HAS_PAD=has_pad, HAS_DROPOUT=dropout_p > 0.0, SPARSE=sparse,
                 EXACT_P=exact_probabilities(dtype))
    if fused_dq:
        first_grid = (cdiv(n_q, PRE_BLOCK_M), B * H)
        first = dict(BLOCK_M=PRE_BLOCK_M, BLOCK_D=padded_head_dim(d), HAS_DLSE=has_dlse, EXACT_P=flags["EXACT_P"])
    else:
        t = all_tiles.dq
        first_grid = _grid(cdiv(n_q, t.block_m), B * H, sparse)
        first = dict(_pass_flags(dtype, cuda, n_q, n_k, d, t), **flags, HAS_DLSE=has_dlse)
    t = all_tiles.dkdv
    dkdv = dict(_pass_flags(dtype, cuda, n_q, n_k, d, t), **flags, FUSED_DQ=fused_dq, DQ_TMA=fused_dq and dq_tma)
    return first_grid, first, _grid(cdiv(n_k, t.block_n), B * H, sparse), dkdv, scalars


_forward_launch_cached = functools.lru_cache(maxsize=256)(_forward_launch)
_backward_launch_cached = functools.lru_cache(maxsize=256)(_backward_launch)


def forward(launch: Callable, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor],
            seed: Optional[Tensor], fwd_indices: Optional[Tensor], fwd_counts: Optional[Tensor], causal: bool,
            dropout_p: float, softmax_scale: float, tiles: list[int],
            out: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """The forward launch: (out (B, H, N_q, d) in q's dtype, laid out like q, the row statistics
    (B, H, 3, N_q) float32 of :func:`new_row_stats`). ``out``: a :func:`new_output` of q to write
    into (the eager dispatch allocates it before choosing the kernel); default a new one."""
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    has_pad = key_padding_mask is not None
    sparse = fwd_indices is not None
    grid, scalars, flags = (_forward_launch if launch is traced else _forward_launch_cached)(
        tuple(tiles), q.dtype, q.is_cuda, B, H, n_q, n_k, d, causal, has_pad, dropout_p, sparse, softmax_scale)
    if out is None:
        out = new_output(q)
    row_stats = new_row_stats(q)
    launch(kern.flash_fwd_kernel)[grid](
        # unused tensor arguments get q as a placeholder; the mask (bool) is read as 8-bit
        q, k, v, out, row_stats, key_padding_mask if has_pad else q, seed if seed is not None else q,
        fwd_indices if sparse else q, fwd_counts if sparse else q,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(), *(key_padding_mask.stride() if has_pad else (0, 0)),
        *_sparse_strides(fwd_indices, fwd_counts), *scalars, **flags,
    )
    return out, row_stats


def backward(launch: Callable, grad_out, grad_row_stats, q, k, v, out, row_stats, key_padding_mask, seed,
             dkdv_indices, dkdv_counts, dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles,
             grads: Optional[tuple] = None):
    """The backward launches -> (dq, dk, dv): the dQ kernel, which recomputes P from the forward's
    ``row_stats`` and also stores every query row's delta and P's row terms
    (:func:`backward_buffers`), then the dK/dV kernel, which reads those (launched in that order on
    one stream, or ordered by the data dependency under the triton_op form). ``grad_row_stats``:
    the gradient of ``row_stats`` (only its lse row, ``[:, :, 0]``, is differentiable:
    :func:`lse_of`) or None. With the one-pass dropout backward
    (:func:`kernels.dropout.fused_backward`) the preprocess kernel stores those row statistics and
    zeroes a float32 dQ buffer, and the dK/dV kernel computes dQ into it; the dQ kernel is not launched.
    ``grads``: (dq, dk, dv) tensors of q's, k's and v's shapes and dtype, any strides, to write the
    gradients into (the packed path's views of one dQKV tensor); default: new contiguous ones."""
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    fused_dq = fused_backward(dropout_p)
    has_pad = key_padding_mask is not None
    has_dlse = grad_row_stats is not None
    sparse = dkdv_indices is not None
    dq_tma = fused_dq and dq_by_tma_reduce(q, launch)
    first_grid, first, dkdv_grid, dkdv, scalars = (_backward_launch if launch is traced else _backward_launch_cached)(
        tuple(tiles), q.dtype, q.is_cuda, B, H, n_q, n_k, d, causal, has_pad, dropout_p, sparse, softmax_scale,
        fused_dq, has_dlse, dq_tma)
    stats, dq_acc = backward_buffers(B, H, n_q, d, q.device, fused_dq, dkdv["EXACT_P"])
    if grads is not None:
        dq, dk, dv = grads
    else:
        dq = None if fused_dq else torch.empty_like(q, memory_format=torch.contiguous_format)
        dk = torch.empty_like(k, memory_format=torch.contiguous_format)
        dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    dlse = lse_of(grad_row_stats).contiguous() if has_dlse else row_stats  # placeholder when unused
    pad = key_padding_mask if has_pad else q  # bool, read as 8-bit by the kernels
    pad_strides = key_padding_mask.stride() if has_pad else (0, 0)
    seed_arg = seed if seed is not None else q
    do_strides = grad_out.stride()
    if fused_dq:
        launch(kern.flash_bwd_preprocess_kernel)[first_grid](
            out, grad_out, row_stats, dlse, stats, dq_acc, *out.stride(), *do_strides, H, n_q, d, **first,
        )
    else:
        launch(kern.flash_bwd_dq_kernel)[first_grid](
            q, k, v, out, grad_out, dq, row_stats, dlse, stats, pad, seed_arg,
            dq_indices if sparse else q, dq_counts if sparse else q,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(), *do_strides, *dq.stride(), *pad_strides,
            *_sparse_strides(dq_indices, dq_counts), *scalars, **first,
        )
    dq_arg = dq_acc if fused_dq else q
    if dq_tma:  # the accumulator as (B * H, N_Q, d) rows, one (1, BLOCK_M, BLOCK_D) box per reduce-add
        dq_arg = TensorDescriptor(dq_acc, [B * H, n_q, d], [n_q * d, d, 1], [1, dkdv["BLOCK_M"], dkdv["BLOCK_D"]])
    launch(kern.flash_bwd_dkdv_kernel)[dkdv_grid](
        q, k, v, grad_out, dk, dv, dq_arg, stats, pad, seed_arg,
        dkdv_indices if sparse else q, dkdv_counts if sparse else q,
        *q.stride(), *k.stride(), *v.stride(), *do_strides, *dk.stride(), *dv.stride(), *pad_strides,
        *_sparse_strides(dkdv_indices, dkdv_counts), *scalars, **dkdv,
    )
    if dq_acc is not None:  # the one-pass form's float32 dQ sum, rounded to q's dtype
        dq = dq_acc.to(q.dtype) if dq is None else dq.copy_(dq_acc)
    return dq, dk, dv


def launch_fwd(
    q: Tensor, k: Tensor, v: Tensor,
    key_padding_mask: Optional[Tensor], seed: Optional[Tensor],
    fwd_indices: Optional[Tensor], fwd_counts: Optional[Tensor],
    dkdv_indices: Optional[Tensor], dkdv_counts: Optional[Tensor],
    dq_indices: Optional[Tensor], dq_counts: Optional[Tensor],
    causal: bool, dropout_p: float, softmax_scale: float, tiles: list[int],
) -> tuple[Tensor, Tensor]:
    """The forward op's eager body (its signature is the op's schema): (out, row statistics) of
    :func:`forward`."""
    with device_guard(q):
        return forward(eager, q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, causal, dropout_p,
                       softmax_scale, tiles)


def launch_bwd(
    grad_out: Tensor, grad_row_stats: Optional[Tensor],
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, row_stats: Tensor,
    key_padding_mask: Optional[Tensor], seed: Optional[Tensor],
    dkdv_indices: Optional[Tensor], dkdv_counts: Optional[Tensor],
    dq_indices: Optional[Tensor], dq_counts: Optional[Tensor],
    causal: bool, dropout_p: float, softmax_scale: float, tiles: list[int],
) -> tuple[Tensor, Tensor, Tensor]:
    """The backward op's eager body: (dq, dk, dv) of :func:`backward`, contiguous, in the inputs' dtype."""
    with device_guard(q):
        return backward(eager, grad_out, grad_row_stats, q, k, v, out, row_stats, key_padding_mask, seed,
                        dkdv_indices, dkdv_counts, dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles)
