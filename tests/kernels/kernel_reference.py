"""float64 PyTorch references for the attention kernels (written once, used by every kernel test)."""
from __future__ import annotations

import math

import numpy as np
import torch


def expand_layout(layout: torch.Tensor, block_size: int, n_q: int, n_k: int) -> torch.Tensor:
    """Block layout (n_qb, n_kb) or (H, n_qb, n_kb) -> element mask (1 or H, n_q, n_k), True = allowed."""
    lay = layout if layout.dim() == 3 else layout[None]
    rows = torch.arange(n_q) // block_size
    cols = torch.arange(n_k) // block_size
    return lay.cpu()[:, rows][:, :, cols]


def attention_reference(q, k, v, *, key_padding_mask=None, causal=False, softmax_scale=None, keep=None,
                        dropout_p=0.0, allowed=None):
    """Returns (out, lse) in float64. keep: bool (B, H, N_q, N_k) dropout keep-mask; allowed: bool mask
    broadcastable to (B, H, N_q, N_k) (block-sparse pattern). Rows with no allowed key give 0 and
    lse = -inf; their gradient is zero."""
    q, k, v = (x.detach().double() if not x.requires_grad else x.double() for x in (q, k, v))
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    s = (q @ k.transpose(-1, -2)) * scale
    dev = q.device
    ok = torch.ones(n_q, n_k, dtype=torch.bool, device=dev)[None, None]
    if causal:
        ok = ok & (torch.arange(n_k, device=dev)[None, :] <= torch.arange(n_q, device=dev)[:, None] + (n_k - n_q))
    if key_padding_mask is not None:
        ok = ok & ~key_padding_mask.to(dev)[:, None, None, :]
    if allowed is not None:
        ok = ok & allowed.to(dev)
    ok = ok.expand(s.shape)
    s = s.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    any_ok = ok.any(-1, keepdim=True)
    p = torch.where(any_ok, torch.softmax(torch.where(any_ok, s, torch.zeros_like(s)), dim=-1), torch.zeros_like(s))
    p = p.masked_fill(~ok, 0.0)
    if keep is not None:
        # the kernels round the drop rate to a multiple of 1/256 and scale by the rounded rate
        p_eff = min(round(dropout_p * 256), 255) / 256
        p = p * keep.to(dev).double() / (1.0 - p_eff)
    return p @ v, lse


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected|| / ||expected|| in float64 (0 if both are zero); NaN never passes."""
    a, e = actual.detach().cpu().double(), expected.detach().cpu().double()
    if not torch.isfinite(a).all():
        return float("inf")
    denom = e.norm().item()
    diff = (a - e).norm().item()
    return diff if denom == 0 else diff / denom


# --- Philox-4x32 in NumPy (Salmon et al., 2011), to check the kernels' dropout counters --------------
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)


def philox4x32(seed: int, c0, c1, c2, c3, rounds: int = 10):
    c = [np.asarray(x, dtype=np.uint32) for x in np.broadcast_arrays(c0, c1, c2, c3)]
    k0, k1 = np.uint32(seed & 0xFFFFFFFF), np.uint32((seed >> 32) & 0xFFFFFFFF)
    with np.errstate(over="ignore"):
        for _ in range(rounds):
            p0 = _M0 * c[0].astype(np.uint64)
            p1 = _M1 * c[2].astype(np.uint64)
            hi0, lo0 = (p0 >> np.uint64(32)).astype(np.uint32), p0.astype(np.uint32)
            hi1, lo1 = (p1 >> np.uint64(32)).astype(np.uint32), p1.astype(np.uint32)
            c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
            k0, k1 = k0 + _W0, k1 + _W1
    return c


def dropout_keep_reference(seed: int, heads: int, rows: np.ndarray, cols: np.ndarray, b: int, h: int,
                           dropout_p: float, rounds: int = 7) -> np.ndarray:
    """The documented scheme: with w = Philox-4x32-<rounds>(seed, (j // 16, i, b*H+h, 0)), keep (i, j) of (b, h) iff
    byte j % 4 of word w[(j % 16) // 4] >= min(round(p * 256), 255)."""
    cols = np.asarray(cols)
    words = philox4x32(seed, (cols // 16)[None, :], rows[:, None], np.uint32(b * heads + h), np.uint32(0), rounds)
    words = np.stack(np.broadcast_arrays(*words))  # (4, rows, cols)
    w = np.take_along_axis(words, np.broadcast_to((cols % 16) // 4, words.shape[1:])[None], axis=0)[0]
    octet = (w >> (np.uint32(8) * (cols % 4).astype(np.uint32))) & np.uint32(0xFF)
    return octet.astype(np.int64) >= min(int(round(dropout_p * 256)), 255)
