"""The one-pass dropout backward (the default under dropout): dQ from the dK/dV kernel by atomics.

The tests wrap the two backward kernels to check which form ran: the one-pass form launches the
dK/dV kernel with ``FUSED_DQ=True`` and no dQ kernel; ``torch.use_deterministic_algorithms(True)``
gives the two-pass form. Small tiles make every call
visit several key tiles per query tile, so dQ rows really are sums of several atomic additions.
"""
from __future__ import annotations

import pytest
import torch
from kernel_helpers import DEVICE, check_against_reference, deterministic, make_qkv
from kernel_reference import expand_layout, rel_err

from kernels import block_sparse_flash_attention, dropout_keep_mask, flash_attention
from kernels import triton_attention as kern
from kernels.tiles import PassTiles, Tiles, override

# fwd, dK/dV, dQ tiles: 90 keys are 3 key tiles of the dK/dV pass (the last ragged), 70 queries 5 query tiles
SMALL = Tiles(PassTiles(64, 64), PassTiles(16, 32), PassTiles(32, 32))


class _Recorder:
    """Stands in for a Triton kernel in the launcher: records the launches, then runs the kernel."""

    def __init__(self, kernel):
        self.kernel, self.calls = kernel, []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.calls.append(kwargs)
            return self.kernel[grid](*args, **kwargs)
        return run


@pytest.fixture
def launches(monkeypatch):
    """{"dkdv": recorder, "dq": recorder} of the backward kernels."""
    rec = {"dkdv": _Recorder(kern.flash_bwd_dkdv_kernel), "dq": _Recorder(kern.flash_bwd_dq_kernel)}
    monkeypatch.setattr(kern, "flash_bwd_dkdv_kernel", rec["dkdv"])
    monkeypatch.setattr(kern, "flash_bwd_dq_kernel", rec["dq"])
    return rec


def _assert_fused(launches, n_backward=1):
    assert [c.get("FUSED_DQ", False) for c in launches["dkdv"].calls] == [True] * n_backward
    assert launches["dq"].calls == []


def _grads(fn, q, k, v, seed, grad_seed=1, **kwargs):
    for x in (q, k, v):
        x.grad = None
    torch.manual_seed(seed)
    out = fn(q, k, v, **kwargs)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed)).to(q.device, q.dtype)
    out.backward(grad)
    return out.detach().clone(), q.grad.clone(), k.grad.clone(), v.grad.clone()


@pytest.mark.parametrize("dtype,d,n_q,n_k,causal,padded", [
    (torch.float32, 16, 70, 90, False, True),   # ragged N_q, N_k; padding
    (torch.bfloat16, 32, 70, 90, True, False),  # causal, N_q < N_k
    (torch.float32, 32, 90, 70, True, True),    # causal, N_q > N_k: the first rows see no key
    (torch.bfloat16, 16, 64, 64, False, False),  # every side a multiple of its tile (no masks)
    (torch.float32, 24, 48, 40, False, True),   # head dim padded to 32 (masked atomic columns)
])
def test_fused_matches_reference(launches, dtype, d, n_q, n_k, causal, padded):
    q, k, v = make_qkv(2, 1, n_q, n_k, d, dtype, seed=31)
    mask = None
    if padded:
        mask = torch.zeros(2, n_k, dtype=torch.bool, device=DEVICE)
        mask[0, n_k - 7:] = True
        mask[1, 3:20] = True
    p = 0.3
    torch.manual_seed(77)
    keep = dropout_keep_mask(q, k, p)
    torch.manual_seed(77)
    with override(SMALL):
        check_against_reference(flash_attention, q, k, v, dropout_p=p, causal=causal, key_padding_mask=mask,
                                ref_kwargs=dict(keep=keep, dropout_p=p, causal=causal, key_padding_mask=mask))
    _assert_fused(launches)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fully_padded_row_gives_zeros_without_nan(launches, dtype):
    q, k, v = make_qkv(2, 1, 40, 50, 16, dtype, seed=32)
    mask = torch.zeros(2, 50, dtype=torch.bool, device=DEVICE)
    mask[1] = True  # batch 1: every key is padding
    mask[0, 45:] = True
    torch.manual_seed(5)
    keep = dropout_keep_mask(q, k, 0.2)
    torch.manual_seed(5)
    with override(SMALL):
        out = check_against_reference(flash_attention, q, k, v, dropout_p=0.2, key_padding_mask=mask,
                                      ref_kwargs=dict(keep=keep, dropout_p=0.2, key_padding_mask=mask))
    _assert_fused(launches)
    for x in (out, q.grad, k.grad, v.grad):
        assert torch.isfinite(x).all()
        assert torch.all(x[1] == 0)
    assert torch.all(k.grad[0, :, 45:] == 0) and torch.all(v.grad[0, :, 45:] == 0)


