"""Performer attention, FAVOR+ (Choromanski et al., "Rethinking Attention with Performers", ICLR 2021).

Attention is approximated as D^-1 (phi(Q) (phi(K)^T V)) with D = diag(phi(Q) (phi(K)^T 1)): linear in
N, never forming the N x N matrix. Feature maps live in `baselines/random_features.py`.

Faithful to the paper, with the traps of the public implementations handled:
- `kernel="softmax"` (default): positive random features with block-orthogonal Gaussian rows rescaled
  by chi(d) norms (`feature_type="ortho"`, or `"iid"`), stabilisers (per-row max for queries, max
  over *valid* keys for keys) and eps = 1e-6 (the reference's `numerical_stabilizer`); m = 256
  features by default (the reference default and the LRA setting).
- `kernel="relu"`: the generalised kernel relu(W x) + eps, eps = 1e-3. The LRA code's default
  Performer (`attention_fn_cls='generalized'`) used this kernel with `features_type='deterministic'`,
  i.e. phi(x) = relu(x) + 0.001 with no random projection at all, no data normalisation and no
  redraws; `feature_type="deterministic"` reproduces that (the registry's `lra` preset).
- Padding: phi(k) of padded keys is exactly 0, so they enter neither numerator nor denominator (the
  reference implementations ignore the padding mask: padded keys get attention mass). Padded values
  are zeroed too. A batch row with no valid key returns 0.
- Precision: features and both reductions run in float32 even under autocast (exp of logits in
  fp16/bf16 is the instability the FlashAttention paper reports for Performer); float64 inputs are
  computed in float64. The output has the input dtype.
- Redraws: features are redrawn every `redraw_interval` training forward calls (0 = never); draw t
  of layer l comes from its own generator seeded by (seed, l, t), so runs are reproducible and
  independent of the global RNG; eval never redraws. The draw counter is part of the state dict
  (extra state), the projection a persistent buffer, so resuming a checkpoint continues the schedule.
- Dropout: FAVOR+ never forms attention probabilities, so there is nothing to drop; the registry's
  `dropout` context option is ignored (as in the reference and LRA code, whose fast attention
  accepts and ignores `dropout_rate`).
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from baselines.padding import validate_qkv, zero_padded
from baselines.random_features import (
    gaussian_iid_matrix,
    gaussian_orthogonal_matrix,
    relu_kernel_features,
    softmax_kernel_features,
)
from baselines.seeding import generator

PerformerKernel = Literal["softmax", "relu"]
FeatureType = Literal["ortho", "iid", "deterministic"]

DEFAULT_EPS = {"softmax": 1e-6, "relu": 1e-3}


class PerformerAttention(nn.Module):
    """FAVOR+ attention; see the module docstring for every choice."""

    def __init__(
        self,
        head_dim: int,
        nb_features: int = 256,
        kernel: PerformerKernel = "softmax",
        feature_type: FeatureType = "ortho",
        redraw_interval: int = 1000,
        eps: float | None = None,
        seed: int = 0,
        layer_idx: int = 0,
    ):
        super().__init__()
        if kernel not in DEFAULT_EPS:
            raise ValueError(f"performer: kernel must be 'softmax' or 'relu', got {kernel!r}")
        if feature_type not in ("ortho", "iid", "deterministic"):
            raise ValueError(f"performer: feature_type must be ortho, iid or deterministic, got {feature_type!r}")
        if feature_type == "deterministic" and kernel != "relu":
            raise ValueError("performer: feature_type='deterministic' (no random projection) needs kernel='relu'")
        if head_dim < 1 or nb_features < 1 or redraw_interval < 0:
            raise ValueError(
                f"performer: need head_dim >= 1, nb_features >= 1, redraw_interval >= 0; got "
                f"{head_dim}, {nb_features}, {redraw_interval}"
            )
        self.head_dim = int(head_dim)
        self.nb_features = int(nb_features) if feature_type != "deterministic" else int(head_dim)
        self.kernel = kernel
        self.feature_type = feature_type
        self.redraw_interval = int(redraw_interval) if feature_type != "deterministic" else 0
        self.eps = float(DEFAULT_EPS[kernel] if eps is None else eps)
        self.seed = int(seed)
        self.layer_idx = int(layer_idx)
        self.draw_index = 0  # which draw the current projection is
        self.steps_since_draw = 0  # training forward calls made with it
        projection = None if feature_type == "deterministic" else self.draw_projection(0).float()
        self.register_buffer("projection", projection, persistent=True)

    # -- random features -------------------------------------------------------------------
    def draw_projection(self, index: int) -> Tensor:
        """The (nb_features, head_dim) float64 projection of draw `index` (deterministic)."""
        gen = generator("performer", self.seed, self.layer_idx, index)
        if self.feature_type == "ortho":
            return gaussian_orthogonal_matrix(self.nb_features, self.head_dim, gen)
        return gaussian_iid_matrix(self.nb_features, self.head_dim, gen)

    def redraw(self, index: int | None = None) -> None:
        """Switch to draw `index` (default: the next one)."""
        if self.projection is None:
            return
        self.draw_index = self.draw_index + 1 if index is None else int(index)
        self.steps_since_draw = 0
        fresh = self.draw_projection(self.draw_index)
        with torch.no_grad():
            self.projection.copy_(fresh.to(self.projection.dtype))

    @torch.compiler.disable
    def _count_training_step(self) -> None:
        if self.redraw_interval > 0 and self.steps_since_draw >= self.redraw_interval:
            self.redraw()
        self.steps_since_draw += 1

    def get_extra_state(self) -> dict:
        return {"draw_index": self.draw_index, "steps_since_draw": self.steps_since_draw}

    def set_extra_state(self, state: dict) -> None:
        self.draw_index = int(state["draw_index"])
        self.steps_since_draw = int(state["steps_since_draw"])

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        # `model.half()` / `.to(torch.bfloat16)` would round the projection; keep it float32.
        if self.projection is not None and self.projection.dtype not in (torch.float32, torch.float64):
            self.projection = self.draw_projection(self.draw_index).to(self.projection.device, torch.float32)
        return self

    # -- attention ---------------------------------------------------------------------------
    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        validate_qkv("performer attention", q, k, v, key_padding_mask)
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"performer: built for head_dim={self.head_dim}, got inputs with head_dim={q.shape[-1]}")
        if self.training:
            self._count_training_step()
        compute_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        with torch.autocast(device_type=q.device.type, enabled=False):
            qf, kf, vf = (t.to(compute_dtype) for t in (q, k, v))
            vf = zero_padded(vf, key_padding_mask)
            projection = None if self.projection is None else self.projection.to(q.device, compute_dtype)
            if self.kernel == "softmax":
                phi_q = softmax_kernel_features(qf, projection, is_query=True, eps=self.eps)
                phi_k = softmax_kernel_features(
                    kf, projection, is_query=False, key_padding_mask=key_padding_mask, eps=self.eps
                )
            else:
                phi_q = relu_kernel_features(qf, projection, eps=self.eps)
                phi_k = relu_kernel_features(kf, projection, key_padding_mask=key_padding_mask, eps=self.eps)
            context = torch.matmul(phi_k.transpose(-2, -1), vf)  # (B, H, m, d)
            normaliser = phi_k.sum(dim=-2).unsqueeze(-1)  # (B, H, m, 1)
            numerator = torch.matmul(phi_q, context)  # (B, H, N, d)
            denominator = torch.matmul(phi_q, normaliser)  # (B, H, N, 1)
            # No valid key: numerator and denominator are both exactly 0, and so is the output.
            out = numerator / denominator.clamp_min(torch.finfo(compute_dtype).tiny)
        return out.to(q.dtype)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, nb_features={self.nb_features}, kernel={self.kernel!r}, "
            f"feature_type={self.feature_type!r}, redraw_interval={self.redraw_interval}, eps={self.eps}"
        )
