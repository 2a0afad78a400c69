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

from . import triton_attention as kern
from .dropout import effective_dropout_p, fused_backward, keep_threshold
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
    context and stream); no guard when it already is (the common case: one cheap device query)."""
    device = t.device
    if device.type != "cuda" or device.index == torch.cuda.current_device():
        return _NO_GUARD
    return torch.cuda.device(device)


def new_output(q: Tensor) -> Tensor:
    """An uninitialised (B, H, N_q, d) output in q's dtype, laid out in memory like q: when q is a
    (B, N, H, d)-ordered view (heads inside tokens, e.g. a slice of a fused QKV projection) the output
    is a (B, H, N, d) view of a contiguous (B, N, H, d) tensor, so that ``out.transpose(1, 2)`` is
    contiguous and the caller's merge of the heads costs no copy (PyTorch's cuDNN attention does the
    same); otherwise contiguous (B, H, N, d). Also the fake kernels' shape function."""
    B, H, n_q, d = q.shape
    if H > 1 and q.stride(1) < q.stride(2):
        return q.new_empty((B, n_q, H, d)).transpose(1, 2)
    return q.new_empty((B, H, n_q, d))


def backward_buffers(B: int, H: int, n_q: int, d: int, device: torch.device,
                     fused_dq: bool) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """The backward's float32 work buffers: delta and the rescaled lse (B, H, N_q) (written by the dQ
    kernel, or the preprocess kernel of the one-pass form), and with the one-pass dropout backward
    dQ's sum (B, H, N_q, d), contiguous as the kernels address it (zeroed by the preprocess kernel);
    else None."""
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=device)
    lse2 = torch.empty((B, H, n_q), dtype=torch.float32, device=device)
    dq_acc = torch.empty((B, H, n_q, d), dtype=torch.float32, device=device) if fused_dq else None
    return delta, lse2, dq_acc


def _s4(t: Tensor) -> tuple[int, int, int, int]:
    return tuple(t.stride())  # type: ignore[return-value]


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


@functools.lru_cache(maxsize=64)
def _tiles(tiles: tuple[int, ...]) -> Tiles:
    return Tiles.from_list(tiles)


@functools.lru_cache(maxsize=64)
def _dropout_args(dropout_p: float) -> tuple[int, float]:
    if dropout_p > 0.0:
        return keep_threshold(dropout_p), 1.0 / (1.0 - effective_dropout_p(dropout_p))
    return 0, 1.0


def _dot_flags(q: Tensor) -> dict:
    """DOT_PREC: exact IEEE products for float32 inputs (no TF32 rounding); for 16-bit inputs the
    setting does not apply: on CUDA it is spelled out as Triton's default ("tf32", the same code as
    None) because Inductor's recompilation of the kernels under the triton_op form fails on a None
    constexpr; the interpreter keeps None.
    UPCAST: Triton's interpreter multiplies bfloat16 dot operands as raw integers, so on CPU the
    kernels convert bfloat16 tiles to float32 after loading (bf16 products are exact in float32)."""
    cuda = q.device.type == "cuda"
    return dict(DOT_PREC="ieee" if q.dtype == torch.float32 else ("tf32" if cuda else None),
                UPCAST=q.dtype == torch.bfloat16 and not cuda)


def _pass_flags(q: Tensor, k: Tensor, t: PassTiles) -> dict:
    """The tile and shape constexprs of one pass, and its launch options."""
    d = q.shape[3]
    d_pad = padded_head_dim(d)
    return dict(BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_D=d_pad, EVEN_M=q.shape[2] % t.block_m == 0,
                EVEN_N=k.shape[2] % t.block_n == 0, EVEN_D=d_pad == d, **_dot_flags(q),
                num_warps=t.num_warps, num_stages=t.num_stages)


def forward(launch: Callable, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor],
            seed: Optional[Tensor], fwd_indices: Optional[Tensor], fwd_counts: Optional[Tensor], causal: bool,
            dropout_p: float, softmax_scale: float, tiles: list[int]) -> tuple[Tensor, Tensor]:
    """The forward launch: (out (B, H, N_q, d) in q's dtype, laid out like q, lse (B, H, N_q) float32)."""
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    out = new_output(q)
    lse = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    pad = key_padding_mask if key_padding_mask is not None else q  # bool, read as 8-bit by the kernels
    sparse = fwd_indices is not None
    t = _tiles(tuple(tiles)).fwd
    drop_threshold, drop_scale = _dropout_args(dropout_p)
    launch(kern.flash_fwd_kernel)[_grid(cdiv(n_q, t.block_m), B * H, sparse)](
        # unused tensor arguments get q as a placeholder
        q, k, v, out, lse, pad, seed if seed is not None else q, fwd_indices if sparse else q,
        fwd_counts if sparse else q,
        *_s4(q), *_s4(k), *_s4(v), *_s4(out),
        pad.stride(0) if key_padding_mask is not None else 0, pad.stride(1) if key_padding_mask is not None else 0,
        *_sparse_strides(fwd_indices, fwd_counts),
        H, n_q, n_k, d, n_k - n_q, softmax_scale * kern.LOG2E, drop_threshold, drop_scale,
        **_pass_flags(q, k, t), IS_CAUSAL=causal, HAS_PAD=key_padding_mask is not None,
        HAS_DROPOUT=dropout_p > 0.0, SPARSE=sparse,
    )
    return out, lse


