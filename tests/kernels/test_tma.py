"""The opt-in TMA path (``PassTiles.loads``): same results as the float64 reference, and the
fall-back to pointer loads wherever tensor descriptors cannot apply.

On CPU, Triton's interpreter emulates the tensor descriptors (zero-filled out-of-bounds rows and
columns included), so these checks run the TMA code of all three kernels; on a Hopper GPU they
run the real TMA (and, for 4-warp tiles, warp-specialised) kernels.
"""
from __future__ import annotations

import pytest
import torch
from kernel_helpers import DEVICE, TOL, check_against_reference, make_qkv
from kernel_reference import expand_layout

from kernels import block_sparse_flash_attention, dropout_keep_mask, flash_attention, ops
from kernels.tiles import LOADS_POINTERS, LOADS_TMA, LOADS_TMA_WS, PassTiles, Tiles, override

# where the TMA path must be taken for eligible inputs: the interpreter, or a Hopper GPU
TMA_HERE = DEVICE.type == "cpu" or torch.cuda.get_device_capability(DEVICE)[0] == 9


def _tiles(loads: int) -> Tiles:
    # 4 warps and 2 stages: the shape Triton's Hopper warp specialiser accepts (see warp_spec_applies)
    return Tiles(PassTiles(64, 64, 4, 2, loads), PassTiles(32, 64, 4, 2, loads), PassTiles(64, 32, 4, 2, loads))


@pytest.fixture
def launches(monkeypatch):
    """The USE_TMA/WARP_SPEC flags of every kernel launch made during the test, in order."""
    seen: list[dict] = []
    real = ops._descriptors

    def spy(t, tensors, warp_spec, traced=False):
        descs, flags = real(t, tensors, warp_spec, traced=traced)
        seen.append(flags)
        return descs, flags

    monkeypatch.setattr(ops, "_descriptors", spy)
    return seen


def _assert_tma(launches, expected=True):
    assert len(launches) == 3  # fwd, dkdv, dq
    assert all(f["USE_TMA"] is (expected and TMA_HERE) for f in launches), launches


@pytest.mark.parametrize("loads", [LOADS_TMA, LOADS_TMA_WS])
@pytest.mark.parametrize(
    "batch,heads,n_q,n_k,d,dtype,causal",
    [
        (1, 2, 128, 128, 64, torch.bfloat16, False),  # aligned: the warp-specialised forward and dK/dV
        (1, 2, 70, 130, 24, torch.float16, True),  # ragged N_q and N_k, d below its padded 32, causal
    ],
)
def test_tma_matches_reference(launches, loads, batch, heads, n_q, n_k, d, dtype, causal):
    q, k, v = make_qkv(batch, heads, n_q, n_k, d, dtype, seed=21)
    with override(_tiles(loads)):
        check_against_reference(flash_attention, q, k, v, causal=causal, ref_kwargs=dict(causal=causal))
    _assert_tma(launches)
    if loads == LOADS_TMA_WS and TMA_HERE:
        # warp specialisation where Triton builds it: forward and dK/dV of the aligned, non-causal call
        ws = ops.warp_spec_supported() and not causal
        assert [f["WARP_SPEC"] for f in launches] == [ws, ws, False]


def test_tma_padding_mask_with_fully_padded_rows(launches):
    q, k, v = make_qkv(3, 2, 70, 130, 32, torch.bfloat16, seed=22)
    mask = (torch.rand(3, 130, generator=torch.Generator().manual_seed(1)) < 0.3).to(DEVICE)
    mask[1] = True  # batch 1: every key padded
    mask[2, 100:] = True
    with override(_tiles(LOADS_TMA)):
        out = check_against_reference(flash_attention, q, k, v, key_padding_mask=mask,
                                      ref_kwargs=dict(key_padding_mask=mask))
    _assert_tma(launches)
    assert torch.all(out[1] == 0) and not torch.isnan(out).any()
    assert torch.all(k.grad[1] == 0) and torch.all(v.grad[2, :, 100:] == 0)


def test_tma_dropout_replays_in_reference(launches, monkeypatch):
    monkeypatch.setattr(ops, "DROPOUT_BWD", "split")  # all three kernels (fwd, dK/dV, dQ) with TMA loads
    q, k, v = make_qkv(2, 2, 70, 90, 32, torch.bfloat16, seed=23)
    p = 0.3
    torch.manual_seed(7)
    keep = dropout_keep_mask(q, k, p)
    torch.manual_seed(7)
    with override(_tiles(LOADS_TMA_WS)):
        check_against_reference(flash_attention, q, k, v, dropout_p=p, causal=True,
                                ref_kwargs=dict(keep=keep, dropout_p=p, causal=True))
    _assert_tma(launches)
    assert not any(f["WARP_SPEC"] for f in launches)  # dropout: TMA without specialisation


