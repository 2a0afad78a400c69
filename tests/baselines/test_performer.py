"""Performer (FAVOR+): approximation quality, unbiasedness, padding, precision and redraw schedule."""
import math

import pytest
import torch

from baselines.performer import PerformerAttention
from baselines.random_features import (
    gaussian_iid_matrix,
    gaussian_orthogonal_matrix,
    softmax_kernel_features,
)
from baselines.seeding import generator


def exact_attention(q, k, v, key_padding_mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    return torch.nan_to_num(torch.softmax(scores, dim=-1)) @ v


def inputs(b=1, h=2, n=64, d=16, scale=0.4, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=gen, dtype=dtype) * scale for _ in range(3))


def test_error_against_exact_softmax_shrinks_with_more_features():
    q, k, v = inputs()
    exact = exact_attention(q, k, v)
    errors = []
    for m in (16, 64, 256, 1024):
        per_seed = [
            ((PerformerAttention(16, nb_features=m, seed=s)(q, k, v) - exact).norm() / exact.norm()).item()
            for s in range(4)
        ]
        errors.append(sum(per_seed) / len(per_seed))
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    # Monte-Carlo rate 1/sqrt(m): a factor 8 from 16 to 1024 features; allow slack for noise.
    assert errors[-1] < errors[0] / 4, errors
    assert errors[-1] < 0.06, errors


@pytest.mark.parametrize("draw", [gaussian_orthogonal_matrix, gaussian_iid_matrix])
def test_kernel_estimate_is_unbiased_over_redraws(draw):
    d, n, m, draws = 8, 12, 16, 300
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 1, n, d, generator=gen, dtype=torch.float64) * 0.4
    k = torch.randn(1, 1, n, d, generator=gen, dtype=torch.float64) * 0.4
    exact = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(d))
    estimates = []
    for t in range(draws):
        w = draw(m, d, generator("unbiased-test", t))
        phi_q = softmax_kernel_features(q, w, is_query=True, eps=0.0, stabilize=False)
        phi_k = softmax_kernel_features(k, w, is_query=False, eps=0.0, stabilize=False)
        estimates.append(phi_q @ phi_k.transpose(-2, -1))
    estimates = torch.stack(estimates)
    mean, sem = estimates.mean(0), estimates.std(0) / math.sqrt(draws)
    z = ((mean - exact) / sem).abs()
    assert z.max() < 4.5, f"biased estimate: max z-score {z.max():.2f}"
    single_draw_error = ((estimates - exact).abs() / exact).mean()
    averaged_error = ((mean - exact).abs() / exact).mean()
    assert averaged_error < single_draw_error / 5


def test_orthogonal_features_are_block_orthogonal_with_chi_norms():
    w = gaussian_orthogonal_matrix(20, 8, generator("ortho-test"))
    directions = w / w.norm(dim=1, keepdim=True)
    for start in (0, 8, 16):
        block = directions[start : start + 8]
        torch.testing.assert_close(block @ block.T, torch.eye(block.shape[0], dtype=torch.float64), atol=1e-10, rtol=0)
    assert not torch.allclose(w.norm(dim=1), w.norm(dim=1)[0].expand(20))  # random norms, not constant


def test_padded_keys_contribute_nothing_exactly():
    """With padding, the output equals the output on the truncated sequence (same features)."""
    q, k, v = inputs(b=2, n=40)
    attention = PerformerAttention(16, nb_features=64, seed=3)
    mask = torch.zeros(2, 40, dtype=torch.bool)
    mask[1, 25:] = True
    out = attention(q, k, v, mask)
    truncated = attention(q[1:], k[1:, :, :25], v[1:, :, :25])
    torch.testing.assert_close(out[1], truncated[0], rtol=1e-12, atol=1e-14)
    # Large garbage in the padded keys/values changes nothing (stabiliser ignores padded keys).
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 25:] = 1e3
    v2[1, :, 25:] = -1e3
    torch.testing.assert_close(attention(q, k2, v2, mask), out, rtol=0, atol=0)


@pytest.mark.parametrize("kernel,feature_type", [("softmax", "ortho"), ("relu", "ortho"), ("relu", "deterministic")])
def test_fully_padded_rows_are_zero_without_nan(kernel, feature_type):
    q, k, v = (t.float().requires_grad_(True) for t in inputs(b=2, n=10))
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[0] = True
    out = PerformerAttention(16, nb_features=32, kernel=kernel, feature_type=feature_type)(q, k, v, mask)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_relu_deterministic_matches_lra_generalised_attention():
    """LRA's default Performer: phi(x) = relu(x) + 1e-3, renormalised, no projection."""
    q, k, v = inputs(n=20)
    out = PerformerAttention(16, kernel="relu", feature_type="deterministic")(q, k, v)
    phi_q, phi_k = torch.relu(q) + 1e-3, torch.relu(k) + 1e-3
    expected = (phi_q @ (phi_k.transpose(-2, -1) @ v)) / (phi_q @ phi_k.sum(-2, keepdim=True).transpose(-2, -1))
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-14)


