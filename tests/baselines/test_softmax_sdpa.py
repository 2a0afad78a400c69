"""Exact attentions: materialised softmax and PyTorch SDPA agree with a float64 reference and each other."""
import math

import pytest
import torch

from baselines.sdpa import SdpaAttention, sdpa_backend_support
from baselines.softmax import SoftmaxAttention


def reference_attention(q, k, v, key_padding_mask=None):
    """float64 dense attention; rows without any valid key are 0."""
    q, k, v = (t.double() for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, dim=-1)) @ v


def ragged_inputs(dtype=torch.float64, b=3, h=2, n=37, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=gen, dtype=dtype) for _ in range(3))
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[1, 20:] = True  # ragged
    mask[2, :] = True  # fully padded row
    return q, k, v, mask


def test_softmax_matches_float64_reference_with_ragged_and_empty_rows():
    q, k, v, mask = ragged_inputs()
    out = SoftmaxAttention()(q, k, v, mask)
    torch.testing.assert_close(out, reference_attention(q, k, v, mask), rtol=1e-10, atol=1e-12)
    assert torch.equal(out[2], torch.zeros_like(out[2]))


def test_softmax_equals_sdpa_math():
    q, k, v, mask = ragged_inputs()
    for m in (None, mask):
        expected = SdpaAttention("math")(q, k, v, m)
        torch.testing.assert_close(SoftmaxAttention()(q, k, v, m), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("backend", ["auto", "flash", "math"])
def test_sdpa_cpu_backends_match_reference_float32(backend):
    q, k, v, mask = ragged_inputs(torch.float32)
    out = SdpaAttention(backend)(q, k, v, mask)
    assert not out.isnan().any()
    torch.testing.assert_close(out.double(), reference_attention(q, k, v, mask), rtol=2e-5, atol=2e-5)
    assert torch.equal(out[2], torch.zeros_like(out[2]))


def test_sdpa_fully_padded_rows_have_zero_output_and_finite_gradients():
    q, k, v, mask = ragged_inputs(torch.float32)
    for t in (q, k, v):
        t.requires_grad_(True)
    out = SdpaAttention("auto")(q, k, v, mask)
    out.square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
        assert torch.equal(t.grad[2], torch.zeros_like(t.grad[2]))


def test_sdpa_cuda_only_backend_on_cpu_raises_clear_error():
    q, k, v, mask = ragged_inputs(torch.float32)
    with pytest.raises(ValueError, match="backend='efficient'"):
        SdpaAttention("efficient")(q, k, v, mask)
    ok, reason = sdpa_backend_support("efficient", "cpu")
    assert not ok and "CUDA" in reason


def test_sdpa_unknown_backend_rejected():
    with pytest.raises(ValueError, match="unknown backend 'fast'.*auto, flash, cudnn, efficient, math"):
        SdpaAttention("fast")


@pytest.mark.parametrize("module", [SoftmaxAttention(dropout=0.5), SdpaAttention("math", dropout=0.5)])
def test_probability_dropout_only_in_training(module):
    q, k, v, mask = ragged_inputs(torch.float32)
    module.eval()
    eval_out = module(q, k, v, mask)
    torch.testing.assert_close(eval_out.double(), reference_attention(q, k, v, mask), rtol=2e-5, atol=2e-5)
    module.train()
    torch.manual_seed(0)
    train_out = module(q, k, v, mask)
    assert not torch.allclose(train_out, eval_out)
    assert torch.isfinite(train_out).all()


def test_softmax_upcasts_under_autocast():
    q, k, v, mask = ragged_inputs(torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = SoftmaxAttention()(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), reference_attention(q, k, v, mask), rtol=0.05, atol=0.05)


def test_bad_inputs_raise_clear_errors():
    q, k, v, mask = ragged_inputs(torch.float32)
    attention = SoftmaxAttention()
    with pytest.raises(ValueError, match="4-D"):
        attention(q[0], k, v)
    with pytest.raises(TypeError, match="bool"):
        attention(q, k, v, mask.float())
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(batch, seq_len\)"):
        attention(q, k, v, mask[:, :-1])
    with pytest.raises(ValueError, match="must agree"):
        attention(q, k[:, :1], v)
