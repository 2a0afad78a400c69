"""The attention kernels as ``torch.library`` custom ops with fake (meta) kernels and autograd.

``lra_kernels::flash_fwd`` and ``lra_kernels::flash_bwd`` serve both the dense and the
block-sparse function (sparse when index lists are given). Registering them as custom ops keeps
``torch.compile(fullgraph=True)`` from breaking the graph at the kernel call: Dynamo and AOTAutograd
see an opaque op with a shape function (``register_fake``) and a backward (``register_autograd``).

In eager mode :func:`attention` skips the custom-op machinery (its Python cost per call is several
times a small kernel's run time) and calls the same launchers through an ``autograd.Function``;
while torch.compile traces, it emits the custom op.

How torch.compile sees the ops is chosen once, at import (``COMPILE_OP``; ``$LRA_KERNELS_COMPILE_OP``
overrides it):

- ``"triton_op"`` (the default where CUDA is available and Triton compiles, i.e. not under
  ``TRITON_INTERPRET=1``): registered with ``torch.library.triton_op`` and launching through
  ``torch.library.wrap_triton``. AOTAutograd decomposes the op into its Triton kernel calls, so
  Inductor launches the kernels itself from its generated code (no custom-op dispatch; with its
  static C launcher since session 16, :func:`_let_inductor_launch_ours_statically`) and CUDA graphs
  (``mode="reduce-overhead"``) capture them. Inductor copies an input it finds written by a kernel;
  none is (tests/kernels/test_compile_triton_op.py checks it; see ``_program_slot`` in
  :mod:`kernels.triton_attention` for the helper-call pattern that made it copy QKV). The op's body is
  its own fake kernel (shape arithmetic and tile selection only, no data access). On the H200
  (torch 2.11, Triton 3.6; session 7, results/models/triton_op/) the compile tests pass and the
  `paper` model's small-batch step under CUDA graphs drops from 3.09 to 2.38 ms at 1K. Session 3's
  failures there are fixed: the bool key-padding mask is passed as is, DOT_PREC is spelled out on
  CUDA, and the kernels cast their float scalars to float32 (Inductor types Python floats as fp64).
  Calls on CPU tensors under torch.compile on a CUDA machine are not supported in this form
  (``LRA_KERNELS_COMPILE_OP=custom_op`` serves them).
- ``"custom_op"`` (the default without CUDA, and the only form the interpreter allows, since
  ``wrap_triton`` cannot trace it): an opaque ``torch.library.custom_op`` with a separate fake
  kernel; Inductor calls it as a Python fallback that launches through Triton's launcher.

The backward under attention dropout has two forms, chosen once, at import, by
``$LRA_DROPOUT_BWD`` (``DROPOUT_BWD``):

- ``"fused"`` (the default): one pass, FlashAttention-2 style. The dK/dV kernel also computes each
  query tile's dQ share and adds it into a float32 buffer with ``tl.atomic_add``; the dQ kernel is
  not launched, so the mask is generated and the probabilities recomputed once instead of twice.
  **Why atomics**: at the LRA head dims the dropout random numbers bound the backward, and the
  split form pays them twice. On the H200 (session 6, results/kernels/dropout/, dropout 0.1,
  bf16, 1K-16K), with its own tuned dK/dV tiles (``kernels.tiles``), the fused backward is
  1.02-1.05x cuDNN at d = 32 (fwd+bwd 1.14-1.17x) where the split one is 0.78-0.82x, and the
  `paper` model's training step becomes 1.01-1.11x faster than the same model on SDPA (cuDNN).
  The price: the atomics add dQ's float32 partial sums in an order that varies from run to run,
  so **dQ is not deterministic in its last bits** (dK and dV stay bit-exact); the float32 sum is
  rounded once to the inputs' dtype at the end.
- ``"split"``: the deterministic two-pass backward (dK/dV over query tiles, then dQ over key
  tiles, no atomics). Each pass regenerates the dropout mask.

Without dropout, and whenever ``torch.use_deterministic_algorithms(True)`` is in force (Lightning's
``deterministic=True``), the split backward runs. Block-sparse calls follow the same setting
(measured in the model: the one-pass form makes flash_sparse's step 9-12 % faster): the dK/dV pass
visits exactly the (query tile, key tile) pairs the dQ pass would, through its transposed index
lists.

Launch arguments that both directions must agree on travel as op arguments: ``tiles`` (15 ints,
see :class:`kernels.tiles.Tiles`), the dropout seed tensor and the block-sparse index lists.
Outputs are freshly allocated: the forward's laid out like q (:func:`new_output`), the gradients
contiguous (or written into the packed path's dQKV); inputs may have any strides.
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Callable, Optional

import torch
import triton
from torch.autograd.function import once_differentiable
from . import triton_attention as kern
from .dropout import effective_dropout_p, keep_threshold
from .launch import CachedLauncher, LaunchPlan, launcher, plans_enabled
from .launch import leading_tensors as _leading_tensors
from .tiles import LOADS_POINTERS, LOADS_TMA_WS, PassTiles, Tiles, cdiv, padded_head_dim
from .validation import check_packed_qkv

Tensor = torch.Tensor

DROPOUT_BWD_ENV = "LRA_DROPOUT_BWD"
DROPOUT_BWD_MODES = ("split", "fused")


def _parse_dropout_bwd(text: Optional[str]) -> str:
    """The backward form under dropout from a $LRA_DROPOUT_BWD value: "fused" (also for unset or
    empty) or "split"; anything else raises ValueError."""
    value = (text or "").strip() or "fused"
    if value not in DROPOUT_BWD_MODES:
        raise ValueError(f"${DROPOUT_BWD_ENV}={text!r}: expected 'fused' (default: one pass, atomic dQ) or "
                         "'split' (two passes, deterministic)")
    return value


# read once, at import; the launcher reads this module global at every backward call
DROPOUT_BWD = _parse_dropout_bwd(os.environ.get(DROPOUT_BWD_ENV))


def kernel_settings() -> dict:
    """The kernels' environment settings in force, for benchmark metadata: the attention-dropout
    Philox rounds and backward form (``$LRA_DROPOUT_RNG``, ``$LRA_DROPOUT_BWD``), the form
    torch.compile sees the ops in (``$LRA_KERNELS_COMPILE_OP``) and whether Inductor launches them
    statically (:func:`inductor_static_launch`), and the eager launch path (``$LRA_TRITON_LAUNCH``,
    :func:`kernels.launch.describe`)."""
    from . import launch

    return {"dropout_philox_rounds": kern.PHILOX_ROUNDS_SETTING, "dropout_backward": DROPOUT_BWD,
            "compile_op": COMPILE_OP, "inductor_static_launch": inductor_static_launch(),
            "launches": launch.describe()}


def fused_dropout_backward(dropout_p: float) -> bool:
    """Whether a call with ``dropout_p`` takes the one-pass backward (atomic dQ): dropout on,
    ``DROPOUT_BWD == "fused"`` and torch's deterministic algorithms off. The launchers pick the
    dK/dV tiles of that form (``kernels.tiles.select(fused_bwd=...)``) when the call is made."""
    return dropout_p > 0.0 and DROPOUT_BWD == "fused" and not torch.are_deterministic_algorithms_enabled()


_NO_GUARD = contextlib.nullcontext()  # reusable


def _device_guard(t: Tensor):
    """The CUDA device of ``t`` made current for the launches (they run on the current device's
    context and stream); no guard when it already is (the common case: one cheap device query
    instead of entering and leaving ``torch.cuda.device``, per call on an eager, host-bound step)."""
    device = t.device
    if device.type != "cuda" or device.index == torch.cuda.current_device():
        return _NO_GUARD
    return torch.cuda.device(device)


def _s4(t: Tensor) -> tuple[int, int, int, int]:
    return tuple(t.stride())  # type: ignore[return-value]


def _sparse_strides(idx: Optional[Tensor], cnt: Optional[Tensor]) -> tuple[int, int, int, int]:
    """(head, tile) strides of an index list and its counts; head stride 0 for a shared layout."""
    if idx is None:
        return 0, 0, 0, 0
    head_i = idx.stride(0) if idx.shape[0] > 1 else 0
    head_c = cnt.stride(0) if cnt.shape[0] > 1 else 0
    return head_i, idx.stride(1), head_c, cnt.stride(1)


def new_output(q: Tensor) -> Tensor:
    """An uninitialised (B, H, N_q, d) output in q's dtype, laid out in memory like q: when q is a
    (B, N, H, d)-ordered view (heads inside tokens, e.g. a slice of a fused QKV projection) the output
    is a (B, H, N, d) view of a contiguous (B, N, H, d) tensor, so that ``out.transpose(1, 2)`` is
    contiguous and the caller's merge of the heads costs no copy (PyTorch's cuDNN attention does the
    same); otherwise contiguous (B, H, N, d). Also the fake kernels' shape function."""
    B, H, n_q, d = q.shape
    if H > 1 and q.stride(1) < q.stride(2):
        return q.new_empty((B, n_q, H, d)).transpose(1, 2)
    return q.new_empty((B, H, n_q, d))


