"""Block-sparse FlashAttention against dense masked attention (float64 reference)."""
from __future__ import annotations

import contextlib

import pytest
import torch
from kernel_helpers import DEVICE, TOL, check_against_reference, make_qkv
from kernel_reference import expand_layout, rel_err

from kernels import BlockSparseLayout, block_sparse_flash_attention, flash_attention, layouts
from kernels.block_sparse import compile_layout
from kernels.tiles import PassTiles, Tiles, override, select


def random_layout(shape, density, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) < density).to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_random_shared_layout_with_empty_rows_ragged_n(dtype):
    n, bs = 130, 32  # 5 blocks, the last one partial
    layout = random_layout((5, 5), 0.5, seed=1)
    layout[2] = False  # query block 2 sees nothing: zeros, zero gradient
    layout[0, 4] = True  # the ragged last key block
    q, k, v = make_qkv(1, 2, n, n, 32, dtype, seed=21)
    out = check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs,
                                  ref_kwargs=dict(allowed=expand_layout(layout, bs, n, n)))
    assert torch.all(out[:, :, 64:96] == 0) and torch.all(q.grad[:, :, 64:96] == 0)


def test_per_head_layout_causal_padding_unequal_lengths():
    n_q, n_k, bs = 70, 100, 32
    layout = random_layout((3, 3, 4), 0.6, seed=2)
    q, k, v = make_qkv(2, 3, n_q, n_k, 24, torch.float16, seed=22)
    mask = torch.zeros(2, n_k, dtype=torch.bool, device=DEVICE)
    mask[0, 90:] = True
    mask[1, :10] = True
    check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs, causal=True,
                            key_padding_mask=mask,
                            ref_kwargs=dict(allowed=expand_layout(layout, bs, n_q, n_k), causal=True,
                                            key_padding_mask=mask))


@pytest.mark.parametrize("block_size", [64, 128])
def test_layout_blocks_larger_than_tiles(block_size):
    """CPU tiles are 64 wide: a 128 block spans 2 x 2 tiles, a 64 block exactly one."""
    n = 300
    nb = -(-n // block_size)
    layout = random_layout((nb, nb), 0.5, seed=block_size)
    layout[-1, -1] = True
    q, k, v = make_qkv(1, 2, n, n, 16, torch.float32, seed=23)
    check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=block_size, causal=True,
                            ref_kwargs=dict(allowed=expand_layout(layout, block_size, n, n), causal=True))


def test_small_tiles_inside_blocks():
    tiles = Tiles(PassTiles(32, 16), PassTiles(16, 32), PassTiles(16, 16))
    n, bs = 150, 32
    layout = random_layout((2, 5, 5), 0.4, seed=3)
    q, k, v = make_qkv(1, 2, n, n, 16, torch.float32, seed=24)
    with override(tiles):
        check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs, causal=True,
                                ref_kwargs=dict(allowed=expand_layout(layout, bs, n, n), causal=True))


@pytest.mark.parametrize("head_dim", [16, 32, 64, 128])
def test_shipped_gpu_sparse_tiles_against_float64(head_dim):
    """Each head dim's block-sparse entry of the GPU tile table, forward and backward, against float64:
    ragged N, causal, a padded key range, 128-blocks (the tiles' shapes unclamped). On the GPU the call
    is dispatched as users get it, in bf16; on CPU the same tile shapes run through the interpreter."""
    on_gpu = DEVICE.type == "cuda"
    n, bs = (1100, 128) if on_gpu else (300, 128)
    nb = -(-n // bs)
    layout = random_layout((2, nb, nb), 0.6, seed=head_dim)
    layout[:, torch.arange(nb), torch.arange(nb)] = True
    dtype = torch.bfloat16 if on_gpu else torch.float32
    q, k, v = make_qkv(2, 2, n, n, head_dim, dtype, seed=head_dim)
    mask = torch.zeros(2, n, dtype=torch.bool, device=DEVICE)
    mask[1, n - 90:] = True
    shipped = select(torch.device("cuda"), torch.bfloat16, head_dim, bs)
    with contextlib.nullcontext() if on_gpu else override(shipped):
        check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs, causal=True,
                                key_padding_mask=mask,
                                ref_kwargs=dict(allowed=expand_layout(layout, bs, n, n), causal=True,
                                                key_padding_mask=mask))


