"""The packed-QKV forms (`flash_attention_qkvpacked`, `block_sparse_flash_attention_qkvpacked`) and the
output layout that follows q's.

The packed forms take the (B, N, 3, H, d) output of a fused projection and return (B, N, H, d); their
gradient is one (B, N, 3, H, d) tensor written by the kernels in place. They must agree with the
float64 reference (values and gradients, ragged N, padding, dropout replayed from its mask) and with
the q/k/v form on the same seed, in both backward forms (one-pass atomic dQ and split).
"""
from __future__ import annotations

import pytest
import torch
from kernel_helpers import DEVICE, TOL, deterministic
from kernel_reference import attention_reference, expand_layout, rel_err

from kernels import (block_sparse_flash_attention, block_sparse_flash_attention_qkvpacked, dropout_keep_mask,
                     flash_attention, flash_attention_qkvpacked, layouts)
from kernels.autograd import unpack_qkv
from kernels.tiles import PassTiles, Tiles, override

# small tiles: several query and key tiles per head at test sizes (dQ rows summed from several atomics)
SMALL = Tiles(PassTiles(32, 32), PassTiles(16, 32), PassTiles(32, 32))


def _packed_input(batch, n, heads, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, n, 3, heads, d, generator=g).to(dtype).to(DEVICE).requires_grad_()


def _views(qkv):
    """q, k, v (B, H, N, d) of a packed leaf, as independent float64 leaves for the reference."""
    return tuple(x.detach().double().requires_grad_() for x in unpack_qkv(qkv))


def _random_grad(shape, dtype, seed=1):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE, dtype)


@pytest.fixture(params=["fused", "split"])
def dropout_bwd(request):
    """The backward form under dropout: the default one-pass form, or the two-pass one."""
    if request.param == "fused":
        yield request.param
    else:
        with deterministic():
            yield request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("d", [16, 24])
def test_packed_matches_float64_reference_with_padding_and_ragged_length(dtype, d):
    batch, n, heads = 2, 75, 3
    qkv = _packed_input(batch, n, heads, d, dtype)
    mask = torch.zeros(batch, n, dtype=torch.bool, device=DEVICE)
    mask[1, 50:] = True
    with override(SMALL):
        out = flash_attention_qkvpacked(qkv, key_padding_mask=mask)
    assert out.shape == (batch, n, heads, d) and out.dtype == dtype and out.is_contiguous()
    grad = _random_grad(out.shape, dtype)
    out.backward(grad)
    q, k, v = _views(qkv)
    ref, _ = attention_reference(q, k, v, key_padding_mask=mask)
    ref.backward(grad.double().transpose(1, 2))
    tol = TOL[dtype]
    assert rel_err(out.transpose(1, 2), ref) < tol
    dq, dk, dv = unpack_qkv(qkv.grad)
    for name, got, want in (("dq", dq, q.grad), ("dk", dk, k.grad), ("dv", dv, v.grad)):
        assert rel_err(got, want) < tol, name


def test_packed_dropout_replays_its_mask_in_both_backward_forms(dropout_bwd):
    batch, n, heads, d, p = 2, 70, 2, 16, 0.25
    qkv = _packed_input(batch, n, heads, d, torch.float32, seed=3)
    q0, k0, _ = unpack_qkv(qkv.detach())
    with override(SMALL):
        torch.manual_seed(11)
        out = flash_attention_qkvpacked(qkv, dropout_p=p)
        torch.manual_seed(11)
        keep = dropout_keep_mask(q0, k0, p)
    grad = _random_grad(out.shape, torch.float32)
    out.backward(grad)
    q, k, v = _views(qkv)
    ref, _ = attention_reference(q, k, v, keep=keep, dropout_p=p)
    ref.backward(grad.double().transpose(1, 2))
    assert rel_err(out.transpose(1, 2), ref) < 1e-4
    for got, want in zip(unpack_qkv(qkv.grad), (q.grad, k.grad, v.grad)):
        assert rel_err(got, want) < 1e-4


