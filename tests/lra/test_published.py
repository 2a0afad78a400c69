"""Published reference numbers: the CSVs load, carry their citations and hold the issue's numbers."""
import math
from pathlib import Path

import pandas as pd
import pytest

from lra import published as pub

PUBLISHED_DIR = Path(__file__).resolve().parents[2] / "results" / "published"


@pytest.fixture(scope="module")
def accuracy():
    return pub.load_accuracy(PUBLISHED_DIR)


def value(frame, paper, model, column):
    hit = frame[(frame["id"] == paper) & (frame["model"] == model) & (frame["column"] == column)]
    assert len(hit) == 1, (paper, model, column, hit)
    return hit.iloc[0]


@pytest.mark.parametrize("paper, model, column, expected", [
    ("fa", "Transformer", "ListOps", 36.0), ("fa", "Transformer", "Retrieval", 81.6),
    ("fa", "FlashAttention", "Image", 43.5), ("fa", "FlashAttention", "Avg", 59.8),
    ("fa", "FlashAttention", "Speedup", 2.4), ("fa", "Block-sparse FlashAttention", "Pathfinder", 73.3),
    ("fa", "Block-sparse FlashAttention", "Speedup", 2.8), ("fa", "Linformer", "Text", 55.9),
    ("fa", "Linear Attention", "ListOps", 38.8), ("fa", "Performer", "Retrieval", 82.2),
    ("fa", "Local Attention", "Pathfinder", 66.6), ("fa", "Reformer", "Speedup", 1.3), ("fa", "SMYRF", "Avg", 57.9),
    ("fa", "FlashAttention", "Path-X", 61.4), ("fa", "Block-sparse FlashAttention", "Path-X", 56.0),
    ("fa", "Block-sparse FlashAttention", "Path-256", 63.1),
    ("lra", "Transformer", "Pathfinder", 71.40), ("lra", "Transformer", "Avg", 54.39),
    ("lra", "Transformer", "Retrieval", 57.46), ("lra", "Linformer", "Pathfinder", 76.34),
    ("lra", "Performer", "ListOps", 18.01), ("lra", "Performer", "Avg", 51.41),
    ("lra", "BigBird", "Retrieval", 59.29), ("lra", "BigBird", "Avg", 55.01),
])
def test_spot_values(accuracy, paper, model, column, expected):
    row = value(accuracy, paper, model, column)
    assert row["value"] == pytest.approx(expected) and not row["failed"]


def test_failures_and_missing(accuracy):
    assert value(accuracy, "fa", "FlashAttention", "Path-256")["failed"]
    for model in ("Transformer", "Linformer", "Linear Attention", "Performer", "Local Attention", "Reformer", "SMYRF"):
        assert value(accuracy, "fa", model, "Path-X")["failed"] and value(accuracy, "fa", model, "Path-256")["failed"]
    assert all(value(accuracy, "lra", m, "Path-X")["failed"] for m in ("Transformer", "Linformer", "Performer", "BigBird"))
    transformer_speedup = value(accuracy, "fa", "Transformer", "Speedup")
    assert math.isnan(transformer_speedup["value"]) and not transformer_speedup["failed"]


def test_averages_match_the_tasks(accuracy):
    """A typo in a typed-in number shows up as an average that no longer matches (papers round to 0.1 / 0.01)."""
    tasks = accuracy[accuracy["task"].isin(pub.AVERAGE_TASKS)]
    means = tasks.groupby(["id", "model"])["value"].mean()
    avgs = accuracy[accuracy["task"] == "avg"].set_index(["id", "model"])["value"]
    assert len(avgs) == 9 + 4
    for key, avg in avgs.items():
        assert means[key] == pytest.approx(avg, abs=0.1), key


def test_every_file_is_cited_and_listed():
    readme = (PUBLISHED_DIR / "README.md").read_text()
    files = sorted(PUBLISHED_DIR.glob("*.csv"))
    assert len(files) >= 4
    for path in files:
        header = pub.read_header(path)
        assert {"id", "kind", "source", "citation"} <= set(header), path
        assert "arXiv" in header["citation"] and "Table" in header["citation"]
        assert path.name in readme


def test_lra_efficiency_table():
    eff = pub.load_efficiency(PUBLISHED_DIR)
    row = eff[(eff["model"] == "Transformer") & (eff["seq_len"] == 4096)].iloc[0]
    assert (row["steps_per_s"], row["peak_mem_gb"]) == (1.4, 9.48)
    row = eff[(eff["model"] == "BigBird") & (eff["seq_len"] == 3072)].iloc[0]
    assert (row["steps_per_s"], row["peak_mem_gb"]) == (2.7, 2.18)
    assert len(eff) == 16 and set(eff["id"]) == {"lra"}


def test_name_mapping(accuracy):
    assert pub.lookup(accuracy, "fa", "flash_sparse", "path256") == (63.1, False)
    assert pub.lookup(accuracy, "fa", "flash", "pathfinder32") == (72.7, False)
    assert pub.lookup(accuracy, "lra", "softmax", "pathfinder32") == (71.40, False)
    assert pub.lookup(accuracy, "lra", "bigbird", "listops") == (36.05, False)
    assert math.isnan(pub.lookup(accuracy, "lra", "flash", "listops")[0])  # the LRA paper has no FlashAttention row
    assert pub.lookup(accuracy, "fa", "unknown_attention", "listops")[1] is False
    assert [label for _, label in pub.sources(accuracy)] == ["FlashAttention paper", "LRA paper"]


def test_bad_files_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="published numbers not found"):
        pub.load_accuracy(tmp_path / "missing")
    (tmp_path / "t.csv").write_text("model,ListOps\nTransformer,36.0\n")
    with pytest.raises(ValueError, match=r"t\.csv.*# id:"):
        pub.load_accuracy(tmp_path)
    (tmp_path / "t.csv").write_text("# id: x\n# kind: accuracy\n# source: X\n# citation: Y\nmodel,ListOps\nA,3o.1\n")
    with pytest.raises(ValueError, match=r"t\.csv: row 'A', column 'ListOps'.*'3o\.1'"):
        pub.load_accuracy(tmp_path)
    (tmp_path / "t.csv").write_text("# id: x\n# kind: accuracy\n# source: X\n# citation: Y\nmodel,Sudoku\nA,3\n")
    with pytest.raises(ValueError, match="unknown column 'Sudoku'"):
        pub.load_accuracy(tmp_path)
    assert pub.parse_cell("2.4x") == (2.4, False) and pub.parse_cell("fail")[1] is True
    assert isinstance(pub.load_accuracy(PUBLISHED_DIR), pd.DataFrame)


def test_tasks_and_citation_of_one_paper(accuracy):
    assert pub.paper_tasks(accuracy, "fa") == ["listops", "text", "retrieval", "image", "pathfinder32", "pathx",
                                               "path256"]
    assert pub.paper_tasks(accuracy, "lra") == ["listops", "text", "retrieval", "image", "pathfinder32", "pathx"]
    citation = pub.citation_text(accuracy, "fa")
    assert citation.startswith("Tri Dao") and citation.endswith("arXiv:2205.14135. Tables 3, 6.")
    assert pub.paper_tasks(pd.DataFrame(), "fa") == [] and pub.citation_text(pd.DataFrame(), "fa") == ""