def test_full_layout_equals_dense_kernel():
    q, k, v = make_qkv(1, 2, 100, 100, 32, torch.float32, seed=25, requires_grad=False)
    layout = torch.ones(4, 4, dtype=torch.bool, device=DEVICE)
    sparse = block_sparse_flash_attention(q, k, v, layout, block_size=32, causal=True)
    dense = flash_attention(q, k, v, causal=True)
    assert rel_err(sparse, dense) < 1e-6


def test_builder_layout_bigbird():
    n, bs = 256, 32
    layout = layouts.bigbird(n // bs, seed=0, device=DEVICE)
    q, k, v = make_qkv(1, 1, n, n, 16, torch.bfloat16, seed=26)
    check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs,
                            ref_kwargs=dict(allowed=expand_layout(layout, bs, n, n)))


def test_compressed_layout_is_built_once_and_reused():
    n, bs = 96, 32
    layout = random_layout((3, 3), 0.5, seed=4)
    layout[:, 0] = True
    compiled = BlockSparseLayout.from_dense(layout, block_size=bs)
    q, k, v = make_qkv(1, 1, n, n, 16, torch.float32, requires_grad=False)
    a = block_sparse_flash_attention(q, k, v, compiled, block_size=bs)
    b = block_sparse_flash_attention(q, k, v, compiled, block_size=bs)  # second layer, same plans
    assert torch.equal(a, b) and len(compiled._plans) == 1
    block_sparse_flash_attention(q, k, v, compiled, block_size=bs, causal=True)
    assert len(compiled._plans) == 2
    # a bool layout passed directly is compressed once, and again after an in-place change
    assert compile_layout(layout, bs) is compile_layout(layout, bs)
    first = compile_layout(layout, bs)
    layout[1, 1] = ~layout[1, 1]
    assert compile_layout(layout, bs) is not first
    out = block_sparse_flash_attention(q, k, v, layout, block_size=bs)
    ref = flash_attention(q, k, v)  # sanity: differs from dense since blocks are skipped
    assert not torch.allclose(out, ref)


def by_row(idx, cnt):
    """A plan (stored by launch slot: slot p holds tile row cnt[h, p, 2]) re-indexed by tile row."""
    inverse = cnt[..., 2].long().argsort(-1)
    return (idx.gather(1, inverse[..., None].expand(-1, -1, idx.shape[-1])),
            cnt.gather(1, inverse[..., None].expand(-1, -1, 3)))


