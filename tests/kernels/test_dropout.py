"""Attention dropout: mask replay against the reference, mean of many draws, seeds, Philox counters."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_helpers import DEVICE, TOL, check_against_reference, make_qkv
from kernel_reference import attention_reference, dropout_keep_reference, rel_err

from kernels import block_sparse_flash_attention, dropout_keep_mask, flash_attention
from kernels.tiles import PassTiles, Tiles, override


@pytest.mark.parametrize("dtype,causal", [(torch.float32, False), (torch.bfloat16, True)])
def test_dropout_replays_in_reference(dtype, causal):
    q, k, v = make_qkv(2, 2, 70, 90, 32, dtype, seed=11)
    mask = torch.zeros(2, 90, dtype=torch.bool, device=DEVICE)
    mask[1, 80:] = True
    p = 0.3
    torch.manual_seed(123)
    keep = dropout_keep_mask(q, k, p)
    assert keep.shape == (2, 2, 70, 90) and keep.dtype == torch.bool
    torch.manual_seed(123)
    check_against_reference(flash_attention, q, k, v, dropout_p=p, causal=causal, key_padding_mask=mask,
                            ref_kwargs=dict(keep=keep, dropout_p=p, causal=causal, key_padding_mask=mask))


def test_dropout_mask_does_not_depend_on_tiles():
    """Forward and backward use different tiles here; the replayed reference still matches."""
    q, k, v = make_qkv(1, 2, 50, 45, 16, torch.float32, seed=12)
    p = 0.5
    torch.manual_seed(5)
    keep = dropout_keep_mask(q, k, p)
    with override(Tiles(PassTiles(32, 16), PassTiles(16, 32), PassTiles(16, 16))):
        torch.manual_seed(5)
        check_against_reference(flash_attention, q, k, v, dropout_p=p, causal=True,
                                ref_kwargs=dict(keep=keep, dropout_p=p, causal=True))


def test_block_sparse_dropout_replays():
    q, k, v = make_qkv(1, 2, 64, 64, 16, torch.float32, seed=13)
    layout = torch.tensor([[True, False], [True, True]], device=DEVICE)
    from kernel_reference import expand_layout
    torch.manual_seed(9)
    keep = dropout_keep_mask(q, k, 0.2)
    torch.manual_seed(9)
    check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=32, dropout_p=0.2,
                            ref_kwargs=dict(keep=keep, dropout_p=0.2, allowed=expand_layout(layout, 32, 64, 64)))


def test_mean_of_many_draws_is_the_undropped_attention():
    """1024 draws in one call: 64 identical query rows (a stride-0 view) in each of 16 (batch, head)
    copies; every (b, h, i) has its own dropout counters, so each row is an independent draw."""
    q, k, v = make_qkv(1, 1, 1, 16, 16, torch.float32, seed=14, requires_grad=False)
    qe = q.expand(4, 4, 64, 16)
    ke, ve = (x.expand(4, 4, 16, 16) for x in (k, v))
    p = 0.25
    torch.manual_seed(0)
    out = flash_attention(qe, ke, ve, dropout_p=p)
    ref, _ = attention_reference(q, k, v)
    draws = out.double().reshape(1024, 16)
    assert draws.std(0).mean() > 0.05  # the draws differ from each other
    std_of_mean = draws.std(0) / np.sqrt(1024)
    deviation = (draws.mean(0) - ref[0, 0, 0]).abs()
    assert torch.all(deviation < 4.5 * std_of_mean)  # ... and their mean is the undropped output
    torch.manual_seed(0)
    keep = dropout_keep_mask(qe, ke, p)
    assert abs(keep.double().mean().item() - (1 - p)) < 0.01


def test_seed_reproducibility():
    q, k, v = make_qkv(1, 2, 40, 40, 16, torch.float16, requires_grad=False)
    torch.manual_seed(1)
    a = flash_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(1)
    b = flash_attention(q, k, v, dropout_p=0.5)
    c = flash_attention(q, k, v, dropout_p=0.5)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_keep_mask_follows_the_documented_philox_counters():
    q, k, _ = make_qkv(2, 3, 5, 7, 16, torch.float32, requires_grad=False)
    seed = 0x1234_5678_9ABC_DEF
    keep = dropout_keep_mask(q, k, 0.4, seed=torch.tensor([seed]))
    for b in range(2):
        for h in range(3):
            want = dropout_keep_reference(seed, 3, np.arange(5), np.arange(7), b, h, 0.4)
            assert np.array_equal(keep[b, h].cpu().numpy(), want)


def test_the_mask_is_philox_with_seven_rounds():
    """The mask is Philox-4x32-7 of the documented counters (not the 10 rounds of Salmon et al.'s
    safety margin), and the kernels replay it."""
    from kernels import triton_attention

    assert triton_attention.PHILOX_ROUNDS.value == 7
    q, k, v = make_qkv(2, 3, 21, 37, 16, torch.float32, seed=15)
    seed = 0x0FED_CBA9_8765_4321
    keep = dropout_keep_mask(q, k, 0.3, seed=torch.tensor([seed]))
    for b in range(2):
        for h in range(3):
            want = dropout_keep_reference(seed, 3, np.arange(21), np.arange(37), b, h, 0.3, rounds=7)
            assert np.array_equal(keep[b, h].cpu().numpy(), want)
    other = dropout_keep_reference(seed, 3, np.arange(21), np.arange(37), 1, 2, 0.3, rounds=10)
    assert not np.array_equal(keep[1, 2].cpu().numpy(), other)
    torch.manual_seed(3)
    keep = dropout_keep_mask(q, k, 0.3)
    torch.manual_seed(3)
    check_against_reference(flash_attention, q, k, v, dropout_p=0.3, ref_kwargs=dict(keep=keep, dropout_p=0.3))


def test_counters_do_not_wrap_beyond_64k_keys():
    """Key indices past 2**16: each gets its own counter (no row * N_k + col product to overflow)."""
    q, k, _ = make_qkv(1, 1, 2, 70_000, 16, torch.float32, requires_grad=False)
    seed = 987654321
    keep = dropout_keep_mask(q, k, 0.5, seed=torch.tensor([seed]))
    cols = np.arange(70_000)
    want = dropout_keep_reference(seed, 1, np.arange(2), cols, 0, 0, 0.5)
    assert np.array_equal(keep[0, 0].cpu().numpy(), want)
    assert not np.array_equal(want[:, :4464], want[:, 65536:])  # no wrap-around repetition


def test_effective_rate_is_rounded_to_8_bits_and_output_stays_unbiased():
    from kernels import effective_dropout_p

    assert effective_dropout_p(0.1) == 26 / 256
    assert abs(effective_dropout_p(0.37) - 0.37) <= 1 / 512
    assert effective_dropout_p(0.0) == 0.0
    assert effective_dropout_p(0.9999999) == 255 / 256
    # the keep rate of many draws matches the rounded rate
    q, k, _ = make_qkv(2, 2, 64, 512, 16, torch.float32, requires_grad=False)
    keep = dropout_keep_mask(q, k, 0.3, seed=torch.tensor([42]))
    assert abs(keep.double().mean().item() - (1 - effective_dropout_p(0.3))) < 0.005
