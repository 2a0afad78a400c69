"""Block pattern of BigBird-ITC (Zaheer et al., "Big Bird: Transformers for Longer Sequences",
NeurIPS 2020) for the PyTorch baseline, as a gather table.

The pattern is :func:`kernels.layouts.bigbird` with two global blocks, the one builder shared with
the block-sparse kernel's BigBird layout: the first and the last block are global (their queries
attend to every key, every query attends to their keys); every other query block i attends to
- the two global blocks,
- a sliding window of `window` blocks centred on i (no wrap-around),
- `num_random` random blocks drawn from the non-global blocks outside its window.
This is the pattern of the reference code (bigbird `bigbird_block_rand_mask`, LRA
`get_block_rand_mask`), with one difference: LRA draws the random blocks only among the first
1024 tokens (`last_idx=min(seq_length, 1024)`); we draw them from the whole sequence, as the paper
describes. The random draw is seeded by :func:`pattern_seed` of (seed, layer, block count).

For the middle query blocks 1 .. n_blocks-2 the baseline gathers through a fixed-width table
`index` (heads, n_blocks-2, slots) of key-block ids with a `valid` flag per slot, slots =
2 + window + num_random: each row's attended blocks in ascending order, then invalid padding slots
(rows next to a global block or the sequence ends attend to fewer blocks), so no key block is ever
counted twice.
"""
from __future__ import annotations

import torch
from torch import Tensor

from baselines.seeding import derive_seed

NUM_GLOBAL = 2  # ITC: the first and the last block


def min_blocks(window: int, num_random: int) -> int:
    """Fewest blocks for which every middle row has its window, both globals and its random blocks."""
    return NUM_GLOBAL + window + num_random


def check_block_count(n_blocks: int, block_size: int, window: int, num_random: int, seq_len: int | None = None) -> None:
    """Raise a clear ValueError if the sequence is too short for the pattern (no silent fallback)."""
    need = min_blocks(window, num_random)
    if n_blocks < need:
        got = f"N={seq_len} ({n_blocks} blocks)" if seq_len is not None else f"{n_blocks} blocks"
        raise ValueError(
            f"bigbird: the pattern needs at least {need} blocks of {block_size} tokens "
            f"(2 global + window {window} + {num_random} random), i.e. N > {(need - 1) * block_size}; got {got}. "
            f"Use a smaller block_size/window/num_random, or an exact attention for short sequences."
        )


def pattern_seed(seed: int, layer_idx: int, n_blocks: int) -> int:
    """The seed of the random blocks of layer `layer_idx` at `n_blocks` blocks (a stream of its own)."""
    return derive_seed("bigbird", seed, layer_idx, n_blocks)


def bigbird_layout(n_blocks: int, num_heads: int, window: int, num_random: int, seed: int, layer_idx: int) -> Tensor:
    """(num_heads, n_blocks, n_blocks) bool block layout of the baseline: :func:`kernels.layouts.bigbird`
    with two global blocks and the seed :func:`pattern_seed` (an independent draw per head)."""
    # imported here: the baselines stay importable where the kernels package (Triton) is not
    from kernels import layouts

    return layouts.bigbird(n_blocks, num_global=NUM_GLOBAL, window=window, num_random=num_random,
                           seed=pattern_seed(seed, layer_idx, n_blocks), num_heads=num_heads)


def bigbird_gather_table(
    n_blocks: int, num_heads: int, window: int, num_random: int, seed: int, layer_idx: int
) -> tuple[Tensor, Tensor]:
    """(index, valid): int64 and bool tensors of shape (num_heads, n_blocks - 2, 2 + window + num_random)
    of the middle rows of :func:`bigbird_layout`.

    Random blocks are fixed per (seed, layer_idx, head, n_blocks): the same every time it is called.
    """
    if window < 1 or window % 2 == 0:
        raise ValueError(f"bigbird: window must be an odd number of blocks >= 1, got {window}")
    if num_random < 0:
        raise ValueError(f"bigbird: num_random must be >= 0, got {num_random}")
    if n_blocks < min_blocks(window, num_random):
        raise ValueError(
            f"bigbird: the pattern needs at least {min_blocks(window, num_random)} blocks "
            f"(2 global + window {window} + {num_random} random), got {n_blocks}"
        )
    middle = bigbird_layout(n_blocks, num_heads, window, num_random, seed, layer_idx)[:, 1:-1]
    slots = min_blocks(window, num_random)
    counts = middle.sum(-1)
    if int(counts.max()) > slots:  # every middle row has at most its globals, window and random blocks
        raise AssertionError(f"bigbird: a row attends to {int(counts.max())} blocks > {slots} slots")
    # attended blocks first, in ascending order (a stable sort of "not attended")
    index = torch.argsort((~middle).to(torch.uint8), dim=-1, stable=True)[..., :slots]
    valid = torch.arange(slots) < counts[..., None]
    return torch.where(valid, index, 0).contiguous(), valid.contiguous()


def bigbird_block_mask(index: Tensor, valid: Tensor, n_blocks: int) -> Tensor:
    """Dense (heads, n_blocks, n_blocks) bool block mask of a gather table (for tests and plots)."""
    heads = index.shape[0]
    mask = torch.zeros(heads, n_blocks, n_blocks, dtype=torch.bool)
    mask[:, 0, :] = True
    mask[:, -1, :] = True
    one_hot = torch.nn.functional.one_hot(index, n_blocks).bool()  # (heads, rows, slots, n_blocks)
    mask[:, 1:-1, :] = (one_hot & valid[..., None]).any(dim=2)
    return mask
