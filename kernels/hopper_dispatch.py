"""Which kernel runs the eager attention forward: the Hopper ping-pong forward
(:func:`kernels.hopper_attention.launch_forward`, ``pingpong=True, overlap=True``; block-sparse:
:func:`kernels.hopper_attention.launch_sparse_forward`) where
:func:`kernels.hopper_support.takes_hopper_forward` says so, the portable one
(:func:`kernels.launch_args.forward`) otherwise.

Both write the output in :func:`kernels.launch_args.new_output`'s layout and store the same row
statistics, so the backward is the portable one either way (the Hopper backward is slower). Only
the eager forward (:class:`kernels.autograd.FlashFunction`, :class:`kernels.autograd.PackedFlashFunction`)
dispatches; under torch.compile the ops launch the portable kernel (:mod:`kernels.ops`).
:func:`use_hopper_forward` switches the dispatch off or on for the process.

A block-sparse call brings its forward plan (:mod:`kernels.block_sparse`), made for the forward tile
of the call's tiles. The Hopper forward walks plans made for its own tile
(:data:`kernels.hopper_support.FORWARD_TILE`), so the block-sparse function asks
:func:`sparse_tiles` for the tiles before the plans are looked up: the Hopper tile as the forward
tile where the Hopper forward will run the call (eager, layout blocks of 128 or 256, and what
:func:`kernels.hopper_support.takes_hopper_forward` asks of a block-sparse call: d = 128 and a dense
call's other conditions), the tiles as they were otherwise. The backward's tiles and plans are the
same either way.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch
import triton

from . import launch_args
from .hopper_support import FORWARD_TILE, cuda_capability, takes_hopper_forward
from .tiles import PassTiles, Tiles

Tensor = torch.Tensor

_TRITON_VERSION = triton.__version__
_enabled = True


def use_hopper_forward(enabled: bool) -> bool:
    """Let eager dense and block-sparse forwards run the Hopper ping-pong kernel where it applies
    (``True``, the default) or keep every forward on the portable kernel (``False``), process-wide,
    from the next call on. Returns the previous setting (to restore it).
    :func:`kernels.kernel_settings` reports it as ``hopper_forward``."""
    global _enabled
    previous, _enabled = _enabled, bool(enabled)
    return previous


def hopper_forward_enabled() -> bool:
    """The setting of :func:`use_hopper_forward`."""
    return _enabled


def forward(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], seed: Optional[Tensor],
            fwd_indices: Optional[Tensor], fwd_counts: Optional[Tensor], causal: bool, dropout_p: float,
            softmax_scale: float, tiles: list[int]) -> tuple[Tensor, Tensor]:
    """The eager forward: (out, row statistics) as :func:`kernels.launch_args.forward` returns them,
    from the Hopper ping-pong kernel or the portable one. The output is allocated first
    (:func:`kernels.launch_args.new_output`), so the decision sees its strides too and the portable
    kernel writes into it when the Hopper one does not run. The arguments are the public call's,
    checked (:func:`kernels.validation.check_attention_inputs`) and ``softmax_scale`` resolved, so the
    Hopper kernel launches through :func:`kernels.hopper_attention.launch_forward`, without
    :func:`kernels.hopper_attention.hopper_forward`'s checks of the same facts. A block-sparse call
    (``fwd_indices`` given) takes the Hopper forward only with a plan made for its tile: ``tiles``'s
    forward tile is :data:`kernels.hopper_support.FORWARD_TILE` (see :func:`sparse_tiles`)."""
    out = launch_args.new_output(q)
    sparse_tile = None if fwd_indices is None else (tiles[0], tiles[1])
    if takes_hopper_forward(_TRITON_VERSION, cuda_capability(q.get_device()) if q.is_cuda else None, q.dtype,
                            q.shape[3], k.shape[2], dropout_p, sparse_tile, (q, k, v, out), enabled=_enabled):
        if sparse_tile is not None:
            from .hopper_attention import launch_sparse_forward

            return launch_sparse_forward(q, k, v, out, key_padding_mask, causal, softmax_scale, fwd_indices,
                                         fwd_counts, overlap=True)
        from .hopper_attention import launch_forward

        return launch_forward(q, k, v, out, key_padding_mask, causal, softmax_scale, overlap=True, pingpong=True)
    return launch_args.forward(launch_args.eager, q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, causal,
                               dropout_p, softmax_scale, tiles, out=out)


def sparse_tiles(q: Tensor, k: Tensor, v: Tensor, block_size: int, dropout_p: float, tiles: Tiles) -> Tiles:
    """The tiles of a block-sparse call (its inputs checked, ``tiles`` those :func:`kernels.tiles.select`
    gives it): ``tiles`` with the forward tile replaced by the Hopper forward's
    (:data:`kernels.hopper_support.FORWARD_TILE`) when the eager forward will run the Hopper kernel
    on the call, so that the forward plan the call looks up is the index list that kernel walks;
    ``tiles`` unchanged otherwise: under torch.compile (the ops launch the portable kernel), with
    layout blocks smaller than the Hopper tile (a layout block must be a whole number of tiles), or where
    :func:`kernels.hopper_support.takes_hopper_forward` says no. The output is not allocated yet; it
    will be :func:`kernels.launch_args.new_output`'s, which TMA accepts wherever q is accepted."""
    if torch.compiler.is_compiling() or block_size < max(FORWARD_TILE):
        return tiles
    if not takes_hopper_forward(_TRITON_VERSION, cuda_capability(q.get_device()) if q.is_cuda else None, q.dtype,
                                q.shape[3], k.shape[2], dropout_p, FORWARD_TILE, (q, k, v), enabled=_enabled):
        return tiles
    return with_hopper_forward_tile(tiles)


@functools.lru_cache(maxsize=64)
def with_hopper_forward_tile(tiles: Tiles) -> Tiles:
    """``tiles`` with :data:`kernels.hopper_support.FORWARD_TILE` as the forward tile (made once per
    tiles: every eager block-sparse call asks). Its launch options (8 warps, 2 stages) are the
    portable kernel's for a 128 x 128 tile, should it ever run the plan."""
    return Tiles(PassTiles(*FORWARD_TILE, num_warps=8, num_stages=2), tiles.dkdv, tiles.dq)
