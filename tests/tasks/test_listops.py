"""ListOps: tokenizer, official-format reader, generator (labels re-evaluated independently)."""
from __future__ import annotations

import pytest

from tasks import build_datamodule, listops


def evaluate(tokens: list[str]) -> int:
    """Independent evaluator: a stack machine over the parenthesis-free token stream."""
    stack: list[tuple[str, list[int]]] = []
    result = None
    for tok in tokens:
        if tok.startswith("["):
            stack.append((tok, []))
        elif tok == "]":
            op, args = stack.pop()
            assert len(args) >= 2, "an operator has at least two arguments"
            ordered = sorted(args)
            if op == "[MIN":
                value = ordered[0]
            elif op == "[MAX":
                value = ordered[-1]
            elif op == "[MED":
                mid = len(ordered) // 2
                value = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) // 2
            else:
                assert op == "[SM"
                value = sum(args) % 10
            if stack:
                stack[-1][1].append(value)
            else:
                result = value
        else:
            value = int(tok)
            if stack:
                stack[-1][1].append(value)
            else:
                result = value
    assert not stack
    return result


def strip(expr: str) -> list[str]:
    return [t for t in expr.split() if t not in ("(", ")")]


def depth_of(tokens):
    depth = best = 0
    for tok in tokens:
        if tok.startswith("["):
            depth += 1
            best = max(best, depth)
        elif tok == "]":
            depth -= 1
    return best


def test_encode_ids_and_unknown_token():
    ids = listops.encode("( ( ( [MAX 2 ) 9 ) ] )")
    assert ids.tolist() == [12, 3, 10, 15]
    assert listops.encode("( [MIN 0 [MED 1 [SM ] ] )").tolist() == [11, 1, 13, 2, 14, 15, 15]
    with pytest.raises(ValueError, match="unknown ListOps token '12'"):
        listops.encode("( [MAX 12 3 ] )")
    with pytest.raises(ValueError, match=r"unknown ListOps token '\[FIRST'"):
        listops.encode("( [FIRST 1 2 ] )")


def test_official_reader_nested_layout(nested, write_listops):
    data_dir, inner = nested
    write_listops(inner)
    dm = build_datamodule("listops", data_dir=data_dir, batch_size=4)
    assert dm.source.kind == "official" and dm.vocab_size == 16 and dm.max_len == 2000
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (4, 2000) and batch["padding_mask"].shape == (4, 2000)
    # Row order is shuffled; compare the set of (first tokens, label).
    ds = dm.dataset("train")
    first = ds[0]
    assert first["input_ids"][:4].tolist() == [12, 3, 10, 15] and first["label"].item() == 9
    assert first["padding_mask"][:4].tolist() == [False] * 4 and first["padding_mask"][4:].all()
    assert (first["input_ids"][4:] == 0).all()
    assert dm.split_sizes == {"train": 4, "val": 1, "test": 2}


@pytest.mark.parametrize("row, message", [
    ("( [MAX 2 9 ] )\t9\textra", "expected 2 tab-separated fields"),
    ("( [MAX 2 9 ] )\tten", "Target must be an integer 0-9"),
    ("( [MAX 2 9 ] )\t12", "Target must be an integer 0-9"),
    ("( [MAX 2 x ] )\t9", "unknown ListOps token 'x'"),
    # a-d are the fast tokenizer's stand-ins for the operators: never read as [MIN ... [SM
    ("( ( ( a 2 ) 9 ) ] )\t9", "unknown ListOps token 'a'"),
    ("( [MAX 2 d ] )\t9", "unknown ListOps token 'd'"),
])
def test_corrupt_rows_name_file_and_line(tmp_path, write_listops, row, message):
    folder = write_listops(tmp_path)
    path = folder / "basic_train.tsv"
    with open(path, "a") as handle:
        handle.write(row + "\n")
    with pytest.raises(ValueError, match=rf"basic_train\.tsv:6: {message}"):
        list(listops.rows(path))


