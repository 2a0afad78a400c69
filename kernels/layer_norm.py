"""LayerNorm over the last dimension in Triton (forward and backward), and a drop-in ``nn.LayerNorm``.

Why: at the LRA model's width (64) PyTorch's LayerNorm CUDA kernels take several times what a
memory-bound pass needs (a profile of the ``paper`` model's eager training step on an H200, 262,144
tokens per step: ~400 us per forward call and ~210 us per backward call where ~35 us would do;
`lra bench models --regimes paper --modes eager --profile DIR` writes that profile). The kernels here
normalise many rows per program.

Math (per row of width D, in float32 whatever the input dtype)::

    mean = sum_j x_j / D        var = sum_j (x_j - mean)^2 / D        rstd = 1 / sqrt(var + eps)
    xhat = (x - mean) * rstd    y = xhat * w + b

    backward, with g = dy * w (w = 1 without weight):
    dx   = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))
    dw   = sum over rows of dy * xhat        db = sum over rows of dy

Design:

* Forward: one program per tile of ``BLOCK_ROWS`` rows x ``BLOCK_D`` columns (``BLOCK_D`` = the next
  power of two >= D, columns masked unless D == BLOCK_D; rows masked in the ragged last tile),
  ``BLOCK_ROWS = max(1, FWD_TILE // BLOCK_D)``: ~4K elements (D = 64: 64 rows, 4 warps, 4096
  programs for the paper batch; one row of 8K and 8 warps at D = 8192). 64-bit arithmetic only
  in each tile's base offset. It writes y and the per-row float32 mean and rstd for the backward.
* Backward: ~2K-element tiles (``BWD_TILE``; D = 64: 32 rows, 4 warps; up to 16 warps at D = 8192),
  smaller than the forward's because it holds x, dy and two accumulators per element: 4K-element
  tiles took ~190 registers a thread for D = 64 on sm_90, 2K ~110, no spills
  (``python -m kernels.compile_check --full --ptx --resources --kernels ln_fwd,ln_bwd``). A fixed
  number of programs P (``BWD_PROGRAMS_PER_SM`` x the SM count on CUDA, at most the number of
  tiles; ``CPU_BWD_PROGRAMS`` in the interpreter) each loop over the row tiles
  ``pid, pid + P, pid + 2P, ...`` (grid-stride). Per tile a program writes dx and adds dy * xhat
  and dy into two float32 [BLOCK_ROWS, BLOCK_D] register accumulators; at the end it reduces them
  over the rows into one row of the float32 partial buffers [P, D], and ``.sum(0)`` in torch
  finishes dw and db (cast to the weight / bias dtypes). The grid-stride loop keeps the partial
  buffers tiny (P x D, 528 x 64 on an H200) and the result deterministic (no atomics), where one
  program per tile would need an [n_tiles, D] buffer and a second reduction pass.

The tile sizes and P follow from register counts.

Output dtype: ``F.layer_norm``'s. Under CUDA autocast that is float32 (layer_norm is on autocast's
float32 list; the kernel reads the 16-bit input as is, which is exact); CPU autocast leaves
layer_norm alone (x's dtype). Which applies is asked of ``F.layer_norm`` itself once per (device
type, input dtype, autocast dtype), on a 1 x 1 tensor. ``autocast_output=True`` (the model's norm1 /
norm2, which feed Linear layers only) writes autocast's dtype instead: the Linear would cast the
float32 output to bfloat16 anyway, so the values are the same and two cast kernels per call
(forward and backward) go away.

:class:`LayerNorm`'s ``backend`` chooses what it runs: ``"auto"`` (the default) -- the kernel for
CUDA inputs of at least ``AUTO_MIN_ELEMENTS`` elements, ``F.layer_norm`` otherwise; ``"torch"`` --
never the kernel; ``"triton"`` -- always the kernel, also on CPU (there it needs Triton's
interpreter, ``TRITON_INTERPRET=1``). Under ``torch.compile`` the module always uses
``F.layer_norm``, which Inductor fuses itself.
"""
from __future__ import annotations

import functools
import math
import numbers

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import nn
from torch.autograd.function import once_differentiable

from .tiles import cdiv

