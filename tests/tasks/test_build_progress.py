"""Every data build says what, where and how big, then shows a bar with ETA (plain lines in logs)."""
from __future__ import annotations

import io

import pytest

from tasks import build_datamodule, listops
from tasks.build_progress import BuildProgress, human_bytes


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_a_terminal_only_a_start_and_an_end_line(tmp_path):
    out = io.StringIO()
    with BuildProgress("generating Things", 2000, "things", tmp_path, nbytes=205e6, stream=out) as bar:
        for _ in range(2000):
            bar.advance()
    lines = out.getvalue().splitlines()
    assert lines[0] == f"generating Things: 2,000 things (~205 MB) into {tmp_path}"
    assert len(lines) == 2 and lines[1].startswith("generating Things: done, 2,000 things in ")


def test_a_terminal_gets_a_bar_with_an_eta(tmp_path):
    out = _Terminal()
    with BuildProgress("generating Things", 10, "things", tmp_path, stream=out) as bar:
        bar.advance(4)
        bar._bar.refresh()
        column_texts = [str(c) for c in bar._bar.columns]
    assert any("TimeRemainingColumn" in text for text in column_texts)
    assert "generating Things: 10 things into" in out.getvalue()


def test_a_failed_build_says_where_it_stopped(tmp_path):
    out = io.StringIO()
    with pytest.raises(RuntimeError):
        with BuildProgress("generating Things", 10, "things", tmp_path, completed=3, stream=out) as bar:
            bar.advance(2)
            raise RuntimeError("boom")
    first, last = out.getvalue().splitlines()
    assert first.endswith("3 already there") and "stopped at 5/10 things" in last


def test_human_bytes():
    assert human_bytes(204_800_000) == "205 MB" and human_bytes(1_500) == "1.5 kB" and human_bytes(12) == "12 B"


def test_listops_generator_announces_count_size_and_folder(tmp_path, capsys):
    params = listops.ListOpsParams(n_train=30, n_val=3, n_test=3, min_length=20, max_length=200, seed=3)
    listops.generate(params, tmp_path, workers=1, progress=False)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert err[0].startswith("generating ListOps (lengths 20-200): 36 expressions (~")
    assert err[0].endswith(f"into {tmp_path}")
    assert err[1].startswith("generating ListOps (lengths 20-200): done, 36 expressions in ")


def test_pathfinder_generator_announces_all_splits_at_once(tmp_path, capsys):
    dm = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=4, limit_train=6, limit_eval=2,
                          generator_workers=1)
    dm.prepare_data()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    # 10 images of 32x32 bytes, named by the cache entry they end up in (not the staging folder)
    assert err[0] == (f"generating Pathfinder-32 hard (contour length 14): 10 images (~10.2 kB) into "
                      f"{dm.source.folder()}")
    assert err[1].startswith("generating Pathfinder-32 hard (contour length 14): done, 10 images in ")
