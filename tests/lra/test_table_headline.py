"""`lra table headline`: the table of record's compact view, attention x task."""
from __future__ import annotations

import io

import pandas as pd
import pytest

from lra import table
from tests.lra.test_table_record import config, published, run_cli, write  # noqa: F401 (fixture)

PATHFINDER = dict(seq_len=1024, cfg=config("pathfinder32", batch=256, max_steps=62400), steps=62400)


def headline_of(root, published, **kwargs):
    records = table.load_run_records(root)
    record = table.record_summary(records, published, **kwargs)
    summary = table.headline_summary(record)
    return summary, table.headline_sections(summary, record, records)[0]


def test_one_row_per_attention_with_accuracy_speed_and_memory_per_task(tmp_path, published):
    for seed, acc in enumerate((0.36, 0.38, 0.40)):
        write(tmp_path, "listops", "flash", seed, acc, tokens=3000.0)
        write(tmp_path, "listops", "softmax", seed, 0.37, tokens=1000.0)
    write(tmp_path, "pathfinder32", "flash", 0, 0.757, **PATHFINDER)
    write(tmp_path, "pathfinder32", "linformer", 0, 0.503, best=0.507, **PATHFINDER)
    write(tmp_path, "pathfinder32", "softmax", 0, None, status="oom", **PATHFINDER)
    summary, section = headline_of(tmp_path, published)
    shown = section.table.set_index("Attention")
    assert list(shown.index) == ["Transformer", "FlashAttention", "Linformer"]
    assert shown.loc["Transformer", "Pathfinder (1K) %"] == "OOM (72.7)"  # no result, and why
    assert list(shown.columns) == ["ListOps (2000) %", "ListOps (2000) speed-up", "ListOps (2000) GB",
                                   "Pathfinder (1K) %", "Pathfinder (1K) speed-up", "Pathfinder (1K) GB"]
    # the same figures as the table of record, the paper's number in brackets, n where it is not typical
    assert shown.loc["FlashAttention", "ListOps (2000) %"] == "38.0 ± 2.0 (37.6)"
    assert shown.loc["FlashAttention", "ListOps (2000) speed-up"] == "3.00×"
    assert shown.loc["FlashAttention", "ListOps (2000) GB"] == "1.07"  # 1 GiB in the record
    assert shown.loc["FlashAttention", "Pathfinder (1K) %"] == "75.7, n = 1 (72.7)"
    assert shown.loc["Linformer", "Pathfinder (1K) %"] == "50.3, n = 1, at chance (67.6)"
    # an attention without runs on a task that has runs: no result, the paper's number
    assert shown.loc["Linformer", "ListOps (2000) %"] == "– (35.6)"
    assert shown.loc["Linformer", "ListOps (2000) speed-up"] == "–"
    notes = "\n".join(section.notes)
    assert "n = 3 seeds" in notes and "Not run here: Text, Retrieval, Image, Path-X, Path-256" in notes
    assert set(summary.columns) == set(table.HEADLINE_COLUMNS)


def test_a_task_and_attention_with_several_rows_is_a_clear_error(tmp_path, published):
    """The error names what sets the rows apart (of preset, length, variant, data: what differs)."""
    presets = tmp_path / "presets"
    write(presets, "listops", "flash", 0, 0.36)
    write(presets, "listops", "flash", 0, 0.50, preset="smoke", run_id="smoke-run")
    with pytest.raises(ValueError, match=r"listops/flash has 2 rows in the table of record \(preset paper; "
                                         r"preset smoke\): narrow the runs with --presets"):
        headline_of(presets, published)
    # narrowed by the filters, it renders
    records = table.filter_frame(table.load_run_records(presets), preset=["paper"])
    assert len(table.headline_summary(table.record_summary(records, published))) >= 1
    # a variant: the same preset and data, another setting
    variant = tmp_path / "variant"
    write(variant, "listops", "flash", 0, 0.36)
    write(variant, "listops", "flash", 0, 0.40, steps=8000, cfg=config(max_steps=8000), run_id="longer")
    with pytest.raises(ValueError, match=r"listops/flash has 2 rows in the table of record "
                                         r"\(train.max_steps=5000; train.max_steps=8000\)"):
        headline_of(variant, published)


def test_cli_writes_the_headline_in_every_format(tmp_path, capsys):
    runs = tmp_path / "runs"
    for seed, acc in enumerate((0.36, 0.38, 0.40)):
        write(runs, "listops", "flash", seed, acc)
    assert run_cli("headline", "--runs-dir", runs) == 0
    out = capsys.readouterr().out
    assert out.startswith("## LRA headline") and "| 38.0 ± 2.0 (37.6)" in out
    assert run_cli("headline", "--runs-dir", runs, "--format", "csv") == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(frame.columns) == table.HEADLINE_COLUMNS and frame.loc[0, "mean"] == 38.0
    out_file = tmp_path / "headline.tex"
    assert run_cli("headline", "--runs-dir", runs, "--format", "tex", "--out", out_file) == 0
    assert r"38.0 $\pm$ 2.0 (37.6)" in out_file.read_text()