def backward(launch: Callable, grad_out, grad_lse, q, k, v, out, lse, key_padding_mask, seed, dkdv_indices,
             dkdv_counts, dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles,
             grads: Optional[tuple] = None):
    """The backward launches -> (dq, dk, dv): the dQ kernel, which also stores every query row's
    delta and rescaled lse, then the dK/dV kernel, which reads them (launched in that order on one
    stream, or ordered by the data dependency under the triton_op form). With the one-pass dropout
    backward (:func:`kernels.dropout.fused_backward`) the preprocess kernel computes delta and the
    rescaled lse and zeroes a float32 dQ buffer, and the dK/dV kernel computes dQ into it; the dQ
    kernel is not launched.
    ``grads``: (dq, dk, dv) tensors of q's, k's and v's shapes and dtype, any strides, to write the
    gradients into (the packed path's views of one dQKV tensor); default: new contiguous ones."""
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    fused_dq = fused_backward(dropout_p)
    delta, lse2, dq_acc = backward_buffers(B, H, n_q, d, q.device, fused_dq)
    if grads is not None:
        dq, dk, dv = grads
    else:
        dq = None if fused_dq else torch.empty((B, H, n_q, d), dtype=q.dtype, device=q.device)
        dk = torch.empty((B, H, n_k, d), dtype=k.dtype, device=k.device)
        dv = torch.empty((B, H, n_k, d), dtype=v.dtype, device=v.device)
    if grad_lse is not None:
        grad_lse = grad_lse.contiguous()
    pad = key_padding_mask if key_padding_mask is not None else q  # bool, read as 8-bit by the kernels
    sparse = dkdv_indices is not None
    seed_arg = seed if seed is not None else q
    all_tiles = _tiles(tuple(tiles))
    pad_strides = (pad.stride(0), pad.stride(1)) if key_padding_mask is not None else (0, 0)
    drop_threshold, drop_scale = _dropout_args(dropout_p)
    qk_scale = softmax_scale * kern.LOG2E
    flags = dict(IS_CAUSAL=causal, HAS_PAD=key_padding_mask is not None, HAS_DROPOUT=dropout_p > 0.0, SPARSE=sparse)
    # unused tensor arguments get a placeholder
    if fused_dq:
        pre_m = 64
        launch(kern.flash_bwd_preprocess_kernel)[(cdiv(n_q, pre_m), B * H)](
            out, grad_out, lse, grad_lse if grad_lse is not None else lse, delta, lse2, dq_acc,
            *_s4(out), *_s4(grad_out), H, n_q, d,
            BLOCK_M=pre_m, BLOCK_D=padded_head_dim(d), HAS_DLSE=grad_lse is not None,
        )
    else:
        t = all_tiles.dq
        launch(kern.flash_bwd_dq_kernel)[_grid(cdiv(n_q, t.block_m), B * H, sparse)](
            q, k, v, out, grad_out, dq, lse, grad_lse if grad_lse is not None else lse, lse2, delta, pad, seed_arg,
            dq_indices if sparse else q, dq_counts if sparse else q,
            *_s4(q), *_s4(k), *_s4(v), *_s4(out), *_s4(grad_out), *_s4(dq), *pad_strides,
            *_sparse_strides(dq_indices, dq_counts),
            H, n_q, n_k, d, n_k - n_q, qk_scale, softmax_scale, drop_threshold, drop_scale,
            **_pass_flags(q, k, t), **flags, HAS_DLSE=grad_lse is not None,
        )
    t = all_tiles.dkdv
    launch(kern.flash_bwd_dkdv_kernel)[_grid(cdiv(n_k, t.block_n), B * H, sparse)](
        q, k, v, grad_out, dk, dv, dq_acc if fused_dq else q, lse2, delta, pad, seed_arg,
        dkdv_indices if sparse else q, dkdv_counts if sparse else q,
        *_s4(q), *_s4(k), *_s4(v), *_s4(grad_out), *_s4(dk), *_s4(dv), *pad_strides,
        *_sparse_strides(dkdv_indices, dkdv_counts),
        H, n_q, n_k, d, n_k - n_q, qk_scale, softmax_scale, drop_threshold, drop_scale,
        **_pass_flags(q, k, t), **flags, FUSED_DQ=fused_dq,
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
    """The forward op's eager body (its signature is the op's schema): (out, lse) of :func:`forward`."""
    with device_guard(q):
        return forward(eager, q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, causal, dropout_p,
                       softmax_scale, tiles)


def launch_bwd(
    grad_out: Tensor, grad_lse: Optional[Tensor],
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    key_padding_mask: Optional[Tensor], seed: Optional[Tensor],
    dkdv_indices: Optional[Tensor], dkdv_counts: Optional[Tensor],
    dq_indices: Optional[Tensor], dq_counts: Optional[Tensor],
    causal: bool, dropout_p: float, softmax_scale: float, tiles: list[int],
) -> tuple[Tensor, Tensor, Tensor]:
    """The backward op's eager body: (dq, dk, dv) of :func:`backward`, contiguous, in the inputs' dtype."""
    with device_guard(q):
        return backward(eager, grad_out, grad_lse, q, k, v, out, lse, key_padding_mask, seed, dkdv_indices,
                        dkdv_counts, dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles)
