"""Run records name the data a run actually read, and the run id depends on it."""
from __future__ import annotations

import json

from lra.cli import main
from lra.config import resolve

FAST = ["train.max_steps=2", "train.val_check_interval=2", "train.batch_size=4", "data.limit_train=8",
        "data.limit_eval=4", "train.throughput_warmup_steps=1", "optim.warmup_steps=1"]


def _write_official_listops(root):
    folder = root / "listops-1000"
    folder.mkdir(parents=True)
    rows = ["( [MAX 2 9 ] )\t9", "( [MIN 4 7 ] )\t4", "( [SM 3 4 ] )\t7", "( [MED 1 5 8 ] )\t5"] * 3
    for split in ("train", "val", "test"):
        (folder / f"basic_{split}.tsv").write_text("Source\tTarget\n" + "\n".join(rows) + "\n")


def _records(runs):
    return [json.loads(p.read_text()) for p in sorted(runs.glob("*/*/*/result.json"))]


def test_run_id_follows_the_data_found_on_disk(tmp_path):
    data = tmp_path / "data"
    generated = resolve("listops", "softmax", preset="smoke", data_dir=data)
    assert generated.resolve_data_identity()["source"] == "generated"
    assert generated.data_identity["generator"]["name"] == "listops"
    _write_official_listops(data)
    official = resolve("listops", "softmax", preset="smoke", data_dir=data)
    assert official.resolve_data_identity()["source"] == "official"
    assert official.run_id() != generated.run_id()
    # the identity holds no path: the same files elsewhere give the same run id
    other = tmp_path / "elsewhere"
    _write_official_listops(other)
    assert resolve("listops", "softmax", preset="smoke", data_dir=other).run_id() == official.run_id()
    # a different released file is different data
    (other / "listops-1000" / "basic_test.tsv").write_text("Source\tTarget\n( [MAX 1 2 ] )\t2\n")
    assert resolve("listops", "softmax", preset="smoke", data_dir=other).run_id() != official.run_id()


def test_record_names_the_data_read_and_a_sweep_on_new_data_trains_again(tmp_path, capsys):
    runs, data = tmp_path / "runs", tmp_path / "data"
    argv = ["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax", "--seq-lens", "64",
            "--runs-dir", str(runs), "--data-dir", str(data), *FAST]
    assert main(argv) == 0
    (rec,) = _records(runs)
    d = rec["data"]
    assert d["source"] == "generated" and d["generator"]["name"] == "listops"
    assert isinstance(d["generator"]["version"], int) and d["generator"]["params"]["n_train"] == 8
    assert d["splits"] == {"train": 8, "val": 4, "test": 4}
    assert len(d["content_hash"]) == 16 and len(d["id"]) == 12
    assert rec["sharing"] == {"runs_per_gpu": 1}
    assert rec["config"]["data_identity"]["source"] == "generated"

    _write_official_listops(data)   # official data appears: `auto` now reads it, a new run
    capsys.readouterr()
    assert main(argv) == 0
    assert "1 new" in capsys.readouterr().out
    by_source = {r["data"]["source"]: r for r in _records(runs)}
    assert set(by_source) == {"generated", "official"}
    official = by_source["official"]["data"]
    assert official["generator"] is None and official["id"] != d["id"]
    assert official["identity"]["files"][0] == ["basic_test.tsv", (data / "listops-1000" / "basic_test.tsv").stat().st_size]
