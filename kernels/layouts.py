"""Block-sparsity layouts for ``kernels.block_sparse_flash_attention``.

A *layout* is a bool tensor of shape ``(n_q_blocks, n_k_blocks)`` (one pattern shared by every head)
or ``(H, n_q_blocks, n_k_blocks)`` (one pattern per head), where ``n_blocks = ceil(N / block_size)``
(:func:`num_blocks`). ``layout[..., i, j]`` is True when the queries of block ``i`` attend to the
keys of block ``j``; the kernel skips every False block at no cost and masks nothing inside a True
block (the sparsity is block-granular). Causal masking is applied by the kernel itself
(``causal=True``), so none of the builders here has a causal variant.

Builders (each docstring states the exact pattern and its source):

- :func:`local` — sliding window of blocks (Longformer's window, no globals).
- :func:`longformer` — sliding window plus global blocks (Beltagy et al., 2020).
- :func:`bigbird` — BigBird-ITC: globals + window + seeded random blocks (Zaheer et al., 2020).
- :func:`butterfly` — flat block butterfly (Chen et al., 2022 "Pixelated Butterfly"), the fixed
  pattern of the FlashAttention paper's block-sparse runs (Dao et al., 2022).
- :func:`from_mask` — block reduction of an element-wise predicate (like FlexAttention's mask_mod).

Utilities: :func:`density`, :func:`num_blocks`, :func:`check_layout` (the kernel's validation),
:func:`to_block_mask` / :func:`from_block_mask` (conversion to and from torch's FlexAttention
``BlockMask``).

Everything here is plain PyTorch; builders return CPU tensors unless ``device`` is given.
"""
from __future__ import annotations

import inspect
import operator
from typing import Callable, Iterable

import torch

__all__ = [
    "BENCHMARK_LAYOUTS",
    "benchmark_layout",
    "bigbird",
    "butterfly",
    "check_layout",
    "density",
    "from_block_mask",
    "from_mask",
    "local",
    "longformer",
    "num_blocks",
    "to_block_mask",
]

# Elements evaluated per ``mask_fn`` call in :func:`from_mask` (bounds its peak memory).
_FROM_MASK_CHUNK_ELEMENTS = 1 << 24


# ----------------------------------------------------------------------------------------------
# argument checking
# ----------------------------------------------------------------------------------------------
def _int_arg(name: str, value, minimum: int | None = None) -> int:
    """``value`` as a Python int (bools and floats are rejected), at least ``minimum``."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got the bool {value!r}")
    try:
        as_int = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if minimum is not None and as_int < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {as_int}")
    return as_int


def _odd_window(window) -> int:
    window = _int_arg("window", window, minimum=1)
    if window % 2 == 0:
        raise ValueError(
            f"window must be odd (it counts blocks centred on the diagonal: block i sees blocks "
            f"i - window//2 .. i + window//2), got {window}; use {window - 1} or {window + 1}"
        )
    return window


def _num_heads_arg(num_heads) -> int | None:
    return None if num_heads is None else _int_arg("num_heads", num_heads, minimum=1)


def _band(n_blocks: int, window: int) -> torch.Tensor:
    """(n, n) bool: |i - j| <= window // 2."""
    idx = torch.arange(n_blocks)
    return (idx[:, None] - idx[None, :]).abs() <= window // 2


def _set_globals(layout: torch.Tensor, global_idx: torch.Tensor) -> torch.Tensor:
    """Make the rows and columns of ``global_idx`` full (in place on the last two dims)."""
    if global_idx.numel():
        layout[..., global_idx, :] = True
        layout[..., :, global_idx] = True
    return layout


def _finish(layout: torch.Tensor, num_heads: int | None, device) -> torch.Tensor:
    """Add the head dimension (the same pattern for every head) and move to ``device``."""
    if num_heads is not None:
        layout = layout.expand(num_heads, *layout.shape).contiguous()
    return layout.to(device) if device is not None else layout