@pytest.mark.parametrize("dtype,causal", [(torch.float32, True), (torch.bfloat16, False)])
def test_fused_gradients_equal_split(launches, dtype, causal):
    """Same inputs and seed: dK/dV bit-identical (the same kernel arithmetic), dQ equal up to the
    float32 summation order (and, for bfloat16, the final rounding of that sum)."""
    q, k, v = make_qkv(1, 1, 70, 90, 32, dtype, seed=33)
    mask = torch.zeros(1, 90, dtype=torch.bool, device=DEVICE)
    mask[0, 85:] = True
    kwargs = dict(dropout_p=0.1, causal=causal, key_padding_mask=mask)
    with override(SMALL):
        with deterministic():
            split = _grads(flash_attention, q, k, v, seed=8, **kwargs)
        assert len(launches["dq"].calls) == 1 and launches["dkdv"].calls[0]["FUSED_DQ"] is False
        launches["dkdv"].calls.clear()
        launches["dq"].calls.clear()
        fused = _grads(flash_attention, q, k, v, seed=8, **kwargs)
    _assert_fused(launches)
    for name, a, b in zip(("out", "dq", "dk", "dv"), split, fused):
        if name == "dq":
            assert rel_err(b, a) < (1e-6 if dtype == torch.float32 else 1e-2), name
            assert torch.allclose(b.float(), a.float(), rtol=1e-5 if dtype == torch.float32 else 2e-2,
                                  atol=1e-6 if dtype == torch.float32 else 1e-2), name
        else:
            assert torch.equal(a, b), name


def test_block_sparse_fused(launches):
    n, bs = 80, 32  # 3 blocks, the last ragged
    layout = torch.tensor([[[True, False, True], [True, True, False], [False, True, True]],
                           [[True, True, True], [False, False, False], [True, False, True]]], device=DEVICE)
    q, k, v = make_qkv(1, 2, n, n, 16, torch.float32, seed=34)
    torch.manual_seed(9)
    keep = dropout_keep_mask(q, k, 0.25)
    torch.manual_seed(9)
    with override(Tiles(PassTiles(32, 16), PassTiles(16, 32), PassTiles(16, 16))):
        check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs, dropout_p=0.25,
                                causal=True, ref_kwargs=dict(keep=keep, dropout_p=0.25, causal=True,
                                                             allowed=expand_layout(layout, bs, n, n)))
    _assert_fused(launches)


def test_without_dropout_the_split_backward_runs(launches):
    q, k, v = make_qkv(1, 1, 20, 30, 16, torch.float32, seed=35)
    check_against_reference(flash_attention, q, k, v)
    assert len(launches["dq"].calls) == 1 and launches["dkdv"].calls[0]["FUSED_DQ"] is False


def test_deterministic_algorithms_keep_the_split_backward(launches):
    q, k, v = make_qkv(1, 1, 20, 30, 16, torch.float32, seed=36)
    with deterministic():
        torch.manual_seed(4)
        flash_attention(q, k, v, dropout_p=0.2).sum().backward()
    assert len(launches["dq"].calls) == 1 and launches["dkdv"].calls[0]["FUSED_DQ"] is False


def test_use_one_pass_backward_extends_the_one_pass_form_to_calls_without_dropout(launches):
    """kernels.use_one_pass_backward(True): a call without dropout takes the one-pass form (dQ by
    atomics, against the float64 reference), deterministic algorithms still keep the two-pass form;
    the switch returns the previous setting and kernel_settings reports it."""
    import kernels

    q, k, v = make_qkv(1, 2, 70, 90, 32, torch.float32, seed=38)
    assert kernels.use_one_pass_backward(True) is False
    try:
        assert kernels.kernel_settings()["one_pass_backward"] is True
        with override(SMALL):
            check_against_reference(flash_attention, q, k, v, causal=True, ref_kwargs=dict(causal=True))
            _assert_fused(launches)
            with deterministic():
                check_against_reference(flash_attention, q, k, v)
        assert launches["dkdv"].calls[-1]["FUSED_DQ"] is False and len(launches["dq"].calls) == 1
    finally:
        assert kernels.use_one_pass_backward(False) is True
    assert kernels.kernel_settings()["one_pass_backward"] is False


