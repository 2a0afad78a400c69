"""Whether a call can take the Hopper Gluon kernels (forward :mod:`kernels.hopper_attention`, backward
:mod:`kernels.hopper_attention_bwd`), and whether an eager dense forward does
(:func:`takes_hopper_forward`).

Importable with any Triton (it imports neither Gluon nor torch), so that a caller or the offline
compile check can ask before importing the kernel module, whose Gluon API differs between Triton
releases. Each check of what a call can take returns ``(True, "")`` or ``(False, reason)``; the
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
# head dim -> least N_k at which the ping-pong forward beats the portable one: results/kernels/hopper_dispatch_h200.md
PINGPONG_MIN_KEYS = {128: 1, 64: 2048}


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
    16-byte aligned; the caller must fall back (e.g. to the portable kernel, or a contiguous copy)
    when that does not hold.
    """
    ok, why = triton_version_ok(triton_version)
    if not ok:
        return ok, why
    if capability is not None and tuple(capability) != (9, 0):
        return False, f"needs an sm_90 (Hopper) device for wgmma, got compute capability {tuple(capability)}"
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        return False, f"dtype {name}: only float16 and bfloat16"
    if head_dim not in HEAD_DIMS:
        return False, f"head_dim {head_dim}: only {', '.join(map(str, HEAD_DIMS))}"
    for which, tensor_strides in zip(names, strides):
        tensor_strides = tuple(tensor_strides)
        if tensor_strides[-1] != 1:
            return False, f"{which}: TMA needs the last dim contiguous, stride {tensor_strides[-1]}"
        if any(s * _ELEM_BYTES % TMA_ALIGN for s in tensor_strides[:-1]):
            return False, f"{which}: TMA needs 16-byte aligned strides, got {tensor_strides} (elements)"
    for which, ptr in zip(names, data_ptrs):
        if ptr % TMA_ALIGN:
            return False, f"{which}: TMA needs a 16-byte aligned base address"
    return True, ""


def takes_hopper_forward(triton_version: str, capability: tuple[int, int] | None, dtype, head_dim: int, n_k: int,
                         dropout_p: float, sparse: bool, strides: Iterable[Sequence[int]],
                         data_ptrs: Iterable[int], enabled: bool = True) -> bool:
    """Does an eager attention forward run the Hopper ping-pong kernel rather than the portable one?

    Yes when the switch is on (``enabled``: :func:`kernels.use_hopper_forward`), the call is dense
    (not ``sparse``) without dropout, the kernel is faster at this head dim and key count
    (:data:`PINGPONG_MIN_KEYS`: d = 128 at any N_k, d = 64 from N_k = 2048) and :func:`supported`
    accepts it. ``capability``: the CUDA device's compute capability, ``None`` for a tensor that is
    not on CUDA. ``strides`` and ``data_ptrs``: of q, k, v and the output (may be lazy iterables,
    read only when the cheaper conditions hold). A tensor with a zero (broadcast) stride stays on
    the portable kernel: TMA descriptors are not verified with such strides.
    """
    if not enabled or capability is None or sparse or dropout_p != 0.0:
        return False
    if n_k < PINGPONG_MIN_KEYS.get(head_dim, n_k + 1):
        return False
    strides = [tuple(s) for s in strides]
    if any(0 in s for s in strides):
        return False
    names = ("q", "k", "v", "out")  # supported() checks as many tensors as it has names
    return supported(triton_version, capability, dtype, head_dim, strides, data_ptrs, names)[0]
