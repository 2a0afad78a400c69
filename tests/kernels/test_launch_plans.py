"""Launch plans (kernels.ops): eager calls replay the bound launches of an earlier call with the same
input layout instead of rebuilding every kernel argument.

On compiled kernels a plan replays ``CompiledKernel.run`` (``kernels.launch.BoundLaunch``). Here the
replay goes through Triton's interpreter instead (a stand-in launcher whose bound launches call the
kernel with the new tensors and the bound scalars), so the plans' keys and the order of the replayed
tensors are checked by real kernel runs: a replayed call must give bitwise the results of a call
that builds its arguments, for every input form the ops take, and layouts that differ in anything
the kernels read must not share a plan.
"""
from __future__ import annotations

import pytest
import torch
from kernel_helpers import DEVICE, cuda_packed_case, packed_call

from kernels import (block_sparse_flash_attention_qkvpacked, flash_attention, flash_attention_qkvpacked, launch,
                     layouts, ops)
from kernels.tiles import LOADS_TMA, PassTiles, Tiles, override

SMALL = Tiles(PassTiles(32, 32), PassTiles(16, 32), PassTiles(32, 32))


class _InterpretedLauncher(launch.CachedLauncher):
    """Binds like CachedLauncher.bind, but its bound launches (compiled=None) replay through the
    interpreted kernel itself."""

    def bind(self, grid, args, kwargs):
        self.kernel[grid](*args, **kwargs)
        self.misses += 1
        n = launch.leading_tensors(args)
        if n is None or launch.signature(args, kwargs) is None:
            return None
        return launch.BoundLaunch(self, None, grid, n, args[n:], kwargs, ())


@pytest.fixture
def plans(monkeypatch):
    if DEVICE.type != "cpu":
        pytest.skip("replays through Triton's interpreter (CPU)")
    """Launch plans switched on over the interpreter; returns the stand-in launchers by kernel."""
    launchers: dict = {}

    def stand_in(kernel):
        return launchers.setdefault(kernel, _InterpretedLauncher(kernel))

    monkeypatch.setattr(ops, "launcher", stand_in)
    monkeypatch.setattr(ops, "plans_enabled", lambda: True)
    monkeypatch.setattr(ops, "_LAUNCH_PLANS", {})
    return launchers


def _replays(launchers) -> int:
    return sum(cl.hits for cl in launchers.values())


def _packed(batch=2, n=75, heads=2, d=24, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, n, 3, heads, d, generator=g).to(dtype).requires_grad_()


def _run_packed(qkv, grad, **kwargs):
    qkv.grad = None
    torch.manual_seed(7)  # the dropout seed
    with override(SMALL):
        out = flash_attention_qkvpacked(qkv, **kwargs)
    out.backward(grad)
    return out.detach().clone(), qkv.grad.clone()


CASES = {
    "plain": dict(),
    "dropout": dict(dropout_p=0.2),
    "causal+padding": dict(causal=True, key_padding_mask="pad"),
    "dropout+padding": dict(dropout_p=0.1, key_padding_mask="pad"),
}


@pytest.mark.parametrize("bwd_form", ["fused", "split"])
@pytest.mark.parametrize("case", list(CASES))
def test_replayed_packed_calls_equal_built_calls(plans, monkeypatch, case, bwd_form):
    monkeypatch.setattr(ops, "DROPOUT_BWD", bwd_form)
    kwargs = dict(CASES[case])
    qkv = _packed()
    if kwargs.get("key_padding_mask") == "pad":
        mask = torch.zeros(2, 75, dtype=torch.bool)
        mask[1, 40:] = True
        mask[0, :] = True  # batch 0: every key padded (rows of zeros, no NaN)
        kwargs["key_padding_mask"] = mask
    grad = torch.randn(2, 75, 2, 24).bfloat16()
    first = _run_packed(qkv, grad, **kwargs)  # builds its arguments and binds the plans
    assert _replays(plans) == 0 and len(ops._LAUNCH_PLANS) == 2  # one forward and one backward plan
    assert all(ops._LAUNCH_PLANS.values())
    second = _run_packed(qkv, grad, **kwargs)  # replays them
    assert _replays(plans) == (2 if bwd_form == "fused" and "dropout_p" in kwargs else 3) + 1
    monkeypatch.setattr(ops, "plans_enabled", lambda: False)
    built = _run_packed(qkv, grad, **kwargs)
    for a, b, c in zip(first, second, built):
        assert torch.equal(a, c) and torch.equal(b, c)
        assert not torch.isnan(b).any()


