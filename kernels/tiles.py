"""Tile shapes and launch parameters of the attention kernels, per device, pass and head dim.

A :class:`Tiles` value fixes, for each of the three passes (forward, backward dK/dV, backward dQ),
the tile (BLOCK_M query rows x BLOCK_N key rows), ``num_warps`` and ``num_stages``. The public
functions pick one with :func:`select` before launching and hand it, as a list of 12 ints
(:meth:`Tiles.as_list`), to the forward *and* the backward op, so both always agree (block-sparse
index lists are built for exactly these tiles).

GPU (sm_80+) values are a fixed table per padded head dim, measured on an H200 with
``python -m kernels.tuning``; the forward follows the FlashAttention-2 shape (128 query rows per
program, 64-key tiles), the dK/dV pass keeps a wide key tile (128) resident and streams narrow query
tiles (32), the dQ pass the other way round. :func:`load_tuning` replaces entries from a tuning JSON.

Without CUDA the kernels run in Triton's interpreter, where every tile operation is a NumPy call:
big tiles mean fewer calls, so the CPU uses 128 x 128 everywhere.

Block-sparse attention clamps every tile side to ``block_size`` (all are powers of two, so the
tile divides the layout block and a layout block is a whole number of tiles).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
from typing import Iterator

import torch


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) in plain integers: the tile count of a grid axis (``triton.cdiv`` is a JIT
    function, slow to call from Python on every launch)."""
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class PassTiles:
    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2

    def fits(self, block_size: int) -> bool:
        """Whether both tile sides are at most ``block_size`` (both powers of two: such a tile divides a block)."""
        return self.block_m <= block_size and self.block_n <= block_size

    def clamped(self, block_size: int) -> "PassTiles":
        if self.fits(block_size):
            return self
        return PassTiles(min(self.block_m, block_size), min(self.block_n, block_size), self.num_warps,
                         self.num_stages)


@dataclasses.dataclass(frozen=True)
class Tiles:
    fwd: PassTiles
    dkdv: PassTiles
    dq: PassTiles

    def __post_init__(self):
        # the 12 ints, made once: every call passes them on and block-sparse plans are cached by them
        ints: list[int] = []
        for p in (self.fwd, self.dkdv, self.dq):
            ints += [p.block_m, p.block_n, p.num_warps, p.num_stages]
        object.__setattr__(self, "_ints", tuple(ints))

    def __hash__(self) -> int:
        # the 12 ints identify the tiles (equal tiles have equal ints): one tuple hash instead of the
        # generated hash of three PassTiles, for the caches keyed by tiles (_with_dkdv, _clamped)
        return hash(self._ints)

    def as_list(self) -> list[int]:
        """12 ints: (block_m, block_n, num_warps, num_stages) of fwd, dkdv, dq."""
        return list(self._ints)

    def as_tuple(self) -> tuple[int, ...]:
        """:meth:`as_list` as a tuple (made when the object is)."""
        return self._ints

    @staticmethod
    def from_list(values) -> "Tiles":
        """Inverse of :meth:`as_list`."""
        v = [int(x) for x in values]
        if len(v) != 12:
            raise ValueError(f"expected 12 tile parameters (4 per pass: fwd, dkdv, dq), got {len(v)}")
        return Tiles(*(PassTiles(*v[i * 4:(i + 1) * 4]) for i in range(3)))

    def clamped(self, block_size: int) -> "Tiles":
        """These tiles with every side at most ``block_size``. Block-sparse calls clamp on every call, so
        the usual case (the tiles fit) returns ``self`` after six comparisons, which is also all that
        Dynamo traces under torch.compile (no dataclass rebuild, no extra guards); tiles that do need
        clamping come from a cache."""
        if self.fwd.fits(block_size) and self.dkdv.fits(block_size) and self.dq.fits(block_size):
            return self
        return _clamped(self, block_size)


@functools.lru_cache(maxsize=256)
def _with_dkdv(tiles: Tiles, dkdv: PassTiles) -> Tiles:
    """``tiles`` with the dK/dV pass's tiles replaced (the one-pass dropout backward's own entry):
    memoised, as :func:`select` asks for it on every call with dropout."""
    return Tiles(tiles.fwd, dkdv, tiles.dq)


@functools.lru_cache(maxsize=256)
def _clamped(tiles: Tiles, block_size: int) -> Tiles:
    return Tiles(tiles.fwd.clamped(block_size), tiles.dkdv.clamped(block_size), tiles.dq.clamped(block_size))


def padded_head_dim(head_dim: int) -> int:
    """Head dim the kernels compute with: next power of two, at least 16 (tl.dot's minimum)."""
    return max(16, 1 << (int(head_dim) - 1).bit_length())