def test_computes_in_float32_under_autocast():
    q, k, v = (t.float() for t in inputs(n=32))
    attention = PerformerAttention(16, nb_features=64)
    qb, kb, vb = (t.bfloat16() for t in (q, k, v))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention(qb, kb, vb)
    assert out.dtype == torch.bfloat16
    # Same as the float32 computation on the same (bf16-rounded) inputs, up to the final rounding.
    reference = attention(qb.float(), kb.float(), vb.float())
    torch.testing.assert_close(out.float(), reference, rtol=8e-3, atol=1e-3)


def test_half_precision_module_keeps_a_float32_projection():
    attention = PerformerAttention(16, nb_features=8, seed=2)
    before = attention.projection.clone()
    attention.to(torch.bfloat16)
    assert attention.projection.dtype == torch.float32
    torch.testing.assert_close(attention.projection, before)


def test_redraws_follow_the_schedule_reproducibly():
    def run(global_seed):
        torch.manual_seed(global_seed)  # the global RNG must not matter
        attention = PerformerAttention(4, nb_features=8, redraw_interval=2, seed=5, layer_idx=1).train()
        q, k, v = (t.float() for t in inputs(h=1, n=6, d=4))
        seen = []
        for _ in range(5):
            attention(q, k, v)
            seen.append(attention.projection.clone())
        return attention, seen

    attention, seen = run(0)
    _, again = run(123)
    for a, b in zip(seen, again):
        assert torch.equal(a, b)
    # Draw 0 for calls 1-2, draw 1 for calls 3-4, draw 2 for call 5.
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[2], seen[3])
    assert not torch.equal(seen[1], seen[2]) and not torch.equal(seen[3], seen[4])
    assert torch.equal(seen[4], attention.draw_projection(2).float())
    # Evaluation never redraws.
    attention.eval()
    q, k, v = (t.float() for t in inputs(h=1, n=6, d=4))
    for _ in range(4):
        attention(q, k, v)
    assert torch.equal(attention.projection, seen[4])
    # Another layer draws other features.
    other_layer = PerformerAttention(4, nb_features=8, seed=5, layer_idx=2)
    assert not torch.equal(other_layer.projection, seen[0])


def test_checkpoint_resumes_the_redraw_schedule():
    q, k, v = (t.float() for t in inputs(h=1, n=6, d=4))
    first = PerformerAttention(4, nb_features=8, redraw_interval=3, seed=1).train()
    for _ in range(4):  # now on draw 1, one step into it
        first(q, k, v)
    state = first.state_dict()
    resumed = PerformerAttention(4, nb_features=8, redraw_interval=3, seed=1).train()
    resumed.load_state_dict(state)
    assert (resumed.draw_index, resumed.steps_since_draw) == (1, 1)
    for _ in range(3):
        first(q, k, v)
        resumed(q, k, v)
        assert torch.equal(first.projection, resumed.projection)
    assert first.draw_index == 2


def test_bad_configuration_rejected():
    with pytest.raises(ValueError, match="deterministic.*relu"):
        PerformerAttention(16, kernel="softmax", feature_type="deterministic")
    with pytest.raises(ValueError, match="head_dim=16"):
        PerformerAttention(16)(*(t.float() for t in inputs(d=8)))


def test_padded_keys_that_would_overflow_exp_leave_gradients_finite():
    """The key stabiliser is the max over *valid* keys, so a padded key aligned with a long feature
    row can push exp past float32's range (|w|^2 / 2 > 88 once head_dim is large); its phi is zeroed,
    but the gradient must not be 0 * inf = NaN (it would reach the QKV projection's weights)."""
    d = 256
    attention = PerformerAttention(d, nb_features=16, seed=0)
    w = attention.projection[attention.projection.norm(dim=1).argmax()]
    assert 0.5 * w.norm() ** 2 > 100  # exp of this overflows float32
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 1, 4, d, generator=gen) * 0.1 for _ in range(3))
    mask = torch.zeros(2, 4, dtype=torch.bool)
    mask[0] = True  # fully padded row: shift 0
    mask[1, 2:] = True  # ragged row: shift from the two small valid keys
    k[0, 0, 1] = w * d**0.25  # x~ = w maximises w.x~ - |x~|^2 / 2
    k[1, 0, 3] = w * d**0.25
    q.requires_grad_(True)
    k.requires_grad_(True)
    out = attention(q, k, v, mask)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    out.square().sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
    assert (k.grad[mask[:, None, :, None].expand_as(k)] == 0).all()  # padded keys get no gradient