def test_plans_visit_only_allowed_tiles():
    """Skipped blocks cost nothing: each index list holds exactly the tiles to compute."""
    layout = torch.tensor([[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool, device=DEVICE)
    compiled = BlockSparseLayout.from_dense(layout, 32)
    tiles = Tiles(PassTiles(32, 32), PassTiles(32, 32), PassTiles(32, 32))
    fwd_idx, fwd_cnt, t_idx, t_cnt, _, _ = compiled.plans(128, 128, False, tiles)
    # stored by launch slot, heaviest row first: rows 3 (4 tiles), 0 (2), 1 (1), 2 (0)
    assert fwd_cnt[0, :, 2].tolist() == [3, 0, 1, 2] and fwd_cnt[0, :, 1].tolist() == [4, 2, 1, 0]
    assert fwd_idx[0, 1, :2].tolist() == [0, 3]  # slot 1 = row 0
    fwd_idx, fwd_cnt = by_row(fwd_idx, fwd_cnt)
    t_idx, t_cnt = by_row(t_idx, t_cnt)
    assert fwd_cnt[0, :, 1].tolist() == [2, 1, 0, 4] and fwd_cnt[0, :, 0].tolist() == [2, 1, 0, 4]
    assert fwd_idx[0, 0, :2].tolist() == [0, 3]
    assert t_cnt[0, :, 1].tolist() == [2, 2, 1, 2] and t_idx[0, 3, :2].tolist() == [0, 3]
    # causal on the 4 x 4 tile grid: tiles above the diagonal vanish, the diagonal is partial
    fwd_idx, fwd_cnt = by_row(*compiled.plans(128, 128, True, tiles)[:2])
    assert fwd_cnt[0, :, 1].tolist() == [1, 1, 0, 4] and fwd_cnt[0, :, 0].tolist() == [0, 0, 0, 3]
    assert fwd_idx[0, 3].tolist() == [0, 1, 2, 3]  # full tiles first, then the diagonal one


def uneven_layout():
    """Per-head layouts whose tile rows differ ~4x in work: a sparse band plus a global row (and
    column) in a different place per head, as BigBird's global blocks."""
    nb = 6
    layout = torch.eye(nb, dtype=torch.bool, device=DEVICE).repeat(2, 1, 1)
    layout[0, 4, :] = True  # head 0: query block 4 sees every key block
    layout[0, :, 4] = True
    layout[1, 0, :] = True  # head 1: query block 0 global, plus a half-global row 3
    layout[1, 3, :3] = True
    return layout


def test_launch_order_puts_heaviest_rows_first():
    """Each pass launches its tile rows longest-first (a permutation, counts non-increasing)."""
    layout = uneven_layout()
    compiled = BlockSparseLayout.from_dense(layout, 32)
    tiles = Tiles(PassTiles(32, 32), PassTiles(32, 32), PassTiles(32, 32))
    plans = compiled.plans(192, 192, False, tiles)
    for idx, cnt in zip(plans[0::2], plans[1::2]):  # fwd, dK/dV, dQ
        assert cnt.shape == (2, 6, 3)
        order = cnt[..., 2].long()
        assert torch.equal(order.sort(-1).values, torch.arange(6, device=DEVICE).expand(2, 6))
        work = cnt[..., 1]  # stored by launch slot: non-increasing
        assert torch.all(work[:, 1:] <= work[:, :-1])
        # each slot's list is its row's: re-indexed by row, the same as the plan of the unordered rows
        row_idx, row_cnt = by_row(idx, cnt)
        assert torch.equal(row_cnt[..., 2], torch.arange(6, device=DEVICE, dtype=row_cnt.dtype).expand(2, 6))
    fwd_cnt, dkdv_cnt = plans[1], plans[3]
    assert fwd_cnt[0, 0, 2] == 4 and fwd_cnt[1, :2, 2].tolist() == [0, 3]  # the global rows go first
    assert dkdv_cnt[0, 0, 2] == 4  # key block 4 is seen by every query block
    fwd_idx = by_row(plans[0], plans[1])[0]
    assert fwd_idx[0, 4].tolist() == [0, 1, 2, 3, 4, 5] and fwd_idx[1, 2, :1].tolist() == [2]
    # causal: later query rows see more tiles; ties keep the row with more partial tiles first
    fwd_cnt = compiled.plans(192, 192, True, tiles)[1]
    work = fwd_cnt[..., 1]
    assert torch.all(work[:, 1:] <= work[:, :-1]) and fwd_cnt[0, 0, 2] == 4


@pytest.mark.parametrize("causal", [False, True])
def test_uneven_rows_equal_dense_masked_reference(causal):
    """Rows of very unequal work, reordered at launch: results are the dense masked attention."""
    n, bs = 180, 32  # ragged last block
    layout = uneven_layout()
    mask = torch.zeros(1, n, dtype=torch.bool, device=DEVICE)
    mask[0, 170:] = True
    q, k, v = make_qkv(1, 2, n, n, 16, torch.float32, seed=27)
    with override(Tiles(PassTiles(32, 32), PassTiles(32, 32), PassTiles(32, 32))):
        check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs, causal=causal,
                                key_padding_mask=mask,
                                ref_kwargs=dict(allowed=expand_layout(layout, bs, n, n), causal=causal,
                                                key_padding_mask=mask))


def test_launch_order_across_head_groups_covers_every_tile():
    """18 (batch, head) pairs: one full group of 16 heads and a partial one of 2, every tile once."""
    n, bs = 90, 16  # 6 blocks, the last one ragged
    layout = uneven_layout()[0]  # shared by all heads
    q, k, v = make_qkv(3, 6, n, n, 16, torch.float32, seed=28)
    with override(Tiles(PassTiles(16, 16), PassTiles(16, 16), PassTiles(16, 16))):
        check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs,
                                ref_kwargs=dict(allowed=expand_layout(layout, bs, n, n)))