# Tables per padded head dim, (fwd, dkdv, dq); each entry the winner of `python -m kernels.tuning` on an
# H200. The tuning JSONs named below are kept in git history, not in the tree
# (`git ls-tree -r 01687b4^ results/kernels` lists them; `git show 01687b4^:PATH` prints one).
# Head dim 16 reuses 32's entries. 8 warps = two 64-row warpgroups.
# 16-bit inputs (tuning_d64_d32_h200.json, tuning_d128_h200.json):
_GPU_16BIT: dict[int, Tiles] = {
    16: Tiles(PassTiles(128, 64, 4, 3), PassTiles(32, 128, 4, 3), PassTiles(64, 64, 4, 3)),
    32: Tiles(PassTiles(128, 64, 4, 3), PassTiles(32, 128, 4, 3), PassTiles(64, 64, 4, 3)),
    64: Tiles(PassTiles(128, 64, 8, 3), PassTiles(32, 128, 4, 3), PassTiles(128, 64, 8, 3)),
    128: Tiles(PassTiles(128, 64, 8, 3), PassTiles(64, 128, 8, 3), PassTiles(128, 32, 8, 3)),
}
# float32 inputs: twice the bytes per element, so half the tile area keeps shared memory in bounds.
_GPU_FP32: dict[int, Tiles] = {
    16: Tiles(PassTiles(64, 64, 4, 2), PassTiles(32, 64, 4, 2), PassTiles(64, 32, 4, 2)),
    32: Tiles(PassTiles(64, 64, 4, 2), PassTiles(32, 64, 4, 2), PassTiles(64, 32, 4, 2)),
    64: Tiles(PassTiles(64, 64, 4, 2), PassTiles(32, 64, 4, 2), PassTiles(64, 32, 4, 2)),
    128: Tiles(PassTiles(64, 32, 4, 2), PassTiles(32, 64, 8, 1), PassTiles(64, 32, 8, 1)),
}
# 16-bit inputs with attention dropout, replacing _GPU_16BIT's entries (the Philox random numbers raise
# register pressure); a head dim not listed uses _GPU_16BIT's. The two-pass backward's tiles:
# tuning_dropout_d32_d64_h200.json, tuning_dropout_split_dkdv_dq_h200.json.
_GPU_16BIT_DROPOUT: dict[int, Tiles] = {
    32: Tiles(PassTiles(128, 64, 4, 3), PassTiles(64, 64, 4, 3), PassTiles(64, 64, 4, 3)),
    64: Tiles(PassTiles(128, 64, 4, 3), PassTiles(64, 64, 4, 3), PassTiles(64, 64, 4, 3)),
}
# The one-pass dropout backward (kernels.dropout.fused_backward) holds a dQ tile in its dK/dV kernel, so
# that kernel has tiles of its own (tuning_dropout_fused_dkdv_h200.json).
_GPU_16BIT_DROPOUT_FUSED_DKDV: dict[int, PassTiles] = {
    16: PassTiles(64, 64, 4, 3),
    32: PassTiles(64, 64, 4, 3),
    64: PassTiles(64, 128, 8, 3),
}
# 16-bit block-sparse calls without dropout, replacing _GPU_16BIT's entries before the clamp to the
# block size: the geometric mean over the local and BigBird layouts at N = 4K and 16K
# (tune_sparse_combined_d32.json, tune_sparse_combined_d64.json); d = 128's backward over the local,
# BigBird and butterfly layouts (results/kernels/tuning_h200/tune_sparse_combined_d128.json).
_GPU_16BIT_SPARSE: dict[int, Tiles] = {
    16: Tiles(PassTiles(128, 64, 4, 3), PassTiles(64, 128, 4, 3), PassTiles(128, 32, 4, 3)),
    32: Tiles(PassTiles(128, 64, 4, 3), PassTiles(64, 128, 4, 3), PassTiles(128, 32, 4, 3)),
    64: Tiles(PassTiles(64, 64, 4, 3), PassTiles(32, 64, 4, 3), PassTiles(128, 64, 4, 3)),
    128: Tiles(PassTiles(128, 64, 8, 3), PassTiles(32, 64, 4, 3), PassTiles(64, 32, 4, 3)),
}
_CPU = Tiles(PassTiles(128, 128, 1, 1), PassTiles(128, 128, 1, 1), PassTiles(128, 128, 1, 1))

_override: list[Tiles] = []


@contextlib.contextmanager
def override(tiles: Tiles) -> Iterator[None]:
    """Force ``tiles`` for every call made inside the block (tests and the tuner)."""
    _override.append(tiles)
    try:
        yield
    finally:
        _override.pop()


