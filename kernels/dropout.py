"""Attention dropout: seeds, thresholds, the backward form, and the keep-mask testing helper.

Scheme (implemented by ``triton_attention.dropout_keep``, the one Triton function that the
forward, both backward passes and :func:`dropout_keep_mask` call): every call draws one 64-bit seed
from torch's default generator for the device of q (``torch.manual_seed`` makes runs reproducible).
With ``w = Philox4x32-7(key=seed, counter=(j // 16, i, b * H + h, 0))`` (four 32-bit words;
7 rounds: see ``triton_attention.PHILOX_ROUNDS``), element ``(b, h, i, j)`` of the probability matrix is kept iff

    (w[(j % 16) // 4] >> (8 * (j % 4))) & 0xFF  >=  t,    t = min(round(dropout_p * 256), 255)

and kept probabilities are scaled by ``1 / (1 - t / 256)``. So one Philox evaluation decides 16
keys (tiles start at multiples of 16 keys, so a group never straddles two tiles): 16x fewer than one
call per element, which matters because the random numbers, not the matrix products, bound the
kernels' speed under dropout at the LRA head dims (32, 64). The price is that the drop rate is
``dropout_p`` rounded to a multiple of 1/256 (:func:`effective_dropout_p`; 0.1 -> 0.1016); the
scale uses that rounded rate, so the output stays an unbiased estimate of the undropped one. The
reference FlashAttention implementation (flash-attn) makes the same trade: 8-bit random numbers, 16
per Philox call, the keep probability rounded to 1/256 (and scaled by the unrounded rate).

The counter words are the key-group index (below 2**28 for N_k < 2**32), the query index and the
(batch, head) index, each below 2**32, so nothing wraps at N = 64K (N_q * N_k = 2**32) or beyond,
and the mask does not depend on tile sizes: the backward passes, with their own tiles, regenerate
exactly the forward's mask.

Backward (:func:`fused_backward`): under dropout it runs in one pass by default, FlashAttention-2
style: the dK/dV kernel also computes each query tile's dQ share and adds it into a float32 buffer
with atomics (on sm_90, TMA reduce-adds of whole tiles: ``kernels.launch_args.dq_by_tma_reduce``),
so the mask is generated and the probabilities recomputed once instead of
twice (at the LRA head dims the random numbers bound the backward; timings: results/kernels/README.md,
"Reading the grid", the dropout bullet).
The atomics add in an order that varies from run to run, so dQ is not deterministic in its last bits
(dK and dV are). Under ``torch.use_deterministic_algorithms(True)`` (Lightning's
``deterministic=True``), and without dropout (unless :func:`use_one_pass_backward` says otherwise), the
two-pass backward runs instead: dQ over key tiles first (storing the row terms), then dK/dV over query
tiles, no atomics, bit-reproducible. Without dropout the two-pass form is also the faster one
(results/kernels/backward_forms_h200.md).
"""
from __future__ import annotations

import torch
import triton

from . import triton_attention
from .validation import check_attention_inputs

_SEED_HIGH = 2**62


def draw_seed(device: torch.device) -> torch.Tensor:
    """One int64 seed on ``device``, from torch's default generator of that device."""
    return torch.randint(0, _SEED_HIGH, (1,), dtype=torch.int64, device=device)


RANDOM_BITS = 8  # bits of randomness per element


def keep_threshold(dropout_p: float) -> int:
    """Integer threshold on 8 random bits: P(keep) = 1 - threshold / 256."""
    return min(int(round(float(dropout_p) * 2**RANDOM_BITS)), 2**RANDOM_BITS - 1)


def effective_dropout_p(dropout_p: float) -> float:
    """The drop rate the kernels apply for ``dropout_p``: rounded to a multiple of 1/256."""
    return keep_threshold(dropout_p) / 2**RANDOM_BITS


_one_pass_always = False


def use_one_pass_backward(enabled: bool) -> bool:
    """Let calls without dropout take the one-pass backward too (``True``: dQ accumulated by atomics
    in the dK/dV kernel, not bit-reproducible; ``False``, the default: only calls with dropout take
    it), process-wide, from the next call on; deterministic algorithms keep the two-pass form either
    way. Returns the previous setting (to restore it). :func:`kernels.kernel_settings` reports it as
    ``one_pass_backward``."""
    global _one_pass_always
    previous, _one_pass_always = _one_pass_always, bool(enabled)
    return previous


def one_pass_backward_always() -> bool:
    """The setting of :func:`use_one_pass_backward`."""
    return _one_pass_always


def fused_backward(dropout_p: float) -> bool:
    """Whether a call with ``dropout_p`` takes the one-pass backward (atomic dQ): dropout on (or
    :func:`use_one_pass_backward` set) and torch's deterministic algorithms off (see the module
    docstring). Asked when the call's tiles are chosen (``kernels.tiles.select(fused_bwd=...)``) and
    again when its backward runs."""
    return (dropout_p > 0.0 or _one_pass_always) and not torch.are_deterministic_algorithms_enabled()


def dropout_keep_mask(q: torch.Tensor, k: torch.Tensor, dropout_p: float, *,
                      seed: torch.Tensor | None = None) -> torch.Tensor:
    """Keep-mask (bool, (B, H, N_q, N_k), True = kept) of attention dropout — a testing helper.

    With ``seed=None`` it draws the seed exactly as ``flash_attention`` / ``block_sparse_flash_attention``
    do, so re-seeding torch's generator before each replays a call's mask::

        torch.manual_seed(0); out = flash_attention(q, k, v, dropout_p=0.1)
        torch.manual_seed(0); keep = dropout_keep_mask(q, k, 0.1)
        # out == softmax(q k^T * scale) * keep / (1 - effective_dropout_p(0.1)) @ v

    The mask comes from the same Triton code the attention kernels run (Philox counters, see this
    module's docstring). It materialises B * H * N_q * N_k bytes: use it on test-sized inputs.
    """
    shape = check_attention_inputs(q, k, k, None, False, dropout_p, None)
    if seed is None:
        seed = draw_seed(q.device)
    if not isinstance(seed, torch.Tensor) or seed.dtype != torch.int64 or seed.numel() != 1:
        raise TypeError("seed must be a one-element int64 tensor (as drawn by kernels.dropout.draw_seed)")
    seed = seed.to(q.device)
    out = torch.empty((shape.batch, shape.heads, shape.n_q, shape.n_k), dtype=torch.uint8, device=q.device)
    # tiles of up to 2**14 elements, as wide as the keys need (few programs for the interpreter)
    block_m = min(64, triton.next_power_of_2(shape.n_q))
    block_n = min(16384 // block_m, max(16, triton.next_power_of_2(shape.n_k)))
    grid = (triton.cdiv(shape.n_q, block_m), triton.cdiv(shape.n_k, block_n), shape.batch * shape.heads)
    triton_attention.dropout_mask_kernel[grid](out, seed, shape.heads, shape.n_q, shape.n_k,
                                               keep_threshold(dropout_p), BLOCK_M=block_m, BLOCK_N=block_n)
    return out.bool()
