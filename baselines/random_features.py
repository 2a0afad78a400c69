"""Random-feature maps of FAVOR+ (Choromanski et al., "Rethinking Attention with Performers", ICLR 2021).

Softmax kernel, positive random features (their Lemma 1):

    exp(q.k / sqrt(d)) = E_w[ phi(q) . phi(k) ],  w ~ N(0, I_d),
    phi(x) = m^(-1/2) * exp(W x~ - |x~|^2 / 2),    x~ = x * d^(-1/4),

with the m rows of W drawn *block-orthogonal* (each d x d block has orthonormal rows; every row is
then rescaled by the norm of an independent N(0, I_d) vector, i.e. a chi(d) sample, so each row is
still marginally N(0, I_d) and the estimator stays unbiased while its variance drops).
A stabiliser c is subtracted inside the exp (the per-row max of W x~ for queries; one max over all
valid keys and features for keys) and a small eps is added, as in the reference implementation; c
cancels in the attention ratio (exactly for keys; up to eps for queries).

Generalised ReLU kernel (the "generalized" attention that the LRA Performer actually used by default,
lra_benchmarks/models/performer/performer.py): phi(x) = relu(W x) + eps, or relu(x) + eps with
`projection=None` (LRA's default `features_type='deterministic'`, `kernel_epsilon=0.001`, no data
normalisation).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def gaussian_orthogonal_matrix(
    nb_features: int, dim: int, generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> Tensor:
    """(nb_features, dim) block-orthogonal Gaussian projection with chi(dim)-distributed row norms."""
    blocks = []
    remaining = nb_features
    while remaining > 0:
        gaussian = torch.randn(dim, dim, generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(gaussian)
        # Fix the signs so that q is Haar-distributed (QR's sign convention otherwise biases it).
        signs = torch.where(torch.diagonal(r) < 0, -1.0, 1.0).to(torch.float64)
        q = q * signs[None, :]
        rows = q.T[: min(remaining, dim)]
        blocks.append(rows)
        remaining -= rows.shape[0]
    directions = torch.cat(blocks, dim=0)
    norms = torch.randn(nb_features, dim, generator=generator, dtype=torch.float64).norm(dim=1)
    return (directions * norms[:, None]).to(dtype)


def gaussian_iid_matrix(
    nb_features: int, dim: int, generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> Tensor:
    """(nb_features, dim) matrix of independent N(0, 1) entries."""
    return torch.randn(nb_features, dim, generator=generator, dtype=torch.float64).to(dtype)


def softmax_kernel_features(
    x: Tensor,
    projection: Tensor,
    *,
    is_query: bool,
    key_padding_mask: Tensor | None = None,
    eps: float = 1e-6,
    stabilize: bool = True,
) -> Tensor:
    """Positive random features phi(x) of shape (B, H, N, m) for x (B, H, N, d) and W (m, d).

    With `key_padding_mask` (B, N), padded rows neither enter the key stabiliser nor keep any feature
    mass: their phi is exactly 0, so they add nothing to numerator or denominator.
    `stabilize=False, eps=0` gives the plain unbiased estimator (used by the tests).
    """
    nb_features, dim = projection.shape
    normalizer = dim ** -0.25
    x = x * normalizer
    logits = torch.matmul(x, projection.T)  # (B, H, N, m) = W x~
    half_sq_norm = 0.5 * (x * x).sum(dim=-1, keepdim=True)
    pad = key_padding_mask[:, None, :, None] if key_padding_mask is not None else None
    if stabilize:
        if is_query:
            shift = logits.amax(dim=-1, keepdim=True)
        else:
            masked = logits if pad is None else logits.masked_fill(pad, float("-inf"))
            shift = masked.amax(dim=(-2, -1), keepdim=True)
            # All keys padded: the max is -inf; any finite shift will do (the features get zeroed).
            shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
        # c cancels in the attention ratio, so it carries no gradient (as in performer-pytorch).
        logits = logits - shift.detach()
    exponent = logits - half_sq_norm
    if pad is not None:
        # The shift bounds the exponent of *valid* keys only: a padded key can still overflow exp to
        # inf, and although its phi is zeroed below, exp's backward (grad * exp(x) = 0 * inf) would put
        # NaN into its gradient. Mask the exponent first: exp(-inf) = 0 with zero gradient.
        exponent = exponent.masked_fill(pad, float("-inf"))
    phi = (torch.exp(exponent) + eps) * (1.0 / math.sqrt(nb_features))
    if pad is not None:
        phi = phi.masked_fill(pad, 0.0)
    return phi


def relu_kernel_features(
    x: Tensor,
    projection: Tensor | None,
    *,
    key_padding_mask: Tensor | None = None,
    eps: float = 1e-3,
) -> Tensor:
    """Generalised-attention features relu(W x) + eps (or relu(x) + eps without a projection)."""
    logits = x if projection is None else torch.matmul(x, projection.T)
    phi = torch.relu(logits) + eps
    if key_padding_mask is not None:
        phi = phi.masked_fill(key_padding_mask[:, None, :, None], 0.0)
    return phi
