"""Whether a call can take the Hopper Gluon kernels (forward :mod:`kernels.hopper_attention`, backward
:mod:`kernels.hopper_attention_bwd`), and whether an eager dense or block-sparse forward does
(:func:`takes_hopper_forward`).

Importable with any Triton (it imports no Gluon, and torch only when :func:`cuda_capability` first
asks a device), so that a caller or the offline compile check can ask before importing the kernel
module, whose Gluon API differs between Triton releases. Each check of what a call can take returns ``(True, "")`` or ``(False, reason)``; the
caller decides the fallback.
"""
from __future__ import annotations

import functools
import re
from typing import Iterable, Sequence

# Triton (major, minor) releases whose Gluon API the kernel was compiled against (offline, sm_90)
VERIFIED_TRITON = ((3, 6), (3, 9))
HEAD_DIMS = (64, 128)
DTYPES = ("float16", "bfloat16")
_ELEM_BYTES = 2  # float16 / bfloat16
TMA_ALIGN = 16  # bytes: TMA's base address and every stride but the innermost
_UNALIGNED_BASE = "TMA needs a 16-byte aligned base address"
# head dim -> least N_k at which the ping-pong forward beats the portable one: results/kernels/h200/hopper.md
PINGPONG_MIN_KEYS = {128: 1, 64: 2048}
# the same for a block-sparse forward: d = 128 only; at d = 64 the portable block-sparse forward is as
# fast or faster at every N (results/kernels/README.md, "Hopper dispatch")
SPARSE_PINGPONG_MIN_KEYS = {128: 1}
# (query rows, keys) of the forward's tile: a program's query rows and one K / V tile
# (kernels.hopper_attention's BLOCK_M and BLOCK_N). The block-sparse forward walks the plan of a
# portable forward of this tile (kernels.block_sparse), which exists for layout blocks of 128 and 256
FORWARD_TILE = (128, 128)


@functools.lru_cache(maxsize=16)  # called on every eager forward on CUDA (takes_hopper_forward)
def triton_version_ok(version: str) -> tuple[bool, str]:
    """Is ``version`` (e.g. ``triton.__version__``) a release the kernel was compiled against?"""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        return False, f"cannot parse Triton version {version!r}"
    if (int(match[1]), int(match[2])) not in VERIFIED_TRITON:
        verified = ", ".join(f"{a}.{b}.x" for a, b in VERIFIED_TRITON)
        return False, f"Triton {version}: the Hopper Gluon kernel is verified only on {verified}"
    return True, ""


@functools.lru_cache(maxsize=None)
def cuda_capability(device_index: int) -> tuple[int, int]:
    """The compute capability of CUDA device ``device_index``, memoised: it does not change while the
    process runs, and torch's query costs microseconds on every forward that asks. Imports torch
    when first called."""
    import torch

    return tuple(torch.cuda.get_device_capability(device_index))


@functools.lru_cache(maxsize=64)  # called on every eager forward on CUDA (takes_hopper_forward)
def device_supported(triton_version: str, capability: tuple[int, int] | None, dtype,
                     head_dim: int) -> tuple[bool, str]:
    """The part of :func:`supported` that depends on no tensor: the Triton release, the device's
    compute capability (a tuple; ``None``: not checked), the dtype (a torch dtype or its name) and the
    head dim. Memoised: the eager forward asks it on every call, with arguments that hardly change."""
    ok, why = triton_version_ok(triton_version)
    if not ok:
        return ok, why
    if capability is not None and capability != (9, 0):
        return False, f"needs an sm_90 (Hopper) device for wgmma, got compute capability {capability}"
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        return False, f"dtype {name}: only float16 and bfloat16"
    if head_dim not in HEAD_DIMS:
        return False, f"head_dim {head_dim}: only {', '.join(map(str, HEAD_DIMS))}"
    return True, ""


