"""Dense FlashAttention (interpreter on CPU) against the float64 reference: outputs and gradients."""
from __future__ import annotations

import math

import pytest
import torch
from kernel_helpers import DEVICE, TOL, check_against_reference, make_qkv
from kernel_reference import attention_reference, rel_err

from kernels import flash_attention
from kernels.tiles import PassTiles, Tiles, override


@pytest.mark.parametrize(
    "batch,heads,n_q,n_k,d,dtype",
    [
        (1, 1, 1, 1, 16, torch.float32),  # single token
        (2, 1, 17, 17, 16, torch.float32),  # ragged N below one tile
        (1, 2, 130, 130, 32, torch.float32),  # ragged N over several tiles
        (1, 1, 333, 333, 24, torch.float16),  # non-power-of-two d, N not a multiple of any tile
        (2, 2, 130, 17, 64, torch.bfloat16),  # N_q > N_k
        (1, 3, 17, 130, 8, torch.float16),  # N_q < N_k, smallest d
        (1, 1, 64, 128, 128, torch.bfloat16),  # largest d, even tiles
        (1, 1, 40, 40, 72, torch.float32),  # d between powers of two
    ],
)
def test_matches_reference(batch, heads, n_q, n_k, d, dtype):
    q, k, v = make_qkv(batch, heads, n_q, n_k, d, dtype)
    check_against_reference(flash_attention, q, k, v)


@pytest.mark.parametrize(
    "n_q,n_k,dtype",
    [(130, 130, torch.float32), (17, 130, torch.bfloat16), (130, 17, torch.float16), (333, 200, torch.float32)],
)
def test_causal_bottom_right_aligned(n_q, n_k, dtype):
    q, k, v = make_qkv(1, 2, n_q, n_k, 32, dtype, seed=3)
    out = check_against_reference(flash_attention, q, k, v, causal=True, ref_kwargs=dict(causal=True))
    if n_q > n_k:  # the first n_q - n_k queries see no key: zeros, not NaN
        assert torch.all(out[:, :, : n_q - n_k] == 0)


def test_key_padding_mask_with_fully_padded_rows():
    q, k, v = make_qkv(3, 2, 70, 130, 32, torch.float32, seed=4)
    mask = (torch.rand(3, 130, generator=torch.Generator().manual_seed(0)) < 0.3).to(DEVICE)
    mask[1] = True  # batch 1: every key padded
    mask[2, 100:] = True  # batch 2: padded tail (ragged lengths)
    out = check_against_reference(flash_attention, q, k, v, key_padding_mask=mask,
                                  ref_kwargs=dict(key_padding_mask=mask))
    assert torch.all(out[1] == 0)
    assert torch.all(q.grad[1] == 0) and torch.all(k.grad[1] == 0) and torch.all(v.grad[1] == 0)
    assert torch.all(k.grad[2, :, 100:] == 0) and torch.all(v.grad[2, :, 100:] == 0)


def test_padding_and_causal_together_bf16():
    q, k, v = make_qkv(2, 2, 130, 130, 64, torch.bfloat16, seed=5)
    mask = torch.zeros(2, 130, dtype=torch.bool, device=DEVICE)
    mask[0, :3] = True  # the first queries of batch 0 see only padding under causal
    mask[1, 90:] = True
    out = check_against_reference(flash_attention, q, k, v, key_padding_mask=mask, causal=True,
                                  ref_kwargs=dict(key_padding_mask=mask, causal=True))
    assert torch.all(out[0, :, :3] == 0)


def test_softmax_scale_and_return_lse_with_lse_gradient():
    q, k, v = make_qkv(1, 2, 70, 90, 16, torch.float32, seed=6)
    mask = torch.zeros(1, 90, dtype=torch.bool, device=DEVICE)
    scale = 0.37
    out, lse = flash_attention(q, k, v, softmax_scale=scale, causal=True, return_lse=True)
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 70)
    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, ref_lse = attention_reference(qr, kr, vr, softmax_scale=scale, causal=True, key_padding_mask=mask)
    assert rel_err(out, ref) < TOL[torch.float32] and rel_err(lse, ref_lse) < 1e-5
    # a loss that uses both outputs: the lse gradient must flow into q and k
    (out.sum() + (lse * torch.linspace(-1, 1, 70, device=DEVICE)).sum()).backward()
    (ref.sum() + (ref_lse * torch.linspace(-1, 1, 70, device=DEVICE).double()).sum()).backward()
    for got, want in ((q.grad, qr.grad), (k.grad, kr.grad), (v.grad, vr.grad)):
        assert rel_err(got, want) < TOL[torch.float32]


