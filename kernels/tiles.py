"""Tile shapes and launch parameters of the attention kernels, per device, pass and head dim.

A :class:`Tiles` value fixes, for each of the three passes (forward, backward dK/dV, backward dQ),
the tile (BLOCK_M query rows x BLOCK_N key rows), ``num_warps``, ``num_stages`` and how the tiles
are loaded (``loads``: pointer arithmetic, the default everywhere, or opt-in Hopper TMA tensor
descriptors, optionally with a warp-specialised loop; see ``LOADS_*``). The public functions pick
one with :func:`select` before launching and hand it, as a list of 15 ints (:meth:`Tiles.as_list`),
to the forward *and* the backward op, so both always agree (block-sparse index lists are built
for exactly these tiles).

GPU (sm_80+) values are a fixed table per padded head dim, measured on an H200 with
``python -m kernels.tuning`` (see ``results/kernels/README.md``); the forward follows the
FlashAttention-2 shape (128 query rows per program, 64-key tiles), the dK/dV pass keeps a wide key
tile (128) resident and streams narrow query tiles (32), the dQ pass the other way round.

Without CUDA the kernels run in Triton's interpreter, where every tile operation is a NumPy call:
big tiles mean fewer calls, so the CPU uses 128 x 128 everywhere (measured: B8 H2 N256 d16 fwd+bwd
1.9 s at 128, 5.0 s at 64, 3.2 s at 256).

Block-sparse attention clamps every tile side to ``block_size`` (all are powers of two, so the
tile divides the layout block and a layout block is a whole number of tiles).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Iterator

import torch


# PassTiles.loads: how a pass streams the operands of its inner loop (K/V in the forward and dQ pass,
# Q/dO in the dK/dV pass)
LOADS_POINTERS = 0  # pointer arithmetic; Triton pipelines the loads as cp.async copies (num_stages)
LOADS_TMA = 1  # Hopper TMA tensor descriptors (4-D, over (B, H, N, d) with the caller's strides)
LOADS_TMA_WS = 2  # TMA plus warp specialisation of the unmasked inner loop (producer / consumer warps)
LOADS_NAMES = {LOADS_POINTERS: "ptr", LOADS_TMA: "tma", LOADS_TMA_WS: "tma+ws"}


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
    # LOADS_*: a request; the launcher falls back to pointers where TMA cannot apply (see
    # kernels.ops.tma_applies), so every table entry is valid on every device and layout
    loads: int = LOADS_POINTERS

    def __post_init__(self):
        if self.loads not in LOADS_NAMES:
            raise ValueError(f"PassTiles.loads must be one of {sorted(LOADS_NAMES)}, got {self.loads}")

    def fits(self, block_size: int) -> bool:
        """Whether both tile sides are at most ``block_size`` (both powers of two: such a tile divides a block)."""
        return self.block_m <= block_size and self.block_n <= block_size

    def clamped(self, block_size: int) -> "PassTiles":
        if self.fits(block_size):
            return self
        return PassTiles(min(self.block_m, block_size), min(self.block_n, block_size), self.num_warps,
                         self.num_stages, self.loads)


@dataclasses.dataclass(frozen=True)
class Tiles:
    fwd: PassTiles
    dkdv: PassTiles
    dq: PassTiles

    def as_list(self) -> list[int]:
        """15 ints: (block_m, block_n, num_warps, num_stages, loads) of fwd, dkdv, dq."""
        out: list[int] = []
        for p in (self.fwd, self.dkdv, self.dq):
            out += [p.block_m, p.block_n, p.num_warps, p.num_stages, p.loads]
        return out

    @staticmethod
    def from_list(values) -> "Tiles":
        """Inverse of :meth:`as_list`; also reads the older 12-int form (4 per pass, pointer loads)."""
        v = [int(x) for x in values]
        if len(v) not in (12, 15):
            raise ValueError(f"expected 15 (or 12) tile parameters, got {len(v)}")
        w = len(v) // 3
        return Tiles(*(PassTiles(*v[i * w:(i + 1) * w]) for i in range(3)))

    def clamped(self, block_size: int) -> "Tiles":
        """These tiles with every side at most ``block_size``. Block-sparse calls clamp on every call, so
        the usual case (the tiles fit: 128-token blocks) returns ``self`` after six comparisons: under
        torch.compile that is all Dynamo traces (tracing the dataclass rebuild added 10 Python guards,
        evaluated at every compiled call; session 17). Tiles that do need clamping come from a cache
        (rebuilding three frozen dataclasses cost ~20 us of each call's host time)."""
        if self.fwd.fits(block_size) and self.dkdv.fits(block_size) and self.dq.fits(block_size):
            return self
        return _clamped(self, block_size)


@functools.lru_cache(maxsize=256)
def _clamped(tiles: Tiles, block_size: int) -> Tiles:
    return Tiles(tiles.fwd.clamped(block_size), tiles.dkdv.clamped(block_size), tiles.dq.clamped(block_size))


def padded_head_dim(head_dim: int) -> int:
    """Head dim the kernels compute with: next power of two, at least 16 (tl.dot's minimum)."""
    return max(16, 1 << (int(head_dim) - 1).bit_length())


# (fwd, dkdv, dq) per padded head dim, 16-bit inputs on sm_90 (H100/H200): the best of
# `python -m kernels.tuning --head-dims 64,32` and `--head-dims 128` (--seq-lens 4096,16384) on an
# H200 (torch 2.11, triton 3.6, 2026-11-30, session 2; every timing in results/kernels/tuning/).
# 16 reuses 32's entry. 8 warps = two 64-row warpgroups; the 4-warp d=64 forward was 4 % slower.
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
# 16-bit inputs with attention dropout: entries here replace _GPU_16BIT's (the Philox random numbers
# raise register pressure, so the best tiles can differ); a head dim not listed uses _GPU_16BIT's.
# Measured with `python -m kernels.tuning --head-dims 32,64 --dropout 0.1` (same run as above); the
# d = 32 dK/dV and dQ entries re-tuned in session 6 (`LRA_DROPOUT_BWD=split ... --passes dkdv,dq`,
# results/kernels/tuning/tuning_dropout_split_dkdv_dq_h200.json: dK/dV (64, 64, 4, 3) 40.5 ms vs
# (32, 128, 4, 3) 41.7 ms, dQ (64, 64, 4, 3) 39.7 ms vs (128, 64, 4, 3) 40.5 ms, backward at N = 16K).
_GPU_16BIT_DROPOUT: dict[int, Tiles] = {
    32: Tiles(PassTiles(128, 64, 4, 3), PassTiles(64, 64, 4, 3), PassTiles(64, 64, 4, 3)),
    64: Tiles(PassTiles(128, 64, 4, 3), PassTiles(64, 64, 4, 3), PassTiles(64, 64, 4, 3)),
}
# The one-pass dropout backward (kernels.ops.fused_dropout_backward) runs its dK/dV kernel with a
# dQ tile on top, so it has dK/dV tiles of its own: `LRA_DROPOUT_BWD=fused python -m kernels.tuning
# --head-dims 32,64 --dropout 0.1 --passes dkdv` on the H200, session 6
# (results/kernels/tuning/tuning_dropout_fused_dkdv_h200.json; N = 4K, 16K: d = 32
# (64, 64, 4, 3) 30.9 ms vs the split's (32, 128, 4, 3) 40.9 ms at 16K; d = 64 (64, 128, 8, 3) 24.2 ms
# vs (64, 64, 4, 3) 25.5 ms). 16 reuses 32's.
_GPU_16BIT_DROPOUT_FUSED_DKDV: dict[int, PassTiles] = {
    16: PassTiles(64, 64, 4, 3),
    32: PassTiles(64, 64, 4, 3),
    64: PassTiles(64, 128, 8, 3),
}
# Not adopted (session 14): wider one-pass dK/dV tiles for short sequences. At the model's small batch
# at 1K (B 32 x H 2, d 32, dropout 0.1) `python -m kernels.tuning ... --passes dkdv` found (64, 128,
# 4, 3) 0.172 ms vs this table's (64, 64, 4, 3) 0.203 ms (results/models/session14/call2_7dd05da/),
# but (64, 64, 4, 3) won at the paper batch at 1K (B 256: 1.072 vs 1.235 ms) and at the small batch at
# 2K / 4K (0.286 / 0.509 vs 0.313 / 0.596 ms; results/models/session14/call3_bb6939b/). With a length
# rule (N_q <= 1K) the model's small-batch steps moved within the drift between calls, and its paper
# batch at 1K measured 0.98x SDPA (1.16x two calls before without the rule). One entry for every length.
# 16-bit block-sparse calls without dropout: entries here replace _GPU_16BIT's for them (before the
# clamp to the block size). Measured with `python -m kernels.tuning --sparse bigbird --block-size 128
# --head-dims 32,64 --seq-lens 4096,16384` on the H200 (session 7, git 8632699;
# results/kernels/tuning/tuning_sparse_bigbird_h200.json; ms at 4K / 16K, tuned vs the dense entry):
# d = 32 fwd (128, 128, 4, 3) 0.728 / 0.822 vs 0.743 / 0.849, dK/dV (64, 128, 4, 3) 1.600 / 1.824 vs
# 1.756 / 2.080, dQ unchanged; d = 64 fwd (128, 128, 4, 3) 0.460 / 0.559 vs 0.461 / 0.585, dK/dV
# (64, 64, 4, 3) 1.562 / 1.751 vs 1.593 / 1.916, dQ (64, 64, 4, 3) 1.309 / 1.466 vs 1.576 / 1.762.
# Re-measured at d = 32 against FlexAttention in the same call (results/kernels/sparse_tuned_d32_h200.*):
# block-sparse backward 10-14 % faster, forward within -3 / +4 %. 16 reuses 32's.
# Session 8 (git 02c7913, `--passes fwd`, local and BigBird): 64-row query tiles beat 128-row ones at
# d = 32 for the then unpipelined loops (results/kernels/sparse_grid/tune_sparse_*_fwd_d*.json).
# Session 9, after the block-sparse loops began carrying their list index one step ahead
# (kernels.triton_attention._fwd_tiles; their copies now pipeline like the dense loops'): all three
# passes re-tuned on the H200 on the local and BigBird layouts (git dc8f0fa, `python -m kernels.tuning
# --sparse local|bigbird --block-size 128 --head-dims D --seq-lens 4096,16384`, 4-stage candidates
# added), the winners picked by the geometric mean over both layouts and both lengths (`--combine`;
# results/kernels/sparse_grid/s9_call1_dc8f0fa/tune_sparse_*.json). Geometric means, ms:
# d = 32: fwd (128, 64, 4, 3) 0.385 vs (64, 64, 4, 3) 0.386, (64, 128, 4, 3) [session 8's] 0.418;
#         dK/dV (64, 128, 4, 3) 0.961 vs (64, 128, 4, 4) 0.970; dQ (128, 32, 4, 3) 0.923 vs (64, 64, 4, 3) 0.969
# d = 64: fwd (64, 64, 4, 3) 0.279 vs (128, 128, 4, 3) [session 7's] 0.294; dK/dV (32, 64, 4, 3) 0.793
#         vs (64, 64, 4, 3) 0.799; dQ (128, 64, 4, 3) 0.783 vs (64, 64, 4, 3) 0.792.
# The 4-stage twins never won. The grid with exactly these tiles: results/kernels/sparse_grid_h200.*.
# 16 reuses 32's.
_GPU_16BIT_SPARSE: dict[int, Tiles] = {
    16: Tiles(PassTiles(128, 64, 4, 3), PassTiles(64, 128, 4, 3), PassTiles(128, 32, 4, 3)),
    32: Tiles(PassTiles(128, 64, 4, 3), PassTiles(64, 128, 4, 3), PassTiles(128, 32, 4, 3)),
    64: Tiles(PassTiles(64, 64, 4, 3), PassTiles(32, 64, 4, 3), PassTiles(128, 64, 4, 3)),
}
_CPU = Tiles(PassTiles(128, 128, 1, 1), PassTiles(128, 128, 1, 1), PassTiles(128, 128, 1, 1))

TILES_ENV = "LRA_KERNEL_TILES"

_override: list[Tiles] = []
# bumped whenever what select() returns may change (overrides, table entries): callers that cache a
# call's tiles (kernels.packed_fast_path) key on it
GENERATION = 0


def _changed() -> None:
    global GENERATION
    GENERATION += 1


@contextlib.contextmanager
def override(tiles: Tiles) -> Iterator[None]:
    """Force ``tiles`` for every call made inside the block (tests and tuning scripts)."""
    _override.append(tiles)
    _changed()
    try:
        yield
    finally:
        _override.pop()
        _changed()


def set_gpu_table(head_dim_padded: int, tiles: Tiles, *, fp32: bool = False, dropout: bool = False,
                  fused_dkdv: PassTiles | None = None, sparse: bool = False) -> None:
    """Replace one entry of the GPU table (16-bit inputs with dropout: ``dropout=True``; with
    ``fused_dkdv`` also the dK/dV tiles of the one-pass dropout backward; 16-bit block-sparse calls
    without dropout: ``sparse=True``)."""
    _changed()
    if sparse:
        _GPU_16BIT_SPARSE[int(head_dim_padded)] = tiles
        return
    if fused_dkdv is not None:
        _GPU_16BIT_DROPOUT_FUSED_DKDV[int(head_dim_padded)] = fused_dkdv
    if fp32:
        _GPU_FP32[int(head_dim_padded)] = tiles
    else:
        (_GPU_16BIT_DROPOUT if dropout else _GPU_16BIT)[int(head_dim_padded)] = tiles


def load_tuning(path: str) -> list[str]:
    """Put the best tiles of a ``python -m kernels.tuning --out`` JSON into the GPU tables.

    A file tuned with ``--dropout`` fills the dropout table; tuned under ``LRA_DROPOUT_BWD=fused``
    (its entries' ``dropout_bwd``), its dK/dV tiles go to the one-pass backward's own table instead.
    A file tuned with ``--sparse`` (its entries' ``sparse``) fills the block-sparse table. Passes the
    file did not tune keep the table's entry. Returns one line per head dim, saying what changed."""
    import json

    with open(path) as f:
        tuned = json.load(f)
    try:
        results = tuned["results"]
    except (KeyError, TypeError):
        raise ValueError(f"{path}: not a kernels.tuning JSON (no 'results')") from None
    lines = []
    for d_pad, entry in results.items():
        d_pad = int(d_pad)
        best = entry.get("best", {})
        dropout = float(entry.get("dropout", 0.0)) > 0.0
        sparse = bool(entry.get("sparse"))
        if sparse and dropout:
            raise ValueError(f"{path}: head dim {d_pad} was tuned block-sparse with dropout, which has no table")
        base = (_GPU_16BIT_DROPOUT if dropout else _GPU_16BIT_SPARSE if sparse else {}).get(d_pad, _GPU_16BIT[d_pad])
        fused = dropout and entry.get("dropout_bwd") == "fused"
        fused_dkdv = PassTiles(*best["dkdv"]) if fused and "dkdv" in best else None
        tiles = Tiles(*(PassTiles(*best[k]) if k in best and not (fused and k == "dkdv") else getattr(base, k)
                        for k in ("fwd", "dkdv", "dq")))
        set_gpu_table(d_pad, tiles, dropout=dropout, fused_dkdv=fused_dkdv, sparse=sparse)
        what = f"{tiles.as_list()}" + (f", one-pass dK/dV {list(dataclasses.astuple(fused_dkdv))}" if fused_dkdv else "")
        kind = " dropout" if dropout else " block-sparse" if sparse else ""
        lines.append(f"d={d_pad}{kind}: {what} (from {path})")
    return lines


def load_tuning_from_env() -> list[str]:
    """Apply every tuning JSON listed (comma-separated) in $LRA_KERNEL_TILES."""
    import os

    lines = []
    for path in filter(None, os.environ.get(TILES_ENV, "").split(",")):
        lines += load_tuning(path)
    return lines


def select(device: torch.device, dtype: torch.dtype, head_dim: int, block_size: int | None = None, *,
           dropout: bool = False, fused_bwd: bool = False) -> Tiles:
    """Tiles for inputs of ``dtype`` with ``head_dim`` on ``device`` (block-sparse: ``block_size``;
    ``dropout``: the call applies attention dropout; ``fused_bwd``: its backward is the one-pass
    form, ``kernels.ops.fused_dropout_backward``)."""
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
            tiles = Tiles(tiles.fwd, _GPU_16BIT_DROPOUT_FUSED_DKDV[d_pad], tiles.dq)
    else:
        tiles = _CPU
    if block_size is not None:
        tiles = tiles.clamped(block_size)
    return tiles


load_tuning_from_env()
