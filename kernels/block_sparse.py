"""Block-sparse FlashAttention: the dense kernels walking compressed lists of non-zero tiles.

:class:`BlockSparseLayout` is the compressed form of a bool block layout. It is built once per
layout (``BlockSparseLayout.from_dense(layout, block_size)``, or implicitly and cached when a bool
tensor is passed) and reused across calls and layers. For each call signature (sequence lengths,
causal flag, tile sizes) it derives and caches three *plans*, one per kernel pass:

- forward and dQ pass: for every (head, query tile) the key tiles to visit (``kv_indices`` /
  ``kv_num_blocks`` in FlexAttention's terms);
- dK/dV pass: the transposed lists, for every (head, key tile) the query tiles to visit;
- per pass, the launch order of the tile rows (heaviest first, see *Scheduling* below).

Each list holds the tiles that need no element mask first, then the partial ones (causal diagonal,
ragged last tile); ``counts[..., 0]`` / ``counts[..., 1]`` are the ends of the two groups. Tiles
that causal masking hides completely are dropped. Kernel tiles divide ``block_size`` (tile sides
are clamped to it), so a layout block maps onto whole tiles.

On an sm_90 GPU the eager forward of a call at d = 128 with layout blocks of 128 or 256 runs the
Hopper ping-pong kernel (:mod:`kernels.hopper_dispatch`): its forward plan is then made for that
kernel's tile (128 query rows x 128 keys, :func:`kernels.hopper_dispatch.sparse_tiles`), which it
walks like the portable kernel does; the backward's plans are the same either way.

Under ``torch.compile`` the plans are looked up outside the traced region: the compiled graph gets
them as ready constant tensors (see :func:`_constant_plans`), so neither the plan building (which
sizes its index lists from the data) nor the cache breaks the graph. A layout object is known to
the compiler by an integer key, so its plans must be built from a :class:`BlockSparseLayout` (the
bool-tensor shortcut, compressed by identity, graph-breaks under torch.compile).

Scheduling: rows of very unequal length (BigBird's global rows visit every tile, ~4x the others)
launched in natural order finish last and leave the GPU idle (a load-imbalance tail). Each plan
therefore stores each head's tile rows sorted by descending work (longest-processing-time-first,
Graham 1969), the row itself in ``counts[h, slot, 2]``; the kernels take the heads in groups of
``LPT_HEAD_GROUP`` with the group's heaviest rows first (see ``_program_slot`` in
:mod:`kernels.triton_attention`). Because the lists are stored by launch slot, not by row, a program's
row, counts and index list are read with independent loads (one memory round trip before the first
key tile instead of three in a chain). Only the order of independent programs changes, so results
are bit-identical, and dropout (keyed by real row/column indices) is unaffected.
"""
from __future__ import annotations

import itertools
import math
import weakref

import torch
from torch.fx.experimental.symbolic_shapes import guard_scalar

from . import hopper_dispatch, ops
from . import layouts as _layouts
from .autograd import packed_views
from .dropout import draw_seed, fused_backward
from .tiles import Tiles, select
from .validation import check_attention_inputs

SUPPORTED_BLOCK_SIZES = (16, 32, 64, 128, 256)


def _check_block_size(block_size) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        raise TypeError(f"block_size must be an int, one of {SUPPORTED_BLOCK_SIZES}, got {block_size!r}")
    if block_size not in SUPPORTED_BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {SUPPORTED_BLOCK_SIZES}, got {block_size}")
    return block_size