# ----------------------------------------------------------------------------------------------
# sizes, density, validation
# ----------------------------------------------------------------------------------------------
def num_blocks(seq_len: int, block_size: int) -> int:
    """Number of blocks covering ``seq_len`` tokens: ``ceil(seq_len / block_size)``.

    The last block is partial when ``block_size`` does not divide ``seq_len``.
    """
    seq_len = _int_arg("seq_len", seq_len, minimum=1)
    block_size = _int_arg("block_size", block_size, minimum=1)
    return -(-seq_len // block_size)


def density(layout: torch.Tensor, *, per_head: bool = False) -> float | torch.Tensor:
    """Fraction of True blocks in ``layout``.

    For a per-head layout ``(H, n_q, n_k)`` this is the mean over heads of each head's density (all
    heads have the same number of blocks, so it is also the fraction of all True blocks); with
    ``per_head=True`` it returns the float64 tensor of the ``H`` per-head densities instead.
    The block density is the fraction of attention FLOPs the block-sparse kernel performs relative
    to dense attention when the block size divides N (and before causal masking).
    """
    _check_bool_tensor(layout)
    if layout.dim() not in (2, 3) or layout.numel() == 0:
        raise ValueError(
            f"layout must be a non-empty (n_q_blocks, n_k_blocks) or (H, n_q_blocks, n_k_blocks) "
            f"tensor, got shape {tuple(layout.shape)}"
        )
    per_head_density = layout.to(torch.float64).mean(dim=(-2, -1))
    if per_head:
        if layout.dim() != 3:
            raise ValueError(f"per_head=True needs a (H, n_q, n_k) layout, got shape {tuple(layout.shape)}")
        return per_head_density.cpu()
    return float(per_head_density.mean())


def _check_bool_tensor(layout) -> None:
    if not isinstance(layout, torch.Tensor):
        raise TypeError(f"layout must be a torch.Tensor of dtype torch.bool, got {type(layout).__name__}")
    if layout.dtype != torch.bool:
        raise TypeError(
            f"layout must have dtype torch.bool (True = the query block attends to the key block), "
            f"got {layout.dtype}; convert with layout.bool() if 0/1 values are meant"
        )
    if layout.layout != torch.strided:
        raise TypeError(f"layout must be a dense (strided) tensor, got {layout.layout}; call .to_dense()")


def _same_device(a: torch.device, b: torch.device) -> bool:
    if a.type != b.type:
        return False
    if a.index is None or b.index is None:
        if a.type == "cuda" and torch.cuda.is_available():
            current = torch.cuda.current_device()
            index_a = a.index if a.index is not None else current
            index_b = b.index if b.index is not None else current
            return index_a == index_b
        return True
    return a.index == b.index


def check_layout(
    layout,
    n_q_blocks: int,
    n_k_blocks: int,
    num_heads: int,
    device,
    *,
    block_size: int | None = None,
) -> torch.Tensor:
    """Validate ``layout`` for attention over ``num_heads`` heads on ``device``.

    Accepted: a bool tensor of shape ``(n_q_blocks, n_k_blocks)`` (shared by all heads) or
    ``(num_heads, n_q_blocks, n_k_blocks)``, on ``device``. Raises ``TypeError`` for a non-tensor or
    a non-bool dtype and ``ValueError`` for a wrong number of dimensions, a block count that is not
    ``ceil(N / block_size)``, a head count that differs from ``num_heads`` or a device mismatch; the
    message names the problem and the expected value. ``block_size`` (optional) only enriches the
    messages.

    Returns the layout as a ``(num_heads, n_q_blocks, n_k_blocks)`` view (expanded, not copied,
    when it is shared by all heads).
    """
    n_q_blocks = _int_arg("n_q_blocks", n_q_blocks, minimum=1)
    n_k_blocks = _int_arg("n_k_blocks", n_k_blocks, minimum=1)
    num_heads = _int_arg("num_heads", num_heads, minimum=1)
    _check_bool_tensor(layout)
    per = " (ceil(N / block_size)" + (f" with block_size={block_size})" if block_size is not None else ")")
    if layout.dim() not in (2, 3):
        raise ValueError(
            f"layout must have 2 dims (n_q_blocks, n_k_blocks) or 3 dims (num_heads, n_q_blocks, "
            f"n_k_blocks), got {layout.dim()} dims with shape {tuple(layout.shape)}"
        )
    if tuple(layout.shape[-2:]) != (n_q_blocks, n_k_blocks):
        raise ValueError(
            f"layout covers {tuple(layout.shape[-2:])} (query, key) blocks but the inputs need "
            f"({n_q_blocks}, {n_k_blocks}) blocks{per}; build it with n_blocks = "
            f"kernels.layouts.num_blocks(seq_len, block_size)"
        )
    if layout.dim() == 3 and layout.shape[0] != num_heads:
        raise ValueError(
            f"layout has {layout.shape[0]} heads (shape {tuple(layout.shape)}) but the inputs have "
            f"{num_heads} heads; give one layout per head or a 2-D layout shared by all heads"
        )
    if not _same_device(layout.device, torch.device(device)):
        raise ValueError(
            f"layout is on {layout.device} but q/k/v are on {torch.device(device)}; move it with "
            f"layout.to(q.device)"
        )
    if layout.dim() == 2:
        return layout.expand(num_heads, n_q_blocks, n_k_blocks)
    return layout


# ----------------------------------------------------------------------------------------------
# builders
# ----------------------------------------------------------------------------------------------
def local(n_blocks: int, window: int, *, num_heads: int | None = None, device=None) -> torch.Tensor:
    """Sliding window of blocks: block ``i`` attends to block ``j`` iff ``|i - j| <= window // 2``.

    ``window`` is the (odd) number of blocks in the band, centred on the diagonal, so ``window=3``
    means the previous, own and next block; even windows are rejected because a centred band of
    even width does not exist. Near the first and last block the band is clipped to the sequence,
    so edge rows have fewer blocks; a window of ``2 * n_blocks - 1`` or more gives a full layout.
    This is the local attention of Longformer (Beltagy et al., 2020, "Longformer: The
    Long-Document Transformer", sliding window of w/2 tokens per side) at block granularity,
    without its global tokens (see :func:`longformer`) — also the window part of BigBird.

    Returns ``(n_blocks, n_blocks)`` bool, or ``(num_heads, n_blocks, n_blocks)`` (the same band in
    every head) when ``num_heads`` is given.
    """
    n_blocks = _int_arg("n_blocks", n_blocks, minimum=1)
    window = _odd_window(window)
    num_heads = _num_heads_arg(num_heads)
    return _finish(_band(n_blocks, window), num_heads, device)


def _global_indices(n_blocks: int, global_blocks) -> torch.Tensor:
    if isinstance(global_blocks, torch.Tensor):
        if global_blocks.dtype == torch.bool or global_blocks.is_floating_point() or global_blocks.dim() > 1:
            raise TypeError(
                f"global_blocks must be block indices (ints), got a {global_blocks.dtype} tensor of "
                f"shape {tuple(global_blocks.shape)}"
            )
        values = global_blocks.reshape(-1).tolist()
    elif isinstance(global_blocks, Iterable) and not isinstance(global_blocks, (str, bytes)):
        values = list(global_blocks)
    else:
        raise TypeError(f"global_blocks must be a sequence of block indices, got {global_blocks!r}")
    indices = []
    for value in values:
        index = _int_arg("global block index", value)
        if not -n_blocks <= index < n_blocks:
            raise ValueError(
                f"global block index {index} is out of range for n_blocks={n_blocks} "
                f"(valid: 0..{n_blocks - 1}, or negative from the end down to {-n_blocks})"
            )
        indices.append(index % n_blocks)
    return torch.tensor(sorted(set(indices)), dtype=torch.long)


def longformer(
    n_blocks: int,
    window: int,
    global_blocks: Iterable[int],
    *,
    num_heads: int | None = None,
    device=None,
) -> torch.Tensor:
    """Longformer pattern at block granularity (Beltagy et al., 2020, "Longformer: The
    Long-Document Transformer"): the sliding window of :func:`local` (``|i - j| <= window // 2``,
    odd ``window``) plus global blocks, whose rows and columns are full — a global block attends to
    every block and every block attends to it (Longformer's symmetric global attention, e.g. on the
    [CLS] token; here on the whole block containing it).

    ``global_blocks``: block indices (ints or a 1-D integer tensor; negative indices count from the
    end; duplicates are allowed and merged; an empty sequence gives :func:`local`). Out-of-range
    indices raise ``ValueError``.

    Returns ``(n_blocks, n_blocks)`` bool, or ``(num_heads, n_blocks, n_blocks)`` when ``num_heads``
    is given.
    """
    n_blocks = _int_arg("n_blocks", n_blocks, minimum=1)
    window = _odd_window(window)
    num_heads = _num_heads_arg(num_heads)
    layout = _set_globals(_band(n_blocks, window), _global_indices(n_blocks, global_blocks))
    return _finish(layout, num_heads, device)


def bigbird(
    n_blocks: int,
    num_global: int = 2,
    window: int = 3,
    num_random: int = 3,
    seed: int = 0,
    num_heads: int | None = None,
    *,
    device=None,
) -> torch.Tensor:
    """BigBird-ITC block pattern (Zaheer et al., 2020, "Big Bird: Transformers for Longer
    Sequences", internal transformer construction; the paper's defaults are 2 global blocks, a
    window of 3 blocks and 3 random blocks, with block size 64).

    - **Global blocks** (``num_global = g``): the first ``ceil(g / 2)`` and the last ``floor(g / 2)``
      blocks (for the default ``g = 2``: the first and the last block). Their rows and columns are
      full: they attend to every block and every block attends to them.
    - **Window**: block ``i`` attends to ``j`` when ``|i - j| <= window // 2`` (odd ``window``,
      clipped at the sequence ends), as in :func:`local`.
    - **Random**: every non-global row gets exactly ``num_random`` extra blocks, drawn uniformly
      without replacement among the blocks that its window and the global blocks do not already
      cover. The draw is fixed by ``seed`` (a ``torch.Generator`` on the CPU, so it is the same on
      every device and machine).

    Hence every *middle* row — a non-global row whose whole window lies among the non-global
    blocks — has exactly ``window + num_global + num_random`` True blocks; non-global rows next to
    a global block have ``num_random`` random blocks too, but their window overlaps the globals (or
    is clipped at the ends), so they have fewer in total. The random blocks make the pattern
    non-symmetric, like BigBird's.

    Too few blocks: the pattern needs ``n_blocks >= num_global + window + num_random`` (otherwise a
    middle row has fewer than ``num_random`` uncovered blocks to draw from) and raises a
    ``ValueError`` saying so; use a smaller block size, fewer random/global blocks, or a dense
    layout for such short sequences.

    ``num_heads``: ``None`` gives one ``(n_blocks, n_blocks)`` layout; an int gives
    ``(num_heads, n_blocks, n_blocks)`` with an independent random draw per head (head ``h`` uses the
    generator's ``h``-th draw, so head 0 equals the ``num_heads=None`` layout for the same seed).
    """
    n_blocks = _int_arg("n_blocks", n_blocks, minimum=1)
    num_global = _int_arg("num_global", num_global, minimum=0)
    window = _odd_window(window)
    num_random = _int_arg("num_random", num_random, minimum=0)
    seed = _int_arg("seed", seed)
    num_heads = _num_heads_arg(num_heads)
    needed = num_global + window + num_random
    if n_blocks < needed:
        raise ValueError(
            f"bigbird needs n_blocks >= num_global + window + num_random = {num_global} + {window} + "
            f"{num_random} = {needed}, got n_blocks={n_blocks}; use a smaller block_size, fewer "
            f"global/random blocks or a narrower window, or dense attention for this length"
        )
    n_front = (num_global + 1) // 2
    n_back = num_global // 2
    global_idx = torch.cat([torch.arange(n_front), torch.arange(n_blocks - n_back, n_blocks)]).long()
    base = _set_globals(_band(n_blocks, window), global_idx)

    is_global_row = torch.zeros(n_blocks, dtype=torch.bool)
    is_global_row[global_idx] = True
    rows = torch.nonzero(~is_global_row).flatten()  # rows that get random blocks

    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    heads = []
    for _ in range(num_heads or 1):
        layout = base.clone()
        if num_random > 0 and rows.numel() > 0:
            # Uniform scores, covered blocks pushed past every candidate, keep the r smallest:
            # r distinct uncovered blocks per row, uniformly at random.
            scores = torch.rand(rows.numel(), n_blocks, generator=generator)
            scores = scores.masked_fill(base[rows], 2.0)
            picks = scores.topk(num_random, dim=1, largest=False).indices
            layout[rows[:, None], picks] = True
        heads.append(layout)
    layout = heads[0] if num_heads is None else torch.stack(heads)
    return layout.to(device) if device is not None else layout


def butterfly(
    n_blocks: int,
    num_factors: int | None = None,
    *,
    window: int = 1,
    num_global: int = 0,
    num_heads: int | None = None,
    device=None,
) -> torch.Tensor:
    """Flat block butterfly pattern (Chen, Dao et al., ICLR 2022, "Pixelated Butterfly: Simple and
    Efficient Sparse Training for Neural Network Models"), the fixed sparsity pattern the
    FlashAttention paper used for its block-sparse runs (Dao et al., NeurIPS 2022, "FlashAttention",
    Sec. 3.3 and the block-sparse benchmarks).

    Construction. Let ``n = 2**ceil(log2(n_blocks))`` (the next power of two). A butterfly factor
    of stride ``s = 2**k`` on ``n`` blocks is block-diagonal with ``n / (2s)`` blocks of size ``2s``,
    each a 2x2 arrangement of ``s x s`` diagonal matrices, so its support is
    ``{(i, j) : i XOR j in {0, s}}``. The *flat* butterfly (Pixelated Butterfly, Sec. 4; HazyResearch
    ``fly`` repository, ``FlatBlockButterflySparsityConfig``) is the union of the supports of the
    first ``num_factors`` factors (strides ``1, 2, ..., 2**(num_factors-1)``)::

        layout[i, j] = (i XOR j == 0) or (i XOR j == 2**k for some k < num_factors)

    i.e. ``i`` and ``j`` are equal or differ in exactly one bit, below bit ``num_factors``. The
    default ``num_factors = log2(n)`` takes every level, so each row of the ``n x n`` pattern has
    exactly ``1 + log2(n)`` blocks and the density is ``(1 + log2 n) / n``. The pattern is symmetric
    with a full diagonal. When ``n_blocks`` is not a power of two the ``n x n`` pattern is built and
    cropped to its top-left ``n_blocks x n_blocks`` corner (rows near the end lose the partners that
    fall past the end).

    Optional additions (both off by default): ``window`` (odd) ORs in the band
    ``|i - j| <= window // 2`` of :func:`local`; ``num_global`` makes the rows and columns of the
    first ``num_global`` blocks full (Pixelated Butterfly's "global" / low-rank-like component,
    ``global_size`` in the ``fly`` code).

    Returns ``(n_blocks, n_blocks)`` bool, or ``(num_heads, n_blocks, n_blocks)`` (the same pattern in
    every head) when ``num_heads`` is given.
    """
    n_blocks = _int_arg("n_blocks", n_blocks, minimum=1)
    log_n = (n_blocks - 1).bit_length()  # n = 2**log_n >= n_blocks
    if num_factors is None:
        num_factors = log_n
    num_factors = _int_arg("num_factors", num_factors, minimum=0)
    if num_factors > log_n:
        raise ValueError(
            f"num_factors must be <= log2 of the padded block count ({log_n} for n_blocks={n_blocks}, "
            f"padded to {2 ** log_n}), got {num_factors}"
        )
    window = _odd_window(window)
    num_global = _int_arg("num_global", num_global, minimum=0)
    if num_global > n_blocks:
        raise ValueError(f"num_global must be <= n_blocks={n_blocks}, got {num_global}")
    num_heads = _num_heads_arg(num_heads)

    idx = torch.arange(n_blocks)
    diff = idx[:, None] ^ idx[None, :]
    # diff is 0 or a power of two below 2**num_factors.
    single_bit = (diff & (diff - 1)) == 0
    layout = single_bit & (diff < (1 << num_factors))
    if window > 1:
        layout |= _band(n_blocks, window)
    layout = _set_globals(layout, torch.arange(num_global))
    return _finish(layout, num_heads, device)


# ----------------------------------------------------------------------------------------------
# element-wise predicate -> blocks
# ----------------------------------------------------------------------------------------------
BENCHMARK_LAYOUTS = ("bigbird", "local", "butterfly")


def benchmark_layout(name: str, n_blocks: int, *, device=None) -> torch.Tensor:
    """The named layouts the kernel benchmark and the tile tuner use: ``bigbird`` (defaults: 2
    global, window 3, 3 random, seed 0), ``local`` (window 3), ``butterfly`` (defaults)."""
    if name == "bigbird":
        return bigbird(n_blocks, seed=0, device=device)
    if name == "local":
        return local(n_blocks, 3, device=device)
    if name == "butterfly":
        return butterfly(n_blocks, device=device)
    raise ValueError(f"unknown benchmark layout {name!r}; use one of {', '.join(BENCHMARK_LAYOUTS)}")


def from_mask(
    mask_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    n_q: int,
    n_k: int,
    block_size: int,
    *,
    return_partial: bool = False,
    device=None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Block layout of an element-wise predicate: keep every block with at least one allowed pair.

    ``mask_fn(q_idx, k_idx)`` receives broadcastable int32 index tensors, as FlexAttention does
    (``q_idx`` of shape ``(rows, 1)``, ``k_idx`` of shape ``(1, n_k)``), and returns a bool tensor
    broadcastable to ``(rows, n_k)``, True where query ``q`` may attend to key ``k``: FlexAttention's
    ``mask_mod`` without its batch and head arguments (e.g. ``lambda q, k: (q - k).abs() <= 256``).
    It is evaluated over the whole ``n_q x n_k`` grid in row chunks of ~16M elements, so long
    sequences need no quadratic memory, but the work is quadratic: 64K x 64K takes tens of seconds
    on a CPU; pass ``device="cuda"`` to evaluate on the GPU. Build the layout once and reuse it.

    The result is **block-granular**: ``block_sparse_flash_attention`` attends to *every* pair
    inside a kept block, including pairs the predicate forbids, so the attention equals the masked
    attention only when each kept block is fully allowed. ``return_partial=True`` returns
    ``(layout, partial)`` where ``partial`` marks the kept blocks that are only partially allowed
    (``partial`` all False means the block layout is exact). Positions past ``n_q`` / ``n_k`` in
    the last (ragged) blocks do not exist and are ignored: a last block is full when all its real
    pairs are allowed. The causal part of a predicate can instead be left to the kernel's
    ``causal=True``, which is exact.

    Returns ``(ceil(n_q / block_size), ceil(n_k / block_size))`` bool (on ``device``, where
    ``mask_fn`` is also evaluated; CPU by default), or the pair described above.
    """
    if not callable(mask_fn):
        raise TypeError(f"mask_fn must be callable as mask_fn(q_idx, k_idx) -> bool tensor, got {mask_fn!r}")
    n_q = _int_arg("n_q", n_q, minimum=1)
    n_k = _int_arg("n_k", n_k, minimum=1)
    block_size = _int_arg("block_size", block_size, minimum=1)
    device = torch.device(device) if device is not None else torch.device("cpu")
    n_q_blocks, n_k_blocks = num_blocks(n_q, block_size), num_blocks(n_k, block_size)
    k_padded = n_k_blocks * block_size

    # Allowed pairs per block, and the number of real (in-range) pairs per block.
    allowed_pairs = torch.zeros(n_q_blocks, n_k_blocks, dtype=torch.int64, device=device)
    # int32 indices, as FlexAttention passes them to mask_mod (and 2-3x faster than int64 here).
    k_idx = torch.arange(n_k, dtype=torch.int32, device=device)[None, :]
    blocks_per_chunk = max(1, _FROM_MASK_CHUNK_ELEMENTS // (block_size * k_padded))
    for first_block in range(0, n_q_blocks, blocks_per_chunk):
        last_block = min(first_block + blocks_per_chunk, n_q_blocks)
        q_start, q_stop = first_block * block_size, min(last_block * block_size, n_q)
        q_idx = torch.arange(q_start, q_stop, dtype=torch.int32, device=device)[:, None]
        allowed = _evaluate_mask_fn(mask_fn, q_idx, k_idx)
        rows = (last_block - first_block) * block_size
        if allowed.shape != (rows, k_padded):  # ragged edge: pad with "not allowed"
            padded = torch.zeros(rows, k_padded, dtype=torch.bool, device=device)
            padded[: q_stop - q_start, :n_k] = allowed
            allowed = padded
        per_row = allowed.reshape(rows, n_k_blocks, block_size).sum(dim=-1, dtype=torch.int32)
        per_block = per_row.view(last_block - first_block, block_size, n_k_blocks).sum(dim=1)
        allowed_pairs[first_block:last_block] = per_block
    q_sizes = (n_q - torch.arange(n_q_blocks, device=device) * block_size).clamp(max=block_size)
    k_sizes = (n_k - torch.arange(n_k_blocks, device=device) * block_size).clamp(max=block_size)
    any_allowed = allowed_pairs > 0
    all_allowed = allowed_pairs == q_sizes[:, None] * k_sizes[None, :]
    if return_partial:
        return any_allowed, any_allowed & ~all_allowed
    return any_allowed


def _evaluate_mask_fn(mask_fn, q_idx: torch.Tensor, k_idx: torch.Tensor) -> torch.Tensor:
    result = mask_fn(q_idx, k_idx)
    if not isinstance(result, torch.Tensor):
        if isinstance(result, bool):
            result = torch.tensor(result, device=q_idx.device)
        else:
            raise TypeError(
                f"mask_fn must return a bool tensor (e.g. q_idx >= k_idx), got {type(result).__name__}"
            )
    if result.dtype != torch.bool:
        raise TypeError(
            f"mask_fn must return a bool tensor (e.g. q_idx >= k_idx), got dtype {result.dtype}"
        )
    shape = (q_idx.shape[0], k_idx.shape[1])
    try:
        return torch.broadcast_to(result, shape).to(q_idx.device)
    except RuntimeError:
        raise ValueError(
            f"mask_fn returned shape {tuple(result.shape)}, which does not broadcast to the "
            f"(query, key) grid {shape} of q_idx {tuple(q_idx.shape)} and k_idx {tuple(k_idx.shape)}"
        ) from None


# ----------------------------------------------------------------------------------------------
# FlexAttention BlockMask conversion
# ----------------------------------------------------------------------------------------------
def _flex_block_mask_class():
    try:
        from torch.nn.attention.flex_attention import BlockMask
    except ImportError as error:
        raise RuntimeError(
            f"torch {torch.__version__} has no FlexAttention (torch.nn.attention.flex_attention."
            f"BlockMask, torch >= 2.5); upgrade torch to convert layouts to and from BlockMask"
        ) from error
    return BlockMask


def _compress(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(…, n_q, n_k) bool -> (num int32 (…, n_q), indices int32 (…, n_q, n_k)), True blocks first in
    ascending order (the rest of each index row is padding that FlexAttention never reads)."""
    counts = rows.sum(dim=-1, dtype=torch.int32)
    order = torch.argsort((~rows).to(torch.uint8), dim=-1, stable=True)
    return counts, order.to(torch.int32)


def to_block_mask(
    layout: torch.Tensor,
    seq_len_q: int,
    seq_len_k: int,
    block_size: int,
    batch: int | None = None,
    *,
    partial: torch.Tensor | None = None,
    mask_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
):
    """Convert a layout to a FlexAttention ``BlockMask`` with ``BLOCK_SIZE == (block_size, block_size)``.

    ``layout`` (2-D, shared by all heads, or ``(H, n_q, n_k)``) must cover
    ``(ceil(seq_len_q / block_size), ceil(seq_len_k / block_size))`` blocks. The BlockMask has batch
    dimension ``batch`` (default 1, which FlexAttention broadcasts over the batch) and head
    dimension ``H`` (1 for a 2-D layout, broadcast over heads). It lives on ``layout.device``; move
    the layout to the device of q before converting.

    Every True block becomes a *full* block (``full_kv_num_blocks`` / ``full_kv_indices``), so
    FlexAttention computes the same block-granular attention as ``block_sparse_flash_attention``
    without evaluating a mask inside the blocks. The BlockMask's ``mask_mod`` looks the block up
    in the layout (``layout[h, q // block_size, k // block_size]``, without ``h`` for a 2-D layout),
    so code that evaluates ``mask_mod`` element-wise (``create_mask``, eager FlexAttention) sees the
    same pattern.

    For an *exact* element-level pattern from :func:`from_mask`, pass its ``partial`` blocks and the
    same ``mask_fn``: those blocks go to ``kv_num_blocks`` / ``kv_indices`` (FlexAttention applies
    ``mask_mod`` inside them) and ``mask_mod`` becomes the layout lookup AND ``mask_fn(q, k)``.

    Compiled FlexAttention needs its tile to divide the BlockMask's block size: on GPUs where its
    default tile is 128 (H200, torch 2.11), a ``block_size`` of 32 or 64 needs
    ``flex_attention(..., kernel_options={"BLOCK_M": block_size, "BLOCK_N": block_size})``.

    Raises ``RuntimeError`` when this torch has no FlexAttention.
    """
    block_mask_class = _flex_block_mask_class()
    seq_len_q = _int_arg("seq_len_q", seq_len_q, minimum=1)
    seq_len_k = _int_arg("seq_len_k", seq_len_k, minimum=1)
    block_size = _int_arg("block_size", block_size, minimum=1)
    batch = 1 if batch is None else _int_arg("batch", batch, minimum=1)
    _check_bool_tensor(layout)
    if layout.dim() not in (2, 3):
        raise ValueError(
            f"layout must be (n_q_blocks, n_k_blocks) or (H, n_q_blocks, n_k_blocks), got shape "
            f"{tuple(layout.shape)}"
        )
    num_heads = layout.shape[0] if layout.dim() == 3 else 1
    n_q_blocks, n_k_blocks = num_blocks(seq_len_q, block_size), num_blocks(seq_len_k, block_size)
    layout3 = check_layout(layout, n_q_blocks, n_k_blocks, num_heads, layout.device, block_size=block_size)
    if (partial is None) != (mask_fn is None):
        raise ValueError(
            "partial and mask_fn go together: pass both (from from_mask(..., return_partial=True)) or neither"
        )
    if partial is not None:
        if not callable(mask_fn):
            raise TypeError(
                f"mask_fn must be callable as mask_fn(q_idx, k_idx) -> bool tensor, got {mask_fn!r}"
            )
        partial3 = check_layout(
            partial, n_q_blocks, n_k_blocks, num_heads, layout.device, block_size=block_size
        )
        if bool((partial3 & ~layout3).any()):
            raise ValueError(
                "partial marks blocks that layout does not keep; partial must be a subset of layout"
            )
    else:
        partial3 = torch.zeros_like(layout3)

    full3 = layout3 & ~partial3
    shape = (batch, num_heads, n_q_blocks, n_k_blocks)
    kv_num, kv_idx = _compress(partial3.expand(shape))
    full_num, full_idx = _compress(full3.expand(shape))

    lookup = layout.contiguous()
    shared_by_heads = layout.dim() == 2

    def layout_mask_mod(b, h, q_idx, kv_idx):
        if shared_by_heads:  # a 2-D layout broadcasts over however many heads q has
            keep = lookup[q_idx // block_size, kv_idx // block_size]
        else:
            keep = lookup[h, q_idx // block_size, kv_idx // block_size]
        if mask_fn is not None:
            keep = keep & mask_fn(q_idx, kv_idx)
        return keep

    kwargs = dict(BLOCK_SIZE=block_size, mask_mod=layout_mask_mod)
    if "seq_lengths" in inspect.signature(block_mask_class.from_kv_blocks).parameters:
        kwargs["seq_lengths"] = (seq_len_q, seq_len_k)
    return block_mask_class.from_kv_blocks(
        kv_num.contiguous(), kv_idx.contiguous(), full_num.contiguous(), full_idx.contiguous(), **kwargs
    )


def _expand_compressed(counts: torch.Tensor, indices: torch.Tensor, n_k_blocks: int) -> torch.Tensor:
    """(…, n_q) counts + (…, n_q, w) indices -> (…, n_q, n_k_blocks) bool, reading only the first
    ``count`` indices of each row (the rest is padding) and dropping indices >= n_k_blocks."""
    slots = torch.arange(indices.shape[-1], device=indices.device)
    indices = indices.to(torch.long)
    valid = (slots < counts[..., None].to(torch.long)) & (indices >= 0) & (indices < n_k_blocks)
    hits = torch.zeros(*indices.shape[:-1], n_k_blocks + 1, dtype=torch.int32, device=indices.device)
    # Invalid slots are routed to the extra column n_k_blocks, which is cut off afterwards.
    hits.scatter_add_(-1, torch.where(valid, indices, n_k_blocks), valid.to(torch.int32))
    return hits[..., :n_k_blocks] > 0


def from_block_mask(block_mask, *, return_partial: bool = False):
    """Layout of a FlexAttention ``BlockMask``: the union of its partial blocks (``kv_num_blocks`` /
    ``kv_indices``, where FlexAttention applies ``mask_mod``) and its full blocks
    (``full_kv_num_blocks`` / ``full_kv_indices``).

    Returns ``(n_q_blocks, n_k_blocks)`` when the BlockMask has one head (broadcast over heads), else
    ``(H, n_q_blocks, n_k_blocks)``; ``n_k_blocks`` is ``ceil(kv_len / KV_BLOCK_SIZE)``. The
    BlockMask's batch entries must all be equal (the kernel's layouts do not depend on the batch
    element), and its query and key block sizes must be equal, since the kernel uses one
    ``block_size`` for both; anything else raises ``ValueError``. ``return_partial=True`` returns
    ``(layout, partial)``, ``partial`` marking the blocks in which the BlockMask applies its
    ``mask_mod`` — where the block layout alone is not exact (the kernel does not evaluate
    ``mask_mod``).
    """
    block_mask_class = _flex_block_mask_class()
    if not isinstance(block_mask, block_mask_class):
        raise TypeError(
            f"block_mask must be a torch FlexAttention BlockMask, got {type(block_mask).__name__}"
        )
    q_block, kv_block = block_mask.BLOCK_SIZE
    if q_block != kv_block:
        raise ValueError(
            f"BlockMask has BLOCK_SIZE=(Q {q_block}, KV {kv_block}); kernels' layouts use one block "
            f"size for queries and keys, so rebuild the BlockMask with equal sizes"
        )

    def as_4d(tensor: torch.Tensor | None, dims: int) -> torch.Tensor | None:
        # An indexed BlockMask (block_mask[b], block_mask[b, h]) has fewer leading dims.
        if tensor is None:
            return None
        return tensor.reshape((1,) * (dims - tensor.dim()) + tuple(tensor.shape))

    kv_indices = as_4d(block_mask.kv_indices, 4)
    if kv_indices.dim() != 4:
        raise ValueError(
            f"expected a (B, H, n_q, n_k) BlockMask, got kv_indices of shape "
            f"{tuple(block_mask.kv_indices.shape)}"
        )
    kv_num_blocks = as_4d(block_mask.kv_num_blocks, 3)
    full_kv_indices = as_4d(block_mask.full_kv_indices, 4)
    full_kv_num_blocks = as_4d(block_mask.full_kv_num_blocks, 3)
    n_k_blocks = kv_indices.shape[-1]
    if full_kv_indices is not None:
        n_k_blocks = max(n_k_blocks, full_kv_indices.shape[-1])
    seq_lengths = getattr(block_mask, "seq_lengths", None)
    n_q_blocks = kv_num_blocks.shape[-1]
    if seq_lengths is not None:  # drop blocks wholly past the sequence (e.g. after padding)
        n_q_blocks = min(n_q_blocks, -(-int(seq_lengths[0]) // q_block))
        n_k_blocks = min(n_k_blocks, -(-int(seq_lengths[1]) // kv_block))

    partial = _expand_compressed(kv_num_blocks, kv_indices, n_k_blocks)
    full = torch.zeros_like(partial)
    if full_kv_num_blocks is not None:
        full = _expand_compressed(full_kv_num_blocks, full_kv_indices, n_k_blocks)
    layout = (partial | full)[..., :n_q_blocks, :]
    partial = (partial & ~full)[..., :n_q_blocks, :]
    if layout.shape[0] > 1 and not bool((layout == layout[:1]).all() and (partial == partial[:1]).all()):
        raise ValueError(
            f"BlockMask differs between its {layout.shape[0]} batch entries; kernels' layouts are the "
            f"same for every batch element, so convert one entry (block_mask[b])"
        )
    layout, partial = layout[0], partial[0]
    if layout.shape[0] == 1:
        layout, partial = layout[0], partial[0]
    return (layout, partial) if return_partial else layout
