"""The eager forward's dispatch to the Hopper ping-pong kernel (:mod:`kernels.hopper_dispatch`).

On any device: the wiring, with the device facts faked (an sm_90 device, a supported Triton) and a
spy in place of the Hopper launchers that runs the portable forward into the output it is given:
which public calls take the Hopper forward (dense, and block-sparse with the plan made for its
tile), with which arguments and output layout, that the portable backward gives the reference
gradients from its row statistics, that the switch and the compiled path keep the portable
forward. On an sm_90 GPU (skipped elsewhere): the real Hopper forward through the public functions,
dense and block-sparse, bf16 and fp16, against the float64 reference in output, lse and gradients.
"""
from __future__ import annotations

import math
import sys
import types

import pytest
import torch
from kernel_helpers import DEVICE, TOL, check_against_reference, hopper_skip_reason
from kernel_reference import attention_reference, expand_layout, rel_err

import kernels
from kernels import (BlockSparseLayout, block_sparse_flash_attention, block_sparse_flash_attention_qkvpacked,
                     flash_attention, flash_attention_qkvpacked, hopper_dispatch, hopper_support, launch_args, layouts,
                     tuning, use_hopper_forward)
from kernels.autograd import unpack_qkv
from kernels.hopper_dispatch import with_hopper_forward_tile
from kernels.hopper_support import FORWARD_TILE
from kernels.tiles import select


@pytest.fixture(autouse=True)
def switch_restored():
    """Every test leaves the Hopper forward switch as it found it."""
    before = hopper_dispatch.hopper_forward_enabled()
    yield
    use_hopper_forward(before)


class _Calls(list):
    """The spy's record of the Hopper launches; ``capability`` is the faked device's."""

    capability = (9, 0)


@pytest.fixture
def spy(monkeypatch):
    """The calls the dispatch sends to the Hopper launches, on a faked device (sm_90 unless the test
    sets the record's ``capability``) with a supported Triton (the rest of
    :func:`kernels.hopper_support.takes_hopper_forward` as it is); the launches
    (:func:`kernels.hopper_attention.launch_forward`, :func:`kernels.hopper_attention.launch_sparse_forward`)
    are replaced by the portable forward, writing into the output the dispatch allocated (block-sparse:
    walking the plan it is given with the Hopper forward's tile)."""
    calls = _Calls()
    decide = hopper_support.takes_hopper_forward
    monkeypatch.setattr(hopper_dispatch, "takes_hopper_forward",
                        lambda _version, _capability, *args, **kwargs: decide("3.9.0", calls.capability, *args,
                                                                              **kwargs))

    def launch_forward(q, k, v, out, key_padding_mask, causal, scale, *, overlap, pingpong, **rest):
        calls.append(dict(q=q, out=out, mask=key_padding_mask, causal=causal, scale=scale, overlap=overlap,
                          pingpong=pingpong, rest=rest))
        tiles = select(q.device, q.dtype, q.shape[3]).as_list()
        return launch_args.forward(launch_args.eager, q, k, v, key_padding_mask, None, None, None, causal, 0.0,
                                   scale, tiles, out=out)

    def launch_sparse_forward(q, k, v, out, key_padding_mask, causal, scale, indices, counts, *, overlap, **rest):
        calls.append(dict(q=q, out=out, mask=key_padding_mask, causal=causal, scale=scale, overlap=overlap,
                          indices=indices, counts=counts, rest=rest))
        tiles = with_hopper_forward_tile(select(q.device, q.dtype, q.shape[3])).as_list()
        return launch_args.forward(launch_args.eager, q, k, v, key_padding_mask, None, indices, counts, causal, 0.0,
                                   scale, tiles, out=out)

    fake = types.SimpleNamespace(launch_forward=launch_forward, launch_sparse_forward=launch_sparse_forward)
    monkeypatch.setitem(sys.modules, "kernels.hopper_attention", fake)
    return calls


def _mask(batch, n_k, seed=0):
    mask = torch.rand(batch, n_k, generator=torch.Generator().manual_seed(seed)) < 0.3
    return mask.to(DEVICE)


