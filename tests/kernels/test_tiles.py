"""Tile tables: tuning JSONs from `python -m kernels.tuning` replace entries, dropout has its own."""
from __future__ import annotations

import ast
import json
import re

import pytest
import torch
from kernel_helpers import DEVICE

from kernels import tiles


@pytest.fixture
def restore_tables():
    tables = (tiles._GPU_16BIT, tiles._GPU_16BIT_DROPOUT, tiles._GPU_16BIT_DROPOUT_FUSED_DKDV, tiles._GPU_16BIT_SPARSE)
    saved = [dict(t) for t in tables]
    yield
    for table, entries in zip(tables, saved):
        table.clear()
        table.update(entries)


def _write(tmp_path, name, best, dropout=0.0, head_dim=64, dropout_bwd=None, sparse=None):
    path = tmp_path / name
    entry = {"best": best, "dropout": dropout}
    if dropout_bwd is not None:
        entry["dropout_bwd"] = dropout_bwd
    if sparse is not None:
        entry["sparse"] = sparse
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


def test_dropout_tuning_fills_its_own_table(tmp_path, restore_tables):
    cuda = torch.device("cuda")
    plain = tiles.select(cuda, torch.bfloat16, 64)
    tiles.load_tuning(_write(tmp_path, "drop.json", {"dkdv": [32, 128, 8, 3]}, dropout=0.1))
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
    # a tuning JSON of the one-pass backward sets its dK/dV tiles, not the split's
    lines = tiles.load_tuning(_write(tmp_path, "fused.json", {"dkdv": [32, 64, 4, 3]}, dropout=0.1,
                                     dropout_bwd="fused"))
    assert "one-pass dK/dV [32, 64, 4, 3]" in lines[0]
    assert tiles.select(cuda, torch.bfloat16, 64, dropout=True, fused_bwd=True).dkdv == tiles.PassTiles(32, 64, 4, 3)
    assert tiles.select(cuda, torch.bfloat16, 64, dropout=True) == split
    tiles.load_tuning(_write(tmp_path, "split.json", {"dkdv": [64, 128, 8, 2]}, dropout=0.1, dropout_bwd="split"))
    assert tiles.select(cuda, torch.bfloat16, 64, dropout=True).dkdv == tiles.PassTiles(64, 128, 8, 2)
    assert tiles.select(cuda, torch.bfloat16, 64, dropout=True, fused_bwd=True).dkdv == tiles.PassTiles(32, 64, 4, 3)


def test_block_sparse_tuning_fills_its_own_table(tmp_path, restore_tables):
    cuda = torch.device("cuda")
    dense = tiles.select(cuda, torch.bfloat16, 32)
    shipped = tiles._GPU_16BIT_SPARSE[32]                                   # measured on the H200
    assert shipped != dense and tiles.select(cuda, torch.bfloat16, 32, 128) == shipped.clamped(128)
    sparse_128, dense_128 = tiles.select(cuda, torch.bfloat16, 128, 128), tiles.select(cuda, torch.bfloat16, 128)
    assert sparse_128.fwd == dense_128.fwd and (sparse_128.dkdv, sparse_128.dq) != (dense_128.dkdv, dense_128.dq)
    del tiles._GPU_16BIT_SPARSE[128]  # a head dim not measured: the dense entry (restore_tables puts it back)
    assert tiles.select(cuda, torch.bfloat16, 128, 128) == dense_128.clamped(128)
    lines = tiles.load_tuning(_write(tmp_path, "sparse.json", {"fwd": [128, 128, 8, 3]}, head_dim=32,
                                     sparse={"layout": "bigbird", "block_size": 128}))
    assert "d=32 block-sparse" in lines[0]
    got = tiles.select(cuda, torch.bfloat16, 32, 128)
    assert got.fwd == tiles.PassTiles(128, 128, 8, 3) and (got.dkdv, got.dq) == (shipped.dkdv, shipped.dq)
    assert tiles.select(cuda, torch.bfloat16, 32, 64).fwd == tiles.PassTiles(64, 64, 8, 3)  # clamped
    assert tiles.select(cuda, torch.bfloat16, 32) == dense                               # dense calls keep theirs
    assert tiles.select(cuda, torch.bfloat16, 32, 128, dropout=True) == \
        tiles._GPU_16BIT_DROPOUT[32].clamped(128)                                        # dropout: its own table
    with pytest.raises(ValueError, match="block-sparse with dropout"):
        tiles.load_tuning(_write(tmp_path, "bad.json", {"fwd": [64, 64, 4, 3]}, dropout=0.1,
                                 sparse={"layout": "local", "block_size": 64}))


def test_tuning_rejects_sparse_with_dropout():
    from kernels import tuning

    with pytest.raises(SystemExit):
        tuning.main(["--sparse", "bigbird", "--dropout", "0.1"])


