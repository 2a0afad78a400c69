"""The eager fast path of attention on a packed QKV tensor (``flash_attention_qkvpacked`` and
``block_sparse_flash_attention_qkvpacked``).

Why: below 16K tokens the `paper` model's eager step is bound by the host CPU (issue #8; session 15's
step profiles: the flash step issues for as long as it runs), so every microsecond of Python per
attention call shows. The regular packed path checks the inputs, makes q/k/v views, picks tiles,
computes launch-plan keys in both directions, and in the backward makes the gradient's views — the
same work for every call of one layout. Here the first call of a layout runs the regular path and
records its two launch plans re-expressed over the tensors the call starts from (the packed QKV
tensor, the output, the gradient and the work buffers, at fixed byte offsets:
:meth:`kernels.launch.LaunchPlan.rebased`); later calls of that layout skip straight to allocating
the outputs and one native replay per direction.

What a layout is (the entry key): the packed tensor's shape, strides, dtype and device, the key
padding mask's shape, strides and dtype (or none), causal, dropout_p and softmax_scale as given,
the dropout backward form (``kernels.ops.fused_dropout_backward``), ``kernels.tiles.GENERATION``
(tile overrides and table changes) and, block-sparse, the layout by identity (a bool tensor also by
its version; checked through a weak reference, so a new object that reuses an id is not mistaken for
the old one) and the block size; the entry holds the layout's index lists, which its plans read.
Everything the regular path checks or derives is a function of that key, so a call that matches an
entry is one the regular path accepted; calls with arguments of other types (``causal=1``, a bool
``dropout_p``) never take this path, so they still get the regular path's error. Per call it checks what the key cannot: 16-byte alignment of the packed tensor
and the mask (Triton specialises on it), the current CUDA device, launch hooks (profilers: the
regular path), and in the backward the gradient's strides, dtype and alignment (one backward plan per
gradient layout, recorded by a regular backward the first time).
A call off the current CUDA device takes the regular path (it switches devices for its launches).

Where it applies: eager calls (not while torch.compile traces) on CUDA with native launch plans
(``$LRA_TRITON_LAUNCH=native`` where :mod:`kernels.plan_launcher` builds); anywhere else the regular
path runs as before. Results are bitwise those of the regular path (the same kernels, arguments and
seed draw; the fused dropout backward's atomic dQ sum varies in its last bits between any two runs):
``tests/kernels/test_packed_fast_path.py`` checks that through the interpreter on CPU,
``tests/kernels/test_plan_launcher.py`` with the native plans on CUDA.
Session 15 (results/models/session15/): one packed call, forward + backward, 342 us of host time
against 648 us without this path and 575 us for SDPA's (the same H200 host, rotating rounds).
"""
from __future__ import annotations

import weakref
from typing import Callable, Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from . import launch, ops, tiles
from .dropout import draw_seed

_ENTRIES: dict[tuple, "Entry"] = {}
_ENTRIES_MAX = 256  # layouts before the cache is cleared (a guard against unbounded growth)


ON = True  # the fast path itself (scripts/h200/host_overhead.py measures the native replay without it)


def enabled() -> bool:
    """The fast path and native launch plans are on (checked per call: tests and scripts flip them)."""
    return ON and launch.NATIVE and launch.PLANNED and launch.ENABLED