def _qkv(batch, heads, n_q, n_k, d, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, heads, n, d, generator=g).to(dtype).to(DEVICE).requires_grad_()
                 for n in (n_q, n_k, n_k))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_dense_call_runs_the_hopper_forward_and_the_portable_backward(spy, dtype, causal):
    q, k, v = _qkv(2, 3, 70, 90, 128, dtype)
    mask = _mask(2, 90)
    out = check_against_reference(flash_attention, q, k, v, key_padding_mask=mask, causal=causal, softmax_scale=0.1,
                                  ref_kwargs=dict(key_padding_mask=mask, causal=causal, softmax_scale=0.1))
    assert len(spy) == 1
    call = spy[0]
    assert call["pingpong"] is True and call["overlap"] is True and call["rest"] == {}
    assert call["causal"] is causal and call["mask"] is mask and call["scale"] == 0.1
    assert call["out"].data_ptr() == out.data_ptr() and out.is_contiguous()


def test_fused_projection_views_keep_the_heads_inside_tokens_layout(spy):
    """q, k, v views of a (B, N, 3, H, d) projection: the output the Hopper forward writes is a
    (B, H, N, d) view of a contiguous (B, N, H, d) tensor (launch_args.new_output)."""
    B, N, H, d = 2, 50, 3, 128
    qkv = torch.randn(B, N, 3, H, d, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).to(DEVICE)
    q, k, v = (x.detach().requires_grad_() for x in unpack_qkv(qkv))
    out = check_against_reference(flash_attention, q, k, v, causal=True, ref_kwargs=dict(causal=True))
    assert len(spy) == 1 and spy[0]["out"].data_ptr() == out.data_ptr()
    assert out.stride() == (N * H * d, d, H * d, 1) and out.transpose(1, 2).is_contiguous()


def test_packed_call_runs_the_hopper_forward(spy):
    B, N, H, d = 2, 60, 2, 128
    qkv = torch.randn(B, N, 3, H, d, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16).to(DEVICE)
    qkv.requires_grad_()
    mask = _mask(B, N, seed=3)
    out = flash_attention_qkvpacked(qkv, key_padding_mask=mask)
    assert len(spy) == 1 and spy[0]["pingpong"] and spy[0]["overlap"]
    assert out.shape == (B, N, H, d) and out.is_contiguous()
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(4)).to(DEVICE, out.dtype)
    out.backward(grad)
    refs = tuple(x.detach().double().requires_grad_() for x in unpack_qkv(qkv))
    ref, _ = attention_reference(*refs, key_padding_mask=mask)
    ref.backward(grad.double().transpose(1, 2))
    assert rel_err(out.transpose(1, 2), ref) < TOL[torch.bfloat16]
    for name, got, want in zip(("dq", "dk", "dv"), unpack_qkv(qkv.grad), (x.grad for x in refs)):
        assert rel_err(got, want) < TOL[torch.bfloat16], name


@pytest.mark.parametrize("n_k, takes", [(2047, False), (2048, True)])
def test_head_dim_64_takes_it_from_2048_keys(spy, n_k, takes):
    q, k, v = _qkv(1, 1, 16, n_k, 64, torch.bfloat16)
    with torch.no_grad():
        flash_attention(q, k, v)
    assert len(spy) == int(takes)


def _sparse(q, k, v):
    layout = BlockSparseLayout.from_dense(torch.ones(2, 2, dtype=torch.bool, device=DEVICE), 64)
    return block_sparse_flash_attention(q, k, v, layout, block_size=64)


@pytest.mark.parametrize("case", ["switched-off", "dropout", "float32", "head-dim-32", "expanded-kv", "block-sparse"])
def test_calls_the_rule_keeps_on_the_portable_forward(spy, case):
    d = 32 if case == "head-dim-32" else 128
    q, k, v = _qkv(1, 2, 128, 128, d, torch.float32 if case == "float32" else torch.bfloat16)
    kwargs = {}
    attention = _sparse if case == "block-sparse" else flash_attention
    if case == "switched-off":
        assert use_hopper_forward(False) is True
    elif case == "dropout":
        kwargs["dropout_p"] = 0.1
    elif case == "expanded-kv":
        k, v = (x[:1, :1].expand(1, 2, 128, d) for x in (k, v))
    with torch.no_grad():
        out = attention(q, k, v, **kwargs)
    assert not spy and out.shape == q.shape