def test_replayed_block_sparse_calls_equal_built_calls(plans, monkeypatch):
    qkv = _packed(n=96, heads=2, d=16, dtype=torch.float16)
    layout = layouts.local(96 // 32, window=3)
    grad = torch.randn(2, 96, 2, 16).half()

    def run():
        qkv.grad = None
        torch.manual_seed(3)
        with override(SMALL):
            out = block_sparse_flash_attention_qkvpacked(qkv, layout, block_size=32, dropout_p=0.1)
        out.backward(grad)
        return out.detach().clone(), qkv.grad.clone()

    first, second = run(), run()
    assert _replays(plans) > 0
    monkeypatch.setattr(ops, "plans_enabled", lambda: False)
    built = run()
    for a, b, c in zip(first, second, built):
        assert torch.equal(a, c) and torch.equal(b, c)


def test_q_k_v_form_with_lse_gradient_replays_and_matches(plans, monkeypatch):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, n, 32, generator=g).requires_grad_() for n in (40, 70, 70))

    def run():
        for t in (q, k, v):
            t.grad = None
        with override(SMALL):
            out, lse = flash_attention(q, k, v, return_lse=True)  # N_q != N_k, float32
        (out.square().sum() + lse.sum()).backward()
        return out.detach().clone(), lse.detach().clone(), q.grad.clone(), k.grad.clone(), v.grad.clone()

    first, second = run(), run()
    assert _replays(plans) == 3 + 1
    monkeypatch.setattr(ops, "plans_enabled", lambda: False)
    built = run()
    for a, b, c in zip(first, second, built):
        assert torch.equal(a, c) and torch.equal(b, c)


def test_layouts_that_differ_get_their_own_plans(plans):
    qkv = _packed(n=64, d=16)
    with override(SMALL):
        flash_attention_qkvpacked(qkv)
        assert len(ops._LAUNCH_PLANS) == 1
        flash_attention_qkvpacked(qkv)  # same layout: replayed
        assert len(ops._LAUNCH_PLANS) == 1 and _replays(plans) == 1
        flash_attention_qkvpacked(qkv, causal=True)
        flash_attention_qkvpacked(qkv, softmax_scale=0.5)
        flash_attention_qkvpacked(_packed(n=63, d=16))  # another length
        flash_attention_qkvpacked(qkv.detach().contiguous().transpose(0, 1).contiguous().transpose(0, 1))  # strides
        flash_attention_qkvpacked(qkv.half())  # dtype
        flash_attention_qkvpacked(qkv, key_padding_mask=torch.zeros(2, 64, dtype=torch.bool))
    assert len(ops._LAUNCH_PLANS) == 7 and _replays(plans) == 1


def test_misaligned_inputs_are_never_planned(plans):
    base = torch.randn(2 * 64 * 3 * 2 * 16 + 1).bfloat16()
    qkv = base[1:].view(2, 64, 3, 2, 16)  # 2-byte offset: not 16-byte aligned
    assert qkv.data_ptr() % 16
    with override(SMALL):
        out = flash_attention_qkvpacked(qkv)
        again = flash_attention_qkvpacked(qkv)
        assert not ops._LAUNCH_PLANS and _replays(plans) == 0
        plain = flash_attention_qkvpacked(qkv.clone())  # aligned: planned
    assert len(ops._LAUNCH_PLANS) == 1
    assert torch.equal(out, again) and torch.equal(out, plain)


def test_tma_launches_are_marked_unplannable_and_keep_working(plans):
    tma = Tiles(*(PassTiles(m, n, loads=LOADS_TMA) for m, n in ((32, 32), (16, 32), (32, 32))))
    qkv = _packed(n=64, d=32)
    with override(tma):
        out1 = flash_attention_qkvpacked(qkv)
        out2 = flash_attention_qkvpacked(qkv)
    assert list(ops._LAUNCH_PLANS.values()) == [False]  # the forward: descriptors cannot be replayed
    assert _replays(plans) == 0 and torch.equal(out1, out2)


