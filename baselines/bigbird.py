"""BigBird attention, ITC variant (Zaheer et al., "Big Bird: Transformers for Longer Sequences",
NeurIPS 2020), block-sparse in plain PyTorch. Independent of our Triton kernels on purpose: it is the
baseline they are compared with.

Defaults are the paper's and LRA's: block size 64, a window of 3 blocks, the first and last blocks
global, 3 random blocks per query block (pattern: `kernels.layouts.bigbird`, as a gather table in
`baselines/bigbird_pattern.py`).

Computation is gather-based, never an N x N mask: the two global query blocks attend densely to all
N keys (2b x N scores); each middle query block gathers its (2 + window + random) key/value blocks
and attends within them (b x slots*b scores). Memory is O(N * slots * b), linear in N.

- The random blocks are fixed per (seed, layer_idx, head) when the module is built (for the block
  count of `max_len`), identical in training and evaluation, and never depend on the global RNG.
  Another sequence length gets its own pattern, derived from the same seed the same way.
- Sequences are padded internally up to a multiple of the block size; those padding keys are masked
  and the padded query rows dropped from the output.
- A sequence with fewer blocks than 2 + window + num_random raises a ValueError (the original code
  silently switches to full attention instead).
- Key padding masks keys in every block (global ones included); a query whose attended keys are all
  padding returns 0. Attention-probability dropout applies in training mode.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from baselines.bigbird_pattern import bigbird_gather_table, check_block_count, min_blocks
from baselines.padding import masked_softmax, safe_key_padding, validate_qkv, zero_empty_rows


class BigBirdAttention(nn.Module):
    """Block-sparse global + window + random attention; see the module docstring."""

    def __init__(
        self,
        num_heads: int,
        block_size: int = 64,
        window: int = 3,
        num_random: int = 3,
        seed: int = 0,
        layer_idx: int = 0,
        max_len: int | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        if num_heads < 1 or block_size < 1:
            raise ValueError(f"bigbird: need num_heads >= 1 and block_size >= 1, got {num_heads}, {block_size}")
        if window < 1 or window % 2 == 0:
            raise ValueError(f"bigbird: window must be an odd number of blocks >= 1, got {window}")
        if num_random < 0:
            raise ValueError(f"bigbird: num_random must be >= 0, got {num_random}")
        self.num_heads = int(num_heads)
        self.block_size = int(block_size)
        self.window = int(window)
        self.num_random = int(num_random)
        self.seed = int(seed)
        self.layer_idx = int(layer_idx)
        self.dropout = float(dropout)
        self.max_blocks = None
        self._tables: dict[tuple[int, str], tuple[Tensor, Tensor]] = {}
        index = valid = None
        if max_len is not None:
            self.max_blocks = math.ceil(max_len / self.block_size)
            check_block_count(self.max_blocks, self.block_size, self.window, self.num_random, seq_len=max_len)
            index, valid = self._make_table(self.max_blocks)
        # The pattern is a function of (seed, layer_idx, block count): rebuilt, not stored in checkpoints.
        self.register_buffer("index", index, persistent=False)
        self.register_buffer("valid", valid, persistent=False)

    @property
    def min_len(self) -> int:
        """Shortest sequence this module accepts."""
        return (min_blocks(self.window, self.num_random) - 1) * self.block_size + 1

    def _make_table(self, n_blocks: int) -> tuple[Tensor, Tensor]:
        return bigbird_gather_table(n_blocks, self.num_heads, self.window, self.num_random, self.seed, self.layer_idx)

    @torch.compiler.disable
    def gather_table(self, n_blocks: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """(index, valid) for `n_blocks` blocks on `device` (cached)."""
        if n_blocks == self.max_blocks and self.index is not None and self.index.device == device:
            return self.index, self.valid
        key = (n_blocks, str(device))
        if key not in self._tables:
            index, valid = self._make_table(n_blocks)
            self._tables[key] = (index.to(device), valid.to(device))
        return self._tables[key]

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        validate_qkv("bigbird attention", q, k, v, key_padding_mask, same_length=True)
        batch, heads, seq_len, head_dim = q.shape
        if heads != self.num_heads:
            raise ValueError(f"bigbird: built for num_heads={self.num_heads} (one pattern per head), got {heads} heads")
        b = self.block_size
        n_blocks = math.ceil(seq_len / b)
        check_block_count(n_blocks, b, self.window, self.num_random, seq_len=seq_len)
        pad = n_blocks * b - seq_len
        if pad:
            q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
            if key_padding_mask is None:
                key_padding_mask = torch.zeros(batch, seq_len, dtype=torch.bool, device=q.device)
            key_padding_mask = F.pad(key_padding_mask, (0, pad), value=True)
        empty = None
        keep = None  # (B, N_pad) True = real key
        if key_padding_mask is not None:
            padding, empty = safe_key_padding(key_padding_mask)
            keep = ~padding
        index, valid = self.gather_table(n_blocks, q.device)  # (H, rows, slots)
        rows, slots = index.shape[1], index.shape[2]
        q = q * (1.0 / math.sqrt(head_dim))
        q_blocks = q.reshape(batch, heads, n_blocks, b, head_dim)

        # Global query blocks (first, last): dense over all keys.
        q_global = torch.cat([q_blocks[:, :, 0], q_blocks[:, :, -1]], dim=2)  # (B, H, 2b, d)
        scores = torch.matmul(q_global, k.transpose(-2, -1))  # (B, H, 2b, N_pad)
        probs = masked_softmax(scores, None if keep is None else keep[:, None, None, :])
        probs = F.dropout(probs, p=self.dropout, training=self.training)
        out_global = torch.matmul(probs.to(v.dtype), v)  # (B, H, 2b, d)

        # Middle query blocks: gather their key/value blocks.
        head_ids = torch.arange(heads, device=q.device)[:, None, None]
        k_sel = k.reshape(batch, heads, n_blocks, b, head_dim)[:, head_ids, index]  # (B, H, rows, slots, b, d)
        v_sel = v.reshape(batch, heads, n_blocks, b, head_dim)[:, head_ids, index]
        k_sel = k_sel.reshape(batch, heads, rows, slots * b, head_dim)
        v_sel = v_sel.reshape(batch, heads, rows, slots * b, head_dim)
        scores = torch.matmul(q_blocks[:, :, 1:-1], k_sel.transpose(-2, -1))  # (B, H, rows, b, slots*b)
        keep_mid = valid[:, :, :, None].expand(heads, rows, slots, b)
        if keep is not None:
            keep_mid = keep_mid & keep.view(batch, n_blocks, b)[:, index]  # (B, H, rows, slots, b)
        keep_mid = keep_mid.reshape(*keep_mid.shape[:-2], 1, slots * b)
        probs = masked_softmax(scores, keep_mid)
        probs = F.dropout(probs, p=self.dropout, training=self.training)
        out_mid = torch.matmul(probs.to(v.dtype), v_sel)  # (B, H, rows, b, d)

        out = torch.cat(
            [out_global[:, :, :b], out_mid.reshape(batch, heads, rows * b, head_dim), out_global[:, :, b:]], dim=2
        )
        return zero_empty_rows(out[:, :, :seq_len], empty)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, block_size={self.block_size}, window={self.window}, "
            f"num_random={self.num_random}, seed={self.seed}, layer_idx={self.layer_idx}, dropout={self.dropout}"
        )
