"""The per-row statistics the backward reads: the forward's [lse, m, log2(l)] of every query row
(``launch_args.new_row_stats``; m the row max of the raw scores, l the softmax denominator relative
to it; m = +inf, log2(l) = 0 for a row that sees no key), and the backward's own [delta, b, m]
(delta = rowsum(dO * O) - dLSE; b and m the terms of P: log2(l) and m for float16 / float32, or
lse * log2(e) with -inf -> +inf and no m for bfloat16; ``launch_args.backward_buffers``), written
before the dK/dV kernel reads them -- by the dQ kernel in the two-pass backward (a program per query
tile row, whether or not it has keys to visit), by the preprocess kernel in the one-pass dropout
backward.

The tests fill both buffers with NaN before the launches (``launch_args.new_row_stats`` and
``launch_args.backward_buffers`` wrapped), so a row that no program writes shows up, and compare
them with the statistics computed in float64.
"""
from __future__ import annotations

import math

import pytest
import torch
from kernel_helpers import DEVICE, TOL, deterministic, make_qkv
from kernel_reference import attention_reference, expand_layout, rel_err

from kernels import (BlockSparseLayout, block_sparse_flash_attention, flash_attention, flash_attention_qkvpacked,
                     launch_args)
from kernels.tiles import PassTiles, Tiles, override

# several query tile rows per pass (70 queries: 3 dQ tile rows of 32, the last ragged)
SMALL = Tiles(PassTiles(32, 16), PassTiles(16, 32), PassTiles(32, 16))


@pytest.fixture
def buffers(monkeypatch):
    """(row statistics of every forward, (B, H, 3, N_q); backward statistics of every backward,
    (B, H, 3 or 2, N_q)), each NaN until a kernel writes it."""
    made = ([], [])
    new_row_stats, backward_buffers = launch_args.new_row_stats, launch_args.backward_buffers

    def nan_row_stats(q):
        rows = new_row_stats(q).fill_(float("nan"))
        made[0].append(rows)
        return rows

    def nan_buffers(*args, **kwargs):
        stats, dq_acc = backward_buffers(*args, **kwargs)
        made[1].append(stats.fill_(float("nan")))
        return stats, dq_acc

    monkeypatch.setattr(launch_args, "new_row_stats", nan_row_stats)
    monkeypatch.setattr(launch_args, "backward_buffers", nan_buffers)
    return made


def _check_stats(buffers, out, lse, grad_out, n_k, grad_lse=None, max_score=None, scale=0.25):
    """The one forward's row statistics and the one backward's statistics against float64: delta =
    rowsum(dO * O) - dLSE; the forward's lse row equal to ``lse``, m to ``max_score`` (the row max of
    the raw scores q k^T over the allowed keys, when given), lse = (m * scale * log2(e) + log2(l)) *
    ln(2) with 0 <= log2(l) <= log2(n_k); rows with lse = -inf: m = +inf and log2(l) = 0. The
    backward's b and m: the forward's log2(l) and m exactly (float16 / float32 inputs), or lse *
    log2(e) in float32 with -inf -> +inf (bfloat16)."""
    (rows,), (stats,) = buffers
    lse_row, row_max, log2_l = rows.cpu().double().unbind(2)
    stats = stats.cpu()
    assert not stats.isnan().any() and not rows.isnan().any(), "a query row's statistics were not written"
    delta = stats[:, :, 0]
    if out.dtype == torch.bfloat16:
        assert stats.shape[2] == 2
        lse32 = rows.cpu()[:, :, 0]
        want_b = torch.where(torch.isneginf(lse32), float("inf"), lse32 * math.log2(math.e))
        assert torch.allclose(stats[:, :, 1], want_b, rtol=1e-6, atol=0)
    else:
        assert stats.shape[2] == 3
        assert torch.equal(stats[:, :, 1], rows.cpu()[:, :, 2]) and torch.equal(stats[:, :, 2], rows.cpu()[:, :, 1])
    want_delta = (grad_out.double() * out.detach().double()).sum(-1).cpu()
    if grad_lse is not None:
        want_delta -= grad_lse.double().cpu()
    assert torch.allclose(delta.double(), want_delta, rtol=1e-4, atol=1e-4)
    lse = lse.detach().double().cpu()
    unseen = torch.isneginf(lse)
    assert torch.equal(torch.isneginf(lse_row), unseen)
    assert torch.all(torch.isposinf(row_max[unseen])) and torch.all(log2_l[unseen] == 0)
    seen = ~unseen
    assert torch.allclose(lse_row[seen], lse[seen], rtol=1e-5, atol=1e-5)
    combined = (row_max * scale * math.log2(math.e) + log2_l) * math.log(2)
    assert torch.allclose(combined[seen], lse[seen], rtol=1e-5, atol=1e-5)
    assert torch.all(log2_l[seen] >= 0) and torch.all(log2_l[seen] <= math.log2(n_k) + 1e-6)
    if max_score is not None:
        assert torch.allclose(row_max[seen], max_score.cpu()[seen], rtol=1e-5, atol=1e-5)