BACKENDS = ("auto", "torch", "triton")
MAX_D = 8192            # widest row the kernels take; wider rows go to F.layer_norm
FWD_TILE = 4096         # elements per forward tile (at least one row)
BWD_TILE = 2048         # elements per backward tile (at least one row): it holds more per element
BWD_PROGRAMS_PER_SM = 4
CPU_BWD_PROGRAMS = 4    # the interpreter: few programs, so the grid-stride loop is exercised
# backend "auto": the kernel only for inputs of at least this many elements. Below it a step is bound
# by the host, where a Triton launch from Python costs more than F.layer_norm's C++ dispatch, while
# PyTorch's slow kernel costs little GPU time: the paper batch (262,144 x 64 = 16.8M elements,
# GPU-bound) takes the kernel, the small batch of `lra bench models` (32,768 x 64 = 2.1M) does not.
AUTO_MIN_ELEMENTS = 1 << 22
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def layer_norm_fwd_kernel(X, W, B, Y, MEAN, RSTD, n_rows, D, eps,
                          HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                          BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr):
    """y = (x - mean) * rstd * w + b for BLOCK_ROWS contiguous rows of width D; mean, rstd per row."""
    pid = tl.program_id(0)
    first = pid * BLOCK_ROWS
    rows = first + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_D)
    row_mask = rows < n_rows
    if EVEN_D:
        col_mask = cols < BLOCK_D
    else:
        col_mask = cols < D
    mask = row_mask[:, None] & col_mask[None, :]
    # 64-bit only in the tile's base offset; within the tile 32-bit offsets (fewer registers)
    base = first.to(tl.int64) * D
    offs = tl.arange(0, BLOCK_ROWS)[:, None] * D + cols[None, :]
    X += base
    Y += base
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / D
    diff = x - mean[:, None]
    if not EVEN_D:
        diff = tl.where(mask, diff, 0.0)
    var = tl.sum(diff * diff, axis=1) / D
    rstd = 1.0 / tl.sqrt(var + eps)
    y = diff * rstd[:, None]
    if HAS_W:
        w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
        y = y * w[None, :]
    if HAS_B:
        b = tl.load(B + cols, mask=col_mask, other=0.0).to(tl.float32)
        y = y + b[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + rows, mean, mask=row_mask)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def layer_norm_bwd_kernel(X, W, DY, DX, MEAN, RSTD, DW_PART, DB_PART, n_rows, D, n_tiles,
                          HAS_W: tl.constexpr, COMPUTE_DX: tl.constexpr, COMPUTE_DW: tl.constexpr,
                          COMPUTE_DB: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
                          EVEN_D: tl.constexpr):
    """dx per row; this program's partial sums of dw = sum dy * xhat and db = sum dy over its tiles
    (tiles pid, pid + P, ...) into row pid of DW_PART / DB_PART (float32, [P, D])."""
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_D)
    if EVEN_D:
        col_mask = cols < BLOCK_D
    else:
        col_mask = cols < D
    if HAS_W:
        w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_D], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_ROWS, BLOCK_D], dtype=tl.float32)
    offs = tl.arange(0, BLOCK_ROWS)[:, None] * D + cols[None, :]   # within a tile (32-bit)
    for tile in range(pid, n_tiles, n_progs):
        first = tile * BLOCK_ROWS
        rows = first + tl.arange(0, BLOCK_ROWS)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        base = first.to(tl.int64) * D
        x = tl.load(X + base + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + base + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(MEAN + rows, mask=row_mask, other=0.0)
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0)
        xhat = (x - mean[:, None]) * rstd[:, None]
        if not EVEN_D:
            xhat = tl.where(mask, xhat, 0.0)   # padding columns: x = 0 there, xhat would not be
        if COMPUTE_DX:
            if HAS_W:
                g = dy * w[None, :]
            else:
                g = dy
            c1 = tl.sum(g * xhat, axis=1) / D
            c2 = tl.sum(g, axis=1) / D
            dx = (g - c2[:, None] - xhat * c1[:, None]) * rstd[:, None]
            tl.store(DX + base + offs, dx.to(DX.dtype.element_ty), mask=mask)
        if COMPUTE_DW:
            dw_acc += dy * xhat
        if COMPUTE_DB:
            db_acc += dy
    if COMPUTE_DW:
        tl.store(DW_PART + pid * D + cols, tl.sum(dw_acc, axis=0), mask=col_mask)
    if COMPUTE_DB:
        tl.store(DB_PART + pid * D + cols, tl.sum(db_acc, axis=0), mask=col_mask)


