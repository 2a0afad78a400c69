"""Linformer attention (Wang et al., "Linformer: Self-Attention with Linear Complexity", 2020).

Keys and values are projected along the *sequence* axis by learned (k x max_len) matrices E and F
before ordinary attention: softmax(Q (E K)^T / sqrt(d)) (F V), so cost and memory are O(N k).

- `proj_k` (k) defaults to 256, the setting Nystromformer used for its LRA runs; the LRA code itself
  used `low_rank_features=16` with one kernel shared by keys and values (registry preset `lra`:
  proj_k=16, sharing='kv').
- Sharing modes (paper, Section 4): `none` (E_i, F_i per head), `headwise` (one E and one F per
  layer, shared by all heads), `kv` (one matrix per layer for keys *and* values, shared by all heads),
  `layerwise` (one matrix for keys and values of all heads of *all* layers).
- `layerwise` in a per-layer module: each layer's module holds a reference to one shared
  `SequenceProjection` submodule (PyTorch deduplicates shared parameters in `parameters()`, the
  optimiser and DDP; the state dict stores it under every layer, and loading restores the same
  tensor). Pass it explicitly with `projection=`; the registry instead uses
  `shared_layerwise_projection`, where layer_idx 0 opens a new shared projection and the layers
  with layer_idx > 0 built after it (same max_len, proj_k, seed) join it. So a model must build its
  layers in order 0, 1, ... (which every encoder does), and two models built interleaved in one
  process would share by mistake: build one model at a time.
- Padding: padded rows of K and V are zeroed before the projection, so their content cannot leak in
  (the LRA code ignores the mask). A batch row that is all padding returns 0.
- N < max_len uses the first N columns of E and F (as the LRA code slices its kernel); N > max_len
  raises, since there are no learned weights for those positions.
- Initialisation: N(0, 1/max_len) entries, the LeCun-normal scale the LRA code's kernel_init gives a
  (max_len x k) kernel.
- Dropout: applied to the N x k attention probabilities in training mode (as in the paper's fairseq
  code and LRA, whose dot_product_attention applies dropout to those weights).
"""
from __future__ import annotations

import math
import threading
import weakref
from typing import Literal

import torch
from torch import Tensor, nn

from baselines.padding import attend, safe_key_padding, validate_qkv, zero_empty_rows, zero_padded

LinformerSharing = Literal["none", "headwise", "kv", "layerwise"]
SHARING_MODES = ("none", "headwise", "kv", "layerwise")


class SequenceProjection(nn.Module):
    """A learned (heads, k, max_len) projection along the sequence axis (heads = 1 when shared)."""

    def __init__(self, max_len: int, proj_k: int, heads: int = 1):
        super().__init__()
        if max_len < 1 or proj_k < 1 or heads < 1:
            raise ValueError(
                f"linformer projection needs max_len, proj_k, heads >= 1; got {max_len}, {proj_k}, {heads}"
            )
        self.max_len = int(max_len)
        self.proj_k = int(proj_k)
        self.weight = nn.Parameter(torch.empty(heads, proj_k, max_len))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, mean=0.0, std=1.0 / math.sqrt(self.max_len))

    def forward(self, x: Tensor) -> Tensor:
        """(B, H, N, d) -> (B, H, k, d), using the first N columns."""
        n = x.shape[2]
        if n > self.max_len:
            raise ValueError(
                f"linformer: sequence length {n} exceeds max_len={self.max_len} the projection was built for; "
                f"rebuild with max_len >= {n}"
            )
        weight = self.weight[:, :, :n].to(x.dtype)  # (H or 1, k, N)
        return torch.matmul(weight.unsqueeze(0), x)

    def extra_repr(self) -> str:
        heads, k, n = self.weight.shape
        return f"heads={heads}, proj_k={k}, max_len={n}"


_layerwise_lock = threading.Lock()
_layerwise_groups: dict[tuple, "weakref.ref[SequenceProjection]"] = {}


def shared_layerwise_projection(max_len: int, proj_k: int, seed: int, layer_idx: int) -> SequenceProjection:
    """The projection shared by all layers of the model being built (see module docstring)."""
    key = (int(max_len), int(proj_k), int(seed))
    with _layerwise_lock:
        existing = _layerwise_groups.get(key)
        shared = existing() if existing is not None else None
        if layer_idx == 0 or shared is None:
            shared = SequenceProjection(max_len, proj_k, heads=1)
            _layerwise_groups[key] = weakref.ref(shared)
        return shared


class LinformerAttention(nn.Module):
    """Low-rank attention with learned sequence projections; see the module docstring."""

    def __init__(
        self,
        num_heads: int,
        max_len: int,
        proj_k: int = 256,
        sharing: LinformerSharing = "headwise",
        dropout: float = 0.0,
        projection: SequenceProjection | None = None,
    ):
        super().__init__()
        if sharing not in SHARING_MODES:
            raise ValueError(f"linformer: sharing must be one of {', '.join(SHARING_MODES)}, got {sharing!r}")
        if max_len is None or max_len < 1:
            raise ValueError(f"linformer needs max_len >= 1 (the longest sequence it will see), got {max_len}")
        self.num_heads = int(num_heads)
        self.max_len = int(max_len)
        self.proj_k = int(proj_k)
        self.sharing = sharing
        self.dropout = float(dropout)
        if projection is not None:
            if sharing not in ("kv", "layerwise"):
                raise ValueError(
                    "linformer: an explicit `projection` is one matrix for K and V: use sharing 'kv' or 'layerwise'"
                )
            if projection.max_len != self.max_len or projection.proj_k != self.proj_k:
                raise ValueError(
                    f"linformer: the given projection is (k={projection.proj_k}, max_len={projection.max_len}), "
                    f"this layer needs (k={self.proj_k}, max_len={self.max_len})"
                )
            self.key_projection = projection
            self.value_projection = projection
        elif sharing == "none":
            self.key_projection = SequenceProjection(max_len, proj_k, heads=num_heads)
            self.value_projection = SequenceProjection(max_len, proj_k, heads=num_heads)
        elif sharing == "headwise":
            self.key_projection = SequenceProjection(max_len, proj_k)
            self.value_projection = SequenceProjection(max_len, proj_k)
        else:  # kv, or layerwise without a shared projection handed in: one matrix for K and V
            self.key_projection = SequenceProjection(max_len, proj_k)
            self.value_projection = self.key_projection

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        validate_qkv("linformer attention", q, k, v, key_padding_mask)
        if k.shape[1] != self.key_projection.weight.shape[0] and self.key_projection.weight.shape[0] != 1:
            raise ValueError(f"linformer: built for num_heads={self.num_heads}, got inputs with {k.shape[1]} heads")
        empty = None
        if key_padding_mask is not None:
            _, empty = safe_key_padding(key_padding_mask)
            k = zero_padded(k, key_padding_mask)
            v = zero_padded(v, key_padding_mask)
        k_low = self.key_projection(k)  # (B, H, k, d)
        v_low = self.value_projection(v)
        scale = 1.0 / math.sqrt(q.shape[-1])
        scores = torch.matmul(q * scale, k_low.transpose(-2, -1))  # (B, H, N, k)
        out = attend(scores, v_low, dropout=self.dropout, training=self.training)
        return zero_empty_rows(out, empty)

    def extra_repr(self) -> str:
        return f"proj_k={self.proj_k}, max_len={self.max_len}, sharing={self.sharing!r}, dropout={self.dropout}"
