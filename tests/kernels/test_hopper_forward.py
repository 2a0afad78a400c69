"""The Hopper Gluon forward (:mod:`kernels.hopper_attention`) against the float64 reference, on an sm_90
GPU with a Triton release the kernel supports (elsewhere the module cannot run: skipped with the
reason; ``test_hopper_compile.py`` compiles it offline instead). Every schedule (warp-specialised,
single-partition or ping-pong, with or without the softmax / PV overlap), d = 64 and 128, ragged and
unequal N_q / N_k, causal, key padding with a fully padded batch entry (out 0, lse -inf). The
block-sparse ping-pong forward (:func:`kernels.hopper_attention.launch_sparse_forward`) on the
benchmark layouts (BigBird, local, butterfly) with blocks of 128 and 256, against the reference with
the layout expanded to an element mask, and with every block on against the dense kernel."""
from __future__ import annotations

import math

import pytest
import torch
from kernel_helpers import hopper_inputs, hopper_skip_reason
from kernel_reference import attention_reference, expand_layout, rel_err

from kernels import BlockSparseLayout, layouts
from kernels.hopper_dispatch import with_hopper_forward_tile
from kernels.tiles import select



pytestmark = pytest.mark.skipif(bool(hopper_skip_reason()), reason=hopper_skip_reason() or "supported")

# (warp_specialize, overlap, pingpong)
SCHEDULES = [(False, False, False), (False, True, False), (True, False, False), (True, True, False),
             (True, False, True), (True, True, True)]
SHAPES = [(2, 3, 256, 256), (1, 2, 200, 333), (2, 2, 513, 129), (1, 1, 64, 1000)]  # (B, H, N_q, N_k)


@pytest.mark.parametrize("warp_specialize,overlap,pingpong", SCHEDULES,
                         ids=["plain", "overlap", "ws", "ws-overlap", "pp", "pp-overlap"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["nomask", "mask"])
def test_hopper_forward_matches_the_reference(warp_specialize, overlap, pingpong, d, causal, padded):
    dtypes = (torch.bfloat16, torch.float16) if (warp_specialize and overlap) else (torch.bfloat16,)
    _check_against_the_reference(d, causal, padded, dtypes, warp_specialize=warp_specialize, overlap=overlap,
                                 pingpong=pingpong)


def _check_against_the_reference(d, causal, padded, dtypes, **schedule):
    from kernels.hopper_attention import hopper_forward

    g = torch.Generator(device="cuda").manual_seed(d)
    for dtype in dtypes:
        for B, H, n_q, n_k in SHAPES:
            q, k, v, mask = hopper_inputs(B, H, n_q, n_k, d, dtype, padded, g)
            out, row_stats = hopper_forward(q, k, v, mask, causal, None, **schedule)
            ref, ref_lse = attention_reference(q, k, v, key_padding_mask=mask, causal=causal,
                                               softmax_scale=1 / math.sqrt(d))
            _check_outputs(out, row_stats, ref, ref_lse, d, f"{dtype} {(B, H, n_q, n_k)}")


def _check_outputs(out, row_stats, ref, ref_lse, d, where):
    """out and the row statistics [lse, m, log2(l)] of a forward against the float64 reference (default
    softmax scale): rows that see no key give out 0, lse -inf, m +inf, log2(l) 0."""
    lse, row_max, log2_l = row_stats.double().unbind(2)
    assert rel_err(out, ref) < 1e-2, where
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), ~seen), where
    assert torch.all(out[~seen] == 0) and torch.isfinite(out).all(), where
    assert torch.all(torch.isposinf(row_max[~seen])) and torch.all(log2_l[~seen] == 0), where
    if seen.any():
        assert (lse[seen] - ref_lse[seen]).abs().max() < 1e-2, where
        # the row statistics the backward reads: lse = (m * scale * log2(e) + log2(l)) * ln(2)
        combined = (row_max * math.log2(math.e) / math.sqrt(d) + log2_l) * math.log(2)
        assert (combined[seen] - lse[seen]).abs().max() < 1e-3, where


