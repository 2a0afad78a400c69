"""Attention modules compared by the harness, in plain PyTorch (plus thin wrappers around `kernels`).

Every module has `forward(q, k, v, key_padding_mask=None) -> (B, H, N, d)` with q/k/v (B, H, N, d)
and a bool (B, N) mask, True = padding. Build them by name through `lra.attention.build`.
"""
import os

import torch

# Without CUDA, Triton (our kernels) runs only through its interpreter, and
# TRITON_INTERPRET must be set before anything imports Triton. The modules below import torch._dynamo
# (for `torch.compiler.disable`), which imports Triton, so the variable is set here, first.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from baselines.bigbird import BigBirdAttention  # noqa: E402
from baselines.flash import BlockSparseFlashAttention, FlashAttention  # noqa: E402
from baselines.linformer import LinformerAttention, SequenceProjection  # noqa: E402
from baselines.performer import PerformerAttention  # noqa: E402
from baselines.sdpa import SdpaAttention  # noqa: E402
from baselines.softmax import SoftmaxAttention  # noqa: E402

__all__ = [
    "BigBirdAttention",
    "BlockSparseFlashAttention",
    "FlashAttention",
    "LinformerAttention",
    "PerformerAttention",
    "SdpaAttention",
    "SequenceProjection",
    "SoftmaxAttention",
]