class Entry:
    """The recorded plans of one layout: ``fwd`` (native plan over (qkv, out, lse, mask|qkv,
    seed|qkv)), ``bwd`` by the gradient's (strides, dtype) (native plans over (qkv, grad, out, lse,
    mask|qkv, seed|qkv, dqkv, delta, lse2, dq_acc|lse)), the call's arguments as the regular path
    derived them, and how often each direction was replayed (tests)."""

    __slots__ = ("fwd", "bwd", "args", "index", "backward_lists", "layout", "fused", "recorded", "forwards",
                 "backwards")

    def __init__(self, fused: bool, layout=None):
        self.fwd = None
        self.bwd: dict[tuple, object] = {}
        self.args: tuple = ()
        self.index: tuple = ()  # block-sparse: the index lists the plans read (kept alive here)
        self.backward_lists: tuple = (None,) * 4  # block-sparse: dK/dV and dQ index lists and counts
        self.layout = weakref.ref(layout) if layout is not None else None  # block-sparse: the layout keyed by id
        self.fused = fused
        self.recorded = False  # a plan was recorded (fwd None after that: the layout cannot take this path)
        self.forwards = self.backwards = 0

    # recorders, called by kernels.ops._PackedFlashFunction with the plan the regular path used
    def forward(self, traced, q, out, lse, key_padding_mask, seed, index_lists: tuple, args: tuple) -> None:
        """``index_lists``: the six block-sparse index lists (or Nones); ``args``: (causal, dropout_p,
        softmax_scale, tiles) as the regular path derived them."""
        plan, tensors = traced
        storages, index = set(), []
        for t in index_lists:  # one base per storage (base_mapping maps views of it by offset)
            storage = t.untyped_storage().data_ptr() if t is not None else None
            if storage is not None and storage not in storages:
                storages.add(storage)
                index.append(t)
        self.index = tuple(index)
        self.backward_lists = tuple(index_lists[2:])
        self.args = args
        self.recorded = True
        # q has qkv's data pointer; out (B, H, N, d) that of the (B, N, H, d) output
        if _separate(q, out, lse, key_padding_mask, seed, *self.index):
            self.fwd = plan.rebased(tensors, _forward_bases(self, q, out, lse, key_padding_mask, seed))

    def backward(self, traced, q, grad, out, lse, key_padding_mask, seed, dqkv, buffers) -> None:
        """Records a regular backward's plan for ``grad``'s layout, unless that backward took another
        dropout-backward form than the entry's (deterministic algorithms switched between the calls),
        or its tensors share a storage."""
        plan, tensors = traced
        if (buffers[2] is not None) != self.fused:
            return
        if grad.data_ptr() % 16 or not _separate(q, grad, out, lse, key_padding_mask, seed, dqkv, *buffers,
                                                 *self.index):
            return
        native = plan.rebased(tensors, _backward_bases(self, q, grad, out, lse, key_padding_mask, seed, dqkv,
                                                       buffers))
        if native is not None:
            self.bwd[(grad.stride(), grad.dtype)] = native


def _separate(*tensors) -> bool:
    """Whether the given tensors (None skipped) lie in pairwise different storages. A recording call
    whose inputs happen to share one (a gradient that is a view of the output, a mask inside the packed
    tensor's storage) is not recorded: its plans would map one tensor's pointer onto another's, which
    later calls need not repeat."""
    storages = [t.untyped_storage().data_ptr() for t in tensors if t is not None]
    return len(set(storages)) == len(storages)


def _forward_bases(entry: Entry, qkv, out, lse, key_padding_mask, seed) -> tuple:
    return (qkv, out, lse, key_padding_mask if key_padding_mask is not None else qkv,
            seed if seed is not None else qkv, *entry.index)


def _backward_bases(entry: Entry, qkv, grad, out, lse, key_padding_mask, seed, dqkv, buffers) -> tuple:
    delta, lse2, dq_acc = buffers
    return (qkv, grad, out, lse, key_padding_mask if key_padding_mask is not None else qkv,
            seed if seed is not None else qkv, dqkv, delta, lse2, dq_acc if dq_acc is not None else lse, *entry.index)


def _on_current_cuda_device(t: Tensor) -> bool:
    return t.is_cuda and t.device.index == torch.cuda.current_device()


