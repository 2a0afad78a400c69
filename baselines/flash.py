"""Attention modules around our Triton kernels (`kernels.flash_attention`,
`kernels.block_sparse_flash_attention`), so that the registry can hand them out like any baseline.

`kernels` is imported when a module is *built*, not when this file is imported: the registry and the
baselines stay importable while the kernels are missing or broken, and `lra.attention.can_run`
reports why. Without CUDA, `import baselines` (like `import lra`) switches Triton to its interpreter
(TRITON_INTERPRET=1) unless it is set, so both run on CPU tensors too: correct, but slow; meant for tests.
"""
from __future__ import annotations

import importlib
import math
import os
import sys
from types import ModuleType
from typing import Literal

import torch
from torch import Tensor, nn

from baselines.padding import validate_qkv

SparseLayoutName = Literal["bigbird", "local", "longformer", "butterfly"]
SPARSE_LAYOUTS = ("bigbird", "local", "longformer", "butterfly")


class KernelsShadowedError(ImportError):
    """`import kernels` found some other folder named `kernels` (a namespace package), not ours."""


def import_kernels() -> ModuleType:
    """`import kernels`, turning any failure into an ImportError that says what to do."""
    try:
        kernels = importlib.import_module("kernels")
    except Exception as err:  # a half-written kernels package can fail with anything
        raise ImportError(
            f"the 'flash' and 'flash_sparse' attentions need our Triton kernels, but `import kernels` failed: "
            f"{type(err).__name__}: {err}"
        ) from err
    if getattr(kernels, "__file__", None) is None:
        locations = list(getattr(kernels, "__path__", []))
        raise KernelsShadowedError(
            f"`import kernels` found a directory without __init__.py ({', '.join(locations)}) instead of our "
            f"kernels package: that folder shadows it on sys.path (under pytest: tests/kernels; run pytest with "
            f"the repository root on sys.path, e.g. pytest's `pythonpath = [\".\"]` setting)"
        )
    return kernels


