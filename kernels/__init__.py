"""Triton FlashAttention kernels: dense and block-sparse, forward and backward; and the LayerNorm of
the LRA model (``kernels.layer_norm``).

    from kernels import flash_attention, block_sparse_flash_attention, layouts
    # packed (B, N, 3, H, d) input from a fused QKV projection, (B, N, H, d) output:
    from kernels import flash_attention_qkvpacked, block_sparse_flash_attention_qkvpacked

On CUDA the kernels are compiled by Triton. On CPU tensors they run through Triton's interpreter,
which must be switched on (``TRITON_INTERPRET=1``) before Triton is first imported. Importing this
package changes no global setting of torch or of the process; :func:`enable_inductor_static_launch`
(for torch.compile), :func:`use_hopper_forward` (``False`` keeps the eager forward off the Hopper
ping-pong kernel) and :func:`use_one_pass_backward` (``True``: calls without dropout take the
one-pass backward too) are the explicit, process-wide switches.
"""
from . import layouts
from .block_sparse import BlockSparseLayout, block_sparse_flash_attention, block_sparse_flash_attention_qkvpacked
from .dense import flash_attention, flash_attention_qkvpacked
from .dropout import dropout_keep_mask, effective_dropout_p, use_one_pass_backward
from .hopper_dispatch import use_hopper_forward
from .inductor import enable_inductor_static_launch
from .settings import kernel_settings

__all__ = ["BlockSparseLayout", "block_sparse_flash_attention", "block_sparse_flash_attention_qkvpacked",
           "dropout_keep_mask", "effective_dropout_p", "enable_inductor_static_launch", "flash_attention",
           "flash_attention_qkvpacked", "kernel_settings", "layouts", "use_hopper_forward", "use_one_pass_backward"]