def _max_score(q, k, allowed):
    """Row max of the raw scores q k^T (float64) over the keys ``allowed`` (B or 1, H or 1, N_q, N_k)."""
    s = q.detach().double() @ k.detach().double().transpose(-1, -2)
    return s.masked_fill(~allowed.to(s.device), float("-inf")).amax(-1)


@pytest.mark.parametrize("n_q,n_k,causal,padded", [
    (70, 30, True, False),   # causal, N_q > N_k: the first 40 rows (a whole dQ tile row) see no key
    (70, 90, False, True),   # ragged N_q != N_k, one batch entirely padded
    (64, 64, True, True),    # every side a multiple of its tile
])
def test_lse_gradient_rows_without_keys(buffers, n_q, n_k, causal, padded):
    """With an lse gradient on every row: the statistics of every row, gradients as the reference's,
    and rows that see no key pass exactly zero gradient (their lse is -inf; dLSE does not leak)."""
    q, k, v = make_qkv(2, 2, n_q, n_k, 16, torch.float32, seed=11)
    mask = None
    if padded:
        mask = torch.zeros(2, n_k, dtype=torch.bool, device=DEVICE)
        mask[0] = True
        mask[1, n_k - 9:] = True
    g = torch.Generator().manual_seed(12)
    grad_out = torch.randn(2, 2, n_q, 16, generator=g).to(DEVICE)
    grad_lse = torch.randn(2, 2, n_q, generator=g).to(DEVICE)
    with override(SMALL):
        out, lse = flash_attention(q, k, v, causal=causal, key_padding_mask=mask, return_lse=True)
        torch.autograd.backward((out, lse), (grad_out, grad_lse))
    allowed = torch.ones(1, 1, n_q, n_k, dtype=torch.bool, device=DEVICE)
    if causal:
        allowed = allowed & (torch.arange(n_k, device=DEVICE) <= torch.arange(n_q, device=DEVICE)[:, None] + n_k - n_q)
    if mask is not None:
        allowed = allowed & ~mask[:, None, None, :]
    _check_stats(buffers, out, lse, grad_out, n_k, grad_lse, max_score=_max_score(q, k, allowed))

    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, ref_lse = attention_reference(qr, kr, vr, causal=causal, key_padding_mask=mask)
    seen = torch.isfinite(ref_lse)
    # rows without keys: their -inf lse takes no gradient in the reference (masked before the sum)
    ((ref * grad_out.double()).sum() + torch.where(seen, ref_lse * grad_lse.double(), 0.0).sum()).backward()
    for name, got, want in (("dq", q.grad, qr.grad), ("dk", k.grad, kr.grad), ("dv", v.grad, vr.grad)):
        assert torch.isfinite(want).all()
        assert rel_err(got, want) < TOL[torch.float32], name
    unseen = ~seen
    assert unseen.any()
    assert torch.all(q.grad[unseen] == 0) and torch.all(out.detach()[unseen] == 0)


