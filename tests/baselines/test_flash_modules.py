"""The modules around our Triton kernels: lazy import, layout options, the layout built once and sliced."""
import math
import sys
import types

import pytest
import torch

import baselines.flash as flash_modules
from baselines.flash import (
    BlockSparseFlashAttention,
    FlashAttention,
    import_kernels,
    sparse_layout_arguments,
)
from lra import attention as registry


# CPU (interpreter) here; on a CUDA machine the modules run the compiled kernels on the GPU
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def dense_reference(q, k, v, key_padding_mask=None, block_layout=None, block_size=None):
    """float64 masked softmax attention on the CPU."""
    q, k, v = (t.detach().double().cpu() for t in (q, k, v))
    key_padding_mask = key_padding_mask.cpu() if key_padding_mask is not None else None
    block_layout = block_layout.cpu() if block_layout is not None else None
    n = q.shape[2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(1, 1, n, n, dtype=torch.bool)
    if block_layout is not None:
        tokens = block_layout.repeat_interleave(block_size, -2).repeat_interleave(block_size, -1)[..., :n, :n]
        allowed = allowed & (tokens if tokens.dim() == 3 else tokens[None])[None]
    if key_padding_mask is not None:
        allowed = allowed & ~key_padding_mask[:, None, None, :]
    return torch.nan_to_num(torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)) @ v


def test_layout_arguments_fill_defaults_and_reject_inapplicable_options():
    assert sparse_layout_arguments("bigbird", seed=7) == {"window": 3, "num_random": 3, "num_global": 2, "seed": 7}
    assert sparse_layout_arguments("local", window=5) == {"window": 5}
    assert sparse_layout_arguments("longformer", num_global=2) == {"window": 3, "global_blocks": [0, 1]}
    assert sparse_layout_arguments("butterfly") == {"window": 1, "num_global": 0, "num_factors": None}
    with pytest.raises(ValueError, match="num_random do not apply to layout='local'"):
        sparse_layout_arguments("local", num_random=2)
    with pytest.raises(ValueError, match="unknown layout 'dense'"):
        sparse_layout_arguments("dense")


def test_broken_kernels_package_gives_clear_errors_and_registry_still_works(monkeypatch):
    real_import = flash_modules.importlib.import_module

    def failing_import(name, *args, **kwargs):
        if name == "kernels":
            raise SyntaxError("half-written kernel file")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(flash_modules.importlib, "import_module", failing_import)
    with pytest.raises(ImportError, match="`import kernels` failed: SyntaxError: half-written"):
        registry.build("flash")
    ok, reason = registry.can_run("flash_sparse", "cpu")
    assert not ok and "half-written" in reason
    assert registry.can_run("softmax", "cpu")[0]
    registry.build("softmax")


def test_flash_module_matches_reference_and_drops_out_only_in_training():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 40, 16, generator=gen).to(DEVICE) for _ in range(3))
    mask = torch.zeros(2, 40, dtype=torch.bool, device=DEVICE)
    mask[1, 23:] = True
    attention = FlashAttention(dropout=0.3).eval()
    out = attention(q, k, v, mask)
    torch.testing.assert_close(out.double().cpu(), dense_reference(q, k, v, mask), rtol=1e-4, atol=1e-4)
    torch.manual_seed(0)
    assert not torch.allclose(attention.train()(q, k, v, mask), out)


def test_sparse_layout_is_built_once_and_sliced_for_shorter_sequences():
    attention = BlockSparseFlashAttention(max_len=160, num_heads=2, layout="bigbird", block_size=16, seed=3).to(DEVICE)
    assert attention.layout.shape == (2, 10, 10)
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 100, 16, generator=gen).to(DEVICE) for _ in range(3))  # 7 blocks, last one partial
    sliced = attention.layout_for(100)
    assert torch.equal(sliced, attention.layout[:, :7, :7])
    expected = dense_reference(q, k, v, block_layout=sliced, block_size=16)
    torch.testing.assert_close(attention(q, k, v).double().cpu(), expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="sequence length 176 exceeds max_len=160"):
        attention.layout_for(176)


def test_sparse_bad_block_size_or_short_layout_fail_at_construction():
    with pytest.raises(ValueError, match="block_size"):
        BlockSparseFlashAttention(max_len=160, num_heads=2, layout="local", block_size=24)
    with pytest.raises(ValueError, match="cannot build layout='bigbird' for max_len=64"):
        BlockSparseFlashAttention(max_len=64, num_heads=2, layout="bigbird", block_size=16)


def test_triton_imported_before_the_interpreter_switch_is_reported_not_a_triton_trace(monkeypatch):
    """On CPU, Triton imported before TRITON_INTERPRET=1 has compiled (not interpreted) builtins, and
    the kernels fail inside Triton; can_run and the modules say what happened instead."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter switch only matters without CUDA")
    kernels = import_kernels()
    fake_standard = types.ModuleType("triton.language.standard")
    fake_standard.sum = object()  # what a JITFunction built without the interpreter looks like here
    monkeypatch.setitem(sys.modules, "triton.language.standard", fake_standard)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    ok, reason = registry.can_run("flash", "cpu")
    assert not ok and "imported before TRITON_INTERPRET=1" in reason
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(RuntimeError, match="flash attention on CPU: Triton was imported before"):
        FlashAttention()(q, q, q)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "set TRITON_INTERPRET=1" in flash_modules.triton_cpu_problem()
    monkeypatch.undo()
    assert flash_modules.triton_cpu_problem() is None and kernels is not None