def call(qkv: Tensor, key_padding_mask: Optional[Tensor], causal, dropout_p, softmax_scale,
         regular: Callable, layout=None, block_size=None) -> Tensor:
    """``regular(recorder)`` — the regular packed path of this call — or its result through the fast
    path where an entry for the call's layout exists (the first call of a layout runs the regular
    path and records the entry). Block-sparse calls pass their ``layout`` (a bool tensor or a
    ``BlockSparseLayout``, keyed by identity, and a tensor also by its version) and ``block_size``."""
    m = key_padding_mask
    if (torch.compiler.is_compiling() or not enabled() or causal.__class__ is not bool
            or dropout_p.__class__ not in (float, int)
            or not (softmax_scale is None or softmax_scale.__class__ in (float, int))
            or not isinstance(qkv, Tensor) or not (m is None or isinstance(m, Tensor))
            or not _on_current_cuda_device(qkv)):
        return regular(None)
    sparse = None
    if layout is not None:
        if block_size.__class__ is not int:
            return regular(None)
        if isinstance(layout, Tensor):
            if layout.is_inference():  # no version counter: an in-place change could not be seen
                return regular(None)
            sparse = (id(layout), layout._version, block_size)
        else:  # a BlockSparseLayout: fixed once built
            sparse = (id(layout), None, block_size)
    fused = ops.fused_dropout_backward(dropout_p)
    key = (qkv.shape, qkv.stride(), qkv.dtype, qkv.device, None if m is None else (m.shape, m.stride(), m.dtype),
           causal, dropout_p, softmax_scale, fused, tiles.GENERATION, sparse)
    entry = _ENTRIES.get(key)
    if entry is not None and sparse is not None and entry.layout() is not layout:
        entry = None  # the layout keyed by this id is gone: a new object reuses its id
    if entry is None:
        entry = Entry(fused, layout)
        out = regular(entry)
        if entry.recorded:
            if len(_ENTRIES) >= _ENTRIES_MAX:
                _ENTRIES.clear()
            _ENTRIES[key] = entry
        return out
    misaligned = (qkv.data_ptr() | (m.data_ptr() if m is not None else 0)) & 15
    if entry.fwd is None or misaligned or launch._hooks_installed():
        return regular(None)
    seed = draw_seed(qkv.device) if dropout_p > 0.0 else None
    return _FastPackedFunction.apply(qkv, key_padding_mask, seed, entry)


class _FastPackedFunction(torch.autograd.Function):
    """The regular packed path's forward and backward (``kernels.ops._PackedFlashFunction``) as
    recorded native replays: allocate, replay, return."""

    @staticmethod
    def forward(ctx, qkv, key_padding_mask, seed, entry):
        B, n, _, H, d = qkv.shape
        out = qkv.new_empty((B, n, H, d))
        lse = torch.empty((B, H, n), dtype=torch.float32, device=qkv.device)
        entry.fwd.run(launch.current_stream(), _forward_bases(entry, qkv, out, lse, key_padding_mask, seed))
        entry.forwards += 1
        ctx.save_for_backward(qkv, out, lse, key_padding_mask, seed)
        ctx.entry = entry
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        qkv, out, lse, key_padding_mask, seed = ctx.saved_tensors
        entry = ctx.entry
        if grad is None:
            grad = torch.zeros_like(out)
        native = entry.bwd.get((grad.stride(), grad.dtype))
        if (native is None or grad.data_ptr() % 16 or launch._hooks_installed()
                or ops.fused_dropout_backward(entry.args[1]) != entry.fused):
            # the regular backward, which records its plan for this gradient layout
            q, k, v = ops.unpack_qkv(qkv)
            dqkv = ops.packed_backward(grad, q, k, v, out.transpose(1, 2), lse, key_padding_mask, seed,
                                       entry.backward_lists, entry.args, entry)
            return dqkv, None, None, None
        B, n, _, H, d = qkv.shape
        dqkv = qkv.new_empty(qkv.shape)
        buffers = ops.backward_buffers(B, H, n, d, qkv.device, entry.fused)
        native.run(launch.current_stream(),
                   _backward_bases(entry, qkv, grad, out, lse, key_padding_mask, seed, dqkv, buffers))
        if buffers[2] is not None:  # the fused form's float32 dQ sum, rounded into dQKV's q part
            dqkv.select(2, 0).copy_(buffers[2].transpose(1, 2))
        entry.backwards += 1
        return dqkv, None, None, None