def triton_cpu_problem() -> str | None:
    """Why our Triton kernels cannot run on CPU tensors in this process, or None if they can.

    On CPU they run through Triton's interpreter, which must be switched on (TRITON_INTERPRET=1)
    before Triton is first imported: Triton's own library functions are built at import time.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        return "Triton runs on CPU only through its interpreter: set TRITON_INTERPRET=1 before Triton is imported"
    standard = sys.modules.get("triton.language.standard")
    if standard is None:
        return None
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # a Triton without this class: nothing to check
        return None
    builtin = getattr(standard, "sum", None)
    if builtin is not None and not isinstance(builtin, InterpretedFunction):
        return (
            "Triton was imported before TRITON_INTERPRET=1 was set (e.g. by Lightning or torch.compile), so "
            "its kernels cannot run on CPU in this process; export TRITON_INTERPRET=1 before starting Python"
        )
    return None


def _check_device(name: str, q: Tensor) -> None:
    if q.device.type == "cpu":
        problem = triton_cpu_problem()
        if problem is not None:
            raise RuntimeError(f"{name} on CPU: {problem}")


def _kernel_function(name: str):
    kernels = import_kernels()
    fn = getattr(kernels, name, None)
    if fn is None:
        raise ImportError(f"`kernels` imported but has no `{name}` (is the kernel package complete?)")
    return fn


class FlashAttention(nn.Module):
    """Dense exact attention through our Triton FlashAttention kernel."""

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self._attention = _kernel_function("flash_attention")
        self._attention_packed = _kernel_function("flash_attention_qkvpacked")
        self.dropout = float(dropout)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        validate_qkv("flash attention", q, k, v, key_padding_mask)
        _check_device("flash attention", q)
        dropout_p = self.dropout if self.training else 0.0
        return self._attention(q, k, v, key_padding_mask=key_padding_mask, dropout_p=dropout_p)

    def forward_packed(self, qkv: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """Self-attention of a packed (B, N, 3, H, d) QKV tensor -> (B, N, H, d); see
        :func:`kernels.flash_attention_qkvpacked` (the model prefers this form when a core has it)."""
        _check_device("flash attention", qkv)
        dropout_p = self.dropout if self.training else 0.0
        return self._attention_packed(qkv, key_padding_mask=key_padding_mask, dropout_p=dropout_p)

    def extra_repr(self) -> str:
        return f"dropout={self.dropout}"


def sparse_layout_arguments(
    layout: str,
    *,
    window: int | None = None,
    num_random: int | None = None,
    num_global: int | None = None,
    num_factors: int | None = None,
    seed: int = 0,
) -> dict:
    """Keyword arguments of the `kernels.layouts` builder for `layout`, with its defaults filled in.

    Options that do not apply to `layout` raise ValueError (rather than being silently ignored).
    """
    if layout not in SPARSE_LAYOUTS:
        raise ValueError(f"flash_sparse: unknown layout {layout!r}; valid: {', '.join(SPARSE_LAYOUTS)}")
    given = {"window": window, "num_random": num_random, "num_global": num_global, "num_factors": num_factors}
    accepted = {
        "bigbird": ("window", "num_random", "num_global"),
        "local": ("window",),
        "longformer": ("window", "num_global"),
        "butterfly": ("window", "num_global", "num_factors"),
    }[layout]
    wrong = [name for name, value in given.items() if value is not None and name not in accepted]
    if wrong:
        raise ValueError(
            f"flash_sparse: option(s) {', '.join(wrong)} do not apply to layout={layout!r} "
            f"(it takes: {', '.join(accepted)})"
        )
    if layout == "bigbird":
        return {
            "window": 3 if window is None else window,
            "num_random": 3 if num_random is None else num_random,
            "num_global": 2 if num_global is None else num_global,
            "seed": seed,
        }
    if layout == "local":
        return {"window": 3 if window is None else window}
    if layout == "longformer":
        # Longformer's global tokens ([CLS] and friends) sit at the start: the first num_global blocks.
        globals_ = 1 if num_global is None else num_global
        return {"window": 3 if window is None else window, "global_blocks": list(range(globals_))}
    return {
        "window": 1 if window is None else window,
        "num_global": 0 if num_global is None else num_global,
        "num_factors": num_factors,
    }


class BlockSparseFlashAttention(nn.Module):
    """Our block-sparse Triton kernel with a layout from `kernels.layouts`.

    The layout is built once, for the block count of `max_len`, and sliced to the block count of
    each call's N (its top-left corner). For `local` and `butterfly` that corner is the layout of
    the shorter sequence, and `longformer` keeps its leading global blocks; for `bigbird` the trailing
    global blocks (the last floor(num_global / 2)) of the max_len layout are cut off for shorter
    sequences (LRA batches are padded to max_len, so N = max_len there).
    N > max_len raises.
    """

    def __init__(
        self,
        max_len: int,
        num_heads: int,
        layout: SparseLayoutName = "bigbird",
        block_size: int = 128,
        dropout: float = 0.0,
        **layout_options,
    ):
        super().__init__()
        if max_len is None or max_len < 1:
            raise ValueError(f"flash_sparse needs max_len >= 1 to build its layout once, got {max_len}")
        if block_size < 1:
            raise ValueError(f"flash_sparse: block_size must be >= 1, got {block_size}")
        self._attention = _kernel_function("block_sparse_flash_attention")
        self._attention_packed = _kernel_function("block_sparse_flash_attention_qkvpacked")
        kernels = import_kernels()
        self._check_packed = kernels.validation.check_packed_qkv
        self.layout_name = layout
        self.block_size = int(block_size)
        self.max_len = int(max_len)
        self.dropout = float(dropout)
        self.max_blocks = math.ceil(max_len / block_size)
        builder = getattr(kernels.layouts, layout)
        kwargs = sparse_layout_arguments(layout, **layout_options)
        if layout == "bigbird":
            kwargs["num_heads"] = num_heads  # an independent random draw per head
        try:
            built = builder(self.max_blocks, **kwargs)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"flash_sparse: cannot build layout={layout!r} for max_len={max_len} "
                f"({self.max_blocks} blocks of {block_size}): {err}"
            ) from err
        # Rebuilt from the options at construction, so not part of checkpoints.
        self.register_buffer("layout", built.to(torch.bool), persistent=False)
        # The kernel's compressed form of the layout (tile lists), built once here (which also validates
        # block_size early) and again whenever the module moves (`_apply`), on the buffer's device:
        # forward only looks it up, so torch.compile traces no layout building (no graph break).
        self._compressed_type = kernels.BlockSparseLayout
        self._compressed: list = []  # [i]: the layout for sequences of i + 1 blocks
        try:
            self._compress()
        except (TypeError, ValueError) as err:
            raise ValueError(f"flash_sparse: {err}") from err

    def _compress(self) -> None:
        full = self._compressed_type.from_dense(self.layout, self.block_size)
        # corners are views of `full` sharing its plan cache, so one per block count costs no memory
        self._compressed = [full.corner(n, n) for n in range(1, self.max_blocks + 1)]

    def _apply(self, fn, *args, **kwargs):
        module = super()._apply(fn, *args, **kwargs)
        self._compress()  # the layout buffer may have moved to another device
        return module

    def layout_for(self, seq_len: int) -> Tensor:
        """The bool block layout used for a sequence of `seq_len` tokens."""
        self._check_len(seq_len)
        n_blocks = math.ceil(seq_len / self.block_size)
        return self.layout[..., :n_blocks, :n_blocks]

    def _check_len(self, seq_len: int) -> None:
        if seq_len > self.max_len:
            raise ValueError(
                f"flash_sparse: sequence length {seq_len} exceeds max_len={self.max_len} the layout was built "
                f"for; rebuild with max_len >= {seq_len}"
            )

    def _kernel_layout(self, seq_len: int):
        """What the kernel gets for `seq_len`: the compressed layout's top-left corner."""
        self._check_len(seq_len)
        return self._compressed[math.ceil(seq_len / self.block_size) - 1]

    def forward(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        validate_qkv("flash_sparse attention", q, k, v, key_padding_mask, same_length=True)
        _check_device("flash_sparse attention", q)
        layout = self._kernel_layout(q.shape[2])
        dropout_p = self.dropout if self.training else 0.0
        return self._attention(
            q, k, v, layout, block_size=self.block_size, key_padding_mask=key_padding_mask, dropout_p=dropout_p
        )

    def forward_packed(self, qkv: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """Self-attention of a packed (B, N, 3, H, d) QKV tensor -> (B, N, H, d); see
        :func:`kernels.block_sparse_flash_attention_qkvpacked`."""
        self._check_packed(qkv)  # its N picks the layout below
        _check_device("flash_sparse attention", qkv)
        layout = self._kernel_layout(qkv.shape[1])
        dropout_p = self.dropout if self.training else 0.0
        return self._attention_packed(qkv, layout, block_size=self.block_size, key_padding_mask=key_padding_mask,
                                      dropout_p=dropout_p)

    def extra_repr(self) -> str:
        return (
            f"layout={self.layout_name!r}, block_size={self.block_size}, max_len={self.max_len}, "
            f"shape={tuple(self.layout.shape)}, dropout={self.dropout}"
        )
