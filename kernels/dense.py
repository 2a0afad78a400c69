"""``flash_attention``: dense FlashAttention (forward + backward) in Triton."""
from __future__ import annotations

import math

import torch

from . import ops
from .autograd import packed_views
from .launch_args import lse_of
from .dropout import draw_seed, fused_backward
from .tiles import select
from .validation import check_attention_inputs


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, key_padding_mask: torch.Tensor | None = None,
                    causal: bool = False, dropout_p: float = 0.0, softmax_scale: float | None = None,
                    return_lse: bool = False):
    """Exact softmax attention, ``softmax(q k^T * scale) v``, without materialising the N_q x N_k matrix.

    Args:
        q: (B, H, N_q, d); k, v: (B, H, N_k, d) — the layout of
            ``torch.nn.functional.scaled_dot_product_attention``. float16, bfloat16 (fast path) or
            float32; 1 <= d <= 128 (any d, padded inside the kernel to a power of two); N_q may
            differ from N_k; any strides (views of a fused QKV projection are read in place).
        key_padding_mask: optional bool (B, N_k); **True marks padding keys**, which get no
            attention (the ``nn.MultiheadAttention`` convention).
        causal: query i attends to keys j <= i + (N_k - N_q): the mask is aligned to the
            bottom-right corner, as in flash-attn 2.1+, so with N_q == N_k it is the usual lower
            triangle and with N_q < N_k the queries are the last N_q positions of the key sequence.
            Query rows with no visible key (possible when N_q > N_k) return zeros.
        dropout_p: dropout on the attention probabilities (applied whenever > 0, like
            ``F.scaled_dot_product_attention``; pass 0 in evaluation). Counter-based Philox with a
            seed drawn from torch's generator, so ``torch.manual_seed`` reproduces it; see
            :mod:`kernels.dropout` and :func:`kernels.dropout_keep_mask`.
        softmax_scale: default ``1 / sqrt(d)``.
        return_lse: also return the float32 log-sum-exp of the scaled scores, (B, H, N_q)
            (``-inf`` for a row that sees no key; a view of the kernels' per-row statistics, not
            contiguous). It is differentiable.

    The output, (B, H, N_q, d), is laid out in memory like q: for views of a fused projection
    (heads inside tokens) it is a view of a contiguous (B, N_q, H, d) tensor, as with SDPA's cuDNN
    back-end, so merging the heads afterwards costs no copy.
    A query row whose keys are all masked returns 0 and passes zero gradient (never NaN).
    On an sm_90 GPU with a Triton release the Hopper kernels support, the eager forward of a 16-bit
    call without dropout runs the Hopper ping-pong kernel (:mod:`kernels.hopper_attention`) for
    d = 128, and for d = 64 at N_k >= 2048, where it is faster; :func:`kernels.use_hopper_forward`
    turns this off.
    Gradients flow to q, k and v; the backward recomputes the probabilities from the saved
    log-sum-exp. Without dropout it is deterministic and uses no atomics; with dropout it runs in
    one pass, its dQ summed with atomics and so varying in its last bits (faster: the mask is
    generated once), unless ``torch.use_deterministic_algorithms(True)`` is in force, which gives the
    deterministic two-pass form (see :mod:`kernels.dropout`). Works under
    ``torch.compile(fullgraph=True)``.
    Raises ``ValueError``/``TypeError`` naming the problem for bad input, before any launch.
    """
    scale, dropout_p, seed, tiles = _prepare(q, k, v, key_padding_mask, causal, dropout_p, softmax_scale)
    out, row_stats = ops.attention(q, k, v, key_padding_mask, seed, _NO_LISTS, causal, dropout_p, scale, tiles)
    return (out, lse_of(row_stats)) if return_lse else out


def flash_attention_qkvpacked(qkv: torch.Tensor, *, key_padding_mask: torch.Tensor | None = None,
                              causal: bool = False, dropout_p: float = 0.0,
                              softmax_scale: float | None = None) -> torch.Tensor:
    """:func:`flash_attention` of the q, k, v packed in one (B, N, 3, H, d) tensor — the output of a
    fused QKV projection viewed as (B, N, 3, H, d) — returning (B, N, H, d) (heads merge with a free
    ``.view(B, N, H * d)``). Same kernels, results and arguments (self-attention: N_q = N_k); the
    gradient comes back as one (B, N, 3, H, d) tensor. In eager mode this skips the view, permute
    and copy operations that q/k/v views cost their caller (see
    :class:`kernels.autograd.PackedFlashFunction`).
    """
    q, k, v = views = packed_views(qkv)
    scale, p, seed, tiles = _prepare(q, k, v, key_padding_mask, causal, dropout_p, softmax_scale)
    return ops.attention_packed(qkv, views, key_padding_mask, seed, _NO_LISTS, causal, p, scale, tiles)


_NO_LISTS = (None,) * 6  # dense: no block-sparse index lists


def _prepare(q, k, v, key_padding_mask, causal, dropout_p, softmax_scale):
    """Checked inputs -> (scale, dropout_p, seed, tiles) of a dense call."""
    shape = check_attention_inputs(q, k, v, key_padding_mask, causal, dropout_p, softmax_scale)
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(shape.head_dim)
    dropout_p = float(dropout_p)
    seed = draw_seed(q.device) if dropout_p > 0.0 else None
    tiles = select(q.device, q.dtype, shape.head_dim, dropout=dropout_p > 0.0,
                   fused_bwd=fused_backward(dropout_p)).as_list()
    return scale, dropout_p, seed, tiles
