"""Tile tables: tuning JSONs from `python -m kernels.tuning` replace entries, dropout has its own."""
from __future__ import annotations

import json

import pytest
import torch

from kernels import tiles


@pytest.fixture
def restore_tables():
    saved = dict(tiles._GPU_16BIT), dict(tiles._GPU_16BIT_DROPOUT)
    yield
    tiles._GPU_16BIT.clear()
    tiles._GPU_16BIT.update(saved[0])
    tiles._GPU_16BIT_DROPOUT.clear()
    tiles._GPU_16BIT_DROPOUT.update(saved[1])


def _write(tmp_path, name, best, dropout=0.0, head_dim=64):
    path = tmp_path / name
    path.write_text(json.dumps({"device": "x", "results": {str(head_dim): {"best": best, "dropout": dropout}}}))
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
