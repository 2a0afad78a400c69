"""The LRA encoder classifier and the retrieval dual encoder.

Structure (the Nyströmformer LRA reproduction that the FlashAttention paper follows, Xiong et al.
2021, `LRA/code/model.py`): token embedding + positions + dropout; `depth` pre-LayerNorm blocks
x = x + drop(attn(LN(x))); x = x + MLP(LN(x)) with MLP = Linear, GELU, dropout, Linear, dropout;
a final LayerNorm; pooling; head Linear(dim, mlp_dim), ReLU, Linear(mlp_dim, classes).
Retrieval encodes both documents with the same weights and classifies [u, v, u*v, u-v] (LRA paper).

Deviation, on purpose: mean pooling averages over non-padded tokens only (the reference averages
over padding too, so its result depends on how much padding a batch has).

The attention of every block comes from the registry, `lra.attention.build(name, **options)`, with
the context options num_heads, head_dim, max_len, dropout, layer_idx and seed; q, k and v are views
(B, H, N, d) of one fused projection, or, for a core with a ``forward_packed`` method (our Triton
kernels), that projection itself as one (B, N, 3, H, d) tensor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from kernels.layer_norm import LayerNorm
from lra.config import MODEL_SET_OPTIONS, ModelConfig
from lra.positional import build_positional

AttentionFactory = Callable[..., nn.Module]



@dataclass(frozen=True)
class DataSpec:
    """What the model needs to know about a task's data (read from its DataModule)."""

    vocab_size: int
    num_classes: int
    max_len: int
    dual: bool = False
    image_shape: Optional[tuple] = None

    @classmethod
    def from_datamodule(cls, dm) -> "DataSpec":
        shape = getattr(dm, "image_shape", None)
        return cls(vocab_size=int(dm.vocab_size), num_classes=int(dm.num_classes),
                   max_len=int(dm.max_len), dual=bool(getattr(dm, "dual", False)),
                   image_shape=tuple(int(s) for s in shape) if shape is not None else None)

    def to_dict(self) -> dict:
        return {"vocab_size": self.vocab_size, "num_classes": self.num_classes,
                "max_len": self.max_len, "dual": self.dual,
                "image_shape": list(self.image_shape) if self.image_shape is not None else None}

    @classmethod
    def from_dict(cls, data: dict) -> "DataSpec":
        data = dict(data)
        if data.get("image_shape") is not None:
            data["image_shape"] = tuple(data["image_shape"])
        return cls(**data)


def _registry_build(name: str, **options) -> nn.Module:
    from lra import attention

    return attention.build(name, **options)


class MultiHeadSelfAttention(nn.Module):
    """Fused QKV projection -> attention core on (B, H, N, d) views -> output projection."""

    def __init__(self, dim: int, num_heads: int, head_dim: int, core: nn.Module):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        self.qkv = nn.Linear(dim, 3 * num_heads * head_dim)
        self.core = core
        # cores with a packed form (our kernels) take the (B, N, 3, H, d) projection itself: in eager
        # mode that saves the views, the head merge's copy and autograd's stacking of dQ, dK, dV
        self.packed = callable(getattr(core, "forward_packed", None))
        self.out = nn.Linear(num_heads * head_dim, dim)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        batch, n, _ = x.shape
        qkv = self.qkv(x).view(batch, n, 3, self.num_heads, self.head_dim)
        if self.packed:
            o = self.core.forward_packed(qkv, key_padding_mask=padding_mask)  # (B, N, H, d)
            return self.out(o.reshape(batch, n, self.num_heads * self.head_dim))
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, N, d), non-contiguous views
        o = self.core(q, k, v, key_padding_mask=padding_mask)
        return self.out(o.transpose(1, 2).reshape(batch, n, self.num_heads * self.head_dim))


class EncoderBlock(nn.Module):
    """Pre-LayerNorm Transformer block."""

    def __init__(self, cfg: ModelConfig, core: nn.Module):
        super().__init__()
        # norm1 and norm2 feed only Linear layers: under autocast they may write bfloat16 directly
        self.norm1 = LayerNorm(cfg.dim, eps=cfg.norm_eps, autocast_output=True)
        self.attention = MultiHeadSelfAttention(cfg.dim, cfg.num_heads, cfg.head_dim, core)
        self.drop = nn.Dropout(cfg.dropout)
        self.norm2 = LayerNorm(cfg.dim, eps=cfg.norm_eps, autocast_output=True)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.dim, cfg.mlp_dim),
            nn.GELU() if cfg.activation == "gelu" else nn.ReLU(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.mlp_dim, cfg.dim),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.drop(self.attention(self.norm1(x), padding_mask))
        return x + self.mlp(self.norm2(x))