def test_lse_of_rows_without_keys_is_minus_inf():
    q, k, v = make_qkv(1, 1, 20, 5, 16, torch.float32)
    out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
    assert torch.all(torch.isneginf(lse[0, 0, :15])) and torch.isfinite(lse[0, 0, 15:]).all()
    assert torch.all(out[0, 0, :15] == 0)


def test_non_contiguous_inputs_from_fused_qkv_projection():
    g = torch.Generator().manual_seed(7)
    B, N, H, d = 2, 77, 2, 24
    qkv = torch.randn(B, N, 3, H, d, generator=g, dtype=torch.float16).to(DEVICE)
    q, k, v = (qkv[:, :, i].transpose(1, 2).requires_grad_() for i in range(3))  # (B, H, N, d) views
    # views of a leaf are not leaves: make leaf views with the same strides
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    assert not q.is_contiguous()
    out = check_against_reference(flash_attention, q, k, v)
    # a non-contiguous output gradient (e.g. from a transpose later in the model)
    grad = torch.randn(B, N, H, d, generator=g, dtype=torch.float16).to(DEVICE).transpose(1, 2)
    for x in (q, k, v):
        x.grad = None
    out = flash_attention(q, k, v)
    out.backward(grad)
    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, _ = attention_reference(qr, kr, vr)
    ref.backward(grad.double())
    assert rel_err(q.grad, qr.grad) < TOL[torch.float16] and rel_err(v.grad, vr.grad) < TOL[torch.float16]


def test_expanded_zero_stride_inputs():
    q, k, v = make_qkv(1, 1, 33, 33, 16, torch.float32, requires_grad=False)
    qe, ke, ve = (x.expand(3, 2, 33, 16) for x in (q, k, v))
    out = flash_attention(qe, ke, ve)
    ref, _ = attention_reference(qe, ke, ve)
    assert rel_err(out, ref) < TOL[torch.float32]


@pytest.mark.parametrize("causal", [False, True])
def test_small_and_unequal_tiles_cover_every_loop_split(causal):
    """Tiles of 32 x 16 (forward), 16 x 32 (dK/dV), 32 x 16 (dQ): many full, diagonal and ragged tiles."""
    tiles = Tiles(PassTiles(32, 16), PassTiles(16, 32), PassTiles(32, 16))
    q, k, v = make_qkv(1, 2, 101, 75, 16, torch.float32, seed=8)
    mask = torch.zeros(1, 75, dtype=torch.bool, device=DEVICE)
    mask[0, 60:] = True
    with override(tiles):
        check_against_reference(flash_attention, q, k, v, causal=causal, key_padding_mask=mask,
                                ref_kwargs=dict(causal=causal, key_padding_mask=mask))


def test_backward_is_deterministic():
    q, k, v = make_qkv(1, 2, 130, 130, 32, torch.bfloat16, seed=9)
    grads = []
    for _ in range(2):
        for x in (q, k, v):
            x.grad = None
        flash_attention(q, k, v, causal=True).backward(torch.ones(1, 2, 130, 32, dtype=torch.bfloat16, device=DEVICE))
        grads.append([x.grad.clone() for x in (q, k, v)])
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_no_grad_inference_and_default_scale():
    q, k, v = make_qkv(1, 1, 50, 50, 64, torch.float32, requires_grad=False)
    with torch.no_grad():
        out = flash_attention(q, k, v)
    expected = torch.softmax((q.double() @ k.double().transpose(-1, -2)) / math.sqrt(64), dim=-1) @ v.double()
    assert rel_err(out, expected) < TOL[torch.float32]


def test_double_backward_raises_instead_of_dropping_terms():
    """The backward kernels are not differentiable: a gradient taken with create_graph=True must not be a
    graph that silently misses the second-order terms (a gradient penalty would be wrong); it raises."""
    from kernels import block_sparse_flash_attention

    q, k, v = make_qkv(1, 1, 20, 20, 16, torch.float32)
    for fn in (flash_attention,
               lambda q, k, v: block_sparse_flash_attention(q, k, v, torch.ones(2, 2, dtype=torch.bool, device=DEVICE),
                                                            block_size=16)):
        (dv,) = torch.autograd.grad(fn(q, k, v).square().sum(), v, create_graph=True)
        with pytest.raises(RuntimeError, match="differentiate twice"):
            (dv.square().sum() + q.sum()).backward()