def _grid(n_rows: int, bh: int, sparse: bool) -> tuple[int, ...]:
    """Dense: (tile rows, batch * heads). Block-sparse: one flat axis that the kernels map onto
    (tile row, batch * head) in longest-processing-time-first order (``_program_slot``)."""
    return (n_rows * bh,) if sparse else (n_rows, bh)


@functools.lru_cache(maxsize=64)
def _tiles(tiles: tuple[int, ...]) -> Tiles:
    return Tiles.from_list(tiles)


@functools.lru_cache(maxsize=64)
def _dropout_args(dropout_p: float) -> tuple[int, float]:
    if dropout_p > 0.0:
        return keep_threshold(dropout_p), 1.0 / (1.0 - effective_dropout_p(dropout_p))
    return 0, 1.0


def _dot_flags(q: Tensor) -> dict:
    """DOT_PREC: exact IEEE products for float32 inputs (no TF32 rounding); for 16-bit inputs the
    setting does not apply: on CUDA it is spelled out as Triton's default ("tf32"; the same PTX as
    None, checked for sm_90 with Triton 3.6) because Inductor's recompilation of the kernels under
    the triton_op form fails on a None constexpr; the interpreter keeps None.
    UPCAST: Triton's interpreter multiplies bfloat16 dot operands as raw integers, so on CPU the
    kernels convert bfloat16 tiles to float32 after loading (bf16 products are exact in float32)."""
    cuda = q.device.type == "cuda"
    return dict(DOT_PREC="ieee" if q.dtype == torch.float32 else ("tf32" if cuda else None),
                UPCAST=q.dtype == torch.bfloat16 and not cuda)


def _common_flags(q: Tensor, k: Tensor, pt_m: int, pt_n: int) -> dict:
    d = q.shape[3]
    d_pad = padded_head_dim(d)
    return dict(
        BLOCK_D=d_pad,
        EVEN_M=q.shape[2] % pt_m == 0,
        EVEN_N=k.shape[2] % pt_n == 0,
        EVEN_D=d_pad == d,
        **_dot_flags(q),
    )


# ---------------------------------------------------------------------------------------------
# TMA tensor descriptors (opt-in per pass: PassTiles.loads)
# ---------------------------------------------------------------------------------------------
def _descriptor_class():
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # a Triton without host-side tensor descriptors
        return None
    return TensorDescriptor


