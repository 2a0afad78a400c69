"""BigBird-ITC: equals dense attention under its own element mask; pattern, padding, length limits."""
import math

import pytest
import torch

from baselines.bigbird import BigBirdAttention
from baselines.bigbird_pattern import bigbird_block_mask, bigbird_gather_table


def dense_under_block_mask(q, k, v, block_mask, block_size, key_padding_mask=None):
    """float64 dense attention restricted to `block_mask` (H, nb, nb) expanded to tokens."""
    n = q.shape[2]
    token_mask = block_mask.repeat_interleave(block_size, 1).repeat_interleave(block_size, 2)[:, :n, :n]
    allowed = token_mask[None]  # (1, H, N, N)
    if key_padding_mask is not None:
        allowed = allowed & ~key_padding_mask[:, None, None, :]
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, dim=-1)) @ v


def inputs(b=2, h=3, n=100, d=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=gen, dtype=torch.float64) for _ in range(3))


@pytest.mark.parametrize("n", [96, 100])  # a multiple of the block, and one padded internally
@pytest.mark.parametrize("with_mask", [False, True])
def test_equals_dense_attention_under_its_block_mask(n, with_mask):
    block, heads = 8, 3
    q, k, v = inputs(h=heads, n=n)
    mask = None
    if with_mask:
        mask = torch.zeros(2, n, dtype=torch.bool)
        mask[1, 61:] = True
    attention = BigBirdAttention(num_heads=heads, block_size=block, seed=4, layer_idx=2, max_len=n)
    n_blocks = math.ceil(n / block)
    index, valid = attention.gather_table(n_blocks, torch.device("cpu"))
    expected = dense_under_block_mask(q, k, v, bigbird_block_mask(index, valid, n_blocks), block, mask)
    torch.testing.assert_close(attention(q, k, v, mask), expected, rtol=1e-10, atol=1e-12)


def test_pattern_is_itc_global_window_random():
    n_blocks, heads, window, r = 20, 4, 3, 3
    index, valid = bigbird_gather_table(n_blocks, heads, window, r, seed=0, layer_idx=0)
    mask = bigbird_block_mask(index, valid, n_blocks)
    assert mask[:, 0].all() and mask[:, -1].all()  # global rows
    assert mask[:, :, 0].all() and mask[:, :, -1].all()  # global columns
    for h in range(heads):
        for i in range(1, n_blocks - 1):
            row = set(torch.nonzero(mask[h, i]).flatten().tolist())
            window_blocks = {j for j in range(i - 1, i + 2)}
            assert window_blocks | {0, n_blocks - 1} <= row
            random_blocks = row - window_blocks - {0, n_blocks - 1}
            assert len(random_blocks) == r, (h, i, row)
            # No slot is counted twice: valid slots name distinct blocks.
            ids = index[h, i - 1][valid[h, i - 1]].tolist()
            assert len(ids) == len(set(ids)) == len(row)
    # Random blocks differ across heads and layers, and are reproducible.
    assert not torch.equal(mask[0], mask[1])
    again, _ = bigbird_gather_table(n_blocks, heads, window, r, seed=0, layer_idx=0)
    other_layer, _ = bigbird_gather_table(n_blocks, heads, window, r, seed=0, layer_idx=1)
    assert torch.equal(index, again) and not torch.equal(index, other_layer)


def test_same_pattern_in_training_and_evaluation():
    q, k, v = inputs(n=80)
    attention = BigBirdAttention(num_heads=3, block_size=8, max_len=80)
    train_out = attention.train()(q, k, v)
    eval_out = attention.eval()(q, k, v)
    assert torch.equal(train_out, eval_out)


