"""Block pattern of BigBird-ITC (Zaheer et al., "Big Bird: Transformers for Longer Sequences",
NeurIPS 2020), as a gather table.

The sequence is cut into n_blocks blocks. ITC ("internal transformer construction"): the first and
the last block are global (their queries attend to every key, every query attends to their keys).
Every other query block i attends to
- the two global blocks,
- a sliding window of `window` blocks centred on i (no wrap-around),
- `num_random` random blocks drawn from the non-global blocks outside its window.
This is the pattern of the reference code (bigbird `bigbird_block_rand_mask`, LRA
`get_block_rand_mask`), with one difference: LRA draws the random blocks only among the first
1024 tokens (`last_idx=min(seq_length, 1024)`); we draw them from the whole sequence, as the paper
describes.

For the middle query blocks 1 .. n_blocks-2 the pattern is a fixed-width table `index`
(heads, n_blocks-2, slots) of key-block ids with a `valid` flag per slot, slots =
2 + window + num_random. A slot is invalid when its window block falls outside the sequence or
repeats a global block (near the ends), so no key block is ever counted twice.
"""
from __future__ import annotations

import torch
from torch import Tensor

from baselines.seeding import generator


def min_blocks(window: int, num_random: int) -> int:
    """Fewest blocks for which every middle row has its window, both globals and its random blocks."""
    return 2 + window + num_random


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


def bigbird_gather_table(
    n_blocks: int, num_heads: int, window: int, num_random: int, seed: int, layer_idx: int
) -> tuple[Tensor, Tensor]:
    """(index, valid): int64 and bool tensors of shape (num_heads, n_blocks - 2, 2 + window + num_random).

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
    half = window // 2
    last = n_blocks - 1
    rows = torch.arange(1, last)  # middle query blocks
    offsets = torch.arange(-half, half + 1)
    window_ids = rows[:, None] + offsets[None, :]  # (rows, window)
    window_valid = (window_ids >= 1) & (window_ids <= last - 1)  # globals are covered by their own slots
    fixed_ids = torch.cat(
        [torch.zeros(len(rows), 1, dtype=torch.long), window_ids.clamp(0, last), torch.full((len(rows), 1), last)],
        dim=1,
    )
    global_slot = torch.ones(len(rows), 1, dtype=torch.bool)
    fixed_valid = torch.cat([global_slot, window_valid, global_slot], dim=1)

    gen = generator("bigbird", seed, layer_idx, n_blocks)
    random_ids = torch.empty(num_heads, len(rows), num_random, dtype=torch.long)
    for r, i in enumerate(rows.tolist()):
        candidates = [j for j in range(1, last) if abs(j - i) > half]
        if len(candidates) < num_random:  # guarded by check_block_count; kept as an invariant
            raise AssertionError(f"bigbird: row {i} has {len(candidates)} random candidates < {num_random}")
        candidates_t = torch.tensor(candidates, dtype=torch.long)
        for h in range(num_heads):
            pick = torch.randperm(len(candidates), generator=gen)[:num_random]
            random_ids[h, r] = candidates_t[pick].sort().values

    index = torch.cat([fixed_ids.expand(num_heads, -1, -1), random_ids], dim=2)
    valid = torch.cat(
        [fixed_valid.expand(num_heads, -1, -1), torch.ones(num_heads, len(rows), num_random, dtype=torch.bool)], 2
    )
    return index.contiguous(), valid.contiguous()


def bigbird_block_mask(index: Tensor, valid: Tensor, n_blocks: int) -> Tensor:
    """Dense (heads, n_blocks, n_blocks) bool block mask of a gather table (for tests and plots)."""
    heads = index.shape[0]
    mask = torch.zeros(heads, n_blocks, n_blocks, dtype=torch.bool)
    mask[:, 0, :] = True
    mask[:, -1, :] = True
    one_hot = torch.nn.functional.one_hot(index, n_blocks).bool()  # (heads, rows, slots, n_blocks)
    mask[:, 1:-1, :] = (one_hot & valid[..., None]).any(dim=2)
    return mask
