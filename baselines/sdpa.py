"""PyTorch's fused `scaled_dot_product_attention` with an explicit back-end.

`backend` picks the implementation through `torch.nn.attention.sdpa_kernel`:
- `auto`: PyTorch chooses among the fused kernels and falls back to `math`.
- `flash`: FlashAttention-2 on CUDA; on CPU, PyTorch's own CPU flash kernel. The CUDA flash kernel
  takes no attention mask, so a batch that contains padding raises a clear error (use `auto`,
  `efficient` or `cudnn`, or our `flash` attention, which does take key padding).
- `cudnn`, `efficient`: CUDA only.
- `math`: the reference composite implementation (materialises N x N, any device).

Key padding becomes SDPA's boolean `attn_mask` of shape (B, 1, 1, N) with SDPA's convention
(True = *keep*, the opposite of ours). Batch rows that are all padding are unmasked before the call
and zeroed after it, so no back-end produces NaN there.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from baselines.padding import safe_key_padding, validate_qkv, zero_empty_rows

SdpaBackendName = Literal["auto", "flash", "cudnn", "efficient", "math"]

SDPA_BACKENDS: dict[str, SDPBackend | None] = {
    "auto": None,
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}

# Back-ends that only exist on CUDA devices.
CUDA_ONLY_BACKENDS = ("cudnn", "efficient")


def sdpa_backend_support(backend: str, device: str | torch.device, dropout: float = 0.0) -> tuple[bool, str]:
    """(can run, reason) for one SDPA back-end on one device type (with attention dropout
    `dropout` in training), without running anything."""
    if backend not in SDPA_BACKENDS:
        return False, f"unknown SDPA backend {backend!r}; valid: {', '.join(SDPA_BACKENDS)}"
    device_type = torch.device(device).type
    if device_type == "cuda" and not torch.cuda.is_available():
        return False, "CUDA was requested but torch.cuda.is_available() is False"
    if backend in CUDA_ONLY_BACKENDS and device_type != "cuda":
        return False, f"SDPA backend {backend!r} needs a CUDA device (got {device_type})"
    if backend == "flash":
        if device_type == "cuda":
            return True, "FlashAttention-2 via SDPA; takes no attention mask, so padded batches raise"
        if dropout > 0:
            return False, (f"sdpa with backend=flash runs on the CPU only without attention dropout (PyTorch's "
                           f"CPU flash kernel has none; dropout={dropout}): set it to 0 or use backend=math or auto")
        return True, "PyTorch's CPU flash kernel (accepts key padding)"
    if backend == "cudnn":
        if not torch.backends.cudnn.is_available():
            return False, "SDPA backend 'cudnn' needs cuDNN, which this PyTorch build cannot load"
        return True, "cuDNN attention via SDPA"
    if backend == "auto":
        return True, "PyTorch picks the fastest eligible back-end"
    return True, f"SDPA {backend} back-end"


class SdpaAttention(nn.Module):
    """`F.scaled_dot_product_attention` pinned to one back-end (or `auto`)."""

    def __init__(self, backend: SdpaBackendName = "auto", dropout: float = 0.0):
        super().__init__()
        if backend not in SDPA_BACKENDS:
            raise ValueError(f"sdpa: unknown backend {backend!r}; valid: {', '.join(SDPA_BACKENDS)}")
        self.backend = backend
        self.dropout = float(dropout)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        validate_qkv("sdpa attention", q, k, v, key_padding_mask)
        attn_mask = None
        empty = None
        if key_padding_mask is not None:
            if self.backend == "flash" and q.is_cuda:
                if bool(key_padding_mask.any()):
                    raise ValueError(
                        "sdpa backend='flash' (FlashAttention-2 on CUDA) takes no attention mask, but this batch "
                        "has key padding; use backend='auto', 'efficient' or 'cudnn', or the 'flash' attention "
                        "(our kernel), which supports key padding"
                    )
            else:
                padding, empty = safe_key_padding(key_padding_mask)
                attn_mask = (~padding)[:, None, None, :]  # SDPA: True = take part in attention
        dropout_p = self.dropout if self.training else 0.0
        backend = SDPA_BACKENDS[self.backend]
        try:
            if backend is None:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
            else:
                with sdpa_kernel([backend]):
                    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
        except RuntimeError as err:
            if "No viable backend" not in str(err) and "No available kernel" not in str(err):
                raise
            raise ValueError(
                f"sdpa backend={self.backend!r} cannot run this call (device={q.device.type}, dtype={q.dtype}, "
                f"head_dim={q.shape[-1]}, mask={'yes' if attn_mask is not None else 'no'}, dropout={dropout_p}); "
                f"PyTorch's warnings above give the reason. Try backend='auto'."
            ) from err
        return zero_empty_rows(out, empty)

    def extra_repr(self) -> str:
        return f"backend={self.backend!r}, dropout={self.dropout}"