def test_a_file_that_is_not_a_tuning_json_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a kernels.tuning JSON"):
        tiles.load_tuning(str(path))


def test_tuning_entries_are_four_ints(tmp_path, restore_tables):
    """The tuner writes (BLOCK_M, BLOCK_N, num_warps, num_stages) per pass; an entry of any other length
    is refused, naming it."""
    cuda = torch.device("cuda")
    tiles.load_tuning(_write(tmp_path, "ok.json", {"fwd": [128, 64, 4, 3], "dq": [128, 32, 8, 3]}))
    got = tiles.select(cuda, torch.bfloat16, 64)
    assert got.fwd == tiles.PassTiles(128, 64, 4, 3) and got.dq == tiles.PassTiles(128, 32, 8, 3)
    assert tiles.Tiles.from_list(got.as_list()) == got and len(got.as_list()) == 12
    for entry in ([128, 64, 4, 3, 0], [128, 64, 4]):
        with pytest.raises(ValueError, match=re.escape(f"tile entry {entry}")):
            tiles.load_tuning(_write(tmp_path, "bad.json", {"fwd": entry}))
    with pytest.raises(ValueError, match="expected 12 tile parameters"):
        tiles.Tiles.from_list(got.as_list() + [0, 0, 0])


def test_sparse_tuning_times_the_block_sparse_kernel_with_clamped_candidates(monkeypatch):
    """kernels.tuning --sparse, run through the interpreter: every candidate is clamped to the block
    size (duplicates timed once), the calls go to the block-sparse kernel on the named layout, and the
    entry says what it tuned (so load_tuning files it under the block-sparse table)."""
    from kernels import tuning

    calls = []
    monkeypatch.setattr(tuning, "_inputs", lambda n, d, tokens, hidden, dtype: tuple(
        torch.randn(1, 1, n, d, dtype=torch.float32, device=DEVICE, requires_grad=True) for _ in range(3)))

    def run_once(fn, grads=None):
        fn()
        return float(len(calls) + 1)
    monkeypatch.setattr(tuning, "_bench", run_once)
    real = tuning.block_sparse_flash_attention

    def spy(q, k, v, layout, **kwargs):
        calls.append(kwargs["block_size"])
        return real(q, k, v, layout, **kwargs)
    monkeypatch.setattr(tuning, "block_sparse_flash_attention", spy)
    results = tuning.tune([16], [96], 96, 16, torch.float32, passes=("fwd",), sparse="local", block_size=32)
    entry = results[16]
    assert entry["sparse"] == {"layout": "local", "block_size": 32} and entry["sdpa"] == {}
    timed = list(entry["fwd"])
    shapes = [ast.literal_eval(c) for c in timed]
    assert shapes and all(block_m <= 32 and block_n <= 32 for block_m, block_n, *_ in shapes)
    assert len(timed) == len(set(timed)) and set(calls) == {32}
    assert entry["best"]["fwd"][:2] == [32, 32]


@pytest.mark.parametrize("split", [False, True])
def test_dropout_tuning_times_the_backward_form_asked_for(monkeypatch, split):
    """kernels.tuning --dropout tunes the one-pass backward; --split-backward the two-pass one, under
    torch's deterministic algorithms for the tuning only. The entry records which (load_tuning files
    the one-pass form's dK/dV tiles under its own table)."""
    from kernels import tuning
    from kernels.dropout import fused_backward

    monkeypatch.setattr(tuning, "_inputs", lambda n, d, tokens, hidden, dtype: tuple(
        torch.randn(1, 1, n, d, dtype=torch.float32, device=DEVICE, requires_grad=True) for _ in range(3)))
    monkeypatch.setattr(tuning, "_sdpa_times", lambda *args: {})
    forms = []
    monkeypatch.setattr(tuning, "_bench", lambda fn, grads=None: (fn(), forms.append(fused_backward(0.1)), 1.0)[-1])
    monkeypatch.setattr(tuning, "DKDV", tuning.DKDV[:1])
    results = tuning.tune([16], [32], 32, 16, torch.float32, dropout_p=0.1, passes=("dkdv",), split_backward=split)
    assert results[16]["dropout_bwd"] == ("split" if split else "fused")
    assert forms and set(forms) == {not split}
    assert not torch.are_deterministic_algorithms_enabled()
    with pytest.raises(SystemExit):
        tuning.main(["--split-backward"])  # only with --dropout


def test_block_sparse_forward_candidates_add_64_row_tiles():
    """--sparse tunes the forward over the dense lists plus 64-row query tiles; other passes and
    dense tuning are unchanged."""
    from kernels import tuning

    dense = tuning.candidates("fwd", 32)
    sparse = tuning.candidates("fwd", 32, sparse=True)
    assert dense == tuning.FWD and sparse == tuning.FWD + tuning.FWD_SPARSE + tuning.SPARSE_DEEP["fwd"]
    assert all(c[0] == 64 for c in tuning.FWD_SPARSE)
    assert tuning.candidates("dkdv", 32) == tuning.DKDV
    assert tuning.candidates("dkdv", 32, sparse=True) == tuning.DKDV + tuning.SPARSE_DEEP["dkdv"]
    assert all(c[3] == 4 for cands in tuning.SPARSE_DEEP.values() for c in cands)