@functools.lru_cache(maxsize=256)  # per call it cost ~20 us of host time (triton's helpers are JIT functions)
def tile_config(d: int, tile: int = FWD_TILE, per_thread: int = 32) -> tuple[int, int, int]:
    """(BLOCK_D, BLOCK_ROWS, num_warps) for rows of width ``d``: a tile of ~``tile`` elements (at
    least one row), and warps for ~``per_thread`` elements per thread (4 to 16 warps)."""
    block_d = triton.next_power_of_2(d)
    block_rows = max(1, tile // block_d)
    warps = block_rows * block_d // (32 * per_thread)
    return block_d, block_rows, min(16, max(4, triton.next_power_of_2(warps)))


def fwd_config(d: int) -> tuple[int, int, int]:
    """The forward's (BLOCK_D, BLOCK_ROWS, num_warps): ~4K-element tiles, 32 elements a thread."""
    return tile_config(d, FWD_TILE, 32)


def bwd_config(d: int) -> tuple[int, int, int]:
    """The backward's: ~2K-element tiles, 16 elements a thread (see the module docstring)."""
    return tile_config(d, BWD_TILE, 16)


_SM_COUNT: dict = {}


def bwd_programs(device: torch.device, n_tiles: int) -> int:
    """Programs of the backward's grid-stride loop: a multiple of the SM count on CUDA (few in the
    interpreter), at most one per tile."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in _SM_COUNT:
            _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
        programs = BWD_PROGRAMS_PER_SM * _SM_COUNT[index]
    else:
        programs = CPU_BWD_PROGRAMS
    return max(1, min(programs, n_tiles))


def _forward(x2: torch.Tensor, weight, bias, eps: float, out_dtype: torch.dtype):
    n_rows, d = x2.shape
    y = torch.empty((n_rows, d), dtype=out_dtype, device=x2.device)
    mean = torch.empty(n_rows, dtype=torch.float32, device=x2.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2.device)
    block_d, block_rows, warps = fwd_config(d)
    grid = (cdiv(n_rows, block_rows),)
    layer_norm_fwd_kernel[grid](
        x2, weight if weight is not None else x2, bias if bias is not None else x2, y, mean, rstd,
        n_rows, d, eps, HAS_W=weight is not None, HAS_B=bias is not None, BLOCK_ROWS=block_rows,
        BLOCK_D=block_d, EVEN_D=d == block_d, num_warps=warps)
    return y, mean, rstd


def _backward(x2, weight, mean, rstd, dy2, need_dx: bool, need_dw: bool, need_db: bool):
    n_rows, d = x2.shape
    block_d, block_rows, warps = bwd_config(d)
    n_tiles = cdiv(n_rows, block_rows)
    programs = bwd_programs(x2.device, n_tiles)
    dx = torch.empty_like(x2) if need_dx else None
    if need_dx and d == 1:
        # One column: y = b whatever x is, so dx is exactly 0. The kernel would give rounding noise
        # times rstd = 1/sqrt(eps) there: on the GPU the compiler contracts g - mean(g) into an FMA
        # (dy * w - c2 with an unrounded product), off by an ulp of g.
        dx.zero_()
        need_dx = False
    dw_part = torch.empty((programs, d), dtype=torch.float32, device=x2.device) if need_dw else None
    db_part = torch.empty((programs, d), dtype=torch.float32, device=x2.device) if need_db else None
    layer_norm_bwd_kernel[(programs,)](
        x2, weight if weight is not None else x2, dy2, dx if need_dx else x2, mean, rstd,
        dw_part if need_dw else mean, db_part if need_db else mean, n_rows, d, n_tiles,
        HAS_W=weight is not None, COMPUTE_DX=need_dx, COMPUTE_DW=need_dw, COMPUTE_DB=need_db,
        BLOCK_ROWS=block_rows, BLOCK_D=block_d, EVEN_D=d == block_d, num_warps=warps)
    return dx, dw_part, db_part


class LayerNormFunction(torch.autograd.Function):
    """Autograd of the kernels; ``x``, weight and bias contiguous, already validated (use
    :func:`layer_norm`). Differentiable once: a double backward (``create_graph=True``) raises
    instead of silently dropping the second-order terms."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, out_dtype):
        d = x.shape[-1]
        x2 = x.reshape(-1, d)
        y, mean, rstd = _forward(x2, weight, bias, eps, out_dtype)
        ctx.save_for_backward(x2, weight, mean, rstd)
        ctx.x_shape = x.shape
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return y.view(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x2, weight, mean, rstd = ctx.saved_tensors
        need_dx, need_dw, need_db = ctx.needs_input_grad[:3]
        need_dw = need_dw and weight is not None
        need_db = need_db and ctx.bias_dtype is not None
        if not (need_dx or need_dw or need_db):
            return None, None, None, None, None
        dy2 = dy.contiguous().view(x2.shape)
        dx, dw_part, db_part = _backward(x2, weight, mean, rstd, dy2, need_dx, need_dw, need_db)
        dx = dx.view(ctx.x_shape) if need_dx else None
        dw = dw_part.sum(0).to(weight.dtype) if need_dw else None
        db = db_part.sum(0).to(ctx.bias_dtype) if need_db else None
        return dx, dw, db, None, None


def _autocast_state(device_type: str):
    """(enabled, dtype) of autocast for this device type."""
    try:
        enabled = torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4: no device argument
        enabled = torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()
        dtype = torch.get_autocast_cpu_dtype() if device_type == "cpu" else torch.get_autocast_gpu_dtype()
        return enabled, dtype
    return enabled, (torch.get_autocast_dtype(device_type) if enabled else None)


_AUTOCAST_OUT: dict = {}


def output_dtype(x: torch.Tensor, autocast_output: bool = False) -> torch.dtype:
    """The dtype ``F.layer_norm(x, ...)`` returns now: x's, unless autocast for x's device casts
    layer_norm (CUDA: to float32); asked of F.layer_norm once per (device type, dtype, autocast dtype).
    ``autocast_output``: autocast's own dtype whenever autocast is on (see :class:`LayerNorm`)."""
    enabled, cast_dtype = _autocast_state(x.device.type)
    if not enabled:
        return x.dtype
    if autocast_output:
        return cast_dtype
    key = (x.device.type, x.dtype, cast_dtype)
    if key not in _AUTOCAST_OUT:
        probe = torch.zeros((1, 1), dtype=x.dtype, device=x.device)
        _AUTOCAST_OUT[key] = F.layer_norm(probe, (1,)).dtype
    return _AUTOCAST_OUT[key]


def _check(x, weight, bias, eps) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"layer_norm: x must be a tensor, got {type(x).__name__}")
    if x.layout != torch.strided:
        raise ValueError(f"layer_norm: x must be a dense (strided) tensor, got {x.layout}; call .to_dense()")
    if x.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"layer_norm: x must be float32, bfloat16 or float16, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"layer_norm: x needs a last dimension of size >= 1, got shape {tuple(x.shape)}")
    d = x.shape[-1]
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"layer_norm: {name} must be a tensor or None, got {type(p).__name__}")
        if p.layout != torch.strided:
            raise ValueError(f"layer_norm: {name} must be a dense (strided) tensor, got {p.layout}; call .to_dense()")
        if tuple(p.shape) != (d,):
            raise ValueError(f"layer_norm: {name} must have shape ({d},) (x's last dimension), "
                             f"got {tuple(p.shape)}")
        if p.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"layer_norm: {name} must be float32, bfloat16 or float16, got {p.dtype}")
        if p.device != x.device:
            raise ValueError(f"layer_norm: x is on {x.device} but {name} is on {p.device}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"layer_norm: eps must be a finite number >= 0, got {eps!r}")
    _check_device(x)


def _check_device(x: torch.Tensor) -> None:
    if x.device.type != "cuda" and not INTERPRETED:
        raise ValueError(f"layer_norm: x is on {x.device}; the Triton kernel runs on CUDA, or on CPU "
                         "through the interpreter (TRITON_INTERPRET=1 before triton is imported)")


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5, *, autocast_output: bool = False) -> torch.Tensor:
    """``F.layer_norm(x, (x.shape[-1],), weight, bias, eps)`` through the Triton kernels.

    x: any leading shape, last dimension D (1 <= D <= ``MAX_D``; wider rows and empty inputs go to
    ``F.layer_norm``); float32, bfloat16 or float16, any strides (made contiguous). weight, bias:
    None or shape (D,), on x's device. Returns ``F.layer_norm``'s dtype (float32 under CUDA
    autocast, else x's); with ``autocast_output`` and autocast on for x's device, autocast's dtype
    instead (see :class:`LayerNorm`). Differentiable in x, weight and bias. Raises ``ValueError``
    for bad input.
    """
    _check(x, weight, bias, eps)
    d = x.shape[-1]
    if d > MAX_D or x.numel() == 0:
        return F.layer_norm(x, (d,), weight, bias, eps)
    return _apply(x, weight, bias, eps, autocast_output)