def test_layout_check_runs_once_per_call_signature(monkeypatch):
    """A BlockSparseLayout checks a call signature once (the layout is fixed once built); a new
    signature is checked, and a bad one still raises."""
    from kernels import block_sparse

    compiled = BlockSparseLayout.from_dense(torch.eye(3, dtype=torch.bool, device=DEVICE), 32)
    calls = []
    real = block_sparse._layouts.check_layout
    monkeypatch.setattr(block_sparse._layouts, "check_layout", lambda *a, **kw: (calls.append(a[1:4]), real(*a, **kw)))
    for _ in range(3):
        compiled.check(96, 96, 2, DEVICE)
    assert calls == [(3, 3, 2)]
    compiled.check(80, 96, 2, DEVICE)  # 3 query blocks again, but another signature: checked
    assert len(calls) == 2
    with pytest.raises(ValueError):
        compiled.check(200, 96, 2, DEVICE)  # 7 query blocks: the layout has 3
    with pytest.raises(ValueError):
        compiled.check(200, 96, 2, DEVICE)  # a failed signature is not remembered
    assert len(calls) == 4


def test_layouts_and_plans_made_under_inference_mode():
    """Evaluation under torch.inference_mode (Lightning's default, also for the sanity check before training):
    a bool layout that is an inference tensor (no version counter) works, and a BlockSparseLayout first used
    there caches plans that a later training call can save for its backward."""
    n, bs = 40, 16
    q, k, v = make_qkv(1, 2, n, n, 16, torch.float32)
    with torch.inference_mode():
        layout = layouts.local(layouts.num_blocks(n, bs), 3, device=DEVICE)
        assert layout.is_inference()
        out = block_sparse_flash_attention(q, k, v, layout, block_size=bs)
    allowed = expand_layout(layout, bs, n, n)
    check_against_reference(lambda q, k, v: block_sparse_flash_attention(q, k, v, layout, block_size=bs), q, k, v,
                            ref_kwargs=dict(allowed=allowed))
    compiled = BlockSparseLayout.from_dense(random_layout((3, 3), 0.6, seed=2), bs)
    with torch.inference_mode():
        first = block_sparse_flash_attention(q, k, v, compiled, block_size=bs)
    out = check_against_reference(lambda q, k, v: block_sparse_flash_attention(q, k, v, compiled, block_size=bs),
                                  q, k, v, ref_kwargs=dict(allowed=expand_layout(compiled.layout[0], bs, n, n)))
    assert torch.equal(out.detach(), first) and len(compiled._plans) == 1