class Encoder(nn.Module):
    """Tokens (B, N) -> pooled features (B, dim)."""

    def __init__(self, cfg: ModelConfig, spec: DataSpec, *, attention: str, attention_options: dict,
                 seed: int = 0, attention_factory: AttentionFactory | None = None):
        super().__init__()
        self.cfg = cfg
        self.pooling = cfg.pooling
        # Pixel tasks are fixed-length (H*W tokens, pixel 0 is a real token): they never pad, so
        # their all-False masks are not passed on (the attention then skips the mask entirely).
        self.fixed_length = spec.image_shape is not None
        self.pixel_linear = cfg.pixel_embedding == "linear"
        if self.pixel_linear:
            if spec.image_shape is None:
                raise ValueError("model.pixel_embedding=linear applies to pixel tasks (image, Pathfinder, "
                                 "Path-X, Path-256) only; token tasks need model.pixel_embedding=token")
            self.embed = nn.Linear(1, cfg.dim)   # pixel value / 255 -> a vector
            nn.init.normal_(self.embed.weight, std=cfg.init_std)
            nn.init.zeros_(self.embed.bias)
        else:
            self.embed = nn.Embedding(spec.vocab_size, cfg.dim)
            nn.init.normal_(self.embed.weight, std=cfg.init_std)
        self.positions = build_positional(cfg.positional, max_len=spec.max_len, dim=cfg.dim,
                                          image_shape=spec.image_shape, grid=cfg.grid_positions,
                                          init_std=cfg.init_std)
        if cfg.pooling == "cls":
            self.cls = nn.Parameter(torch.zeros(1, 1, cfg.dim))
            nn.init.normal_(self.cls, std=cfg.init_std)
        self.drop = nn.Dropout(cfg.dropout)
        attn_len = spec.max_len + (1 if cfg.pooling == "cls" else 0)
        factory = attention_factory or _registry_build
        clash = sorted(set(attention_options) & set(MODEL_SET_OPTIONS))
        if clash:
            raise ValueError(f"attention option(s) {clash} are set by the model; use "
                             + ", ".join(MODEL_SET_OPTIONS[c] for c in clash) + " instead")
        self.blocks = nn.ModuleList(
            EncoderBlock(cfg, factory(attention, num_heads=cfg.num_heads, head_dim=cfg.head_dim,
                                      max_len=attn_len, dropout=cfg.attention_dropout,
                                      layer_idx=i, seed=seed, **attention_options))
            for i in range(cfg.depth)
        )
        self.norm = LayerNorm(cfg.dim, eps=cfg.norm_eps)

    def forward(self, input_ids: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.pixel_linear:
            x = self.embed((input_ids.to(self.embed.weight.dtype) / 255.0).unsqueeze(-1))
        else:
            x = self.embed(input_ids)
        if self.positions is not None:
            x = x + self.positions(x)
        if self.fixed_length:
            padding_mask = None
        if self.pooling == "cls":
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)
            if padding_mask is not None:
                padding_mask = torch.cat([padding_mask.new_zeros(x.shape[0], 1), padding_mask], dim=1)
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, padding_mask)
        x = self.norm(x)
        if self.pooling == "cls":
            return x[:, 0]
        if padding_mask is None:
            return x.mean(dim=1)
        keep = (~padding_mask).unsqueeze(-1).to(x.dtype)
        return (x * keep).sum(dim=1) / keep.sum(dim=1).clamp_min(1.0)


def _head(in_dim: int, hidden: int, num_classes: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


class SequenceClassifier(nn.Module):
    """One sequence per example: logits = head(pool(encoder(x)))."""

    def __init__(self, cfg: ModelConfig, spec: DataSpec, **encoder_kwargs):
        super().__init__()
        self.encoder = Encoder(cfg, spec, **encoder_kwargs)
        self.head = _head(cfg.dim, cfg.mlp_dim, spec.num_classes)

    def forward(self, input_ids: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        if input_ids.dim() != 2:
            raise ValueError(f"expected input_ids of shape (B, N), got {tuple(input_ids.shape)}")
        return self.head(self.encoder(input_ids, padding_mask))


class DualEncoderClassifier(nn.Module):
    """Two sequences per example (retrieval), one shared encoder; head on [u, v, u*v, u-v]."""

    def __init__(self, cfg: ModelConfig, spec: DataSpec, **encoder_kwargs):
        super().__init__()
        self.encoder = Encoder(cfg, spec, **encoder_kwargs)
        self.head = _head(4 * cfg.dim, cfg.mlp_dim, spec.num_classes)

    def forward(self, input_ids: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        if input_ids.dim() != 3 or input_ids.shape[1] != 2:
            raise ValueError(f"expected input_ids of shape (B, 2, N), got {tuple(input_ids.shape)}")
        batch, _, n = input_ids.shape
        # Both documents go through the encoder in one batch of 2B sequences.
        flat_mask = padding_mask.reshape(2 * batch, n) if padding_mask is not None else None
        pooled = self.encoder(input_ids.reshape(2 * batch, n), flat_mask).view(batch, 2, -1)
        u, v = pooled[:, 0], pooled[:, 1]
        return self.head(torch.cat([u, v, u * v, u - v], dim=-1))


def build_model(cfg: ModelConfig, spec: DataSpec, *, attention: str, attention_options: dict | None = None,
                seed: int = 0, attention_factory: AttentionFactory | None = None) -> nn.Module:
    """The classifier for `spec` (dual encoder when the task pairs two sequences)."""
    cls = DualEncoderClassifier if spec.dual else SequenceClassifier
    return cls(cfg, spec, attention=attention, attention_options=dict(attention_options or {}),
               seed=seed, attention_factory=attention_factory)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
