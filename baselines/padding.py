"""Key-padding handling shared by every attention in `baselines/`.

Conventions (docs/interfaces.md): q/k/v are (B, H, N, d); the key padding mask is bool (B, N) with
True = padding. A query whose keys are *all* padding has no distribution to attend with; every
attention here returns exactly 0 for it, with no NaN in the output or in any gradient.

The trick used throughout: a batch row that is entirely padding is *unmasked* before the softmax (so
no row is ever all -inf and nothing produces NaN), and its output is zeroed afterwards, which also
zeroes every gradient flowing back through it.
"""
from __future__ import annotations

import torch
from torch import Tensor


def validate_qkv(
    name: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    *,
    same_length: bool = False,
) -> None:
    """Raise one clear ValueError/TypeError if q/k/v/mask do not follow the attention contract."""
    for label, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: {label} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name}: {label} must be 4-D (batch, heads, seq_len, head_dim), got shape {tuple(t.shape)}"
            )
        if not t.is_floating_point():
            raise TypeError(f"{name}: {label} must be a floating tensor, got dtype {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name}: q is on {q.device} but {label} is on {t.device}")
    if q.shape[0] != k.shape[0] or q.shape[1] != k.shape[1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"{name}: q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch, heads and head_dim"
        )
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"{name}: k {tuple(k.shape)} and v {tuple(v.shape)} must agree in batch, heads, seq_len")
    if same_length and q.shape[2] != k.shape[2]:
        raise ValueError(
            f"{name}: needs self-attention lengths (q and k of equal seq_len), got {q.shape[2]} and {k.shape[2]}"
        )
    if key_padding_mask is not None:
        if not isinstance(key_padding_mask, Tensor) or key_padding_mask.dtype != torch.bool:
            got = key_padding_mask.dtype if isinstance(key_padding_mask, Tensor) else type(key_padding_mask).__name__
            raise TypeError(f"{name}: key_padding_mask must be a bool tensor (True = padding), got {got}")
        expected = (k.shape[0], k.shape[2])
        if tuple(key_padding_mask.shape) != expected:
            raise ValueError(
                f"{name}: key_padding_mask must have shape (batch, seq_len) = {expected}, "
                f"got {tuple(key_padding_mask.shape)}"
            )
        if key_padding_mask.device != k.device:
            raise ValueError(f"{name}: key_padding_mask is on {key_padding_mask.device} but k is on {k.device}")


def empty_rows(key_padding_mask: Tensor) -> Tensor:
    """(B,) bool: batch rows whose keys are all padding."""
    return key_padding_mask.all(dim=-1)


def safe_key_padding(key_padding_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Return (padding, empty): the mask with all-padding rows unmasked, and those rows (B,).

    Attending with `padding` never meets an all -inf row; call `zero_empty_rows(out, empty)` after.
    """
    empty = empty_rows(key_padding_mask)
    return key_padding_mask & ~empty[:, None], empty


def zero_empty_rows(out: Tensor, empty: Tensor | None) -> Tensor:
    """Zero the (B, H, N, d) output of batch rows flagged in `empty` (B,)."""
    if empty is None:
        return out
    return out.masked_fill(empty[:, None, None, None], 0.0)


def zero_padded(x: Tensor, key_padding_mask: Tensor | None) -> Tensor:
    """Zero the rows of a (B, H, N, d) key/value tensor at padded positions."""
    if key_padding_mask is None:
        return x
    return x.masked_fill(key_padding_mask[:, None, :, None], 0.0)


def attend(scores: Tensor, v: Tensor, *, dropout: float, training: bool) -> Tensor:
    """softmax(scores) @ v with the softmax in float32 even under autocast (float64 stays float64, for
    reference checks) and dropout on the probabilities."""
    softmax_dtype = torch.float64 if scores.dtype == torch.float64 else torch.float32
    probs = torch.softmax(scores, dim=-1, dtype=softmax_dtype)
    probs = torch.nn.functional.dropout(probs, p=dropout, training=training)
    return torch.matmul(probs.to(v.dtype), v)


def masked_softmax(scores: Tensor, keep: Tensor | None, dim: int = -1) -> Tensor:
    """Softmax over `dim` in float32 (float64 stays float64) restricted to `keep` (broadcastable bool).

    Rows with nothing to keep come out as all zeros, never NaN. The result is float32/float64; the
    caller casts it to the value dtype.
    """
    dtype = torch.float64 if scores.dtype == torch.float64 else torch.float32
    if keep is None:
        return torch.softmax(scores, dim=dim, dtype=dtype)
    filled = scores.to(dtype).masked_fill(~keep, torch.finfo(dtype).min)
    probs = torch.softmax(filled, dim=dim)
    # A row with every entry masked is uniform here; multiplying by `keep` turns it into zeros and
    # leaves every other row unchanged (masked entries are already exactly 0 after exp underflow).
    return probs * keep
