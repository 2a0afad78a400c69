"""Linformer: identity-projection oracle, sharing modes, padding, length limits."""
import math

import pytest
import torch
from torch import nn

from baselines.linformer import LinformerAttention, SequenceProjection
from lra.attention import build


def exact_attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def inputs(b=2, h=3, n=24, d=8, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=gen, dtype=dtype) for _ in range(3))


@pytest.mark.parametrize("sharing", ["none", "headwise", "kv"])
def test_identity_projections_with_k_equal_n_give_dense_attention(sharing):
    q, k, v = inputs()
    attention = LinformerAttention(num_heads=3, max_len=24, proj_k=24, sharing=sharing).double()
    with torch.no_grad():
        for projection in (attention.key_projection, attention.value_projection):
            projection.weight.copy_(torch.eye(24, dtype=torch.float64).expand_as(projection.weight))
    torch.testing.assert_close(attention(q, k, v), exact_attention(q, k, v), rtol=1e-12, atol=1e-12)


def test_sharing_modes_own_the_documented_parameters():
    def count(module):
        return sum(p.numel() for p in module.parameters())

    k, n, h = 4, 16, 3
    assert count(LinformerAttention(h, n, k, "none")) == 2 * h * k * n
    assert count(LinformerAttention(h, n, k, "headwise")) == 2 * k * n
    kv = LinformerAttention(h, n, k, "kv")
    assert count(kv) == k * n and kv.key_projection is kv.value_projection


def test_layerwise_sharing_through_the_registry_shares_one_matrix_per_model():
    def model(seed):
        return nn.ModuleList(
            build("linformer", num_heads=2, head_dim=8, max_len=16, proj_k=4, sharing="layerwise",
                  layer_idx=i, seed=seed)
            for i in range(3)
        )

    first, second = model(0), model(0)
    weights = {id(layer.key_projection.weight) for layer in first}
    assert len(weights) == 1 and len(list(first.parameters())) == 1
    assert first[0].value_projection is first[0].key_projection
    # A second model (layer 0 built again) gets its own matrix.
    assert second[0].key_projection.weight is not first[0].key_projection.weight
    # Gradients from every layer accumulate in the shared matrix; a state dict round trip keeps the tie.
    q, k, v = (t.float() for t in inputs(h=2, n=16))
    sum(layer(q, k, v).sum() for layer in first).backward()
    assert first[0].key_projection.weight.grad is not None
    second.load_state_dict(first.state_dict())
    assert len(list(second.parameters())) == 1
    torch.testing.assert_close(second[2].key_projection.weight, first[0].key_projection.weight)


def test_explicit_shared_projection():
    shared = SequenceProjection(max_len=16, proj_k=4)
    layers = [LinformerAttention(2, 16, 4, "layerwise", projection=shared) for _ in range(2)]
    assert all(layer.key_projection is shared for layer in layers)
    with pytest.raises(ValueError, match="k=4, max_len=16"):
        LinformerAttention(2, 32, 4, "layerwise", projection=shared)


def test_padding_is_zeroed_before_projection_and_shorter_sequences_slice():
    """A padded row equals the same row run unpadded at its true length (sliced projection)."""
    q, k, v = inputs(n=20)
    attention = LinformerAttention(num_heads=3, max_len=32, proj_k=8).double()
    mask = torch.zeros(2, 20, dtype=torch.bool)
    mask[1, 13:] = True
    out = attention(q, k, v, mask)
    truncated = attention(q[1:], k[1:, :, :13], v[1:, :, :13])
    torch.testing.assert_close(out[1], truncated[0], rtol=1e-12, atol=1e-12)
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 13:], v2[1, :, 13:] = 1e4, -1e4
    torch.testing.assert_close(attention(q, k2, v2, mask), out, rtol=0, atol=0)


def test_longer_than_max_len_is_a_clear_error():
    attention = LinformerAttention(num_heads=3, max_len=16, proj_k=4)
    q, k, v = (t.float() for t in inputs(n=20))
    with pytest.raises(ValueError, match="sequence length 20 exceeds max_len=16"):
        attention(q, k, v)


def test_fully_padded_rows_are_zero():
    q, k, v = (t.float().requires_grad_(True) for t in inputs(n=12))
    mask = torch.zeros(2, 12, dtype=torch.bool)
    mask[0] = True
    out = LinformerAttention(3, 12, 4)(q, k, v, mask)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_bad_configuration_rejected():
    with pytest.raises(ValueError, match="sharing must be one of"):
        LinformerAttention(2, 16, 4, "sometimes")
    with pytest.raises(ValueError, match="max_len"):
        LinformerAttention(2, None, 4)