def test_bound_launch_replays_the_compiled_kernel_with_new_tensors(monkeypatch):
    from test_launch import _Jit

    monkeypatch.setattr(launch, "current_stream", lambda: 7)
    monkeypatch.setattr(launch, "_hooks_installed", lambda: False)
    jit = _Jit()
    cl = launch.CachedLauncher(jit)
    x, y = torch.zeros(8), torch.zeros(4)
    bound = cl.bind((3, 2), (x, 4, 0.5), {"BLOCK": 32})
    assert bound is not None and len(jit.slow_calls) == 1  # launched once while binding
    compiled = bound(y)
    (args,) = compiled.runs
    assert args[:9] == (3, 2, 1, 7, "fn-handle", ("meta",), None, None, None)
    assert args[9] is y and args[10:] == (4, 0.5, 32, False)  # new tensor, bound scalars, constexprs
    with pytest.raises(TypeError, match="takes 1 tensors, got 2"):
        bound(x, y)
    monkeypatch.setattr(launch, "_hooks_installed", lambda: True)  # a profiler: through Triton's path
    bound(x)
    assert len(jit.slow_calls) == 2 and jit.slow_calls[-1][1][0] is x


@pytest.mark.skipif(not torch.cuda.is_available(), reason="plans replay compiled kernels")
@pytest.mark.parametrize("sparse", [False, True])
def test_plans_on_cuda_give_bitwise_the_results_of_built_launches(monkeypatch, sparse):
    """On the GPU: replayed CompiledKernel launches vs launches built by the ops (through the cached
    path), with dropout (split backward: deterministic), padding and ragged N, dense and block-sparse."""
    if not launch.plans_enabled():
        pytest.skip(f"launch plans are off here (Triton {__import__('triton').__version__} not in "
                    f"VERIFIED_TRITON, or {launch.ENV} is 'cached' or 'triton')")
    monkeypatch.setattr(ops, "DROPOUT_BWD", "split")
    monkeypatch.setattr(ops, "_LAUNCH_PLANS", {})
    monkeypatch.setattr(launch, "NATIVE", False)  # the bound launches' replay (test_plan_launcher: the native one)
    case = cuda_packed_case()

    def run():
        return packed_call(*case, sparse=sparse)

    run()
    plans = [p for p in ops._LAUNCH_PLANS.values() if p]
    assert len(plans) >= 2  # forward and backward
    planned = run()  # replayed
    assert all(p.replays >= 1 for p in plans)
    monkeypatch.setattr(launch, "PLANNED", False)
    built = run()
    for a, b in zip(planned, built):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.isnan(planned[1]).any()


class _CudaLauncher:
    """Stands in for Triton 3.6's CudaLauncher (CompiledKernel.run): its C entry point is .launch."""

    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self, scratch: int):
        self.global_scratch_size, self.profile_scratch_size = scratch, 0
        self.direct, self.via_call = [], []

    def launch(self, *args):
        self.direct.append(args)

    def __call__(self, *args):
        self.via_call.append(args)


@pytest.mark.parametrize("scratch", [0, 256])
def test_bound_launch_calls_the_c_launcher_directly_when_no_scratch_is_needed(monkeypatch, scratch):
    from test_launch import _Jit

    monkeypatch.setattr(launch, "current_stream", lambda: 7)
    monkeypatch.setattr(launch, "_hooks_installed", lambda: False)
    runner = _CudaLauncher(scratch)

    class Compiled:
        function, packed_metadata, run = "fn-handle", ("meta",), runner

    jit = _Jit()
    jit.compiled = {launch.signature((torch.zeros(8), 4, 0.5), {"BLOCK": 32}): Compiled()}
    bound = launch.CachedLauncher(jit).bind((3,), (torch.zeros(8), 4, 0.5), {"BLOCK": 32})
    y = torch.ones(8)
    bound(y)
    if scratch:  # the kernel needs scratch memory: through CudaLauncher.__call__, which allocates it
        assert not runner.direct and len(runner.via_call) == 1
        assert runner.via_call[0][:9] == (3, 1, 1, 7, "fn-handle", ("meta",), None, None, None)
    else:  # grid, stream, function, cooperative, PDL, two scratch buffers, metadata, launch metadata, hooks
        (args,) = runner.direct
        assert not runner.via_call
        assert args[:13] == (3, 1, 1, 7, "fn-handle", False, True, None, None, ("meta",), None, None, None)
        assert args[13] is y and args[14:] == (4, 0.5, 32, False)


def test_leading_tensors_and_unbindable_calls():
    x = torch.zeros(4)
    assert launch.leading_tensors((x, x, 3, 0.5)) == 2
    assert launch.leading_tensors((3, x)) is None  # a tensor after a scalar
    assert launch.leading_tensors(()) == 0