def tma_applies(*tensors: Tensor) -> bool:
    """Whether the (B, H, N, d) ``tensors`` can be read through 4-D TMA descriptors: 16-bit
    floats on a Hopper GPU (compute capability 9.x), or on CPU under Triton's interpreter (which
    emulates descriptors, so the tests cover this path); base address 16-byte aligned, head dim
    contiguous (stride 1), every other stride positive and, like the row (d elements), a multiple
    of 16 bytes (the rules of ``triton.tools.tensor_descriptor.TensorDescriptor`` and of CUDA's
    ``cuTensorMapEncodeTiled``).
    Anything else (float32, Ampere/Blackwell, odd views, d * 2 bytes not a multiple of 16) keeps
    the pointer path."""
    if _descriptor_class() is None:
        return False
    for t in tensors:
        if t.dtype not in (torch.float16, torch.bfloat16) or t.dim() != 4:
            return False
        if t.device.type == "cuda":
            if kern.INTERPRETED or torch.cuda.get_device_capability(t.device)[0] != 9:
                return False
        elif not kern.INTERPRETED:
            return False
        size = t.element_size()
        if t.stride(3) != 1:
            return False
        if t.data_ptr() % 16 or (t.shape[3] * size) % 16:
            return False
        # broadcast (stride-0) dims are left to the pointer path: a tensor map wants real strides
        if any(t.stride(i) <= 0 or (t.stride(i) * size) % 16 for i in range(3)):
            return False
    return True


# Triton releases (major, minor) whose Hopper warp specialiser builds *and runs* our TMA loops: none.
# Triton 3.6 (the GPU machine's) builds them offline for sm_90 (kernels.compile_check) and ran the
# 128-token GPU tests (session 3), but on the H200 at benchmark sizes (bf16, B*N = 16K, N = 4K and
# 16K) every warp-specialised candidate -- forward d = 32 / 64 / 128 and dK/dV d = 64, 7 of them --
# was still running after 38-70 s where the pointer tiles finish in 1-3 s (killed by its timeout:
# session 8, scripts/h200/ws_probe.py, results/kernels/README.md "Hopper TMA loads"); session 3's
# tuner stalled on the same candidate. Triton 3.9 rejects the loops (its data partitioner halves
# the 128-row TMA tiles that the host-side descriptors fix at full size: "descriptor block and
# tensor must have the same number of elements"). So LOADS_TMA_WS runs as plain TMA everywhere;
# a Triton added here gets the specialisation back where warp_spec_applies allows it.
WARP_SPEC_TRITON: frozenset = frozenset()


def warp_spec_supported() -> bool:
    """Whether this Triton's warp specialisation is known to build the kernels' TMA loops."""
    major, minor = (int(x) for x in triton.__version__.split(".")[:2])
    return (major, minor) in WARP_SPEC_TRITON


def warp_spec_applies(kernel: str, t: PassTiles, *, causal: bool, dropout: bool, sparse: bool,
                      even_n: bool) -> bool:
    """Whether a TMA pass (``kernel``: "fwd", "dkdv" or "dq") may warp-specialise its loop.

    Triton 3.6's Hopper warp specialiser (the pass behind ``tl.range(warp_specialize=True)`` on
    sm_90) handles only a function with one such loop, fed by TMA loads, and 4 warps (it then adds
    a producer and a second consumer warpgroup: 12 warps in all, registers rebalanced with
    ``setmaxnreg``; with other warp counts it leaves the loop alone). Compiled offline for sm_90
    (``python -m kernels.compile_check``, 2026-11-30) it aborts the process (an assertion, not an
    exception) or fails on: a second (masked) loop, i.e. causal, block-sparse, or a forward/dQ
    whose N_k is not a multiple of block_n; dropout; and the dQ pass in every form (its LSE/delta
    loads are not TMA: triton-lang/triton#9728). Those calls keep TMA and drop only the warp
    specialisation, as do Tritons other than :data:`WARP_SPEC_TRITON`."""
    if t.loads != LOADS_TMA_WS or t.num_warps != 4 or kernel == "dq" or not warp_spec_supported():
        return False
    if causal or dropout or sparse:
        return False
    return even_n or kernel == "dkdv"


def _descriptors(t: PassTiles, tensors: tuple, warp_spec: bool, traced: bool = False) -> tuple[list, dict]:
    """(the kernel's descriptor arguments, USE_TMA/WARP_SPEC flags) of a pass with tiles ``t``
    that reads ``tensors`` (q, k, v[, grad_out]) in tiles of block_m (q, grad_out) or block_n (k, v)
    rows: descriptors when ``t.loads`` asks for TMA and :func:`tma_applies` to all of them, else
    the tensors themselves as unused placeholders (pointer path). ``warp_spec``: what
    :func:`warp_spec_applies` says for this call. ``traced``: the launch goes through
    ``wrap_triton`` (torch.compile with the triton_op), which takes tensors and scalars only, so
    that path keeps pointer loads."""
    if t.loads == LOADS_POINTERS or traced or not tma_applies(*tensors):
        return list(tensors), dict(USE_TMA=False, WARP_SPEC=False)
    desc = _descriptor_class()
    d_pad = padded_head_dim(tensors[0].shape[3])
    rows = [t.block_m, t.block_n, t.block_n, t.block_m]
    # shape (B, H, N, d) and the real strides: rows >= N and columns >= d read as zero, per head
    descs = [desc(x, list(x.shape), [x.stride(0), x.stride(1), x.stride(2), 1], [1, 1, r, d_pad])
             for x, r in zip(tensors, rows)]
    return descs, dict(USE_TMA=True, WARP_SPEC=warp_spec)


# ---------------------------------------------------------------------------------------------
# forward
# ---------------------------------------------------------------------------------------------
def _direct(kernel):
    """Eager launches: the kernel behind :mod:`kernels.launch`'s cached launcher (repeat calls skip
    Triton's per-call argument binding; the kernel itself under the interpreter)."""
    return launcher(kernel)


def _wrapped(kernel):
    return torch.library.wrap_triton(kernel)


def launch_fwd(
    q: Tensor, k: Tensor, v: Tensor,
    key_padding_mask: Optional[Tensor], seed: Optional[Tensor],
    fwd_indices: Optional[Tensor], fwd_counts: Optional[Tensor],
    dkdv_indices: Optional[Tensor], dkdv_counts: Optional[Tensor],
    dq_indices: Optional[Tensor], dq_counts: Optional[Tensor],
    causal: bool, dropout_p: float, softmax_scale: float, tiles: list[int],
) -> tuple[Tensor, Tensor]:
    """Returns (out (B, H, N_q, d) in q's dtype, laid out like q (:func:`new_output`), lse (B, H, N_q) float32)."""
    with _device_guard(q):
        return _fwd(_direct, q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, causal, dropout_p,
                    softmax_scale, tiles)


