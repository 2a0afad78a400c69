"""The persistent block-sparse forward (kernels.persistent_forward): its step list, its numbers
against the float64 reference, and which calls fall back to the row kernel."""
from __future__ import annotations

import pytest
import torch
from kernel_helpers import DEVICE, check_against_reference, make_qkv
from kernel_reference import expand_layout

from kernels import BlockSparseLayout, block_sparse_flash_attention, persistent_forward
from kernels.tiles import PassTiles, Tiles, override

TILES = Tiles(PassTiles(32, 32), PassTiles(32, 32), PassTiles(32, 32))


@pytest.fixture
def persistent_launches(monkeypatch):
    """Grid of every persistent launch made during the test; persistent mode on, 4 programs per SM."""
    monkeypatch.setattr(persistent_forward, "PROGRAMS_PER_SM", 4)
    seen: list[tuple] = []
    real = persistent_forward.flash_fwd_persistent_kernel

    class Spy:
        def __getitem__(self, grid):
            seen.append(grid)
            return real[grid]
    monkeypatch.setattr(persistent_forward, "flash_fwd_persistent_kernel", Spy())
    return seen


def test_setting_parses_and_rejects():
    assert persistent_forward.parse_setting(None) == persistent_forward.DEFAULT_PROGRAMS_PER_SM
    assert persistent_forward.parse_setting(" persistent ") == persistent_forward.DEFAULT_PROGRAMS_PER_SM
    assert persistent_forward.parse_setting("persistent:2") == 2
    assert persistent_forward.parse_setting("rows") == 0
    for bad in ("persistent:0", "persistent:x", "flat", "rows:2"):
        with pytest.raises(ValueError, match="LRA_SPARSE_FORWARD"):
            persistent_forward.parse_setting(bad)


def banded_layout(heads, nb):
    """Per-head layouts: a band of width 3 plus one global query row in a different place per head."""
    layout = torch.zeros(heads, nb, nb, dtype=torch.bool, device=DEVICE)
    for i in range(nb):
        layout[:, i, max(0, i - 1):i + 2] = True
    for h in range(heads):
        layout[h, (2 * h) % nb, :] = True
    return layout


@pytest.mark.parametrize("programs", [1, 5, 1000])
def test_flat_plan_covers_every_tile_row_once_in_order(programs):
    heads, nb, batch = 3, 6, 7  # 21 (batch, head) pairs: more than one group of 16
    compiled = BlockSparseLayout.from_dense(banded_layout(heads, nb), 32)
    idx, cnt = compiled.plans(nb * 32, nb * 32, False, TILES)[:2]
    row_bh, meta, starts = persistent_forward.flat_plan(idx, cnt, batch * heads, heads, programs)
    bh_total = batch * heads
    assert starts.numel() == programs + 1 and starts[0] == 0 and starts[-1] == row_bh.numel()
    assert torch.all(starts[1:] >= starts[:-1])
    key_tile = (meta & ((1 << 28) - 1)).tolist()
    first, last = ((meta >> 28) & 1).bool().tolist(), ((meta >> 29) & 1).bool().tolist()
    runs, pos = [], 0
    while pos < row_bh.numel():  # consecutive steps of one (tile row, batch * head) form one run
        end = pos
        while not last[end]:
            end += 1
        assert first[pos] and not any(first[pos + 1:end + 1]) and len(set(row_bh[pos:end + 1].tolist())) == 1
        runs.append((pos, end + 1))
        pos = end + 1
    assert len(runs) == nb * bh_total
    seen = set()
    for lo, hi in runs:
        row, bh = divmod(int(row_bh[lo]), bh_total)
        seen.add((row, bh))
        want = [j for j in range(nb) if compiled.layout[bh % heads, row, j]]
        assert sorted(key_tile[lo:hi]) == want
        # a run never straddles two programs
        assert not any(lo < s < hi for s in starts.tolist())
    assert seen == {(r, bh) for r in range(nb) for bh in range(bh_total)}
    # cached per plan
    assert persistent_forward.flat_plan(idx, cnt, bh_total, heads, programs)[0] is row_bh


def test_flat_plan_declines_a_layout_with_an_empty_row():
    layout = torch.eye(4, dtype=torch.bool, device=DEVICE)
    layout[2, 2] = False
    compiled = BlockSparseLayout.from_dense(layout, 32)
    idx, cnt = compiled.plans(128, 128, False, TILES)[:2]
    assert persistent_forward.flat_plan(idx, cnt, 2, 1, 3) is None


@pytest.mark.parametrize(
    "batch,heads,n_q,d,dtype,shared",
    [
        (2, 3, 192, 16, torch.float32, False),  # per-head layouts with a global row each
        (3, 6, 160, 24, torch.bfloat16, True),  # 18 (batch, head) pairs > one group; d padded to 32
        (1, 2, 150, 32, torch.float16, False),  # ragged N_q (the last query tile is partial)
    ],
)
def test_persistent_forward_matches_reference(persistent_launches, batch, heads, n_q, d, dtype, shared):
    n_k, bs = 192, 32
    nb_q = -(-n_q // bs)
    layout = banded_layout(heads, max(nb_q, n_k // bs))[:, :nb_q, :n_k // bs]
    layout = layout[0] if shared else layout
    q, k, v = make_qkv(batch, heads, n_q, n_k, d, dtype, seed=31)
    with override(TILES):
        check_against_reference(block_sparse_flash_attention, q, k, v, layout=layout, block_size=bs,
                                ref_kwargs=dict(allowed=expand_layout(layout, bs, n_q, n_k)))
    assert persistent_launches == [(persistent_forward.CPU_PROGRAMS,)] or DEVICE.type == "cuda"
    assert len(persistent_launches) == 1


def test_persistent_and_row_kernels_agree(persistent_launches, monkeypatch):
    q, k, v = make_qkv(2, 2, 128, 128, 16, torch.float32, seed=32, requires_grad=False)
    layout = banded_layout(2, 4)
    with override(TILES):
        out = block_sparse_flash_attention(q, k, v, layout, block_size=32)
        monkeypatch.setattr(persistent_forward, "PROGRAMS_PER_SM", 0)
        rows = block_sparse_flash_attention(q, k, v, layout, block_size=32)
    assert len(persistent_launches) == 1
    torch.testing.assert_close(out, rows, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["causal", "padding", "dropout", "ragged_keys", "empty_row"])
def test_calls_it_does_not_cover_take_the_row_kernel(persistent_launches, case):
    n = 150 if case == "ragged_keys" else 128
    nb = -(-n // 32)
    layout = banded_layout(1, nb)[0]
    if case == "empty_row":
        layout[1] = False
    q, k, v = make_qkv(1, 2, n, n, 16, torch.float32, seed=33)
    kwargs = dict(causal=case == "causal", dropout_p=0.2 if case == "dropout" else 0.0)
    if case == "padding":
        kwargs["key_padding_mask"] = torch.zeros(1, n, dtype=torch.bool, device=DEVICE)
    with override(TILES):
        out = block_sparse_flash_attention(q, k, v, layout, block_size=32, **kwargs)
    assert persistent_launches == []
    assert not torch.isnan(out).any()
