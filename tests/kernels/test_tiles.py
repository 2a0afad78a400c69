"""Tile tables: tuning JSONs from `python -m kernels.tuning` replace entries, dropout has its own."""
from __future__ import annotations

import json

import pytest
import torch

from kernels import tiles


@pytest.fixture
def restore_tables():
    tables = (tiles._GPU_16BIT, tiles._GPU_16BIT_DROPOUT, tiles._GPU_16BIT_DROPOUT_FUSED_DKDV)
    saved = [dict(t) for t in tables]
    yield
    for table, entries in zip(tables, saved):
        table.clear()
        table.update(entries)


def _write(tmp_path, name, best, dropout=0.0, head_dim=64, dropout_bwd=None):
    path = tmp_path / name
    entry = {"best": best, "dropout": dropout}
    if dropout_bwd is not None:
        entry["dropout_bwd"] = dropout_bwd
    path.write_text(json.dumps({"device": "x", "results": {str(head_dim): entry}}))
    return str(path)


def test_tuning_json_replaces_the_tuned_passes_only(tmp_path, restore_tables):
    cuda = torch.device("cuda")
    before = tiles.select(cuda, torch.bfloat16, 128)
    lines = tiles.load_tuning(_write(tmp_path, "t.json", {"fwd": [256, 64, 8, 3]}, head_dim=128))
    after = tiles.select(cuda, torch.bfloat16, 128)
    assert after.fwd == tiles.PassTiles(256, 64, 8, 3)
    assert after.dkdv == before.dkdv and after.dq == before.dq
    assert "d=128" in lines[0]
    # without a dropout entry (d=128 has none), the dropout path uses the same tiles
    assert 128 not in tiles._GPU_16BIT_DROPOUT
    assert tiles.select(cuda, torch.bfloat16, 128, dropout=True) == after
    # CPU tiles never change
    assert tiles.select(torch.device("cpu"), torch.bfloat16, 128) == tiles._CPU


def test_dropout_tuning_fills_its_own_table(tmp_path, restore_tables, monkeypatch):
    cuda = torch.device("cuda")
    plain = tiles.select(cuda, torch.bfloat16, 64)
    path = _write(tmp_path, "drop.json", {"dkdv": [32, 128, 8, 3]}, dropout=0.1)
    monkeypatch.setenv(tiles.TILES_ENV, path)
    tiles.load_tuning_from_env()
    assert tiles.select(cuda, torch.bfloat16, 64, dropout=True).dkdv == tiles.PassTiles(32, 128, 8, 3)
    assert tiles.select(cuda, torch.bfloat16, 64) == plain
    # block-sparse clamps the dropout tiles like the others
    assert tiles.select(cuda, torch.bfloat16, 64, 64, dropout=True).dkdv == tiles.PassTiles(32, 64, 8, 3)


def test_the_one_pass_dropout_backward_has_its_own_dkdv_tiles(tmp_path, restore_tables):
    cuda = torch.device("cuda")
    split = tiles.select(cuda, torch.bfloat16, 64, dropout=True)
    fused = tiles.select(cuda, torch.bfloat16, 64, dropout=True, fused_bwd=True)
    assert fused.dkdv == tiles._GPU_16BIT_DROPOUT_FUSED_DKDV[64] != split.dkdv
    assert (fused.fwd, fused.dq) == (split.fwd, split.dq)
    # only with dropout, 16-bit inputs, on the GPU
    assert tiles.select(cuda, torch.bfloat16, 64, fused_bwd=True) == tiles.select(cuda, torch.bfloat16, 64)
    assert tiles.select(cuda, torch.float32, 64, dropout=True, fused_bwd=True) == \
        tiles.select(cuda, torch.float32, 64, dropout=True)
    assert tiles.select(torch.device("cpu"), torch.bfloat16, 64, dropout=True, fused_bwd=True) == tiles._CPU
    # a tuning JSON made under LRA_DROPOUT_BWD=fused sets the one-pass dK/dV tiles, not the split's
    lines = tiles.load_tuning(_write(tmp_path, "fused.json", {"dkdv": [32, 64, 4, 3]}, dropout=0.1,
                                     dropout_bwd="fused"))
    assert "one-pass dK/dV [32, 64, 4, 3, 0]" in lines[0]
    assert tiles.select(cuda, torch.bfloat16, 64, dropout=True, fused_bwd=True).dkdv == tiles.PassTiles(32, 64, 4, 3)
    assert tiles.select(cuda, torch.bfloat16, 64, dropout=True) == split
    tiles.load_tuning(_write(tmp_path, "split.json", {"dkdv": [64, 128, 8, 2]}, dropout=0.1, dropout_bwd="split"))
    assert tiles.select(cuda, torch.bfloat16, 64, dropout=True).dkdv == tiles.PassTiles(64, 128, 8, 2)
    assert tiles.select(cuda, torch.bfloat16, 64, dropout=True, fused_bwd=True).dkdv == tiles.PassTiles(32, 64, 4, 3)


def test_a_file_that_is_not_a_tuning_json_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a kernels.tuning JSON"):
        tiles.load_tuning(str(path))


def test_tuning_json_with_tma_load_modes(tmp_path, restore_tables):
    """`kernels.tuning --loads tma` writes 5 ints per pass (the last the load mode); 4 mean pointers."""
    cuda = torch.device("cuda")
    tiles.load_tuning(_write(tmp_path, "tma.json", {"fwd": [128, 64, 4, 3, 2], "dq": [128, 32, 8, 3]}))
    got = tiles.select(cuda, torch.bfloat16, 64)
    assert got.fwd == tiles.PassTiles(128, 64, 4, 3, tiles.LOADS_TMA_WS)
    assert got.dq.loads == tiles.LOADS_POINTERS
    assert tiles.Tiles.from_list(got.as_list()) == got
