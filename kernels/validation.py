"""Input checks at the public boundary: one clear ValueError/TypeError before any kernel launches."""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from . import triton_attention

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_SUPPORTED = frozenset(SUPPORTED_DTYPES)
_STRIDED = torch.strided
MAX_HEAD_DIM = 128
# the dense forward, every backward pass and the dropout-mask kernel index (batch, head) by grid axis 1 or 2
MAX_BATCH_HEADS = 65535


class AttentionShape(NamedTuple):
    batch: int
    heads: int
    n_q: int
    n_k: int
    head_dim: int


def _describe(t) -> str:
    return f"{type(t).__name__}" if not isinstance(t, torch.Tensor) else f"tensor of shape {tuple(t.shape)}"


def check_packed_qkv(qkv) -> None:
    """A packed QKV input must be a (B, N, 3, H, d) tensor (its q, k, v views are then checked by
    :func:`check_attention_inputs`)."""
    if not isinstance(qkv, torch.Tensor):
        raise TypeError(f"qkv must be a torch.Tensor of shape (B, N, 3, H, d), got {_describe(qkv)}")
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f"qkv must have shape (B, N, 3, H, d) (q, k, v packed along dim 2), got {tuple(qkv.shape)}")


def _check_tensor(name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B, H, N, d), got {_describe(t)}")
    if t.layout is not _STRIDED:
        raise TypeError(f"{name} must be a dense (strided) tensor, got {t.layout}; call .to_dense()")
    if t.dim() != 4:
        raise ValueError(
            f"{name} must have 4 dims (batch, heads, seq_len, head_dim) like "
            f"scaled_dot_product_attention, got {t.dim()} dims with shape {tuple(t.shape)}")
    if t.dtype not in _SUPPORTED:
        raise TypeError(f"{name} has dtype {t.dtype}; supported: float16, bfloat16, float32")


def check_attention_inputs(q, k, v, key_padding_mask, causal, dropout_p, softmax_scale) -> AttentionShape:
    """Every input of an attention call checked (the first problem raised as a ValueError or
    TypeError naming it); returns the call's shape. Runs on every call, so each check is one cheap
    attribute test (a CUDA input is recognised by ``is_cuda``, without building its device's type)."""
    _check_tensor("q", q)
    _check_tensor("k", k)
    _check_tensor("v", v)
    dtype = q.dtype
    if not (dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    device = q.device
    if not (device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got q {q.device}, k {k.device}, v {v.device}")
    B, H, n_q, d = q.shape
    k_shape = k.shape
    if k_shape != v.shape:
        raise ValueError(f"k and v must have the same shape (B, H, N_k, d), got k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}")
    if k_shape[0] != B or k_shape[1] != H:
        raise ValueError(f"q {tuple(q.shape)} and k/v {tuple(k.shape)} differ in batch or heads; "
                         f"expected k/v of shape ({B}, {H}, N_k, {d})")
    if k_shape[3] != d:
        raise ValueError(f"q has head_dim {d} but k/v have head_dim {k.shape[3]}")
    n_k = k_shape[2]
    if min(B, H, n_q, n_k) < 1:
        raise ValueError(f"empty input: batch, heads, N_q and N_k must all be >= 1, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if B * H > MAX_BATCH_HEADS:
        raise ValueError(f"batch * heads = {B} * {H} = {B * H} exceeds {MAX_BATCH_HEADS}, the kernels' limit (CUDA's "
                         f"launch grid holds at most 65,535 blocks along the axis that indexes (batch, head)); "
                         f"split the batch into chunks of at most {max(1, MAX_BATCH_HEADS // H)}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim {d} is not supported: the kernels take 1 <= head_dim <= {MAX_HEAD_DIM}")
    if not q.is_cuda:
        if device.type != "cpu":
            raise ValueError(f"inputs are on {device}; the kernels run on CUDA or (through Triton's interpreter) CPU")
        if torch.cuda.is_available():
            raise ValueError("inputs are on the CPU but CUDA is available, so Triton compiles for the GPU; "
                             "move q, k, v to the GPU (CPU tensors run only through the interpreter, "
                             "TRITON_INTERPRET=1, on machines without CUDA)")
        if not triton_attention.INTERPRETED:
            raise ValueError("inputs are on the CPU, but the kernels were built for the GPU compiler, not Triton's "
                             "interpreter: CPU tensors run only with TRITON_INTERPRET=1 set before kernels is imported")
    if key_padding_mask is not None:
        m = key_padding_mask
        if not isinstance(m, torch.Tensor):
            raise TypeError(f"key_padding_mask must be a bool tensor (B, N_k), got {_describe(m)}")
        if m.layout is not _STRIDED:
            raise TypeError(f"key_padding_mask must be a dense (strided) tensor, got {m.layout}; call .to_dense()")
        if m.dtype != torch.bool:
            raise TypeError(f"key_padding_mask must have dtype torch.bool (True = padding), got {m.dtype}")
        if m.dim() != 2 or m.shape[0] != B or m.shape[1] != n_k:
            raise ValueError(f"key_padding_mask must have shape (B, N_k) = ({B}, {n_k}), got {tuple(m.shape)}")
        if m.device != device:
            raise ValueError(f"key_padding_mask is on {m.device} but q/k/v are on {q.device}")
    if causal is not True and causal is not False:
        kind = f"{type(causal).__module__}.{type(causal).__qualname__}"  # numpy's bool is also called "bool"
        raise TypeError(f"causal must be a bool, got {causal!r} ({kind})")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p must be a float in [0, 1), got {dropout_p!r}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if softmax_scale is not None:
        if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
            raise TypeError(f"softmax_scale must be a positive float or None, got {softmax_scale!r}")
        if not (math.isfinite(float(softmax_scale)) and float(softmax_scale) > 0):
            raise ValueError(f"softmax_scale must be a finite positive number, got {softmax_scale}")
    return AttentionShape(B, H, n_q, n_k, d)