def _apply(x, weight, bias, eps: float, autocast_output: bool) -> torch.Tensor:
    """The kernels on inputs already checked (by :func:`layer_norm`, or :meth:`LayerNorm._use_kernel`).
    The kernels read x, weight and bias as contiguous: a strided or expanded (stride-0) weight or
    bias is copied (differentiably) like x, not read past its elements."""
    weight = weight.contiguous() if weight is not None else None
    bias = bias.contiguous() if bias is not None else None
    return LayerNormFunction.apply(x.contiguous(), weight, bias, float(eps), output_dtype(x, autocast_output))


def auto_uses_kernel(device_type: str, numel: int) -> bool:
    """Whether backend "auto" runs the kernel: CUDA inputs of >= ``AUTO_MIN_ELEMENTS`` elements."""
    return device_type == "cuda" and numel >= AUTO_MIN_ELEMENTS


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` (same parameters and state_dict keys) whose forward runs the Triton kernels
    chosen by ``backend`` (see the module docstring: "auto", "torch" or "triton"); ``F.layer_norm`` under
    ``torch.compile``, without elementwise affine, for normalized shapes of more than one
    dimension, other dtypes and rows wider than ``MAX_D``.

    ``autocast_output=True``: for a LayerNorm whose output only feeds layers that autocast runs in
    its lower precision (a Linear), the kernel writes autocast's dtype (bfloat16) directly instead
    of float32 that the Linear then casts -- the same values (the kernel rounds to nearest even,
    as the cast does) and, backward, the same gradient (the Linear's bfloat16 input gradient,
    which the cast's backward would widen exactly), without the two cast kernels. The
    ``F.layer_norm`` fallback keeps its float32 output."""

    def __init__(self, *args, autocast_output: bool = False, backend: str = "auto", **kwargs):
        super().__init__(*args, **kwargs)
        if backend not in BACKENDS:
            raise ValueError(f"LayerNorm: backend={backend!r}; use one of {', '.join(BACKENDS)} "
                             "(auto: the Triton kernel for large CUDA inputs; torch: never; triton: always)")
        self.autocast_output = autocast_output
        self.backend = backend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling() or not self._use_kernel(x):
            return super().forward(x)
        return _apply(x, self.weight, self.bias, self.eps, self.autocast_output)

    def _use_kernel(self, x: torch.Tensor) -> bool:
        """Whether the kernels apply to this call -- which also validates it for them, so that the
        forward skips :func:`layer_norm`'s checks (a module's parameters are (D,) tensors already)."""
        if self.backend == "torch" or (self.backend == "auto" and not auto_uses_kernel(x.device.type, x.numel())):
            return False
        use = (self.elementwise_affine and len(self.normalized_shape) == 1 and x.dim() >= 1
               and x.shape[-1] == self.normalized_shape[0] and 1 <= x.shape[-1] <= MAX_D and x.numel() > 0
               and x.dtype in SUPPORTED_DTYPES and self.weight.dtype in SUPPORTED_DTYPES
               and self.weight.device == x.device)
        if use:
            _check_device(x)  # forced on a CPU tensor without the interpreter: one clear error
        return use


def _built_for_interpreter() -> bool:
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # a Triton without this class: nothing else runs CPU tensors
        return False
    return isinstance(layer_norm_fwd_kernel, InterpretedFunction)


# Whether these kernels run in Triton's interpreter (fixed when triton.jit decorated them): the only
# way they take CPU tensors.
INTERPRETED = _built_for_interpreter()