def _random_layout(n_q_blocks, n_k_blocks, seed, heads=None):
    g = torch.Generator().manual_seed(seed)
    shape = (n_q_blocks, n_k_blocks) if heads is None else (heads, n_q_blocks, n_k_blocks)
    layout = torch.rand(shape, generator=g) < 0.5
    layout[..., 0, :] = False  # query block 0 sees nothing: out 0, lse -inf
    layout[..., -1, -1] = True  # the ragged last tiles
    return layout.to(DEVICE)


def _hopper_plan(compiled, q, k, causal, block_size):
    """(indices, counts) of the forward plan made for the Hopper tile for this call (cached by the layout)."""
    tiles = with_hopper_forward_tile(select(q.device, q.dtype, q.shape[3], block_size))
    return compiled.plans(q.shape[2], k.shape[2], causal, tiles)[:2]


@pytest.mark.parametrize("block_size", [128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_block_sparse_call_runs_the_hopper_forward_on_the_plan_of_its_tile(spy, block_size, causal):
    """Layout blocks of 128 or 256: the Hopper sparse launch gets the forward plan made for its 128 x 128
    tile (the layout's cached one), the output the dispatch allocated, the mask, scale and causal flag;
    the portable backward gives the reference gradients from its row statistics."""
    n_q, n_k = 300, 520  # ragged, N_q != N_k
    layout = _random_layout(-(-n_q // block_size), -(-n_k // block_size), seed=block_size, heads=2)
    compiled = BlockSparseLayout.from_dense(layout, block_size)
    q, k, v = _qkv(2, 2, n_q, n_k, 128, torch.bfloat16, seed=11)
    mask = _mask(2, n_k, seed=12)
    mask[1] = True  # a batch entry with every key padded
    allowed = expand_layout(layout, block_size, n_q, n_k)
    out = check_against_reference(block_sparse_flash_attention, q, k, v, layout=compiled, block_size=block_size,
                                  key_padding_mask=mask, causal=causal, softmax_scale=0.1,
                                  ref_kwargs=dict(allowed=allowed, key_padding_mask=mask, causal=causal,
                                                  softmax_scale=0.1))
    assert len(spy) == 1
    call = spy[0]
    indices, counts = _hopper_plan(compiled, q, k, causal, block_size)
    assert call["indices"] is indices and call["counts"] is counts and counts.shape[1] == -(-n_q // FORWARD_TILE[0])
    assert call["overlap"] is True and call["rest"] == {} and call["causal"] is causal
    assert call["mask"] is mask and call["scale"] == 0.1 and call["out"].data_ptr() == out.data_ptr()
    assert torch.all(out[1] == 0) and torch.all(out[:, :, :block_size] == 0) and torch.isfinite(out).all()


def test_block_sparse_builder_layout_and_packed_input_run_the_hopper_forward(spy):
    """A builder layout (BigBird) as a bool tensor, and the packed (B, N, 3, H, d) form."""
    n, bs = 1024, 128
    layout = layouts.bigbird(n // bs, seed=1, device=DEVICE)
    B, H, d = 1, 2, 128
    qkv = torch.randn(B, n, 3, H, d, generator=torch.Generator().manual_seed(13)).to(torch.float16).to(DEVICE)
    q, k, v = (x.detach().requires_grad_() for x in unpack_qkv(qkv))
    out = check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs,
                                  ref_kwargs=dict(allowed=expand_layout(layout, bs, n, n)))
    assert len(spy) == 1 and spy[0]["counts"].shape == (1, n // 128, 3)
    with torch.no_grad():
        packed = block_sparse_flash_attention_qkvpacked(qkv, layout, block_size=bs)
    assert len(spy) == 2 and spy[1]["indices"] is spy[0]["indices"]
    assert torch.equal(packed, out.detach().transpose(1, 2))


@pytest.mark.parametrize("case", ["block-64", "dropout", "head-dim-32", "float32", "switched-off", "d64-1024-keys",
                                  "d64-2048-keys", "sm80", "expanded-kv"])
def test_block_sparse_calls_the_rule_keeps_on_the_portable_forward(spy, case):
    """Layout blocks under 128, dropout, head dims and dtypes the kernel lacks, d = 64 at any key count
    (the dense call takes it from 2048 keys), a device other than sm_90, the switch off, broadcast K / V:
    the portable forward, on the plan of the tiles the call had (sparse_tiles leaves them)."""
    d = 64 if case.startswith("d64") else 32 if case == "head-dim-32" else 128
    dtype = torch.float32 if case == "float32" else torch.bfloat16
    bs = 64 if case == "block-64" else 128
    n = {"d64-1024-keys": 1024, "d64-2048-keys": 2048}.get(case, 256)
    q, k, v = (x.detach() for x in _qkv(1, 2, n, n, d, dtype))
    kwargs = {}
    if case == "dropout":
        kwargs["dropout_p"] = 0.1
    elif case == "switched-off":
        use_hopper_forward(False)
    elif case == "sm80":
        spy.capability = (8, 0)
    elif case == "expanded-kv":
        k, v = (x[:1, :1].expand(1, 2, n, d) for x in (k, v))
    tiles = select(q.device, q.dtype, d, bs, dropout=case == "dropout")
    assert hopper_dispatch.sparse_tiles(q, k, v, bs, kwargs.get("dropout_p", 0.0), tiles) is tiles
    layout = torch.eye(n // bs, dtype=torch.bool, device=DEVICE)  # local attention: few tiles in the interpreter
    out = block_sparse_flash_attention(q, k, v, layout, block_size=bs, **kwargs)
    assert not spy and out.shape == q.shape


def test_sparse_tiles_give_the_hopper_tile_only_where_the_hopper_forward_runs(spy):
    """sparse_tiles: the forward tile becomes the Hopper one for blocks of 128 and 256 on the faked sm_90;
    the backward tiles stay; the tiles object is made once."""
    q, k, v = (x.detach() for x in _qkv(1, 2, 256, 256, 128, torch.float16))
    for bs in (128, 256):
        tiles = select(q.device, q.dtype, 128, bs)
        got = hopper_dispatch.sparse_tiles(q, k, v, bs, 0.0, tiles)
        assert (got.fwd.block_m, got.fwd.block_n) == FORWARD_TILE and (got.dkdv, got.dq) == (tiles.dkdv, tiles.dq)
        assert hopper_dispatch.sparse_tiles(q, k, v, bs, 0.0, tiles) is got
    assert hopper_dispatch.sparse_tiles(q, k, v, 64, 0.0, select(q.device, q.dtype, 128, 64)).fwd.block_n <= 64


def test_compiled_block_sparse_calls_keep_the_portable_forward(spy):
    q, k, v = _qkv(1, 2, 256, 256, 128, torch.bfloat16)
    compiled_layout = BlockSparseLayout.from_dense(_random_layout(2, 2, seed=3), 128)
    compiled = torch.compile(lambda q, k, v: block_sparse_flash_attention(q, k, v, compiled_layout, causal=True),
                             fullgraph=True, backend="aot_eager")
    out = compiled(q, k, v)
    assert not spy
    eager = block_sparse_flash_attention(q, k, v, compiled_layout, causal=True)
    assert len(spy) == 1 and rel_err(out, eager) < TOL[torch.bfloat16]


def test_switch_is_explicit_and_reported():
    assert kernels.kernel_settings()["hopper_forward"] is True  # the default
    assert use_hopper_forward(False) is True
    assert kernels.kernel_settings()["hopper_forward"] is False
    assert use_hopper_forward(False) is False
    assert use_hopper_forward(True) is False and kernels.kernel_settings()["hopper_forward"] is True


def test_compiled_calls_keep_the_portable_forward(spy):
    q, k, v = _qkv(1, 2, 64, 64, 128, torch.bfloat16)
    compiled = torch.compile(lambda q, k, v: flash_attention(q, k, v, causal=True), fullgraph=True, backend="aot_eager")
    out = compiled(q, k, v)
    assert not spy
    assert torch.equal(out, flash_attention(q, k, v, causal=True)) and len(spy) == 1  # same kernel arithmetic


def test_tuner_times_the_portable_forward(monkeypatch):
    """kernels.tuning times tile candidates of the portable kernel: the Hopper forward is off meanwhile."""
    seen = []
    monkeypatch.setattr(tuning, "_tune", lambda *args: seen.append(hopper_dispatch.hopper_forward_enabled()) or {})
    assert tuning.tune([128], [256], 256, 128, torch.bfloat16) == {}
    assert seen == [False] and hopper_dispatch.hopper_forward_enabled()


class _Launches:
    """Stands in for a Gluon kernel: records ``kernel[grid](*args, **kwargs)`` instead of launching."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((grid, args, kwargs))


def _described(arg):
    """A launch argument in comparable form: a TMA descriptor as (base address, shape, strides, block,
    layout), a tensor as (shape, strides, dtype), anything else as it is."""
    if hasattr(arg, "block_shape"):
        return arg.base.data_ptr(), arg.shape, arg.strides, arg.block_shape, arg.layout
    if isinstance(arg, torch.Tensor):
        return tuple(arg.shape), arg.stride(), arg.dtype
    return arg


@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "mask"])
def test_dispatch_launches_as_hopper_forward_does_checking_once(monkeypatch, padded):
    """The real Hopper launch path on a faked sm_90 device, the Gluon kernel replaced by a recorder:
    the dispatch runs no check of hopper_forward (its facts were checked once, by the public call's
    validation and takes_hopper_forward) and launches what hopper_forward launches for the same call."""
    hopper_attention = pytest.importorskip("kernels.hopper_attention", reason="this Triton has no Gluon")
    decide = hopper_support.takes_hopper_forward
    monkeypatch.setattr(hopper_dispatch, "takes_hopper_forward",
                        lambda _version, _capability, *args, **kwargs: decide("3.9.0", (9, 0), *args, **kwargs))
    checks = []
    check = hopper_support.supported
    monkeypatch.setattr(hopper_attention, "supported",
                        lambda version, _capability, *args, **kwargs: checks.append(1) or check(version, (9, 0), *args,
                                                                                                 **kwargs))
    launches = _Launches()
    monkeypatch.setattr(hopper_attention, "hopper_attention_fwd_pingpong_kernel", launches)
    q, k, v = (x.detach() for x in _qkv(2, 3, 200, 333, 128, torch.bfloat16))
    mask = _mask(2, 333) if padded else None
    with torch.no_grad():
        flash_attention(q, k, v, key_padding_mask=mask, causal=True, softmax_scale=0.1)
    assert not checks and len(launches.calls) == 1
    hopper_attention.hopper_forward(q, k, v, mask, True, 0.1, pingpong=True, overlap=True)
    assert len(checks) == 1 and len(launches.calls) == 2
    (grid, args, kwargs), (public_grid, public_args, public_kwargs) = launches.calls
    assert grid == public_grid and kwargs == public_kwargs and kwargs["HAS_PAD"] is padded
    described, public = [_described(a) for a in args], [_described(a) for a in public_args]
    assert described[:3] == public[:3] and described[4:] == public[4:]  # all but out's own address
    assert described[3][1:] == public[3][1:]


# ------------------------------------------------------------------------------------------------ sm_90 GPU
needs_hopper = pytest.mark.skipif(bool(hopper_skip_reason()), reason=hopper_skip_reason() or "supported")


def _count_calls(monkeypatch, name: str) -> list:
    """``kernels.hopper_attention.<name>`` still launching, its calls' keyword arguments recorded in the
    returned list."""
    from kernels import hopper_attention

    calls = []
    launch = getattr(hopper_attention, name)

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return launch(*args, **kwargs)

    monkeypatch.setattr(hopper_attention, name, counted)
    return calls


@pytest.fixture
def hopper_calls(monkeypatch):
    """The real Hopper launch (:func:`kernels.hopper_attention.launch_forward`, which the dispatch
    calls), counting its calls."""
    return _count_calls(monkeypatch, "launch_forward")


# (B, H, N_q, N_k, d, causal, key padding)
GPU_CASES = {
    "d128": (2, 3, 256, 256, 128, False, False),
    "d128-causal-mask": (2, 3, 256, 256, 128, True, True),
    "d128-ragged-nq-ne-nk": (2, 2, 200, 333, 128, True, True),
    "d128-nq-gt-nk": (1, 2, 300, 129, 128, True, False),
    "d64-n2048": (1, 2, 2048, 2048, 64, False, True),
    "d64-n2048-causal": (1, 2, 2048, 2048, 64, True, False),
    "d64-nq-ne-nk": (2, 2, 333, 2048, 64, True, True),
}


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_public_call_runs_the_hopper_forward_on_sm90(hopper_calls, case, dtype):
    B, H, n_q, n_k, d, causal, padded = GPU_CASES[case]
    q, k, v = _qkv(B, H, n_q, n_k, d, dtype, seed=d + n_k)
    mask = _mask(B, n_k, seed=n_q) if padded else None
    out = check_against_reference(flash_attention, q, k, v, key_padding_mask=mask, causal=causal,
                                  ref_kwargs=dict(key_padding_mask=mask, causal=causal))
    assert len(hopper_calls) == 1 and hopper_calls[0]["pingpong"] and hopper_calls[0]["overlap"]
    assert out.is_contiguous()
    # the same call on the portable forward: the two forwards agree to rounding
    use_hopper_forward(False)
    with torch.no_grad():
        portable = flash_attention(q, k, v, key_padding_mask=mask, causal=causal)
    assert len(hopper_calls) == 1 and rel_err(out, portable) < TOL[dtype]


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d, n", [(128, 512), (64, 2048)])
def test_fused_projection_views_and_packed_input_on_sm90(hopper_calls, dtype, d, n):
    B, H = 2, 2
    qkv = torch.randn(B, n, 3, H, d, device="cuda", generator=torch.Generator(device="cuda").manual_seed(d))
    qkv = qkv.to(dtype)
    mask = _mask(B, n, seed=5)
    q, k, v = (x.detach().requires_grad_() for x in unpack_qkv(qkv))
    out = check_against_reference(flash_attention, q, k, v, key_padding_mask=mask, causal=True,
                                  ref_kwargs=dict(key_padding_mask=mask, causal=True))
    assert len(hopper_calls) == 1
    assert out.stride() == (n * H * d, d, H * d, 1) and out.transpose(1, 2).is_contiguous()

    packed = qkv.clone().requires_grad_()
    out_packed = flash_attention_qkvpacked(packed, key_padding_mask=mask, causal=True)
    assert len(hopper_calls) == 2 and out_packed.shape == (B, n, H, d) and out_packed.is_contiguous()
    assert torch.equal(out_packed, out.transpose(1, 2))  # same kernel, same inputs
    grad = torch.randn(out_packed.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(6))
    out_packed.backward(grad.to(dtype))
    refs = tuple(x.detach().double().requires_grad_() for x in unpack_qkv(qkv))
    ref, _ = attention_reference(*refs, key_padding_mask=mask, causal=True)
    ref.backward(grad.to(dtype).double().transpose(1, 2))
    for name, got, want in zip(("dq", "dk", "dv"), unpack_qkv(packed.grad), (x.grad for x in refs)):
        assert rel_err(got, want) < TOL[dtype], name


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_lse_of_the_hopper_forward_and_its_gradient_on_sm90(hopper_calls, dtype):
    """return_lse: the lse is the Hopper forward's row statistics, and the portable backward takes its
    gradient too."""
    q, k, v = _qkv(2, 2, 200, 333, 128, dtype, seed=7)
    out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
    assert len(hopper_calls) == 1
    g = torch.Generator().manual_seed(8)
    grad_out, grad_lse = torch.randn(out.shape, generator=g).to(DEVICE, dtype), torch.randn(lse.shape, generator=g)
    ((out.float() * grad_out.float()).sum() + (lse * grad_lse.to(DEVICE)).sum()).backward()
    refs = tuple(x.detach().double().requires_grad_() for x in (q, k, v))
    ref, ref_lse = attention_reference(*refs, causal=True)
    ((ref * grad_out.double()).sum() + (ref_lse * grad_lse.double().to(DEVICE)).sum()).backward()
    assert rel_err(out, ref) < TOL[dtype] and (lse.double() - ref_lse).abs().max() < 1e-2
    for name, got, want in (("dq", q.grad, refs[0].grad), ("dk", k.grad, refs[1].grad), ("dv", v.grad, refs[2].grad)):
        assert rel_err(got, want) < TOL[dtype], name


@needs_hopper
@pytest.mark.parametrize("case", ["d64-n1024", "dropout", "switched-off", "compiled"])
def test_calls_that_stay_portable_on_sm90(hopper_calls, case):
    d, n = (64, 1024) if case == "d64-n1024" else (128, 256)
    q, k, v = _qkv(2, 2, n, n, d, torch.bfloat16, seed=9)
    attention = flash_attention
    if case == "switched-off":
        use_hopper_forward(False)
    elif case == "compiled":
        attention = torch.compile(flash_attention, fullgraph=True, backend="aot_eager")
    out = attention(q, k, v, dropout_p=0.1 if case == "dropout" else 0.0)
    assert not hopper_calls and out.shape == q.shape and torch.isfinite(out).all()
    if case != "dropout":
        ref, _ = attention_reference(q, k, v, softmax_scale=1 / math.sqrt(d))
        assert rel_err(out, ref) < TOL[torch.bfloat16]


@pytest.fixture
def hopper_sparse_calls(monkeypatch):
    """The real Hopper block-sparse launch (:func:`kernels.hopper_attention.launch_sparse_forward`),
    counting its calls."""
    return _count_calls(monkeypatch, "launch_sparse_forward")


# (benchmark layout, block size, B, H, N_q, N_k, d, causal, key padding)
SPARSE_GPU_CASES = {
    "bigbird-128-d128": ("bigbird", 128, 2, 2, 1024, 1024, 128, False, False),
    "bigbird-128-d128-causal-mask": ("bigbird", 128, 2, 2, 1024, 1024, 128, True, True),
    "local-256-ragged-d128-mask": ("local", 256, 2, 2, 1000, 1000, 128, False, True),
    "butterfly-128-causal": ("butterfly", 128, 1, 2, 2048, 2048, 128, True, False),
    "butterfly-256-nq-ne-nk-mask": ("butterfly", 256, 2, 2, 1500, 2100, 128, True, True),
    "local-128-nq-gt-nk-d128-causal": ("local", 128, 2, 2, 700, 333, 128, True, False),
}


@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", list(SPARSE_GPU_CASES))
def test_block_sparse_public_call_runs_the_hopper_sparse_forward_on_sm90(hopper_sparse_calls, hopper_calls, case,
                                                                         dtype):
    """block_sparse_flash_attention with layout blocks of 128 / 256 runs the Hopper sparse forward;
    out and the gradients (portable backward from its row statistics) match the float64 reference
    with the layout expanded to an element mask (a fully padded batch entry: out 0, no NaN), and the
    portable forward of the same call agrees to rounding."""
    name, bs, B, H, n_q, n_k, d, causal, padded = SPARSE_GPU_CASES[case]
    n_qb, n_kb = -(-n_q // bs), -(-n_k // bs)
    layout = layouts.benchmark_layout(name, max(n_qb, n_kb, 8), device=DEVICE)[:n_qb, :n_kb].contiguous()
    q, k, v = _qkv(B, H, n_q, n_k, d, dtype, seed=n_q + d)
    mask = None
    if padded:
        mask = _mask(B, n_k, seed=n_k)
        mask[0] = True
    allowed = expand_layout(layout, bs, n_q, n_k)
    out = check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs,
                                  key_padding_mask=mask, causal=causal,
                                  ref_kwargs=dict(allowed=allowed, key_padding_mask=mask, causal=causal))
    assert len(hopper_sparse_calls) == 1 and not hopper_calls and torch.isfinite(out).all()
    if padded:
        assert torch.all(out[0] == 0)
    use_hopper_forward(False)
    with torch.no_grad():
        portable = block_sparse_flash_attention(q, k, v, layout, block_size=bs, key_padding_mask=mask, causal=causal)
    assert len(hopper_sparse_calls) == 1 and rel_err(out, portable) < TOL[dtype]


@needs_hopper
@pytest.mark.parametrize("case", ["block-64", "dropout", "d64-1024", "d64-4096", "compiled"])
def test_block_sparse_calls_that_stay_portable_on_sm90(hopper_sparse_calls, case):
    d, n = {"d64-1024": (64, 1024), "d64-4096": (64, 4096)}.get(case, (128, 512))
    bs = 64 if case == "block-64" else 128
    q, k, v = _qkv(2, 2, n, n, d, torch.bfloat16, seed=14)
    layout = BlockSparseLayout.from_dense(layouts.local(n // bs, 3, device=DEVICE), bs)
    attention = block_sparse_flash_attention
    if case == "compiled":
        attention = torch.compile(block_sparse_flash_attention, fullgraph=True, backend="aot_eager")
    out = attention(q, k, v, layout, block_size=bs, dropout_p=0.1 if case == "dropout" else 0.0)
    assert not hopper_sparse_calls and out.shape == q.shape and torch.isfinite(out).all()
    if case != "dropout":
        ref, _ = attention_reference(q, k, v, allowed=expand_layout(layout.layout[0], bs, n, n),
                                     softmax_scale=1 / math.sqrt(d))
        assert rel_err(out, ref) < TOL[torch.bfloat16]
