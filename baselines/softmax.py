"""The standard Transformer attention (Vaswani et al., 2017): materialised N x N scores.

This is the "Transformer" row of every comparison, so it is written the way a typical training script
writes it: one matmul for the scores (in the input dtype, i.e. bf16/fp16 under autocast), a softmax
computed in float32, attention-probability dropout, one matmul for the output. Its memory grows as
B * H * N^2, which is exactly the cost the other attentions are measured against.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from baselines.padding import attend, safe_key_padding, validate_qkv, zero_empty_rows


class SoftmaxAttention(nn.Module):
    """Exact attention with materialised scores; `dropout` applies to the probabilities in training."""

    def __init__(self, dropout: float = 0.0, softmax_scale: float | None = None):
        super().__init__()
        self.dropout = float(dropout)
        self.softmax_scale = softmax_scale

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        validate_qkv("softmax attention", q, k, v, key_padding_mask)
        scale = self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
        scores = torch.matmul(q * scale, k.transpose(-2, -1))  # (B, H, Nq, Nk), input dtype
        empty = None
        if key_padding_mask is not None:
            padding, empty = safe_key_padding(key_padding_mask)
            scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
        out = attend(scores, v, dropout=self.dropout, training=self.training)
        return zero_empty_rows(out, empty)

    def extra_repr(self) -> str:
        return f"dropout={self.dropout}"