def _fwd(launch: Callable, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor],
         seed: Optional[Tensor], fwd_indices: Optional[Tensor], fwd_counts: Optional[Tensor], causal: bool,
         dropout_p: float, softmax_scale: float, tiles: list[int],
         trace: Optional[list] = None) -> tuple[Tensor, Tensor]:
    """The forward launch; ``launch(kernel)`` is the kernel itself or its ``wrap_triton`` wrapper.
    Eager calls on compiled kernels replay a launch plan when one exists for the inputs' layout.
    ``trace``: a list that gets (plan, its tensors) of the plan this call replayed or bound (if any)."""
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    out = new_output(q)
    lse = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    pad = key_padding_mask if key_padding_mask is not None else q  # bool, read as 8-bit by the kernels
    sparse = fwd_indices is not None
    # the kernel's leading tensor arguments (unused ones get q as a placeholder)
    tensors = (q, k, v, out, lse, pad, seed if seed is not None else q, fwd_indices if sparse else q,
               fwd_counts if sparse else q)
    key = None
    if launch is _direct and plans_enabled():
        key = _launch_plan_key("fwd", tensors, (q, k, v), key_padding_mask, seed, fwd_indices, fwd_counts,
                               causal, dropout_p, softmax_scale, tiles)
        plan = _LAUNCH_PLANS.get(key)
        if plan:
            plan(*tensors, q, k, v)  # a plan exists only for the pointer path: q, k, v fill the descriptor slots
            if trace is not None:
                trace.append((plan, (*tensors, q, k, v)))
            return out, lse
    t: PassTiles = _tiles(tuple(tiles)).fwd
    drop_threshold, drop_scale = _dropout_args(dropout_p)
    grid = _grid(cdiv(n_q, t.block_m), B * H, sparse)
    ws = warp_spec_applies("fwd", t, causal=causal, dropout=dropout_p > 0.0, sparse=sparse,
                           even_n=n_k % t.block_n == 0)
    descs, tma_flags = _descriptors(t, (q, k, v), ws, traced=launch is not _direct)
    args = (
        *tensors, *descs,
        *_s4(q), *_s4(k), *_s4(v), *_s4(out),
        pad.stride(0) if key_padding_mask is not None else 0, pad.stride(1) if key_padding_mask is not None else 0,
        *_sparse_strides(fwd_indices, fwd_counts),
        H, n_q, n_k, d, n_k - n_q, softmax_scale * kern.LOG2E, drop_threshold, drop_scale,
    )
    kwargs = dict(
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, **_common_flags(q, k, t.block_m, t.block_n),
        IS_CAUSAL=causal, HAS_PAD=key_padding_mask is not None, HAS_DROPOUT=dropout_p > 0.0, SPARSE=sparse,
        **tma_flags, num_warps=t.num_warps, num_stages=t.num_stages,
    )
    if key is not None:
        plan = _bind_launch_plan(key, [(kern.flash_fwd_kernel, grid, args, kwargs)])
        if plan and trace is not None:
            trace.append((plan, (*tensors, q, k, v)))
    else:
        launch(kern.flash_fwd_kernel)[grid](*args, **kwargs)
    return out, lse


@functools.wraps(launch_fwd)  # same signature: the op schema is inferred from it
def _traceable_fwd(q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, dkdv_indices, dkdv_counts,
                   dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles):
    return _fwd(_wrapped, q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, causal, dropout_p,
                softmax_scale, tiles)