def test_packed_equals_the_qkv_form_on_the_same_seed():
    """Same kernels, same dropout draw: the packed and the q/k/v forms give the same numbers."""
    batch, n, heads, d = 2, 40, 2, 16
    qkv = _packed_input(batch, n, heads, d, torch.float32, seed=5)
    views_leaf = qkv.detach().clone().requires_grad_()
    with override(SMALL):
        torch.manual_seed(7)
        packed = flash_attention_qkvpacked(qkv, dropout_p=0.1)
        torch.manual_seed(7)
        q, k, v = unpack_qkv(views_leaf)
        plain = flash_attention(q, k, v, dropout_p=0.1)
    grad = _random_grad(packed.shape, torch.float32)
    packed.backward(grad)
    plain.transpose(1, 2).backward(grad)
    torch.testing.assert_close(packed, plain.transpose(1, 2), rtol=0, atol=0)
    torch.testing.assert_close(qkv.grad, views_leaf.grad, rtol=1e-6, atol=1e-6)


def test_block_sparse_packed_matches_reference_and_its_qkv_form():
    batch, n, heads, d, block = 2, 100, 2, 16, 32
    layout = layouts.bigbird(-(-n // block), window=1, num_random=1, num_global=1, seed=0, num_heads=heads).to(DEVICE)
    qkv = _packed_input(batch, n, heads, d, torch.float32, seed=9)
    views_leaf = qkv.detach().clone().requires_grad_()
    with override(SMALL):
        out = block_sparse_flash_attention_qkvpacked(qkv, layout, block_size=block)
        plain = block_sparse_flash_attention(*unpack_qkv(views_leaf), layout, block_size=block)
    grad = _random_grad(out.shape, torch.float32)
    out.backward(grad)
    plain.transpose(1, 2).backward(grad)
    q, k, v = _views(qkv)
    ref, _ = attention_reference(q, k, v, allowed=expand_layout(layout, block, n, n))
    ref.backward(grad.double().transpose(1, 2))
    assert rel_err(out.transpose(1, 2), ref) < 1e-4
    for got, want in zip(unpack_qkv(qkv.grad), (q.grad, k.grad, v.grad)):
        assert rel_err(got, want) < 1e-4
    torch.testing.assert_close(out, plain.transpose(1, 2), rtol=0, atol=0)
    torch.testing.assert_close(qkv.grad, views_leaf.grad, rtol=1e-6, atol=1e-6)


def test_fully_padded_batch_gives_zero_output_and_gradient_not_nan():
    qkv = _packed_input(2, 33, 2, 16, torch.float32, seed=2)
    mask = torch.zeros(2, 33, dtype=torch.bool, device=DEVICE)
    mask[0] = True
    with override(SMALL):
        out = flash_attention_qkvpacked(qkv, key_padding_mask=mask)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(qkv.grad).all()
    assert (out[0] == 0).all()
    assert (qkv.grad[0] == 0).all()


def test_output_is_laid_out_like_q():
    """Views of a fused projection (heads inside tokens) get a (B, N, H, d)-contiguous output, so the
    heads merge without a copy; contiguous (B, H, N, d) inputs keep a contiguous output."""
    qkv = _packed_input(2, 20, 3, 16, torch.float32).detach()
    q, k, v = unpack_qkv(qkv)
    out = flash_attention(q, k, v)
    assert out.transpose(1, 2).is_contiguous()
    out.transpose(1, 2).view(2, 20, 48)  # a view, no copy
    out2 = flash_attention(q.contiguous(), k.contiguous(), v.contiguous())
    assert out2.is_contiguous()
    torch.testing.assert_close(out, out2, rtol=0, atol=0)


@pytest.mark.parametrize("bad, message", [
    (torch.zeros(2, 8, 3, 16), "(B, N, 3, H, d)"),
    (torch.zeros(2, 8, 2, 2, 16), "(B, N, 3, H, d)"),
    ("qkv", "torch.Tensor"),
])
def test_packed_input_errors_name_the_expected_shape(bad, message):
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(").replace(")", r"\)")):
        flash_attention_qkvpacked(bad)


def test_packed_half_precision_checks_still_apply():
    qkv = torch.zeros(2, 8, 3, 2, 16, dtype=torch.int32, device=DEVICE)
    with pytest.raises(TypeError, match="dtype"):
        flash_attention_qkvpacked(qkv)
