"""Autograd of the attention launches: the eager ``autograd.Function`` forms and the registered ops'
``setup_context`` / backward.

In eager mode the public functions call the launches through :class:`FlashFunction` (or, for a
packed QKV input, :class:`PackedFlashFunction`) rather than through the registered ops
(:mod:`kernels.ops`): a ``torch.library`` op costs tenths of a millisecond of Python per forward +
backward (dispatcher, default filling, the dynamo guard around its autograd), which an eager,
launch-bound model step pays per layer. Both forms run the same launches (:mod:`kernels.launch_args`),
except that the eager forward runs the Hopper ping-pong kernel where :mod:`kernels.hopper_dispatch`
says so.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from . import hopper_dispatch, launch_args
from .validation import check_packed_qkv

Tensor = torch.Tensor
_NO_INPUT_GRADS = (None,) * 12  # gradients of the ops' non-tensor and index-list inputs


def setup_context(ctx, inputs, output):
    """``setup_context`` of the registered forward op."""
    (q, k, v, key_padding_mask, seed, _fi, _fc, dkdv_indices, dkdv_counts, dq_indices, dq_counts,
     causal, dropout_p, softmax_scale, tiles) = inputs
    out, row_stats = output
    ctx.save_for_backward(q, k, v, out, row_stats, key_padding_mask, seed, dkdv_indices, dkdv_counts, dq_indices,
                          dq_counts)
    ctx.args = (causal, dropout_p, softmax_scale, tiles)
    # row statistics (the lse) nobody differentiates stay None (HAS_DLSE=False) instead of a zero
    # tensor: under torch.compile the default would add a fill kernel per call and a read of it in the
    # backward
    ctx.set_materialize_grads(False)


def op_backward(flash_bwd_op, ctx, grad_out, grad_row_stats):
    """Backward of the registered forward op through the registered backward op ``flash_bwd_op``."""
    (q, k, v, out, row_stats, key_padding_mask, seed, dkdv_indices, dkdv_counts, dq_indices,
     dq_counts) = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv = flash_bwd_op(grad_out, grad_row_stats, q, k, v, out, row_stats, key_padding_mask, seed, dkdv_indices,
                              dkdv_counts, dq_indices, dq_counts, *ctx.args)
    return dq, dk, dv, *_NO_INPUT_GRADS


class FlashFunction(torch.autograd.Function):
    """(out, row statistics) of q, k, v (B, H, N, d) for eager mode, with the registered ops' arguments except
    that the six block-sparse index lists (fwd, dK/dV, dQ indices and counts; or six Nones) come as
    one tuple, ``lists``, and the launch settings ``(causal, dropout_p, softmax_scale, tiles)`` as
    another, ``args``, as in :class:`PackedFlashFunction`: neither is differentiable (the lists are
    cached plans that are never modified), both are kept on ``ctx``, and each argument of ``apply``
    fewer saves autograd a step per call."""

    @staticmethod
    def forward(ctx, q, k, v, key_padding_mask, seed, lists, args):
        causal, dropout_p, softmax_scale, tiles = args
        with launch_args.device_guard(q):
            out, row_stats = hopper_dispatch.forward(q, k, v, key_padding_mask, seed, lists[0], lists[1], causal,
                                                     dropout_p, softmax_scale, tiles)
        ctx.save_for_backward(q, k, v, out, row_stats, key_padding_mask, seed)
        ctx.lists = lists[2:]  # the backward's index lists (dK/dV, dQ)
        ctx.args = args
        ctx.set_materialize_grads(False)
        return out, row_stats

    @staticmethod
    @once_differentiable  # the backward kernels are not differentiable: a double backward raises
    def backward(ctx, grad_out, grad_row_stats):
        q, k, v, out, row_stats, key_padding_mask, seed = ctx.saved_tensors
        if grad_out is None:
            grad_out = torch.zeros_like(out)
        with launch_args.device_guard(q):
            dq, dk, dv = launch_args.backward(launch_args.eager, grad_out, grad_row_stats, q, k, v, out, row_stats,
                                              key_padding_mask, seed, *ctx.lists, *ctx.args)
        return dq, dk, dv, None, None, None, None  # mask, seed, lists, args


def unpack_qkv(qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v as (B, H, N, d) views of a packed (B, N, 3, H, d) tensor (no copy; two view ops)."""
    return qkv.permute(2, 0, 3, 1, 4).unbind(0)


def packed_views(qkv) -> tuple[Tensor, Tensor, Tensor]:
    """A packed input checked (:func:`check_packed_qkv`) and its q, k, v views of ``qkv.detach()``:
    for the callers' checks and tile choice, and the ``views`` of :class:`PackedFlashFunction` (not
    tracked by autograd)."""
    check_packed_qkv(qkv)
    return unpack_qkv(qkv.detach())


class PackedFlashFunction(torch.autograd.Function):
    """Eager attention on a packed (B, N, 3, H, d) QKV tensor (a fused projection's output), giving
    (B, N, H, d). Same launches as :class:`FlashFunction` on views of the one input; the backward
    writes dQ, dK and dV straight into one (B, N, 3, H, d) gradient. Against q/k/v views it saves the
    caller's permute / unbind / transpose autograd nodes and two copies per call (the (B, H, N, d)
    output's merge of the heads; autograd's stacking of dQ, dK, dV into the projection's gradient).
    ``views``: (q, k, v) of ``qkv.detach()``, made once by the caller for its checks (a tuple, so
    autograd does not track it; detached views share qkv's version counter, so saving them still
    catches an in-place change of qkv before the backward). ``lists``: the six block-sparse index
    lists (fwd, dK/dV, dQ indices and counts) or six Nones; ``args``: (causal, dropout_p,
    softmax_scale, tiles)."""

    @staticmethod
    def forward(ctx, qkv, views, key_padding_mask, seed, lists, args):
        q, k, v = views
        causal, dropout_p, softmax_scale, tiles = args
        with launch_args.device_guard(q):
            out, row_stats = hopper_dispatch.forward(q, k, v, key_padding_mask, seed, *lists[:2], causal, dropout_p,
                                                     softmax_scale, tiles)
        ctx.save_for_backward(q, k, v, out, row_stats, key_padding_mask, seed)
        ctx.lists = lists[2:]  # the backward's index lists (dK/dV, dQ); not differentiable, never modified
        ctx.args = args
        ctx.set_materialize_grads(False)
        return out.transpose(1, 2)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        q, k, v, out, row_stats, key_padding_mask, seed = ctx.saved_tensors
        if grad is None:
            grad = torch.zeros_like(out).transpose(1, 2)
        B, H, n, d = q.shape
        dqkv = q.new_empty((B, n, 3, H, d))
        with launch_args.device_guard(q):
            launch_args.backward(launch_args.eager, grad.transpose(1, 2), None, q, k, v, out, row_stats,
                                 key_padding_mask, seed, *ctx.lists, *ctx.args, grads=unpack_qkv(dqkv))
        return dqkv, None, None, None, None, None  # views, mask, seed, lists, args