def test_padded_keys_do_not_leak_and_empty_rows_are_zero():
    q, k, v = (t.float() for t in inputs(n=90))
    mask = torch.zeros(2, 90, dtype=torch.bool)
    mask[0] = True
    mask[1, 50:] = True
    attention = BigBirdAttention(num_heads=3, block_size=8)
    out = attention(q, k, v, mask)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 50:], v2[:, :, 50:] = 1e4, -1e4
    torch.testing.assert_close(attention(q, k2, v2, mask), out, rtol=0, atol=0)
    q.requires_grad_(True)
    attention(q, k, v, mask).sum().backward()
    assert torch.isfinite(q.grad).all()


def test_too_short_sequences_raise_instead_of_switching_to_full_attention():
    with pytest.raises(ValueError, match=r"at least 8 blocks of 64 tokens.*N > 448"):
        BigBirdAttention(num_heads=2, max_len=448)
    attention = BigBirdAttention(num_heads=2, block_size=8)
    q, k, v = (t.float() for t in inputs(h=2, n=50))
    with pytest.raises(ValueError, match="got N=50"):
        attention(q, k, v)
    assert attention.min_len == 57


def test_runs_at_16k_tokens_through_block_gathers():
    q, k, v = (torch.randn(1, 1, 16384, 8) for _ in range(3))
    out = BigBirdAttention(num_heads=1, max_len=16384)(q, k, v)
    assert out.shape == (1, 1, 16384, 8) and torch.isfinite(out).all()


def test_wrong_head_count_rejected():
    q, k, v = (t.float() for t in inputs(h=2, n=80))
    with pytest.raises(ValueError, match="num_heads=3"):
        BigBirdAttention(num_heads=3, block_size=8)(q, k, v)


def attended_blocks(attention, n, block):
    """(H, n_blocks, n_blocks) bool: which key blocks each query block of `attention` attends to, read
    off its output. With q = 0 every attended key gets the same weight, and key j's value is the
    one-hot vector of its block, so output column b of a query is > 0 exactly when block b is attended."""
    heads, n_blocks = attention.num_heads, math.ceil(n / block)
    q = torch.zeros(1, heads, n, n_blocks, dtype=torch.float64)
    k = torch.randn(1, heads, n, n_blocks, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    v = torch.nn.functional.one_hot(torch.arange(n) // block, n_blocks).to(torch.float64).expand(1, heads, n, n_blocks)
    out = attention(q, k, v)[0]  # (H, N, n_blocks)
    return out[:, ::block] > 0  # the first query of each block


@pytest.mark.parametrize("n, block, window, num_random, seed, layer_idx", [
    (96, 8, 3, 3, 0, 0),    # 12 blocks
    (100, 8, 3, 3, 4, 2),   # 13 blocks, the last one padded
    (160, 16, 5, 2, 7, 1),  # 10 blocks, a wider window
    (64, 8, 3, 3, 1, 0),    # 8 blocks: the fewest the pattern takes
    (144, 12, 1, 4, 3, 5),  # block size not a power of two, window of one block
])
def test_attends_exactly_the_kernels_bigbird_layout(n, block, window, num_random, seed, layer_idx):
    """One BigBird pattern: the baseline attends to exactly the (query block, key block) pairs of
    kernels.layouts.bigbird built with two global blocks and the baseline's seed of this layer and
    block count -- the same random blocks from the same generator, per head."""
    from kernels import layouts

    from baselines.bigbird_pattern import pattern_seed

    heads = 3
    attention = BigBirdAttention(num_heads=heads, block_size=block, window=window, num_random=num_random, seed=seed,
                                 layer_idx=layer_idx, max_len=n)
    n_blocks = math.ceil(n / block)
    layout = layouts.bigbird(n_blocks, num_global=2, window=window, num_random=num_random,
                             seed=pattern_seed(seed, layer_idx, n_blocks), num_heads=heads)
    assert torch.equal(attended_blocks(attention, n, block), layout)
    index, valid = attention.gather_table(n_blocks, torch.device("cpu"))
    assert torch.equal(bigbird_block_mask(index, valid, n_blocks), layout)