def reference_plan(layout, block_size, n_q, n_k, causal, tile_m, tile_n):
    """The forward plan of a bool block layout, built tile by tile: per head and query tile, (the key
    tiles that need no element mask, the partial ones), each ascending. A key tile is visited when
    its layout block is True and, causal, some row of the query tile sees one of its keys; it is
    partial when it runs past N_k or, causal, crosses the diagonal of the tile's first row."""
    lay = layout if layout.dim() == 3 else layout[None]
    offset = n_k - n_q
    plan = {}
    for h in range(lay.shape[0]):
        for r in range(-(-n_q // tile_m)):
            first, last = r * tile_m, min((r + 1) * tile_m, n_q) - 1
            full, partial = [], []
            for c in range(-(-n_k // tile_n)):
                k_first, k_last = c * tile_n, (c + 1) * tile_n - 1
                if not lay[h, first // block_size, k_first // block_size]:
                    continue
                if causal and k_first > last + offset:
                    continue
                masked = k_last >= n_k or (causal and k_last > first + offset)
                (partial if masked else full).append(c)
            plan[h, r] = (full, partial)
    return plan


HOPPER_LAYOUTS = ("bigbird", "bigbird-ragged", "local-256", "butterfly", "per-head-nq-ne-nk")


def hopper_layouts():
    """(name, bool layout, block size, N_q, N_k) of the Hopper tile plan checks (HOPPER_LAYOUTS)."""
    yield "bigbird", layouts.bigbird(8, seed=3, device=DEVICE), 128, 1024, 1024
    yield "bigbird-ragged", layouts.bigbird(9, seed=4, device=DEVICE), 128, 1100, 1100
    yield "local-256", layouts.local(4, 3, device=DEVICE), 256, 1000, 1000
    yield "butterfly", layouts.butterfly(8, device=DEVICE), 128, 1024, 1024
    yield "per-head-nq-ne-nk", random_layout((3, 3, 5), 0.5, seed=5), 128, 300, 600


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("case", HOPPER_LAYOUTS)
def test_hopper_tile_plans_match_a_reference_built_from_the_layout(case, causal):
    """The forward plan the Hopper forward walks (forward tile 128 x 128: hopper_dispatch.sparse_tiles)
    holds, per head and query tile, exactly the reference's key tiles, full ones first; slots run
    longest first; the backward plans are those of the tiles the call had."""
    from kernels.hopper_dispatch import with_hopper_forward_tile
    from kernels.hopper_support import FORWARD_TILE

    _, layout, bs, n_q, n_k = next(c for c in hopper_layouts() if c[0] == case)
    base = select(torch.device("cuda"), torch.bfloat16, 128, bs)
    tiles = with_hopper_forward_tile(base)
    assert (tiles.fwd.block_m, tiles.fwd.block_n) == FORWARD_TILE and (tiles.dkdv, tiles.dq) == (base.dkdv, base.dq)
    compiled = BlockSparseLayout.from_dense(layout, bs)
    plans = compiled.plans(n_q, n_k, causal, tiles)
    idx, cnt = plans[:2]
    n_rows = -(-n_q // 128)
    assert cnt.shape == (compiled.layout.shape[0], n_rows, 3) and idx.dtype == cnt.dtype == torch.int32
    assert torch.all(cnt[..., 1][:, 1:] <= cnt[..., 1][:, :-1])  # longest first
    row_idx, row_cnt = by_row(idx, cnt)
    for (h, r), (full, partial) in reference_plan(compiled.layout, bs, n_q, n_k, causal, 128, 128).items():
        n_full, n_visit = row_cnt[h, r, :2].tolist()
        assert (n_full, n_visit) == (len(full), len(full) + len(partial)), (h, r)
        assert row_idx[h, r, :n_visit].tolist() == full + partial, (h, r)
    # the backward's plans are the base tiles' plans
    for ours, theirs in zip(plans[2:], compiled.plans(n_q, n_k, causal, base)[2:]):
        assert torch.equal(ours, theirs)


def test_hopper_tile_plan_of_a_causal_layout_with_fewer_queries_than_keys():
    """Bottom-right causal with N_q < N_k on the 128 x 128 grid, a hand-checked case: 2 query tiles of
    200 rows against 3 key tiles of 333 keys (offset 133), all blocks on."""
    from kernels.hopper_dispatch import with_hopper_forward_tile

    compiled = BlockSparseLayout.from_dense(torch.ones(2, 3, dtype=torch.bool, device=DEVICE), 128)
    tiles = with_hopper_forward_tile(select(torch.device("cuda"), torch.float16, 64, 128))
    plan = compiled.plans(200, 333, True, tiles)[:2]
    idx, cnt = by_row(*plan)
    # query tile 0 (rows 0-127, keys <= row + 133): key tile 0 full (127 <= 0 + 133), 1 and 2 partial
    # (row 0 sees keys <= 133, row 127 keys <= 260); query tile 1 (rows 128-199, keys <= 332): key
    # tiles 0 and 1 full (255 <= 128 + 133), 2 ragged (keys 256-332 of a 384-key tile)
    assert cnt[0, :, :2].tolist() == [[1, 3], [2, 3]]
    assert idx[0, 0, :3].tolist() == [0, 1, 2] and idx[0, 1, :3].tolist() == [0, 1, 2]
    assert plan[1][0, :, 2].tolist() == [0, 1]  # equal work: the row with more partial tiles first