def tma_problem(strides: Sequence[int], data_ptr: int = 0) -> str:
    """Why TMA cannot address a 16-bit tensor of these strides (in elements) and base address, or ""
    when it can: the innermost dimension contiguous, every other stride and the base 16-byte aligned."""
    if strides[-1] != 1:
        return f"TMA needs the last dim contiguous, stride {strides[-1]}"
    for s in strides[:-1]:  # a loop, not any(): this runs on every eager forward
        if s * _ELEM_BYTES % TMA_ALIGN:
            return f"TMA needs 16-byte aligned strides, got {tuple(strides)} (elements)"
    if data_ptr % TMA_ALIGN:
        return _UNALIGNED_BASE
    return ""


def supported(triton_version: str, capability: tuple[int, int] | None, dtype, head_dim: int,
              strides: Iterable[Sequence[int]] = (), data_ptrs: Iterable[int] = (),
              names: Sequence[str] = ("q", "k", "v")) -> tuple[bool, str]:
    """Can q, k, v with these properties take the Hopper path?

    Args:
        triton_version: ``triton.__version__``.
        capability: the device's ``torch.cuda.get_device_capability()``; ``None`` skips the check
            (offline compilation).
        dtype: a torch dtype or its name (``"bfloat16"``).
        head_dim: d.
        strides: the (B, H, N, d) strides, in elements, of each of q, k, v (or of the tensors
            ``names`` lists).
        data_ptrs: their data pointers.
        names: the tensors' names in the reasons (the backward adds ``grad_out``).

    TMA needs the innermost (d) dimension contiguous and the base address and every other stride
    16-byte aligned (:func:`tma_problem`); the caller must fall back (e.g. to the portable kernel, or
    a contiguous copy) when that does not hold. The strides of every tensor are checked before any
    base address.
    """
    ok, why = device_supported(triton_version, None if capability is None else tuple(capability), dtype, head_dim)
    if not ok:
        return ok, why
    for which, tensor_strides in zip(names, strides):
        why = tma_problem(tuple(tensor_strides))
        if why:
            return False, f"{which}: {why}"
    for which, ptr in zip(names, data_ptrs):
        if ptr % TMA_ALIGN:
            return False, f"{which}: {_UNALIGNED_BASE}"
    return True, ""


def takes_hopper_forward(triton_version: str, capability: tuple[int, int] | None, dtype, head_dim: int, n_k: int,
                         dropout_p: float, sparse_tile: tuple[int, int] | None, tensors: Sequence,
                         enabled: bool = True) -> bool:
    """Does an eager attention forward run the Hopper ping-pong kernel rather than the portable one?

    Yes when the switch is on (``enabled``: :func:`kernels.use_hopper_forward`), the call has no
    dropout, is dense (``sparse_tile`` None) or block-sparse with a plan made for the Hopper
    forward's tile (``sparse_tile``, the (query rows, keys) of the plan's forward tile, equal to
    :data:`FORWARD_TILE`: the index lists the kernel walks), the kernel is faster at this head dim
    and key count (dense, :data:`PINGPONG_MIN_KEYS`: d = 128 at any N_k, d = 64 from N_k = 2048;
    block-sparse, :data:`SPARSE_PINGPONG_MIN_KEYS`: d = 128) and
    :func:`supported` accepts it. ``capability``: the CUDA device's compute capability, ``None``
    for a tensor that is not on CUDA. ``tensors``: q, k, v and the output, (B, H, N, d), anything
    with ``stride()`` and ``data_ptr()``; read only when the cheaper conditions hold. A tensor with
    a zero (broadcast) stride stays on the portable kernel: TMA descriptors are not verified with
    such strides.
    """
    if not enabled or capability is None or dropout_p != 0.0:
        return False
    if sparse_tile is not None and tuple(sparse_tile) != FORWARD_TILE:
        return False
    if n_k < (PINGPONG_MIN_KEYS if sparse_tile is None else SPARSE_PINGPONG_MIN_KEYS).get(head_dim, n_k + 1):
        return False
    if not device_supported(triton_version, capability, dtype, head_dim)[0]:
        return False
    for t in tensors:
        strides = t.stride()
        if 0 in strides or tma_problem(strides, t.data_ptr()):
            return False
    return True