def test_tma_reads_views_of_a_fused_qkv_projection(launches):
    """4-D descriptors with the views' own strides; a transposed (non-contiguous) output gradient."""
    g = torch.Generator().manual_seed(24)
    B, N, H, d = 2, 77, 2, 24
    qkv = torch.randn(B, N, 3, H, d, generator=g, dtype=torch.float16).to(DEVICE)
    q, k, v = (qkv[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
    assert not q.is_contiguous() and ops.tma_applies(q, k, v) is TMA_HERE
    grad = torch.randn(B, N, H, d, generator=g, dtype=torch.float16).to(DEVICE).transpose(1, 2)
    with override(_tiles(LOADS_TMA)):
        out = flash_attention(q, k, v)
        out.backward(grad)
    _assert_tma(launches)
    from kernel_reference import attention_reference, rel_err

    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, _ = attention_reference(qr, kr, vr)
    ref.backward(grad.double())
    for got, want in ((out, ref), (q.grad, qr.grad), (k.grad, kr.grad), (v.grad, vr.grad)):
        assert rel_err(got, want) < TOL[torch.float16]


def test_tma_block_sparse(launches):
    q, k, v = make_qkv(1, 2, 128, 128, 32, torch.bfloat16, seed=25)
    layout = torch.tensor([[True, False], [True, True]], device=DEVICE)
    with override(_tiles(LOADS_TMA_WS)):
        check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=64,
                                ref_kwargs=dict(allowed=expand_layout(layout, 64, 128, 128)))
    _assert_tma(launches)
    assert not any(f["WARP_SPEC"] for f in launches)


def test_inputs_tma_cannot_read_fall_back_to_pointers(launches):
    # float32: TMA is offered for 16-bit inputs only; the call still runs (pointer path) and is right
    q, k, v = make_qkv(1, 1, 40, 40, 16, torch.float32, seed=26)
    with override(_tiles(LOADS_TMA)):
        check_against_reference(flash_attention, q, k, v)
    _assert_tma(launches, expected=False)
    # a row of 20 half floats is 40 bytes, not a multiple of 16
    assert not ops.tma_applies(*make_qkv(1, 1, 8, 8, 20, torch.float16, requires_grad=False))
    base = torch.zeros(1, 1, 9, 32, dtype=torch.bfloat16, device=DEVICE)
    shifted = torch.zeros(4 * 32 + 1, dtype=torch.bfloat16, device=DEVICE)[1:].view(1, 1, 4, 32)
    assert not ops.tma_applies(shifted)  # base address 2 bytes past a 16-byte boundary
    assert not ops.tma_applies(base[..., ::2])  # head dim not contiguous
    assert not ops.tma_applies(base.as_strided((1, 1, 4, 16), (288, 288, 20, 1)))  # row stride 40 bytes
    assert not ops.tma_applies(base.expand(2, 3, 9, 32))  # broadcast batch and head (stride 0)


def test_pointer_loads_stay_the_default():
    from kernels import tiles

    for table in (tiles._GPU_16BIT, tiles._GPU_FP32, tiles._GPU_16BIT_DROPOUT):
        for entry in table.values():
            assert all(p.loads == LOADS_POINTERS for p in (entry.fwd, entry.dkdv, entry.dq))


def test_tile_list_carries_the_load_mode():
    t = Tiles(PassTiles(128, 64, 8, 3, LOADS_TMA), PassTiles(32, 128, 4, 3), PassTiles(128, 32, 4, 3, LOADS_TMA_WS))
    assert len(t.as_list()) == 15 and Tiles.from_list(t.as_list()) == t
    assert Tiles.from_list([64, 64, 4, 1] * 3) == Tiles(*[PassTiles(64, 64, 4, 1)] * 3)  # the 12-int form
    assert t.clamped(32).dq.loads == LOADS_TMA_WS
    with pytest.raises(ValueError, match="loads"):
        PassTiles(64, 64, 4, 3, 7)
    with pytest.raises(ValueError, match="15"):
        Tiles.from_list([64] * 13)


def test_warp_specialisation_only_where_triton_builds_it(monkeypatch):
    import triton

    monkeypatch.setattr(ops, "WARP_SPEC_TRITON", {(3, 6)})
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    ws4 = PassTiles(128, 64, 4, 3, LOADS_TMA_WS)
    plain = dict(causal=False, dropout=False, sparse=False, even_n=True)
    assert ops.warp_spec_applies("fwd", ws4, **plain) and ops.warp_spec_applies("dkdv", ws4, **plain)
    assert not ops.warp_spec_applies("dq", ws4, **plain)
    assert not ops.warp_spec_applies("fwd", PassTiles(128, 64, 8, 3, LOADS_TMA_WS), **plain)
    assert not ops.warp_spec_applies("fwd", PassTiles(128, 64, 4, 3, LOADS_TMA), **plain)
    for change in (dict(causal=True), dict(dropout=True), dict(sparse=True)):
        assert not ops.warp_spec_applies("fwd", ws4, **dict(plain, **change))
    assert not ops.warp_spec_applies("fwd", ws4, **dict(plain, even_n=False))
    assert ops.warp_spec_applies("dkdv", ws4, **dict(plain, even_n=False))
    monkeypatch.setattr(triton, "__version__", "3.9.0")  # a Triton whose specialiser rejects the loops
    assert not ops.warp_spec_applies("fwd", ws4, **plain)


def test_tuning_candidates_time_tma_against_the_table_entry():
    from kernels import tuning

    entry = PassTiles(128, 64, 8, 3)
    tma = tuning.candidates("fwd", 64, "tma", entry)
    assert tma[:2] == [(128, 64, 8, 3, LOADS_POINTERS), (128, 64, 8, 3, LOADS_TMA)]  # the anchors
    assert any(c[4] == LOADS_TMA_WS and c[2] == 4 for c in tma)  # a warp-specialised 4-warp candidate
    assert tuning.candidates("fwd", 64, "ptr", entry) == tuning.FWD
    both = tuning.candidates("fwd", 64, "all", entry)
    assert len(both) == len(set(PassTiles(*c) for c in both))  # the pointer anchor is not timed twice
    assert all(PassTiles(*c) for c in tuning.candidates("dq", 128, "all", PassTiles(128, 32, 8, 3)))
