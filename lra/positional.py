"""Positional embeddings of the LRA encoder: learned 1-D, learned 2-D grid, learned axial (row +
column), fixed sinusoidal.

Every embedding maps a token tensor (B, N, dim) to the positions to add to it, (1, N, dim), for
N up to the length it was built for.

`GridPositionalEmbedding` keeps its table as a parameter of shape (H, W, dim) for pixel tasks
(row-major flattening gives the order the tasks emit pixels in). Flattened, it is exactly a learned
1-D table of length H*W — so it changes no result — but it knows the image geometry, which makes a
checkpoint transferable to a larger image by grid duplication (`upsample_grid`, used for
Path-64 -> Path-X / Path-256 in the FlashAttention paper's recipe).

`AxialPositionalEmbedding` (pixel tasks, `model.positional=axial`) learns one vector per row and one
per column and adds them: position (i, j) gets row[i] + col[j], a factorised 2-D embedding. Pixels
of the same row or column share a component, so the model starts with a notion of 2-D
neighbourhood that a free (H, W, dim) table has to learn pixel by pixel. Not the papers' setting;
an option for Pathfinder learnability experiments. It is a grid too: duplicating each row and
column vector `factor` times is exactly grid duplication of the summed (H, W, dim) table
(`upsample_axial`).
"""
from __future__ import annotations

import math

import torch
from torch import nn


class LearnedPositionalEmbedding(nn.Module):
    """One learned vector per position 0..max_len-1, table shape (max_len, dim)."""

    def __init__(self, max_len: int, dim: int, *, init_std: float = 0.02):
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, dim))
        nn.init.normal_(self.weight, std=init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        if n > self.max_len:
            raise ValueError(f"sequence of {n} tokens exceeds the positional table ({self.max_len})")
        return self.weight[:n].unsqueeze(0)


class GridPositionalEmbedding(nn.Module):
    """Learned 2-D positions for an H x W image, parameter `weight` of shape (H, W, dim)."""

    def __init__(self, image_shape: tuple[int, int], dim: int, *, init_std: float = 0.02):
        super().__init__()
        height, width = (int(s) for s in image_shape)
        self.image_shape = (height, width)
        self.weight = nn.Parameter(torch.empty(height, width, dim))
        nn.init.normal_(self.weight, std=init_std)

    @property
    def max_len(self) -> int:
        return self.image_shape[0] * self.image_shape[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        if n != self.max_len:
            raise ValueError(f"grid positions expect {self.image_shape[0]}x{self.image_shape[1]} = "
                             f"{self.max_len} pixel tokens, got {n}")
        return self.weight.reshape(1, n, -1)


def upsample_grid(weight: torch.Tensor, factor: int) -> torch.Tensor:
    """Grid duplication: each of the (H, W) positions becomes a factor x factor block.

    (H, W, dim) -> (H*factor, W*factor, dim), out[i, j] = weight[i // factor, j // factor].
    """
    if weight.dim() != 3:
        raise ValueError(f"expected a (H, W, dim) grid, got shape {tuple(weight.shape)}")
    if factor < 1:
        raise ValueError(f"upsampling factor must be >= 1, got {factor}")
    return weight.repeat_interleave(factor, dim=0).repeat_interleave(factor, dim=1)


class AxialPositionalEmbedding(nn.Module):
    """Learned row and column vectors for an H x W image, parameters `rows` (H, dim) and `cols`
    (W, dim); position (i, j) (token i*W + j) gets rows[i] + cols[j]."""

    def __init__(self, image_shape: tuple[int, int], dim: int, *, init_std: float = 0.02):
        super().__init__()
        height, width = (int(s) for s in image_shape)
        self.image_shape = (height, width)
        # each position sums two vectors: std init_std / sqrt(2) keeps the sum at init_std
        self.rows = nn.Parameter(torch.empty(height, dim))
        self.cols = nn.Parameter(torch.empty(width, dim))
        nn.init.normal_(self.rows, std=init_std / math.sqrt(2.0))
        nn.init.normal_(self.cols, std=init_std / math.sqrt(2.0))

    @property
    def max_len(self) -> int:
        return self.image_shape[0] * self.image_shape[1]

    def grid(self) -> torch.Tensor:
        """The summed table, (H, W, dim)."""
        return self.rows[:, None, :] + self.cols[None, :, :]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        if n != self.max_len:
            raise ValueError(f"axial positions expect {self.image_shape[0]}x{self.image_shape[1]} = "
                             f"{self.max_len} pixel tokens, got {n}")
        return self.grid().reshape(1, n, -1)


def upsample_axial(weight: torch.Tensor, factor: int) -> torch.Tensor:
    """Grid duplication of one axis of an axial embedding: (L, dim) -> (L*factor, dim),
    out[i] = weight[i // factor]; applied to rows and columns it duplicates the summed grid."""
    if weight.dim() != 2:
        raise ValueError(f"expected an (L, dim) axis table, got shape {tuple(weight.shape)}")
    if factor < 1:
        raise ValueError(f"upsampling factor must be >= 1, got {factor}")
    return weight.repeat_interleave(factor, dim=0)


class SinusoidalPositionalEmbedding(nn.Module):
    """Fixed sin/cos positions (Vaswani et al. 2017), not saved in checkpoints."""

    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.max_len = max_len
        position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
        inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
        table = torch.zeros(max_len, dim, dtype=torch.float64)
        table[:, 0::2] = torch.sin(position * inv_freq)
        table[:, 1::2] = torch.cos(position * inv_freq)[:, : dim // 2]
        self.register_buffer("table", table.float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        if n > self.max_len:
            raise ValueError(f"sequence of {n} tokens exceeds the positional table ({self.max_len})")
        return self.table[:n].unsqueeze(0)


def build_positional(kind: str, *, max_len: int, dim: int, image_shape=None, grid: bool = True,
                     init_std: float = 0.02) -> nn.Module | None:
    """The positional embedding a model config asks for; None for `kind="none"`."""
    if kind == "none":
        return None
    if kind == "sinusoidal":
        return SinusoidalPositionalEmbedding(max_len, dim)
    if kind == "axial":
        if image_shape is None:
            raise ValueError("model.positional=axial (learned row + column vectors) applies to pixel tasks "
                             "(image, Pathfinder, Path-X, Path-256) only")
        height, width = image_shape
        if height * width != max_len:
            raise ValueError(f"image {height}x{width} has {height * width} pixels but sequences are "
                             f"{max_len} tokens; axial positions need the full image")
        return AxialPositionalEmbedding((height, width), dim, init_std=init_std)
    if kind == "learned":
        if grid and image_shape is not None:
            height, width = image_shape
            if height * width != max_len:
                raise ValueError(f"image {height}x{width} has {height * width} pixels but sequences are "
                                 f"{max_len} tokens; use the full image length or model.grid_positions=false")
            return GridPositionalEmbedding((height, width), dim, init_std=init_std)
        return LearnedPositionalEmbedding(max_len, dim, init_std=init_std)
    raise ValueError(f"unknown positional embedding {kind!r}; use learned, axial, sinusoidal or none")