def test_launchers_choose_the_tiles_of_the_backward_form_that_runs(monkeypatch):
    """flash_attention / block_sparse_flash_attention ask kernels.tiles.select for the one-pass form's
    dK/dV tiles exactly when that form will run (dropout, not deterministic)."""
    from kernels import block_sparse, dense, tiles

    asked = []

    def spy(*args, **kwargs):
        asked.append(kwargs.get("fused_bwd"))
        return tiles.select(*args, **kwargs)

    monkeypatch.setattr(dense, "select", spy)
    monkeypatch.setattr(block_sparse, "select", spy)
    q, k, v = make_qkv(1, 1, 20, 20, 16, torch.float32, seed=37)
    layout = torch.ones(1, 1, dtype=torch.bool, device=DEVICE)
    flash_attention(q, k, v, dropout_p=0.1)
    block_sparse_flash_attention(q, k, v, layout, block_size=32, dropout_p=0.1)
    flash_attention(q, k, v)
    with deterministic():
        flash_attention(q, k, v, dropout_p=0.1)
    assert asked == [True, True, False, False]


class _FakeQ:
    """What dq_by_tma_reduce reads of q: device kind, index and shape."""

    def __init__(self, is_cuda, d):
        self.is_cuda, self.shape = is_cuda, (2, 3, 100, d)

    def get_device(self):
        return 0


@pytest.mark.parametrize("is_cuda,d,capability,traced,takes", [
    (True, 64, (9, 0), False, True), (True, 128, (10, 0), False, True), (True, 48, (9, 0), False, True),
    (True, 30, (9, 0), False, False),  # 120-byte float32 rows: not a TMA stride
    (True, 64, (8, 0), False, False), (True, 64, (9, 0), True, False), (False, 64, None, False, False),
])
def test_dq_by_tma_reduce_on_sm90_eager_launches_only(monkeypatch, is_cuda, d, capability, traced, takes):
    from kernels import launch_args

    monkeypatch.setattr(launch_args, "cuda_capability", lambda index: capability)
    launch = launch_args.traced if traced else launch_args.eager
    assert launch_args.dq_by_tma_reduce(_FakeQ(is_cuda, d), launch) is takes


needs_sm90 = pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)),
                                reason="needs an sm_90 GPU (TMA reduce-add)")


@needs_sm90
@pytest.mark.parametrize("d", [48, 64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_dq_by_tma_reduce_equals_per_element_atomics(launches, monkeypatch, d, causal):
    """On sm_90 the one-pass backward adds dQ by TMA reduce-adds: the same dQ as by per-element atomics
    up to the float32 summation order, against the float64 reference too; ragged N_q (the last query
    tile clipped at each head's end, not spilling into the next head), three heads, a padded head dim
    (48: columns past d clipped), key padding."""
    from kernels import launch_args

    q, k, v = make_qkv(2, 3, 300, 260, d, torch.bfloat16, seed=d)
    mask = torch.zeros(2, 260, dtype=torch.bool, device=DEVICE)
    mask[1, 200:] = True
    kwargs = dict(dropout_p=0.1, causal=causal, key_padding_mask=mask)
    tma = _grads(flash_attention, q, k, v, seed=9, **kwargs)
    assert launches["dkdv"].calls[-1].get("DQ_TMA") is True and launches["dq"].calls == []
    monkeypatch.setattr(launch_args, "dq_by_tma_reduce", lambda q, launch: False)
    atomics = _grads(flash_attention, q, k, v, seed=9, **kwargs)
    assert launches["dkdv"].calls[-1]["DQ_TMA"] is False
    for name, a, b in zip(("out", "dq", "dk", "dv"), atomics, tma):
        if name == "dq":
            assert rel_err(b, a) < 1e-2 and torch.isfinite(b).all(), name
        else:
            assert torch.equal(a, b), name
    # the one-pass form without dropout (as kernels.dropout.fused_backward would choose it) against the
    # float64 reference through the public call
    from kernels import dense

    monkeypatch.undo()
    monkeypatch.setattr(kern, "flash_bwd_dkdv_kernel", launches["dkdv"])
    monkeypatch.setattr(kern, "flash_bwd_dq_kernel", launches["dq"])
    for module in (launch_args, dense):
        monkeypatch.setattr(module, "fused_backward", lambda p: not torch.are_deterministic_algorithms_enabled())
    check_against_reference(flash_attention, q, k, v, causal=causal, key_padding_mask=mask,
                            ref_kwargs=dict(causal=causal, key_padding_mask=mask))
    assert launches["dkdv"].calls[-1].get("DQ_TMA") is True and launches["dkdv"].calls[-1]["FUSED_DQ"] is True