@pytest.mark.parametrize("overlap", [False, True], ids=["plain", "overlap"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_hopper_pingpong_matches_the_warp_specialised_schedule_exactly(overlap, causal):
    """Each ping-pong consumer runs the 8-warp consumer's instructions on its 64 rows (same tiles,
    masks and wgmma shapes per warpgroup); only the issue order between the warpgroups differs, so
    out and the row statistics are bit-identical."""
    from kernels.hopper_attention import hopper_forward

    g = torch.Generator(device="cuda").manual_seed(7)
    for d in (64, 128):
        for B, H, n_q, n_k in SHAPES:
            q, k, v = (torch.randn(B, H, n, d, device="cuda", generator=g).to(torch.bfloat16)
                       for n in (n_q, n_k, n_k))
            mask = torch.rand(B, n_k, device="cuda", generator=g) < 0.3
            ws = hopper_forward(q, k, v, mask, causal, None, overlap=overlap)
            pp = hopper_forward(q, k, v, mask, causal, None, overlap=overlap, pingpong=True)
            assert torch.equal(ws[0], pp[0]) and torch.equal(ws[1], pp[1]), f"d={d} {(B, H, n_q, n_k)}"


def test_hopper_pingpong_needs_warp_specialisation():
    from kernels.hopper_attention import hopper_forward

    q = torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="warp_specialize"):
        hopper_forward(q, q, q, warp_specialize=False, pingpong=True)


# (benchmark layout, block size, B, H, N_q, N_k, d)
SPARSE_CASES = {
    "bigbird-128-d128": ("bigbird", 128, 2, 3, 1024, 1024, 128),
    "local-256-ragged-d128": ("local", 256, 1, 2, 1000, 1000, 128),
    "butterfly-128-d64": ("butterfly", 128, 2, 2, 2048, 2048, 64),
    "bigbird-256-nq-lt-nk-d64": ("bigbird", 256, 1, 2, 1500, 2100, 64),
    "local-128-nq-gt-nk-d128": ("local", 128, 2, 2, 700, 333, 128),
}


def sparse_layout(name, block_size, heads, n_q, n_k):
    """A per-head block layout for N_q x N_k: the named benchmark layout (built square, at least 8
    blocks, and cropped), with query block 1 of head 1 seeing nothing (out 0, lse -inf there)."""
    n_qb, n_kb = -(-n_q // block_size), -(-n_k // block_size)
    layout = layouts.benchmark_layout(name, max(n_qb, n_kb, 8), device="cuda")[:n_qb, :n_kb]
    layout = layout.repeat(heads, 1, 1)
    layout[1, min(1, n_qb - 1)] = False
    return layout


def _sparse_forward(q, k, v, mask, causal, layout, block_size, overlap=True):
    from kernels.hopper_attention import launch_sparse_forward

    tiles = with_hopper_forward_tile(select(q.device, q.dtype, q.shape[3], block_size))
    indices, counts = BlockSparseLayout.from_dense(layout, block_size).plans(q.shape[2], k.shape[2], causal, tiles)[:2]
    return launch_sparse_forward(q, k, v, torch.empty_like(q), mask, causal, 1 / math.sqrt(q.shape[3]), indices,
                                 counts, overlap=overlap)


@pytest.mark.parametrize("overlap", [False, True], ids=["pp", "pp-overlap"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("case", list(SPARSE_CASES))
def test_hopper_sparse_forward_matches_the_reference(case, padded, causal, overlap):
    name, bs, B, H, n_q, n_k, d = SPARSE_CASES[case]
    g = torch.Generator(device="cuda").manual_seed(n_q + n_k)
    layout = sparse_layout(name, bs, H, n_q, n_k)
    allowed = expand_layout(layout, bs, n_q, n_k)
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v, mask = hopper_inputs(B, H, n_q, n_k, d, dtype, padded, g)
        out, row_stats = _sparse_forward(q, k, v, mask, causal, layout, bs, overlap)
        ref, ref_lse = attention_reference(q, k, v, key_padding_mask=mask, causal=causal, allowed=allowed,
                                           softmax_scale=1 / math.sqrt(d))
        _check_outputs(out, row_stats, ref, ref_lse, d, f"{case} {dtype}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_hopper_sparse_forward_with_every_block_on_equals_the_dense_kernel_exactly(causal):
    """Every block on: each slot's list is its query tile's key tiles in the dense kernel's order (no-mask
    tiles, then the diagonal / ragged ones), so the sparse kernel runs the dense ping-pong kernel's
    steps and gives bit-identical out and row statistics; only the order of the programs differs."""
    from kernels.hopper_attention import hopper_forward

    g = torch.Generator(device="cuda").manual_seed(5)
    for d in (64, 128):
        for B, H, n_q, n_k in SHAPES:
            q, k, v = (torch.randn(B, H, n, d, device="cuda", generator=g).to(torch.bfloat16)
                       for n in (n_q, n_k, n_k))
            mask = torch.rand(B, n_k, device="cuda", generator=g) < 0.3
            layout = torch.ones(-(-n_q // 128), -(-n_k // 128), dtype=torch.bool, device="cuda")
            sparse = _sparse_forward(q, k, v, mask, causal, layout, 128)
            dense = hopper_forward(q, k, v, mask, causal, None, pingpong=True)
            assert torch.equal(sparse[0], dense[0]) and torch.equal(sparse[1], dense[1]), f"d={d} {(B, H, n_q, n_k)}"


def test_hopper_sparse_forward_rejects_a_plan_of_other_tiles():
    from kernels.hopper_attention import launch_sparse_forward

    q = torch.randn(1, 2, 512, 64, device="cuda", dtype=torch.bfloat16)
    layout = BlockSparseLayout.from_dense(torch.ones(4, 4, dtype=torch.bool, device="cuda"), 128)
    tiles = select(q.device, q.dtype, 64, 128)  # forward tile 64 x 64: 8 query tiles
    indices, counts = layout.plans(512, 512, False, tiles)[:2]
    with pytest.raises(ValueError, match="one slot per 128-row query tile"):
        launch_sparse_forward(q, q, q, torch.empty_like(q), None, False, 0.125, indices, counts)