@pytest.mark.parametrize("causal", [False, True])
def test_block_sparse_rows_without_blocks(buffers, causal):
    """Block-sparse: a query block row with no block (and, causal, rows that see none of their
    blocks) still gets its statistics from its dQ program; gradients as the reference's."""
    n = 70
    layout = torch.ones(2, 5, 5, dtype=torch.bool)
    layout[0, 1] = False  # head 0: query block row 1 attends to nothing
    layout[1, :, 0] = False  # head 1: no query sees key block 0 (causal: query block 0 sees nothing)
    layout[1, 3, 2:] = False
    layout = layout.to(DEVICE)
    q, k, v = make_qkv(2, 2, n, n, 16, torch.float32, seed=13)
    grad_out = torch.randn(2, 2, n, 16, generator=torch.Generator().manual_seed(14)).to(DEVICE)
    out = block_sparse_flash_attention(q, k, v, BlockSparseLayout.from_dense(layout, 16), block_size=16,
                                       causal=causal)
    out.backward(grad_out)
    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, ref_lse = attention_reference(qr, kr, vr, causal=causal, allowed=expand_layout(layout, 16, n, n)[None])
    _check_stats(buffers, out, ref_lse, grad_out, n)
    ref.backward(grad_out.double())
    for name, got, want in (("dq", q.grad, qr.grad), ("dk", k.grad, kr.grad), ("dv", v.grad, vr.grad)):
        assert rel_err(got, want) < TOL[torch.float32], name
    assert torch.all(q.grad[0, 0, 16:32] == 0)


@pytest.mark.parametrize("one_pass", [False, True])
def test_dropout_both_backward_forms(buffers, one_pass):
    """Under dropout: the two-pass backward (deterministic algorithms) gets the statistics from its dQ
    kernel, the one-pass backward from its preprocess kernel; ragged N_q > N_k, causal."""
    q, k, v = make_qkv(1, 2, 70, 45, 16, torch.float32, seed=15)
    grad_out = torch.randn(1, 2, 70, 16, generator=torch.Generator().manual_seed(16)).to(DEVICE)
    with override(SMALL):
        if one_pass:
            out, lse = flash_attention(q, k, v, causal=True, dropout_p=0.2, return_lse=True)
            out.backward(grad_out)
        else:
            with deterministic():
                out, lse = flash_attention(q, k, v, causal=True, dropout_p=0.2, return_lse=True)
                out.backward(grad_out)
    _check_stats(buffers, out, lse, grad_out, 45)


@pytest.mark.parametrize("one_pass", [False, True])
def test_bfloat16(buffers, one_pass):
    """bfloat16: the backward stores [delta, b = lse * log2(e)] (no m); causal with N_q > N_k, so the
    first rows see no key (b = +inf, no gradient), and the last query tile is ragged; the two-pass
    backward (no dropout), or the one-pass one (dropout)."""
    q, k, v = make_qkv(1, 2, 70, 45, 16, torch.bfloat16, seed=19)
    grad_out = torch.randn(1, 2, 70, 16, generator=torch.Generator().manual_seed(20)).to(DEVICE, torch.bfloat16)
    with override(SMALL):
        out, lse = flash_attention(q, k, v, causal=True, dropout_p=0.2 if one_pass else 0.0, return_lse=True)
        out.backward(grad_out)
    _check_stats(buffers, out, lse, grad_out, 45)
    unseen = torch.isneginf(lse.detach())
    assert unseen.any() and torch.all(q.grad[unseen] == 0)
    if not one_pass:
        qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
        ref, _ = attention_reference(qr, kr, vr, causal=True)
        ref.backward(grad_out.double())
        for name, got, want in (("dq", q.grad, qr.grad), ("dk", k.grad, kr.grad), ("dv", v.grad, vr.grad)):
            assert rel_err(got, want) < TOL[torch.bfloat16], name


def test_packed(buffers):
    """The packed path (its own backward call, gradients written into one dQKV)."""
    qkv = torch.randn(2, 50, 3, 2, 16, generator=torch.Generator().manual_seed(17)).to(DEVICE).requires_grad_()
    grad = torch.randn(2, 50, 2, 16, generator=torch.Generator().manual_seed(18)).to(DEVICE)
    with override(SMALL):
        out = flash_attention_qkvpacked(qkv, causal=True)
        out.backward(grad)
    q, k, v = (qkv.detach()[:, :, i].transpose(1, 2) for i in range(3))
    _ref, ref_lse = attention_reference(q, k, v, causal=True)
    _check_stats(buffers, out.transpose(1, 2), ref_lse, grad.transpose(1, 2), 50)
