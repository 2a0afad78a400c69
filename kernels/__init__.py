"""Triton FlashAttention kernels: dense and block-sparse, forward and backward; and the LayerNorm of
the LRA model (``kernels.layer_norm``).

    from kernels import flash_attention, block_sparse_flash_attention, layouts
    # packed (B, N, 3, H, d) input from a fused QKV projection, (B, N, H, d) output:
    from kernels import flash_attention_qkvpacked, block_sparse_flash_attention_qkvpacked

Without CUDA, importing this package sets ``TRITON_INTERPRET=1`` (unless already set) before
Triton is imported, so the same kernels run on CPU tensors through Triton's interpreter.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from . import layouts  # noqa: E402
from .block_sparse import BlockSparseLayout, block_sparse_flash_attention, block_sparse_flash_attention_qkvpacked  # noqa: E402,E501
from .dense import flash_attention, flash_attention_qkvpacked  # noqa: E402
from .dropout import dropout_keep_mask, effective_dropout_p  # noqa: E402

__all__ = ["BlockSparseLayout", "block_sparse_flash_attention", "block_sparse_flash_attention_qkvpacked",
           "dropout_keep_mask", "effective_dropout_p", "flash_attention", "flash_attention_qkvpacked", "layouts"]