def set_gpu_table(head_dim_padded: int, tiles: Tiles, *, fp32: bool = False, dropout: bool = False,
                  fused_dkdv: PassTiles | None = None, sparse: bool = False) -> None:
    """Replace one entry of the GPU table (16-bit inputs with dropout: ``dropout=True``; with
    ``fused_dkdv`` also the dK/dV tiles of the one-pass dropout backward; 16-bit block-sparse calls
    without dropout: ``sparse=True``)."""
    if sparse:
        _GPU_16BIT_SPARSE[int(head_dim_padded)] = tiles
        return
    if fused_dkdv is not None:
        _GPU_16BIT_DROPOUT_FUSED_DKDV[int(head_dim_padded)] = fused_dkdv
    if fp32:
        _GPU_FP32[int(head_dim_padded)] = tiles
    else:
        (_GPU_16BIT_DROPOUT if dropout else _GPU_16BIT)[int(head_dim_padded)] = tiles


def _pass_tiles(values, path: str) -> PassTiles:
    """A tuning JSON's (BLOCK_M, BLOCK_N, num_warps, num_stages) entry."""
    values = [int(x) for x in values]
    if len(values) != 4:
        raise ValueError(f"{path}: tile entry {values} is not (BLOCK_M, BLOCK_N, num_warps, num_stages)")
    return PassTiles(*values)


def load_tuning(path: str) -> list[str]:
    """Put the best tiles of a ``python -m kernels.tuning --out`` JSON into the GPU tables (process-wide,
    for every later call).

    A file tuned with ``--dropout`` fills the dropout table; tuned for the one-pass dropout backward
    (its entries' ``dropout_bwd`` is "fused"), its dK/dV tiles go to that backward's own table instead.
    A file tuned with ``--sparse`` (its entries' ``sparse``) fills the block-sparse table. Passes the
    file did not tune keep the table's entry. Returns one line per head dim, saying what changed."""
    with open(path) as f:
        tuned = json.load(f)
    try:
        results = tuned["results"]
    except (KeyError, TypeError):
        raise ValueError(f"{path}: not a kernels.tuning JSON (no 'results')") from None
    lines = []
    for d_pad, entry in results.items():
        d_pad = int(d_pad)
        best = {k: _pass_tiles(v, path) for k, v in entry.get("best", {}).items()}
        dropout = float(entry.get("dropout", 0.0)) > 0.0
        sparse = bool(entry.get("sparse"))
        if sparse and dropout:
            raise ValueError(f"{path}: head dim {d_pad} was tuned block-sparse with dropout, which has no table")
        base = (_GPU_16BIT_DROPOUT if dropout else _GPU_16BIT_SPARSE if sparse else {}).get(d_pad, _GPU_16BIT[d_pad])
        fused = dropout and entry.get("dropout_bwd") == "fused"
        fused_dkdv = best["dkdv"] if fused and "dkdv" in best else None
        tiles = Tiles(*(best[k] if k in best and not (fused and k == "dkdv") else getattr(base, k)
                        for k in ("fwd", "dkdv", "dq")))
        set_gpu_table(d_pad, tiles, dropout=dropout, fused_dkdv=fused_dkdv, sparse=sparse)
        what = str(tiles.as_list())
        if fused_dkdv is not None:
            what += f", one-pass dK/dV {list(dataclasses.astuple(fused_dkdv))}"
        kind = " dropout" if dropout else " block-sparse" if sparse else ""
        lines.append(f"d={d_pad}{kind}: {what} (from {path})")
    return lines


def select(device: torch.device, dtype: torch.dtype, head_dim: int, block_size: int | None = None, *,
           dropout: bool = False, fused_bwd: bool = False) -> Tiles:
    """Tiles for inputs of ``dtype`` with ``head_dim`` on ``device`` (block-sparse: ``block_size``;
    ``dropout``: the call applies attention dropout; ``fused_bwd``: its backward is the one-pass
    form, ``kernels.dropout.fused_backward``)."""
    if _override:
        tiles = _override[-1]
    elif device.type == "cuda":
        d_pad = padded_head_dim(head_dim)
        if dtype == torch.float32:
            tiles = _GPU_FP32[d_pad]
        elif dropout and d_pad in _GPU_16BIT_DROPOUT:
            tiles = _GPU_16BIT_DROPOUT[d_pad]
        elif block_size is not None and not dropout and d_pad in _GPU_16BIT_SPARSE:
            tiles = _GPU_16BIT_SPARSE[d_pad]
        else:
            tiles = _GPU_16BIT[d_pad]
        if dropout and fused_bwd and dtype != torch.float32 and d_pad in _GPU_16BIT_DROPOUT_FUSED_DKDV:
            tiles = _with_dkdv(tiles, _GPU_16BIT_DROPOUT_FUSED_DKDV[d_pad])
    else:
        tiles = _CPU
    if block_size is not None:
        tiles = tiles.clamped(block_size)
    return tiles
