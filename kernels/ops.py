"""The attention kernels as ``torch.library`` ops, and the dispatch between them and the eager path.

``lra_kernels::flash_fwd`` and ``lra_kernels::flash_bwd`` serve both the dense and the block-sparse
function (sparse when index lists are given). As registered ops they keep
``torch.compile(fullgraph=True)`` from breaking the graph at the kernel call: Dynamo and AOTAutograd
see an op with a shape function and a backward (:mod:`kernels.autograd`). In eager mode
:func:`attention` and :func:`attention_packed` skip the op machinery and call the same launches
through an ``autograd.Function``; while torch.compile traces, they emit the op.

The form of the ops (:data:`OP_FORM`) follows from how the kernels were built:

- ``"triton_op"`` (CUDA, compiled kernels): ``torch.library.triton_op`` launching through
  ``torch.library.wrap_triton``. AOTAutograd decomposes the op into its Triton kernel calls, so
  Inductor launches the kernels itself from its generated code (see
  :func:`kernels.enable_inductor_static_launch`) and CUDA graphs (``mode="reduce-overhead"``)
  capture them. Inductor copies an input it finds written by a kernel; none is
  (tests/kernels/test_compile_triton_op.py checks it; ``_program_slot`` in
  :mod:`kernels.triton_attention` says which pattern made it copy). The op's body is its own fake
  kernel (shape arithmetic and tile selection only, no data access).
- ``"custom_op"`` (Triton's interpreter, i.e. CPU tensors; also CUDA-less machines): an opaque
  ``torch.library.custom_op`` with a separate fake kernel, which Inductor calls as a Python
  fallback. ``wrap_triton`` cannot trace interpreted kernels.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch

from . import autograd, launch_args
from . import triton_attention as kern

Tensor = torch.Tensor

OP_FORMS = ("triton_op", "custom_op")


@functools.wraps(launch_args.launch_fwd)  # same signature: the op schema is inferred from it
def _traceable_fwd(q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, dkdv_indices, dkdv_counts,
                   dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles):
    return launch_args.forward(launch_args.traced, q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts,
                               causal, dropout_p, softmax_scale, tiles)


@functools.wraps(launch_args.launch_bwd)
def _traceable_bwd(grad_out, grad_row_stats, q, k, v, out, row_stats, key_padding_mask, seed, dkdv_indices,
                   dkdv_counts, dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles):
    return launch_args.backward(launch_args.traced, grad_out, grad_row_stats, q, k, v, out, row_stats,
                                key_padding_mask, seed, dkdv_indices, dkdv_counts, dq_indices, dq_counts, causal,
                                dropout_p, softmax_scale, tiles)


def _flash_fwd_fake(q, k, v, key_padding_mask, seed, fwd_indices, fwd_counts, dkdv_indices, dkdv_counts,
                    dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles):
    return launch_args.new_output(q), launch_args.new_row_stats(q)


def _flash_bwd_fake(grad_out, grad_row_stats, q, k, v, out, row_stats, key_padding_mask, seed, dkdv_indices,
                    dkdv_counts, dq_indices, dq_counts, causal, dropout_p, softmax_scale, tiles):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def register_ops(namespace: str, form: str):
    """Register ``{namespace}::flash_fwd`` and ``{namespace}::flash_bwd`` in ``form`` (one of
    :data:`OP_FORMS`) with autograd; returns (fwd op, bwd op). The package registers ``lra_kernels``
    once, when :mod:`kernels.ops` is imported."""
    name_fwd, name_bwd = f"{namespace}::flash_fwd", f"{namespace}::flash_bwd"
    if form == "triton_op":
        fwd = torch.library.triton_op(name_fwd, mutates_args=())(_traceable_fwd)
        bwd = torch.library.triton_op(name_bwd, mutates_args=())(_traceable_bwd)
    elif form == "custom_op":
        fwd = torch.library.custom_op(name_fwd, mutates_args=())(launch_args.launch_fwd)
        bwd = torch.library.custom_op(name_bwd, mutates_args=())(launch_args.launch_bwd)
        fwd.register_fake(_flash_fwd_fake)
        bwd.register_fake(_flash_bwd_fake)
    else:
        raise ValueError(f"unknown op form {form!r}: use one of {', '.join(OP_FORMS)}")
    bwd_packet = getattr(getattr(torch.ops, namespace), "flash_bwd")
    fwd.register_autograd(functools.partial(autograd.op_backward, bwd_packet), setup_context=autograd.setup_context)
    return fwd, bwd


def op_form() -> str:
    """:data:`OP_FORM` of this process: "triton_op" where CUDA runs compiled kernels, else "custom_op"."""
    return "triton_op" if torch.cuda.is_available() and not kern.INTERPRETED else "custom_op"


OP_FORM = op_form()
flash_fwd, flash_bwd = register_ops("lra_kernels", OP_FORM)


def attention(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor], seed: Optional[Tensor],
              lists: tuple, causal: bool, dropout_p: float, softmax_scale: float,
              tiles: list[int]) -> tuple[Tensor, Tensor]:
    """(out, row statistics) with autograd (the lse is :func:`kernels.launch_args.lse_of` the
    statistics): the op while torch.compile traces, :class:`kernels.autograd.FlashFunction`
    otherwise. ``lists``: the six block-sparse index lists (fwd, dK/dV, dQ indices and counts) or six
    Nones."""
    if torch.compiler.is_compiling():
        return torch.ops.lra_kernels.flash_fwd(q, k, v, key_padding_mask, seed, *lists, causal, dropout_p,
                                               softmax_scale, tiles)
    return autograd.FlashFunction.apply(q, k, v, key_padding_mask, seed, lists,
                                        (causal, dropout_p, softmax_scale, tiles))


def attention_packed(qkv: Tensor, views: tuple[Tensor, Tensor, Tensor], key_padding_mask: Optional[Tensor],
                     seed: Optional[Tensor], lists: tuple, causal: bool, dropout_p: float, softmax_scale: float,
                     tiles: list[int]) -> Tensor:
    """(B, N, H, d) attention output of a packed (B, N, 3, H, d) ``qkv`` with autograd to ``qkv``;
    ``views``: :func:`kernels.autograd.packed_views` of it; ``lists`` as in :func:`attention`. While
    torch.compile traces: the op on views of qkv (Inductor plans the copies itself)."""
    if torch.compiler.is_compiling():
        out, _row_stats = torch.ops.lra_kernels.flash_fwd(*autograd.unpack_qkv(qkv), key_padding_mask, seed, *lists,
                                                    causal, dropout_p, softmax_scale, tiles)
        return out.transpose(1, 2)
    return autograd.PackedFlashFunction.apply(qkv, views, key_padding_mask, seed, lists,
                                              (causal, dropout_p, softmax_scale, tiles))
