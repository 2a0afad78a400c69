"""kernels.packed_fast_path: repeat packed calls of one layout replay recorded plans over the packed
tensor, the output, the gradient and the work buffers instead of running the regular path.

On CUDA the recorded plans are native (kernels.plan_launcher; test_plan_launcher.py compares them
bitwise with the regular path on the GPU). Here, on CPU, the plans replay through Triton's
interpreter (test_launch_plans.py's stand-in launchers), and the rebased plan is a stand-in that
turns each (base, byte offset) of the mapping back into the view it stands for: so the recording,
the base mapping, the fast path's argument order, its seed draw and the fused backward's dQ are all
checked by real kernel runs against the regular path, bitwise.
"""
from __future__ import annotations

import pytest
import torch
from test_launch_plans import SMALL, _InterpretedLauncher, _packed

from kernels import (BlockSparseLayout, block_sparse_flash_attention_qkvpacked, flash_attention_qkvpacked, launch,
                     layouts, ops, packed_fast_path, plan_launcher)
from kernels.tiles import cdiv, override


class _ViewReplay:
    """Stands in for a rebased native plan: rebuilds the regular plan's views from the bases."""

    def __init__(self, plan, mapping, metas):
        self.plan, self.mapping, self.metas = plan, mapping, metas

    def run(self, stream, bases):
        views = []
        for (j, offset), (shape, stride, dtype) in zip(self.mapping, self.metas):
            base = bases[j]
            assert base.dtype == dtype and offset % base.element_size() == 0
            views.append(torch.as_strided(base, shape, stride, base.storage_offset() + offset // base.element_size()))
        self.plan(*views)


def _rebased(plan, views, bases):
    mapping = plan_launcher.base_mapping(views, bases)
    if mapping is None:
        return None
    return _ViewReplay(plan, mapping, [(tuple(v.shape), v.stride(), v.dtype) for v in views])


@pytest.fixture
def fast(monkeypatch):
    """The fast path switched on over the interpreter; returns the entries by layout."""
    if torch.cuda.is_available():
        pytest.skip("replays through Triton's interpreter (CPU); on CUDA: test_plan_launcher.py")
    launchers: dict = {}
    monkeypatch.setattr(ops, "launcher", lambda kernel: launchers.setdefault(kernel, _InterpretedLauncher(kernel)))
    monkeypatch.setattr(ops, "plans_enabled", lambda: True)
    monkeypatch.setattr(ops, "_LAUNCH_PLANS", {})
    monkeypatch.setattr(launch, "current_stream", lambda: 0)
    monkeypatch.setattr(launch, "_hooks_installed", lambda: False)
    monkeypatch.setattr(launch.LaunchPlan, "rebased", _rebased)
    monkeypatch.setattr(packed_fast_path, "enabled", lambda: True)
    monkeypatch.setattr(packed_fast_path, "_on_current_cuda_device", lambda t: True)
    monkeypatch.setattr(packed_fast_path, "_ENTRIES", {})
    return packed_fast_path._ENTRIES


def _mask():
    mask = torch.zeros(2, 75, dtype=torch.bool)
    mask[1, 40:] = True
    mask[0, :] = True  # batch 0: every key padded (rows of zeros, no NaN)
    return mask


def _run(qkv, grad, **kwargs):
    qkv.grad = None
    torch.manual_seed(7)  # the dropout seed
    out = flash_attention_qkvpacked(qkv, **kwargs)
    out.backward(grad)
    return out.detach().clone(), qkv.grad.clone()


@pytest.mark.parametrize("bwd_form", ["fused", "split"])
@pytest.mark.parametrize("case", ["dropout+padding", "causal"])
def test_fast_calls_give_bitwise_the_results_of_regular_calls(fast, monkeypatch, case, bwd_form):
    monkeypatch.setattr(ops, "DROPOUT_BWD", bwd_form)
    kwargs = dict(dropout_p=0.1, key_padding_mask=_mask()) if case == "dropout+padding" else dict(causal=True)
    qkv = _packed()
    grad = torch.randn(2, 75, 2, 24).bfloat16()
    with override(SMALL):
        first = _run(qkv, grad, **kwargs)  # regular: binds the plans and records the entry
        (entry,) = fast.values()
        assert entry.fwd is not None and len(entry.bwd) == 1 and entry.forwards == entry.backwards == 0
        second = _run(qkv, grad, **kwargs)  # the fast path, both directions
        assert entry.forwards == 1 and entry.backwards == 1
        monkeypatch.setattr(packed_fast_path, "enabled", lambda: False)
        regular = _run(qkv, grad, **kwargs)
    for a, b, c in zip(first, second, regular):
        assert torch.equal(a, c) and torch.equal(b, c)
        assert not torch.isnan(b).any()


def test_a_new_gradient_layout_gets_its_backward_recorded_and_odd_calls_take_the_regular_path(fast):
    qkv = _packed()
    grad = torch.randn(2, 75, 2, 24).bfloat16()
    odd_grad = torch.randn(2, 2, 75, 24).bfloat16().transpose(1, 2)  # other strides
    with override(SMALL):
        _run(qkv, grad)
        (entry,) = fast.values()
        fast_out = _run(qkv, odd_grad)  # fast forward; regular backward, which records this layout
        assert entry.forwards == 1 and entry.backwards == 0 and len(entry.bwd) == 2
        again = _run(qkv, odd_grad)
        assert entry.forwards == 2 and entry.backwards == 1
        for a, b in zip(fast_out, again):
            assert torch.equal(a, b)
        # a misaligned packed tensor (same shape and strides): the regular path, no new entry
        storage = torch.randn(qkv.numel() + 1).bfloat16()
        shifted = storage[1:].view(qkv.shape).requires_grad_()
        _run(shifted, grad)
        assert entry.forwards == 2 and len(fast) == 1
        # arguments the regular path refuses are refused even when their value matches an entry
        with pytest.raises(TypeError, match="causal must be a bool"):
            flash_attention_qkvpacked(qkv, causal=0)
        with pytest.raises(TypeError, match="dropout_p must be a float"):
            flash_attention_qkvpacked(qkv, dropout_p=False)
    assert entry.forwards == 2


def test_a_layout_whose_plans_cannot_be_rebased_keeps_the_regular_path(fast, monkeypatch):
    monkeypatch.setattr(launch.LaunchPlan, "rebased", lambda self, views, bases: None)
    qkv = _packed()
    grad = torch.randn(2, 75, 2, 24).bfloat16()
    with override(SMALL):
        _run(qkv, grad)
        (entry,) = fast.values()  # remembered as unfit, so it is not recorded again
        assert entry.recorded and entry.fwd is None
        _run(qkv, grad)
    assert entry.forwards == 0 and len(fast) == 1


def test_tile_changes_make_a_new_entry(fast):
    qkv = _packed()
    grad = torch.randn(2, 75, 2, 24).bfloat16()
    with override(SMALL):
        _run(qkv, grad)
    with override(SMALL):  # the same tiles, but select() may have changed: a new generation, a new entry
        _run(qkv, grad)
    assert len(fast) == 2 and all(e.forwards == 0 for e in fast.values())


@pytest.mark.parametrize("form", ["tensor", "compressed"])
def test_block_sparse_fast_calls_give_bitwise_the_results_of_regular_calls(fast, monkeypatch, form):
    monkeypatch.setattr(ops, "DROPOUT_BWD", "fused")
    qkv = _packed()
    grad = torch.randn(2, 75, 2, 24).bfloat16()
    dense = layouts.bigbird(cdiv(75, 32), num_global=1, window=1, num_random=1, seed=0)
    layout = dense if form == "tensor" else BlockSparseLayout.from_dense(dense, 32)

    def run():
        qkv.grad = None
        torch.manual_seed(7)
        out = block_sparse_flash_attention_qkvpacked(qkv, layout, block_size=32, key_padding_mask=_mask(),
                                                     dropout_p=0.1)
        out.backward(grad)
        return out.detach().clone(), qkv.grad.clone()

    with override(SMALL):
        first = run()
        (entry,) = fast.values()
        assert len(entry.index) >= 1 and entry.fwd is not None and len(entry.bwd) == 1
        second = run()
        assert entry.forwards == 1 and entry.backwards == 1
        if form == "tensor":  # an in-place change of the layout tensor: its version moves, a new entry
            saved = dense.clone()
            dense[1] = False
            dense[1, 1] = True  # query block 1 (unpadded keys in batch 1) now sees only its own block
            changed = run()
            assert len(fast) == 2 and entry.forwards == 1
            dense.copy_(saved)
        monkeypatch.setattr(packed_fast_path, "enabled", lambda: False)
        regular = run()
    for a, b, c in zip(first, second, regular):
        assert torch.equal(a, c) and torch.equal(b, c)
    if form == "tensor":
        assert not torch.equal(changed[0], first[0])


def test_a_recording_call_whose_tensors_share_a_storage_records_no_plan(fast):
    """A gradient that is a view of the output (out.backward(out)): the backward plan is not recorded
    from it (later calls' gradients need not alias the output); a later ordinary call records it."""
    qkv = _packed()
    grad = torch.randn(2, 75, 2, 24).bfloat16()
    with override(SMALL):
        qkv.grad = None
        out = flash_attention_qkvpacked(qkv)
        out.backward(out.detach())  # the gradient shares the output's storage
        (entry,) = fast.values()
        assert entry.fwd is not None and entry.bwd == {}
        aliased = qkv.grad.clone()
        _run(qkv, grad)  # fast forward, regular backward: records
        assert len(entry.bwd) == 1
        qkv.grad = None
        out = flash_attention_qkvpacked(qkv)  # fast both ways, the gradient aliasing the output again
        out.backward(out.detach())
        assert entry.backwards == 1
    assert torch.equal(qkv.grad, aliased)


def test_a_backward_form_switched_after_the_forward_is_neither_replayed_nor_recorded(fast, monkeypatch):
    """torch.use_deterministic_algorithms(True) between a fast forward and its backward: the split
    backward runs the regular way, and its plan is not filed under the entry's (fused) form."""
    monkeypatch.setattr(ops, "DROPOUT_BWD", "fused")
    qkv = _packed()
    grad = torch.randn(2, 75, 2, 24).bfloat16()
    with override(SMALL):
        _run(qkv, grad, dropout_p=0.1)  # records (fused form)
        (entry,) = fast.values()
        bwd_plans = dict(entry.bwd)
        qkv.grad = None
        torch.manual_seed(7)
        out = flash_attention_qkvpacked(qkv, dropout_p=0.1)  # fast forward
        deterministic = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            out.backward(grad)  # the split form now
        finally:
            torch.use_deterministic_algorithms(deterministic)
        assert entry.forwards == 1 and entry.backwards == 0 and entry.bwd == bwd_plans
        switched = qkv.grad.clone()
        monkeypatch.setattr(packed_fast_path, "enabled", lambda: False)
        torch.use_deterministic_algorithms(True)
        try:
            _, regular = _run(qkv, grad, dropout_p=0.1)
        finally:
            torch.use_deterministic_algorithms(deterministic)
    assert torch.equal(switched, regular)