def _tile_plan(layout: torch.Tensor, block_size: int, n_q: int, n_k: int, causal: bool, block_m: int,
               block_n: int, transposed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Index lists (Hl, rows, width) int32 and counts (Hl, rows, 3) int32 of one kernel pass, one
    entry per launch slot: slot p of head h runs tile row ``counts[h, p, 2]``, the row with the p-th
    most work (the launch order); ``counts[h, p, :2]`` are the ends of that row's full and partial
    groups and ``indices[h, p]`` its tiles to visit.
    """
    device = layout.device
    n_m, n_n = -(-n_q // block_m), -(-n_k // block_n)
    mt = torch.arange(n_m, device=device)
    nt = torch.arange(n_n, device=device)
    active = layout[:, (mt * block_m) // block_size][:, :, (nt * block_n) // block_size]  # (Hl, n_m, n_n)
    rows_first = mt * block_m
    rows_last = torch.clamp((mt + 1) * block_m, max=n_q) - 1
    cols_first = nt * block_n
    cols_end = (nt + 1) * block_n  # exclusive, unclipped
    whole_cols = (cols_end <= n_k)[None, :]
    if causal:
        offset = n_k - n_q  # bottom-right aligned: row i sees keys j <= i + offset
        visible = cols_first[None, :] <= rows_last[:, None] + offset
        full = (cols_end[None, :] - 1 <= rows_first[:, None] + offset) & whole_cols
        active = active & visible
    else:
        full = whole_cols.expand(n_m, n_n)
    group = torch.where(active & full, 0, torch.where(active, 1, 2))  # 0 full, 1 partial, 2 skipped
    if transposed:
        group = group.transpose(1, 2)
    width = group.shape[-1]
    order = torch.argsort(group * width + torch.arange(width, device=device), dim=-1)
    n_full, n_visit = (group == 0).sum(-1), (group < 2).sum(-1)
    # launch order, longest-processing-time first: program slot r of a head runs the tile row with the
    # r-th most tiles to visit (ties: more partial tiles first, then natural order; the sort is stable)
    launch = torch.argsort(-(n_visit * (width + 1) + (n_visit - n_full)), dim=-1, stable=True)
    # stored in launch order (slot p of head h holds tile row launch[h, p]): a program reads its row,
    # its two counts and its first list entries with loads that do not wait for one another
    keep = max(int(n_visit.max()), 1)
    indices = order[..., :keep].gather(1, launch[..., None].expand(-1, -1, keep))
    counts = torch.stack([n_full.gather(1, launch), n_visit.gather(1, launch), launch], dim=-1)
    return indices.to(torch.int32).contiguous(), counts.to(torch.int32).contiguous()


# every BlockSparseLayout by its key: what torch.compile's constant plan lookup (_constant_plans) receives
_LAYOUTS: "weakref.WeakValueDictionary[int, BlockSparseLayout]" = weakref.WeakValueDictionary()
_layout_keys = itertools.count()


class BlockSparseLayout:
    """Compressed block layout for :func:`block_sparse_flash_attention`, reusable across calls.

    ``layout``: bool (n_q_blocks, n_k_blocks) shared by all heads or (H, n_q_blocks, n_k_blocks);
    True = the query block attends to the key block. Build with :meth:`from_dense`. The layout is
    read when it is built and when a call signature's plans are first made; changing the tensor
    afterwards is not seen (build a new object).
    """

    def __init__(self, layout: torch.Tensor, block_size: int, *, _parent: "BlockSparseLayout | None" = None):
        _check_block_size(block_size)
        if not isinstance(layout, torch.Tensor) or layout.dtype != torch.bool:
            raise TypeError(f"layout must be a bool tensor (True = the query block attends to the key block), got "
                            f"{layout.dtype if isinstance(layout, torch.Tensor) else type(layout).__name__}")
        if layout.layout != torch.strided:
            raise TypeError(f"layout must be a dense (strided) tensor, got {layout.layout}; call .to_dense()")
        if layout.dim() not in (2, 3) or layout.numel() == 0:
            raise ValueError(f"layout must be a non-empty (n_q_blocks, n_k_blocks) or (H, n_q_blocks, n_k_blocks) "
                             f"bool tensor, got shape {tuple(layout.shape)}")
        self.layout = layout[None] if layout.dim() == 2 else layout
        if _parent is None:
            self.layout = self.layout.contiguous()
        self.shared = layout.dim() == 2
        self.block_size = block_size
        # a corner (a view of its parent's layout) shares its parent's plans: see corner()
        self._plans: dict[tuple, tuple[torch.Tensor, ...]] = {} if _parent is None else _parent._plans
        self._corners: dict[tuple[int, int], BlockSparseLayout] = {}
        self._checked: set[tuple] = set()  # call signatures check() has passed
        self.key = next(_layout_keys)
        _LAYOUTS[self.key] = self

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["key"]  # a copy (copy.deepcopy, pickle) is a layout of its own: it gets a new key
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.key = next(_layout_keys)
        _LAYOUTS[self.key] = self

    @classmethod
    def from_dense(cls, layout: torch.Tensor, block_size: int = 128) -> "BlockSparseLayout":
        return cls(layout, block_size)

    @property
    def num_heads(self) -> int | None:
        """Heads of a per-head layout, None for a layout shared by all heads."""
        return None if self.shared else self.layout.shape[0]

    @property
    def n_blocks(self) -> tuple[int, int]:
        return self.layout.shape[1], self.layout.shape[2]

    def density(self) -> float:
        return float(self.layout.to(torch.float64).mean())

    def check(self, n_q: int, n_k: int, num_heads: int, device: torch.device) -> None:
        """Raise if this layout does not fit a call (blocks for n_q x n_k, heads, device). A
        signature that passed is remembered: the layout is fixed once built (see the class), so
        later calls with it skip the check's host time."""
        key = (n_q, n_k, num_heads, device)
        if key in self._checked:
            return
        _layouts.check_layout(self.layout[0] if self.shared else self.layout,
                              -(-n_q // self.block_size), -(-n_k // self.block_size), num_heads, device,
                              block_size=self.block_size)
        self._checked.add(key)

    def corner(self, n_q_blocks: int, n_k_blocks: int) -> "BlockSparseLayout":
        """The layout of the top-left ``n_q_blocks x n_k_blocks`` blocks (cached; ``self`` for the whole).

        A corner is a view of this layout (no copy) and shares its plan cache: plans only ever read the
        blocks a call signature covers, so a model that slices one max-length layout for shorter
        sequences builds each plan once."""
        n_q_all, n_k_all = self.n_blocks
        if not (1 <= n_q_blocks <= n_q_all and 1 <= n_k_blocks <= n_k_all):
            raise ValueError(f"corner ({n_q_blocks}, {n_k_blocks}) is outside the layout's ({n_q_all}, {n_k_all}) blocks")
        if (n_q_blocks, n_k_blocks) == (n_q_all, n_k_all):
            return self
        hit = self._corners.get((n_q_blocks, n_k_blocks))
        if hit is None:
            part = self.layout[:, :n_q_blocks, :n_k_blocks]
            hit = BlockSparseLayout(part[0] if self.shared else part, self.block_size, _parent=self)
            self._corners[(n_q_blocks, n_k_blocks)] = hit
        return hit

    def plans(self, n_q: int, n_k: int, causal: bool, tiles: Tiles) -> tuple[torch.Tensor, ...]:
        """(fwd_idx, fwd_cnt, dkdv_idx, dkdv_cnt, dq_idx, dq_cnt) for one call signature (cached)."""
        key = (n_q, n_k, bool(causal), tiles.as_tuple())
        plans = self._plans.get(key)
        if plans is None:
            bs = self.block_size
            # normal tensors even when the first call runs under torch.inference_mode (e.g. Lightning's
            # sanity-check validation): cached inference tensors could not be saved for a later backward
            with torch.inference_mode(False):
                fwd = _tile_plan(self.layout, bs, n_q, n_k, causal, tiles.fwd.block_m, tiles.fwd.block_n, False)
                dkdv = _tile_plan(self.layout, bs, n_q, n_k, causal, tiles.dkdv.block_m, tiles.dkdv.block_n, True)
                dq = _tile_plan(self.layout, bs, n_q, n_k, causal, tiles.dq.block_m, tiles.dq.block_n, False)
            plans = (*fwd, *dkdv, *dq)
            self._plans[key] = plans
        return plans

    def __repr__(self) -> str:
        heads = "shared" if self.shared else f"{self.layout.shape[0]} heads"
        return (f"BlockSparseLayout({self.n_blocks[0]}x{self.n_blocks[1]} blocks of {self.block_size}, {heads}, "
                f"density {self.density():.3f})")


@torch.compiler.assume_constant_result
def _constant_plans(layout_key: int, n_q: int, n_k: int, causal: bool, tiles: tuple) -> tuple[torch.Tensor, ...]:
    """:meth:`BlockSparseLayout.plans` of the layout with ``layout_key``, for torch.compile: Dynamo runs
    this while tracing (every argument is a Python constant the graph is specialised on) and gives
    the graph the resulting tensors, so the plans are built, or found in the cache, outside the graph.
    It returns the tuple, not single tensors: Dynamo names a constant result after the function, and
    only a non-tensor result gets a unique name per call."""
    return _LAYOUTS[layout_key].plans(n_q, n_k, causal, Tiles.from_list(tiles))


def _plans_for(compiled: BlockSparseLayout, n_q: int, n_k: int, causal: bool, tiles: Tiles) -> tuple[torch.Tensor, ...]:
    if torch.compiler.is_compiling():
        # The plans depend on the sequence lengths' values: guard_scalar specialises a length that
        # torch.compile made symbolic (it does after seeing a second N) back to its value, so each N
        # gets its own break-free graph with its plans as constants.
        n_q, n_k = guard_scalar(n_q), guard_scalar(n_k)
        return _constant_plans(compiled.key, n_q, n_k, causal, tiles.as_tuple())
    return compiled.plans(n_q, n_k, causal, tiles)


# bool layout tensors passed directly are compressed once and remembered (weakly) by identity.
_compiled: dict[tuple[int, int, int], tuple[weakref.ref, BlockSparseLayout]] = {}


def compile_layout(layout: torch.Tensor, block_size: int) -> BlockSparseLayout:
    """The cached :class:`BlockSparseLayout` of a bool layout tensor (rebuilt if it was modified).

    An inference tensor (made under ``torch.inference_mode``) has no version counter, so a change made
    to it in place could not be seen: it is compressed afresh at every call (pass a
    :class:`BlockSparseLayout` to reuse the work)."""
    if layout.is_inference():
        return BlockSparseLayout(layout, block_size)
    key = (id(layout), layout._version, block_size)
    hit = _compiled.get(key)
    if hit is not None and hit[0]() is layout:
        return hit[1]
    compiled = BlockSparseLayout(layout, block_size)
    for stale in [k for k, (ref, _) in _compiled.items() if ref() is None or k[0] == id(layout)]:
        del _compiled[stale]
    _compiled[key] = (weakref.ref(layout), compiled)
    return compiled


def block_sparse_flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout, *, block_size: int = 128,
                                 key_padding_mask: torch.Tensor | None = None, causal: bool = False,
                                 dropout_p: float = 0.0, softmax_scale: float | None = None) -> torch.Tensor:
    """Attention restricted to the True blocks of ``layout``: exactly dense attention
    (:func:`kernels.flash_attention`, same arguments and rules) with every (query, key) pair outside
    the layout's blocks masked out. Skipped blocks cost nothing.

    ``layout``: bool tensor (n_q_blocks, n_k_blocks) shared by all heads or (H, n_q_blocks,
    n_k_blocks), ``n_blocks = ceil(N / block_size)``, on q's device — or a
    :class:`BlockSparseLayout` built once with ``BlockSparseLayout.from_dense(layout, block_size)``
    (its block size must equal ``block_size``). A query row that sees no allowed key returns zeros
    (zero gradient, no NaN). ``block_size`` in {16, 32, 64, 128, 256}.
    """
    scale, dropout_p, seed, plans, tiles = _prepare(q, k, v, layout, block_size, key_padding_mask, causal, dropout_p,
                                                    softmax_scale)
    out, _row_stats = ops.attention(q, k, v, key_padding_mask, seed, plans, causal, dropout_p, scale, tiles)
    return out


def block_sparse_flash_attention_qkvpacked(qkv: torch.Tensor, layout, *, block_size: int = 128,
                                           key_padding_mask: torch.Tensor | None = None, causal: bool = False,
                                           dropout_p: float = 0.0, softmax_scale: float | None = None) -> torch.Tensor:
    """:func:`block_sparse_flash_attention` of q, k, v packed in one (B, N, 3, H, d) tensor, returning
    (B, N, H, d); the packed form of :func:`kernels.flash_attention_qkvpacked` (same gains in eager mode)."""
    q, k, v = views = packed_views(qkv)
    scale, p, seed, plans, tiles = _prepare(q, k, v, layout, block_size, key_padding_mask, causal, dropout_p,
                                            softmax_scale)
    return ops.attention_packed(qkv, views, key_padding_mask, seed, plans, causal, p, scale, tiles)


def _prepare(q, k, v, layout, block_size, key_padding_mask, causal, dropout_p, softmax_scale):
    """Checked inputs -> (scale, dropout_p, seed, the six index lists, tiles as a list) of a call."""
    shape = check_attention_inputs(q, k, v, key_padding_mask, causal, dropout_p, softmax_scale)
    _check_block_size(block_size)
    if isinstance(layout, BlockSparseLayout):
        if layout.block_size != block_size:
            raise ValueError(f"the BlockSparseLayout was built for block_size={layout.block_size} but "
                             f"block_size={block_size} was passed; pass block_size={layout.block_size}")
        compiled = layout
    elif isinstance(layout, torch.Tensor):
        _layouts.check_layout(layout, -(-shape.n_q // block_size), -(-shape.n_k // block_size), shape.heads,
                              q.device, block_size=block_size)
        compiled = compile_layout(layout, block_size)
    else:
        raise TypeError(f"layout must be a bool tensor or a kernels.BlockSparseLayout, got {type(layout).__name__}")
    compiled.check(shape.n_q, shape.n_k, shape.heads, q.device)
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(shape.head_dim)
    dropout_p = float(dropout_p)
    seed = draw_seed(q.device) if dropout_p > 0.0 else None
    tiles = select(q.device, q.dtype, shape.head_dim, block_size, dropout=dropout_p > 0.0,
                   fused_bwd=fused_backward(dropout_p))
    # the Hopper forward's tile where that kernel will run the eager forward: its plan is the one it walks
    tiles = hopper_dispatch.sparse_tiles(q, k, v, block_size, dropout_p, tiles)
    plans = _plans_for(compiled, shape.n_q, shape.n_k, causal, tiles)
    return scale, dropout_p, seed, plans, tiles.as_list()