def test_undecodable_bytes_name_file_and_line(tmp_path, write_listops):
    path = write_listops(tmp_path) / "basic_train.tsv"
    with open(path, "ab") as handle:
        handle.write(b"( [MAX 2 9 ] )\t9\n( [MAX 2 \xff ] )\t9\n")
    with pytest.raises(ValueError, match=r"basic_train\.tsv:7: not valid UTF-8 \(byte 0xff at column 10\)"):
        list(listops.rows(path))


def test_generator_distribution_and_labels(tmp_path):
    params = listops.ListOpsParams(n_train=300, n_val=30, n_test=30, min_length=20, max_length=200, seed=3)
    listops.generate(params, tmp_path, workers=1, progress=False)
    seen = set()
    for split, n in (("train", 300), ("val", 30), ("test", 30)):
        lines = (tmp_path / listops.FILES[split]).read_text().splitlines()
        assert lines[0] == "Source\tTarget" and len(lines) == n + 1
        for line in lines[1:]:
            expr, label = line.split("\t")
            assert expr.count("(") == expr.count(")")
            tokens = strip(expr)
            assert 20 < len(tokens) < 200                       # LRA's strict length window
            assert evaluate(tokens) == int(label)               # label = value of the expression
            assert 1 <= depth_of(tokens) <= 9                   # operators only above depth 10
            assert set(tokens) <= set(listops.TOKEN_IDS)
            seen.add(expr)
    assert len(seen) == 360                                      # de-duplicated across splits
    # Seeded and deterministic, whatever the number of workers.
    again = tmp_path / "again"
    again.mkdir()
    listops.generate(params, again, workers=2, progress=False)
    for name in listops.FILES.values():
        assert (again / name).read_text() == (tmp_path / name).read_text()


def test_generated_source_reads_back_and_labels_span_classes(tmp_path):
    dm = build_datamodule("listops", data_dir=tmp_path, batch_size=8, source="generated",
                          limit_train=200, limit_eval=20, seq_len=128, generator_workers=1)
    assert dm.max_len == 128
    p = dm.source.params
    assert (p.n_train, p.n_val, p.n_test, p.max_length) == (200, 20, 20, 129)
    dm.prepare_data()
    dm.setup()
    ds = dm.dataset("train")
    labels = [ds[i]["label"].item() for i in range(len(ds))]
    assert len(set(labels)) >= 5
    for i in range(20):                 # generated trees fit the requested length: never cut
        item = ds[i]
        n = int((~item["padding_mask"]).sum())
        assert item["input_ids"][n - 1].item() == 15 and n <= 128


def test_generator_rejects_lengths_no_expression_fits(tmp_path):
    # seq_len 3 -> max_length 4: no expression is that short, so the generator refuses at once instead of searching
    with pytest.raises(ValueError, match="max_length must be at least 5"):
        build_datamodule("listops", data_dir=tmp_path, batch_size=2, seq_len=3, source="generated")
    p = listops.ListOpsParams(n_train=3, n_val=1, n_test=1, min_length=1, max_length=5)
    listops.generate(p, tmp_path, workers=1, progress=False)
    assert {len(ids) for (ids,), _ in listops.rows(tmp_path / listops.FILES["train"])} == {4}


def test_auto_prefers_official_then_generator(tmp_path, write_listops):
    assert build_datamodule("listops", data_dir=tmp_path, batch_size=2).source.kind == "generated"
    write_listops(tmp_path)
    assert build_datamodule("listops", data_dir=tmp_path, batch_size=2).source.kind == "official"


def test_official_missing_says_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        build_datamodule("listops", data_dir=tmp_path, batch_size=2, source="official")
    text = str(err.value)
    assert "listops-1000/basic_{train,val,test}.tsv" in text and "lra_release.gz" in text
    assert "lra data generate listops" in text