def _tuned(tmp_path, name, layout, timings, head_dim=32, block_size=128):
    """A --sparse tuning JSON: timings = {pass: {candidate tuple: [ms at each N] or None (failed)}}."""
    entry = {"sparse": {"layout": layout, "block_size": block_size}, "dropout": 0.0, "best": {}}
    for kind, cands in timings.items():
        entry[kind] = {str(c): {"ms": dict(zip(("4096", "16384"), ms))} if ms else {"error": "OutOfResources"}
                       for c, ms in cands.items()}
    path = tmp_path / name
    path.write_text(json.dumps({"device": "H200", "results": {str(head_dim): entry}}))
    return str(path)


def test_combine_picks_each_pass_by_the_geometric_mean_over_layouts(tmp_path, restore_tables):
    """--combine: local favours A, BigBird favours B by more, so B wins; a candidate that failed (or was
    not timed) on one layout cannot win; the merged file loads into the block-sparse table."""
    from kernels import tuning

    a, b, c = (64, 128, 4, 3), (64, 64, 4, 4), (128, 128, 4, 4)
    local = _tuned(tmp_path, "local.json", "local", {"fwd": {a: [0.20, 0.21], b: [0.22, 0.23], c: [0.01, 0.01]},
                                                     "dq": {a: [1.0, 1.0]}})
    bigbird = _tuned(tmp_path, "bigbird.json", "bigbird", {"fwd": {a: [0.70, 0.80], b: [0.50, 0.55], c: None},
                                                           "dkdv": {b: [1.5, 1.6]}})
    out = str(tmp_path / "both.json")
    assert tuning.main(["--combine", local, bigbird, "--out", out]) == 0
    merged = json.loads(open(out).read())
    entry = merged["results"]["32"]
    assert entry["best"] == {"fwd": list(b)}                      # dkdv / dq: timed on one layout only
    assert entry["sparse"] == {"layout": "local+bigbird", "block_size": 128}
    assert list(entry["geomean_ms"]["fwd"]) == [str(b), str(a)]   # c failed on BigBird: not a candidate
    cuda = torch.device("cuda")
    shipped = tiles._GPU_16BIT_SPARSE[32]
    assert "d=32 block-sparse" in tiles.load_tuning(out)[0]
    got = tiles.select(cuda, torch.bfloat16, 32, 128)
    assert got.fwd == tiles.PassTiles(*b) and (got.dkdv, got.dq) == (shipped.dkdv.clamped(128), shipped.dq.clamped(128))


def test_combine_rejects_files_of_different_kernels(tmp_path, capsys):
    from kernels import tuning

    one = _tuned(tmp_path, "a.json", "local", {"fwd": {(64, 64, 4, 3): [1.0, 1.0]}}, block_size=128)
    two = _tuned(tmp_path, "b.json", "local", {"fwd": {(64, 64, 4, 3): [1.0, 1.0]}}, block_size=64)
    assert tuning.main(["--combine", one, two, "--out", str(tmp_path / "c.json")]) == 2
    assert "block size" in capsys.readouterr().err
    other_dim = _tuned(tmp_path, "d.json", "local", {"fwd": {(64, 64, 4, 3): [1.0, 1.0]}}, head_dim=64)
    assert tuning.main(["--combine", one, other_dim, "--out", str(tmp_path / "c.json")]) == 2
    with pytest.raises(SystemExit):
        tuning.main(["--combine", one])                           # no --out


def test_clamping_to_a_block_size():
    """Tiles that fit a block are returned as they are (no objects built on a block-sparse call's path);
    a side larger than the block is cut to it, every other setting kept."""
    fwd = tiles.PassTiles(128, 64, 8, 3)
    dkdv = tiles.PassTiles(64, 128, 4, 2)
    dq = tiles.PassTiles(128, 32, 4, 3)
    t = tiles.Tiles(fwd, dkdv, dq)
    assert t.clamped(128) is t and t.clamped(256) is t and fwd.clamped(128) is fwd
    small = t.clamped(64)
    assert small == tiles.Tiles(tiles.PassTiles(64, 64, 8, 3), tiles.PassTiles(64, 64, 4, 2),
                                tiles.PassTiles(64, 32, 4, 3))
    assert small.dkdv.clamped(64) is small.dkdv
    assert t.clamped(16).as_list() == [16, 16, 8, 3, 16, 16, 4, 2, 16, 16, 4, 3]
    assert t.clamped(64) is small  # cached: a block-sparse call clamps on every call