def _flash_fwd_fake(q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, dkdv_indices, dkdv_counts,
                    dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles):
    B, H, n_q, d = q.shape
    return new_output(q), q.new_empty((B, H, n_q), dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# backward
# ---------------------------------------------------------------------------------------------
def launch_bwd(
    grad_out: Tensor, grad_lse: Optional[Tensor],
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
    key_padding_mask: Optional[Tensor], seed: Optional[Tensor],
    dkdv_indices: Optional[Tensor], dkdv_counts: Optional[Tensor],
    dq_indices: Optional[Tensor], dq_counts: Optional[Tensor],
    causal: bool, dropout_p: float, softmax_scale: float, tiles: list[int],
) -> tuple[Tensor, Tensor, Tensor]:
    """Returns (dq, dk, dv), contiguous, in the inputs' dtype."""
    with _device_guard(q):
        return _bwd(_direct, grad_out, grad_lse, q, k, v, out, lse, key_padding_mask, seed, dkdv_indices,
                    dkdv_counts, dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles)


def backward_buffers(B: int, H: int, n_q: int, d: int, device: torch.device,
                     fused_dq: bool) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """The backward's float32 work buffers: delta and the rescaled lse (B, H, N_q), and with the fused
    dropout backward dQ's sum (B, H, N_q, d), contiguous as the kernels address it (zeroed by the
    preprocess kernel); else None."""
    delta = torch.empty((B, H, n_q), dtype=torch.float32, device=device)
    lse2 = torch.empty((B, H, n_q), dtype=torch.float32, device=device)
    dq_acc = torch.empty((B, H, n_q, d), dtype=torch.float32, device=device) if fused_dq else None
    return delta, lse2, dq_acc


def _bwd(launch: Callable, grad_out, grad_lse, q, k, v, out, lse, key_padding_mask, seed, dkdv_indices, dkdv_counts,
         dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles, grads: Optional[tuple] = None,
         buffers: Optional[tuple] = None, trace: Optional[list] = None):
    """The backward launches (preprocess, dK/dV, dQ); ``launch`` as in :func:`_fwd`. With dropout
    and ``DROPOUT_BWD == "fused"`` the dK/dV kernel computes dQ too (atomically, into a float32
    buffer that the preprocess kernel zeroes) and the dQ kernel is not launched.
    ``grads``: (dq, dk, dv) tensors of q's, k's and v's shapes and dtype, any strides, to write the
    gradients into (the packed-QKV path's views of one dQKV tensor); default: new contiguous ones.
    ``buffers``: :func:`backward_buffers` of this call, made by the caller; default: new ones.
    Eager calls on compiled kernels replay a launch plan when one exists for the inputs' layout;
    ``trace`` as in :func:`_fwd`."""
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    # torch.use_deterministic_algorithms(True) (Lightning's deterministic=True) keeps the split form
    fused_dq = fused_dropout_backward(dropout_p)
    if buffers is None:
        buffers = backward_buffers(B, H, n_q, d, q.device, fused_dq)
    delta, lse2, dq_acc = buffers
    if grads is not None:
        dq, dk, dv = grads
    else:
        dq = None if fused_dq else torch.empty((B, H, n_q, d), dtype=q.dtype, device=q.device)
        dk = torch.empty((B, H, n_k, d), dtype=k.dtype, device=k.device)
        dv = torch.empty((B, H, n_k, d), dtype=v.dtype, device=v.device)
    if grad_lse is not None:
        grad_lse = grad_lse.contiguous()
    pad = key_padding_mask if key_padding_mask is not None else q  # bool, read as 8-bit by the kernels
    sparse = dkdv_indices is not None
    seed_arg = seed if seed is not None else q
    # each kernel's leading tensor arguments (unused ones get a placeholder)
    pre_tensors = (out, grad_out, lse, grad_lse if grad_lse is not None else lse, delta, lse2,
                   dq_acc if fused_dq else lse)
    dkdv_tensors = (q, k, v, grad_out, dk, dv, dq_acc if fused_dq else q, lse2, delta, pad, seed_arg,
                    dkdv_indices if sparse else q, dkdv_counts if sparse else q)
    dq_tensors = None if fused_dq else (q, k, v, grad_out, dq, lse2, delta, pad, seed_arg,
                                        dq_indices if sparse else q, dq_counts if sparse else q)
    key = None
    if launch is _direct and plans_enabled():
        dq_lists = None if dq_indices is None else (dq_indices, dq_counts)
        key = _launch_plan_key(
            "bwd", dkdv_tensors + pre_tensors[:4] + (dq if dq is not None else q,) + (dq_lists or ()),
            (q, k, v, grad_out, out, dq if dq is not None else q, dk, dv), key_padding_mask, seed,
            dkdv_indices, dkdv_counts, causal, dropout_p, softmax_scale, tiles,
            extra=(fused_dq, grad_lse is not None, grad_out.dtype,
                   None if dq_lists is None else tuple((t.shape, t.stride()) for t in dq_lists)))
        plan = _LAUNCH_PLANS.get(key)
        if plan:  # plans exist only for the pointer path: q, k, v, grad_out fill the descriptor slots
            if dq_tensors is None:
                flat = (*pre_tensors, *dkdv_tensors, q, k, v, grad_out)
            else:
                flat = (*pre_tensors, *dkdv_tensors, q, k, v, grad_out, *dq_tensors, q, k, v, grad_out)
            plan(*flat)
            if trace is not None:
                trace.append((plan, flat))
            return _bwd_result(q, dq, dk, dv, dq_acc)
    launches = []
    pre_m = 64
    launches.append((kern.flash_bwd_preprocess_kernel, (cdiv(n_q, pre_m), B * H), (
        *pre_tensors, *_s4(out), *_s4(grad_out), H, n_q, d,
    ), dict(BLOCK_M=pre_m, BLOCK_D=padded_head_dim(d), HAS_DLSE=grad_lse is not None, ZERO_DQ=fused_dq)))
    all_tiles = _tiles(tuple(tiles))
    traced = launch is not _direct
    pad_strides = (pad.stride(0), pad.stride(1)) if key_padding_mask is not None else (0, 0)
    drop_threshold, drop_scale = _dropout_args(dropout_p)
    qk_scale = softmax_scale * kern.LOG2E
    flags = dict(IS_CAUSAL=causal, HAS_PAD=key_padding_mask is not None, HAS_DROPOUT=dropout_p > 0.0, SPARSE=sparse)
    t = all_tiles.dkdv
    ws = warp_spec_applies("dkdv", t, causal=causal, dropout=dropout_p > 0.0, sparse=sparse,
                           even_n=n_k % t.block_n == 0)
    descs, tma_flags = _descriptors(t, (q, k, v, grad_out), ws, traced=traced)
    launches.append((kern.flash_bwd_dkdv_kernel, _grid(cdiv(n_k, t.block_n), B * H, sparse), (
        *dkdv_tensors, *descs,
        *_s4(q), *_s4(k), *_s4(v), *_s4(grad_out), *_s4(dk), *_s4(dv), *pad_strides,
        *_sparse_strides(dkdv_indices, dkdv_counts),
        H, n_q, n_k, d, n_k - n_q, qk_scale, softmax_scale, drop_threshold, drop_scale,
    ), dict(
        BLOCK_M=t.block_m, BLOCK_N=t.block_n, **_common_flags(q, k, t.block_m, t.block_n), **flags,
        **tma_flags, FUSED_DQ=fused_dq, num_warps=t.num_warps, num_stages=t.num_stages,
    )))
    if dq_tensors is not None:
        t = all_tiles.dq
        descs, tma_flags = _descriptors(t, (q, k, v, grad_out), False, traced=traced)  # see warp_spec_applies
        launches.append((kern.flash_bwd_dq_kernel, _grid(cdiv(n_q, t.block_m), B * H, sparse), (
            *dq_tensors, *descs,
            *_s4(q), *_s4(k), *_s4(v), *_s4(grad_out), *_s4(dq), *pad_strides,
            *_sparse_strides(dq_indices, dq_counts),
            H, n_q, n_k, d, n_k - n_q, qk_scale, softmax_scale, drop_threshold, drop_scale,
        ), dict(
            BLOCK_M=t.block_m, BLOCK_N=t.block_n, **_common_flags(q, k, t.block_m, t.block_n), **flags,
            **tma_flags, num_warps=t.num_warps, num_stages=t.num_stages,
        )))
    if key is not None:
        plan = _bind_launch_plan(key, launches)
        if plan and trace is not None:
            trace.append((plan, tuple(t for _, _, args, _ in launches for t in args[:_leading_tensors(args)])))
    else:
        for kernel, grid, args, kwargs in launches:
            launch(kernel)[grid](*args, **kwargs)
    return _bwd_result(q, dq, dk, dv, dq_acc)


def _bwd_result(q: Tensor, dq: Optional[Tensor], dk: Tensor, dv: Tensor, dq_acc: Optional[Tensor]):
    """(dq, dk, dv) of :func:`_bwd`: the fused form's float32 dQ sum rounded to q's dtype (into the
    caller's ``dq`` when given)."""
    if dq_acc is not None:
        if dq is None:
            return dq_acc.to(q.dtype), dk, dv
        return dq.copy_(dq_acc), dk, dv
    return dq, dk, dv


# ---------------------------------------------------------------------------------------------
# launch plans (eager calls on compiled kernels)
# ---------------------------------------------------------------------------------------------
# Why: an eager `paper`-model step at the small batch is bound by the host CPU (issue #8), and the
# argument building above (strides, flags, tiles, grid, TMA checks) plus the launch signature cost
# tens of microseconds per call. A plan is the bound launches (kernels.launch.BoundLaunch) of one
# direction for one input layout (kernels.launch.LaunchPlan, natively by default: one C call for the
# direction's launches); a later call with the same layout only allocates its outputs and replays them
# with its tensors.
# Key: everything the launches' scalars, constexprs, grid and Triton's specialisation depend on --
# the direction, device, dtype, every shape and stride the kernels read, which optional inputs are
# present, causal, dropout_p, the scale, the tiles -- and only calls whose tensors are all 16-byte
# aligned get one (Triton specialises on that; freshly allocated outputs always are). Value: the
# LaunchPlan, or False where a launch cannot be replayed (TMA descriptors), which then keeps the path
# above.
_LAUNCH_PLANS: dict[tuple, object] = {}
_LAUNCH_PLANS_MAX = 1024  # distinct layouts before the cache is cleared (a guard against unbounded growth)


def _launch_plan_key(direction: str, tensors: tuple, strided: tuple, key_padding_mask, seed, indices, counts,
                     causal: bool, dropout_p: float, softmax_scale: float, tiles,
                     extra: tuple = ()) -> Optional[tuple]:
    """The plan key of a call (see above), or None when one of ``tensors`` is not 16-byte aligned.
    ``strided``: the tensors whose shapes and strides the launches read; their dtypes follow q's (the
    inputs are checked to share one; outputs and buffers are allocated from it), except the
    backward's incoming gradient, whose dtype the backward passes in ``extra``."""
    misaligned = 0
    for t in tensors:
        misaligned |= t.data_ptr()
    if misaligned & 15:
        return None
    q = strided[0]
    return (direction, q.device, q.dtype, tuple((t.shape, t.stride()) for t in strided),
            None if key_padding_mask is None else key_padding_mask.stride(), seed is None,
            None if indices is None else (indices.shape, indices.stride(), counts.shape, counts.stride()),
            causal, dropout_p, softmax_scale, tuple(tiles), extra)


def _bind_launch_plan(key: tuple, launches: list):
    """Run ``launches`` ((kernel, grid, args, kwargs), in order) and keep their bound forms as the plan
    of ``key`` (False if one cannot be bound; the launches run either way); returns that plan."""
    bound = []
    for kernel, grid, args, kwargs in launches:
        wrapped = launcher(kernel)
        if isinstance(wrapped, CachedLauncher):
            bound.append(wrapped.bind(grid, args, kwargs))
        else:  # not a JIT kernel (a test's stand-in): launched, never replayed
            wrapped[grid](*args, **kwargs)
            bound.append(None)
    if len(_LAUNCH_PLANS) >= _LAUNCH_PLANS_MAX:
        _LAUNCH_PLANS.clear()
    plan = _LAUNCH_PLANS[key] = LaunchPlan(bound) if all(b is not None for b in bound) else False
    return plan


@functools.wraps(launch_bwd)
def _traceable_bwd(grad_out, grad_lse, q, k, v, out, lse, key_padding_mask, seed, dkdv_indices, dkdv_counts,
                   dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles):
    return _bwd(_wrapped, grad_out, grad_lse, q, k, v, out, lse, key_padding_mask, seed, dkdv_indices, dkdv_counts,
                dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles)


def _flash_bwd_fake(grad_out, grad_lse, q, k, v, out, lse, key_padding_mask, seed, dkdv_indices, dkdv_counts,
                    dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


# ---------------------------------------------------------------------------------------------
# the ops torch.compile sees
# ---------------------------------------------------------------------------------------------
COMPILE_OP_ENV = "LRA_KERNELS_COMPILE_OP"


def _compile_op_kind() -> str:
    """$LRA_KERNELS_COMPILE_OP if set ("triton_op" or "custom_op"), else "triton_op" where CUDA is
    available and Triton compiles (not TRITON_INTERPRET=1), else "custom_op" (module docstring)."""
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    forced = os.environ.get(COMPILE_OP_ENV, "").strip()
    if forced:
        if forced not in ("triton_op", "custom_op"):
            raise ValueError(f"${COMPILE_OP_ENV}={forced!r}: use triton_op or custom_op")
        if forced == "triton_op" and interpreting:
            raise ValueError(f"${COMPILE_OP_ENV}=triton_op needs compiled kernels, but TRITON_INTERPRET=1 runs "
                             "them in Triton's interpreter, which torch.library.wrap_triton cannot trace")
        return forced
    return "triton_op" if torch.cuda.is_available() and not interpreting else "custom_op"


def register_ops(namespace: str, kind: str):
    """Register ``{namespace}::flash_fwd`` and ``{namespace}::flash_bwd`` as ``kind`` ops with autograd;
    returns (fwd op, bwd op). The package registers ``lra_kernels`` once, at import."""
    name_fwd, name_bwd = f"{namespace}::flash_fwd", f"{namespace}::flash_bwd"
    if kind == "triton_op":
        fwd = torch.library.triton_op(name_fwd, mutates_args=())(_traceable_fwd)
        bwd = torch.library.triton_op(name_bwd, mutates_args=())(_traceable_bwd)
    elif kind == "custom_op":
        fwd = torch.library.custom_op(name_fwd, mutates_args=())(launch_fwd)
        bwd = torch.library.custom_op(name_bwd, mutates_args=())(launch_bwd)
        fwd.register_fake(_flash_fwd_fake)
        bwd.register_fake(_flash_bwd_fake)
    else:
        raise ValueError(f"unknown op kind {kind!r}: triton_op or custom_op")
    bwd_packet = getattr(getattr(torch.ops, namespace), "flash_bwd")
    fwd.register_autograd(functools.partial(_backward, bwd_packet), setup_context=_setup_context)
    return fwd, bwd


# ---------------------------------------------------------------------------------------------
# autograd
# ---------------------------------------------------------------------------------------------
def _setup_context(ctx, inputs, output):
    (q, k, v, key_padding_mask, seed, _fi, _fc, dkdv_indices, dkdv_counts, dq_indices, dq_counts,
     causal, dropout_p, softmax_scale, tiles) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, key_padding_mask, seed, dkdv_indices, dkdv_counts, dq_indices, dq_counts)
    ctx.causal = causal
    ctx.dropout_p = dropout_p
    ctx.softmax_scale = softmax_scale
    ctx.tiles = tiles
    # an lse nobody differentiates stays None (HAS_DLSE=False) instead of a zero tensor: under
    # torch.compile the default would add a fill kernel per call and a read of it in the preprocess
    ctx.set_materialize_grads(False)


def _backward(flash_bwd_op, ctx, grad_out, grad_lse):
    q, k, v, out, lse, key_padding_mask, seed, dkdv_indices, dkdv_counts, dq_indices, dq_counts = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv = flash_bwd_op(
        grad_out, grad_lse, q, k, v, out, lse, key_padding_mask, seed, dkdv_indices, dkdv_counts,
        dq_indices, dq_counts, ctx.causal, ctx.dropout_p, ctx.softmax_scale, ctx.tiles)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None, None


STATIC_LAUNCH_ENV = "TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS"


def _let_inductor_launch_ours_statically() -> None:
    """Under the triton_op form Inductor launches our kernels from its generated code. Its own kernels
    go through its static C launcher, but user kernels by default through Triton's Python launcher
    (``torch._inductor.config.static_launch_user_defined_triton_kernels``, off by default in torch
    2.11-2.13): measured on the H200 (session 16), those 6 launches per `paper`-model step were the
    compiled step's dearest host work per kernel. This switches the static launch on for them; a
    kernel it cannot serve (launch hooks, scratch memory, PDL / cooperative launch, several CTAs) falls
    back to Triton's launcher by itself. The choice is made where the kernel is compiled, which is
    mostly in Inductor's compile worker processes, and those get only a few settings from this
    process's config -- so it goes through torch's own environment variable, which they inherit
    (``$TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS``; set to 0 by the user, it stays off)."""
    import torch._inductor.config as inductor_config

    if not hasattr(inductor_config, "static_launch_user_defined_triton_kernels"):
        return
    if STATIC_LAUNCH_ENV not in os.environ:
        os.environ[STATIC_LAUNCH_ENV] = "1"  # the compile workers, started later, read it at import
        inductor_config.static_launch_user_defined_triton_kernels = True  # this process's config is read already


def inductor_static_launch() -> Optional[bool]:
    """Whether Inductor launches user Triton kernels (ours, in the triton_op form) with its static
    launcher (None: this torch has no such setting)."""
    import torch._inductor.config as inductor_config

    return getattr(inductor_config, "static_launch_user_defined_triton_kernels", None)


COMPILE_OP = _compile_op_kind()
flash_fwd, flash_bwd = register_ops("lra_kernels", COMPILE_OP)
if COMPILE_OP == "triton_op":
    _let_inductor_launch_ours_statically()


# ---------------------------------------------------------------------------------------------
# eager fast path
# ---------------------------------------------------------------------------------------------
class _FlashFunction(torch.autograd.Function):
    """The same forward and backward as the custom ops, for eager mode. Calling a ``custom_op``
    costs ~0.3-0.5 ms of Python per forward + backward (dispatcher, default filling, the dynamo
    guard around its autograd), which an eager LRA model step, itself launch-bound, pays per
    layer; ``autograd.Function`` calls the launchers directly."""

    @staticmethod
    def forward(ctx, q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, dkdv_indices, dkdv_counts,
                dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles):
        out, lse = launch_fwd(q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, dkdv_indices,
                              dkdv_counts, dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles)
        ctx.save_for_backward(q, k, v, out, lse, key_padding_mask, seed, dkdv_indices, dkdv_counts, dq_indices,
                              dq_counts)
        ctx.args = (causal, dropout_p, softmax_scale, tiles)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    @once_differentiable  # the backward kernels are not differentiable: a double backward raises
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse, key_padding_mask, seed, dkdv_indices, dkdv_counts, dq_indices, dq_counts = ctx.saved_tensors
        if grad_out is None:
            grad_out = torch.zeros_like(out)
        dq, dk, dv = launch_bwd(grad_out, grad_lse, q, k, v, out, lse, key_padding_mask, seed, dkdv_indices,
                                dkdv_counts, dq_indices, dq_counts, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None, None


def unpack_qkv(qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v as (B, H, N, d) views of a packed (B, N, 3, H, d) tensor (no copy; two view ops)."""
    return qkv.permute(2, 0, 3, 1, 4).unbind(0)


def packed_views(qkv) -> tuple[Tensor, Tensor, Tensor]:
    """A packed input checked (:func:`check_packed_qkv`) and its q, k, v views of ``qkv.detach()``:
    for the callers' checks and tile choice, and the ``views`` of :func:`attention_packed` (not
    tracked by autograd)."""
    check_packed_qkv(qkv)
    return unpack_qkv(qkv.detach())


class _PackedFlashFunction(torch.autograd.Function):
    """Eager attention on a packed (B, N, 3, H, d) QKV tensor (a fused projection's output), giving
    (B, N, H, d). Same launches as :class:`_FlashFunction` on views of the one input; the backward
    writes dQ, dK and dV straight into one (B, N, 3, H, d) gradient. Against q/k/v views it saves the
    caller's permute / unbind / transpose autograd nodes and two copies per call (the (B, H, N, d)
    output's merge of the heads; autograd's stacking of dQ, dK, dV into the projection's gradient):
    on an eager, launch-bound LRA step that host time is what decides (issue #8, small batch).
    ``views``: (q, k, v) of ``qkv.detach()``, made once by the caller for its checks (a tuple, so
    autograd does not track it; detached views share qkv's version counter, so saving them still
    catches an in-place change of qkv before the backward)."""

    @staticmethod
    def forward(ctx, qkv, views, key_padding_mask, seed, plans, causal, dropout_p, softmax_scale, tiles, recorder):
        q, k, v = views
        trace = [] if recorder is not None else None
        with _device_guard(q):
            out, lse = _fwd(_direct, q, k, v, key_padding_mask, seed, *plans[:2], causal, dropout_p, softmax_scale,
                            tiles, trace=trace)
        if trace:
            recorder.forward(trace[0], q, out, lse, key_padding_mask, seed, plans,
                             (causal, dropout_p, softmax_scale, tiles))
        ctx.save_for_backward(q, k, v, out, lse, key_padding_mask, seed)
        ctx.plans = plans[2:]  # the backward's index lists (dK/dV, dQ); not differentiable, never modified
        ctx.args = (causal, dropout_p, softmax_scale, tiles)
        ctx.recorder = recorder
        ctx.set_materialize_grads(False)
        return out.transpose(1, 2)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q, k, v, out, lse, key_padding_mask, seed = ctx.saved_tensors
        if grad is None:
            grad = torch.zeros_like(out).transpose(1, 2)
        dqkv = packed_backward(grad, q, k, v, out, lse, key_padding_mask, seed, ctx.plans, ctx.args, ctx.recorder)
        return dqkv, None, None, None, None, None, None, None, None, None


def packed_backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                    key_padding_mask: Optional[Tensor], seed: Optional[Tensor], lists: tuple, args: tuple,
                    recorder=None) -> Tensor:
    """The packed path's backward: dQKV (B, N, 3, H, d) from the (B, N, H, d) output gradient ``grad``,
    with q, k, v, out (B, H, N, d) views and the forward's lse, mask and seed; ``lists``: the dK/dV and
    dQ index lists and counts (or Nones); ``args``: (causal, dropout_p, softmax_scale, tiles). dQ, dK and
    dV are written straight into dQKV. ``recorder`` (``kernels.packed_fast_path``) learns the plan used."""
    B, H, n, d = q.shape
    dqkv = q.new_empty((B, n, 3, H, d))
    buffers = backward_buffers(B, H, n, d, q.device, fused_dropout_backward(args[1]))
    trace = [] if recorder is not None else None
    with _device_guard(q):
        _bwd(_direct, grad.transpose(1, 2), None, q, k, v, out, lse, key_padding_mask, seed, *lists, *args,
             grads=unpack_qkv(dqkv), buffers=buffers, trace=trace)
    if trace:
        recorder.backward(trace[0], q, grad, out, lse, key_padding_mask, seed, dqkv, buffers)
    return dqkv


def attention(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], seed: Optional[Tensor],
              fwd_indices: Optional[Tensor], fwd_counts: Optional[Tensor], dkdv_indices: Optional[Tensor],
              dkdv_counts: Optional[Tensor], dq_indices: Optional[Tensor], dq_counts: Optional[Tensor],
              causal: bool, dropout_p: float, softmax_scale: float, tiles: list[int]) -> tuple[Tensor, Tensor]:
    """(out, lse) with autograd: the custom op while torch.compile traces, the eager fast path otherwise."""
    args = (q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, dkdv_indices, dkdv_counts, dq_indices,
            dq_counts, causal, dropout_p, softmax_scale, tiles)
    if torch.compiler.is_compiling():
        return torch.ops.lra_kernels.flash_fwd(*args)
    return _FlashFunction.apply(*args)


def attention_packed(qkv: Tensor, views: tuple[Tensor, Tensor, Tensor], key_padding_mask: Optional[Tensor],
                     seed: Optional[Tensor], plans: tuple, causal: bool, dropout_p: float, softmax_scale: float,
                     tiles: list[int], recorder=None) -> Tensor:
    """(B, N, H, d) attention output of a packed (B, N, 3, H, d) ``qkv`` with autograd to ``qkv``;
    ``views``: ``unpack_qkv(qkv.detach())``; ``plans``: the six block-sparse index lists (fwd, dK/dV,
    dQ indices and counts) or six Nones. While torch.compile traces: the custom op on views of qkv
    (Inductor plans the copies itself). ``recorder``: a ``kernels.packed_fast_path`` entry that learns
    this call's launch plans (eager)."""
    if torch.compiler.is_compiling():
        out, _lse = torch.ops.lra_kernels.flash_fwd(*unpack_qkv(qkv), key_padding_mask, seed, *plans, causal,
                                                    dropout_p, softmax_scale, tiles)
        return out.transpose(1, 2)
    return _PackedFlashFunction.apply(qkv, views, key_padding_mask, seed, plans, causal, dropout_p, softmax_scale,
                                      tiles, recorder)
