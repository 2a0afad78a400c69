"""The "user's own model" of `lra bench models --model user`: how our kernel fares as a drop-in
replacement for ``F.scaled_dot_product_attention`` in a model that is not ours.

A small Transformer classifier written the way a user writes one around an attention function:
plain ``torch.nn`` layers (``nn.LayerNorm``, ``nn.Linear``, ``nn.GELU``), a fused QKV projection whose
output is viewed as q, k, v — strided (B, H, N, d) views, no copy — and one attention call per layer.
Its size is the `paper` model's (width 64, MLP 128, 2 heads × 32, 2 layers, learned positions, mean
pooling), so rows compare with the project's model (`--model lra`, which uses the packed QKV path
and our LayerNorm kernel).

The attention call is the only difference between rows:

- ``flash``: :func:`kernels.flash_attention` on the views;
- ``sdpa``: ``F.scaled_dot_product_attention`` pinned to one back-end (option ``sdpa.backend``,
  `lra bench models` sets cuDNN on CUDA), ``sdpa_flash``: pinned to its FlashAttention-2 back-end — together the best
  of SDPA on Hopper;
- ``softmax``: the materialised ``softmax(q kᵀ / √d) v`` (the ratio columns' baseline).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import sdpa_kernel

from lra.bench.model_options import USER_ATTENTIONS  # the names live with the (torch-free) CLI options

WIDTH, MLP_WIDTH, HEADS, HEAD_DIM, DEPTH = 64, 128, 2, 32, 2
DESCRIPTION = ("the user's own model (plain torch.nn pre-LayerNorm Transformer, width 64, MLP 128, 2 heads × 32, "
               "2 layers; q, k, v strided views of a fused QKV projection; one attention call per layer)")


def attention_function(name: str, dropout: float, backend: str = "auto"):
    """``attend(q, k, v, training) -> (B, H, N, d)`` of one user-model attention name."""
    from baselines.sdpa import SDPA_BACKENDS

    if name == "flash":
        from kernels import flash_attention

        return lambda q, k, v, training: flash_attention(q, k, v, dropout_p=dropout if training else 0.0)
    if name in ("sdpa", "sdpa_flash"):
        chosen = SDPA_BACKENDS["flash" if name == "sdpa_flash" else backend]

        def attend(q, k, v, training):
            p = dropout if training else 0.0
            if chosen is None:
                return F.scaled_dot_product_attention(q, k, v, dropout_p=p)
            with sdpa_kernel([chosen]):
                return F.scaled_dot_product_attention(q, k, v, dropout_p=p)

        return attend
    if name == "softmax":
        def materialised(q, k, v, training):
            weights = torch.softmax((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1])), dim=-1)
            return F.dropout(weights, dropout, training) @ v

        return materialised
    raise ValueError(f"the user's own model has no attention {name!r}: use one of {', '.join(USER_ATTENTIONS)}")


def support(name: str, device: torch.device, options: dict, dropout: float = 0.0) -> tuple[bool, str]:
    """(can run, reason) of a user-model attention on ``device`` with ``options`` (only ``backend`` of sdpa)
    and attention dropout ``dropout`` in training."""
    from baselines.sdpa import sdpa_backend_support

    unknown = sorted(set(options) - ({"backend"} if name == "sdpa" else set()))
    if unknown:
        return False, f"the user's model takes no option {unknown[0]!r} for {name} (sdpa takes backend=...)"
    if name == "sdpa":
        return sdpa_backend_support(options.get("backend", "auto"), device, dropout)
    if name == "sdpa_flash":
        return sdpa_backend_support("flash", device, dropout)
    return True, ""


class UserBlock(nn.Module):
    """Pre-LayerNorm block: x + proj(attend(views of qkv(norm(x)))), then x + mlp(norm(x))."""

    def __init__(self, attend, dropout: float):
        super().__init__()
        self.attend = attend
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * HEADS * HEAD_DIM)
        self.proj = nn.Linear(HEADS * HEAD_DIM, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, MLP_WIDTH), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(MLP_WIDTH, WIDTH), nn.Dropout(dropout))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, n, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, n, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4).unbind(0)
        heads = self.attend(q, k, v, self.training)  # (B, H, N, d)
        x = x + self.drop(self.proj(heads.transpose(1, 2).reshape(batch, n, HEADS * HEAD_DIM)))
        return x + self.mlp(self.norm2(x))


class UserModel(nn.Module):
    """Tokens (B, N) -> logits (B, classes): embedding + learned positions, DEPTH blocks, mean pooling."""

    def __init__(self, attention: str, *, vocab_size: int, num_classes: int, max_len: int,
                 attention_dropout: float = 0.1, dropout: float = 0.1, options: dict | None = None):
        super().__init__()
        attend = attention_function(attention, attention_dropout, **(options or {}))
        self.embed = nn.Embedding(vocab_size, WIDTH)
        self.positions = nn.Parameter(torch.randn(max_len, WIDTH) * 0.02)
        self.blocks = nn.ModuleList(UserBlock(attend, dropout) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.positions[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))
