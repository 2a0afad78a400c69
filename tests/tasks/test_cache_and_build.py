"""Atomic keyed caches, resumable image fills, build_datamodule's contract and `lra data`."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from tasks import TASKS, build_datamodule, cache, image_store


def test_build_once_is_atomic_and_reused(tmp_path):
    final = tmp_path / "entry"
    calls = []

    def failing(staging):
        (staging / "half.bin").write_bytes(b"x")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        cache.build_once(final, failing, meta={"a": 1})
    assert not final.exists() and not cache.is_complete(final)         # never a half-written entry

    def resuming(staging):
        calls.append(sorted(p.name for p in staging.iterdir()))
        (staging / "data.bin").write_bytes(b"ok")

    assert cache.build_once(final, resuming, meta={"a": 1}) == final
    assert calls == [["half.bin"]]                                       # resumed in the staging dir
    assert cache.read_meta(final) == {"a": 1} and (final / "data.bin").read_bytes() == b"ok"
    cache.build_once(final, resuming, meta={"a": 1})
    assert len(calls) == 1                                               # reused, not rebuilt
    cache.build_once(final, resuming, meta={"a": 2}, force=True)
    assert len(calls) == 2 and cache.read_meta(final) == {"a": 2}
    assert cache.param_hash({"b": 1, "a": 2}) == cache.param_hash({"a": 2, "b": 1})


def _fill(start, stop, out, *, fail_at=None):
    for j, k in enumerate(range(start, stop)):
        if k == fail_at:
            raise RuntimeError(f"stop at {k}")
        out[j] = k % 256
    return np.arange(start, stop) % 2


def test_fill_images_resumes_after_interruption(tmp_path, monkeypatch):
    job = image_store.Job("test_cache_and_build:_fill", {"fail_at": 37})
    monkeypatch.setattr(image_store, "_resolve", lambda name: _fill)
    with pytest.raises(RuntimeError, match="stop at 37"):
        image_store.fill_images(tmp_path, 50, (2, 2), job, workers=1, chunk=10, progress=False)
    done = np.load(tmp_path / image_store.DONE)
    assert done.tolist() == [True, True, True, False, False]
    job = image_store.Job("test_cache_and_build:_fill", {})
    result = image_store.fill_images(tmp_path, 50, (2, 2), job, workers=1, chunk=10, progress=False)
    assert result["images"] == 20                                        # only the missing chunks
    images = image_store.open_images(tmp_path)
    assert images[:, 0, 0].tolist() == list(range(50))
    assert result["labels"].tolist() == [k % 2 for k in range(50)]


def test_fill_images_in_parallel_matches_serial(tmp_path):
    from tasks import pathfinder, pathfinder_gen
    p = pathfinder_gen.params_for(32, "hard")
    job = image_store.Job("tasks.pathfinder:generate_chunk",
                          {"params": pathfinder_gen.dataclasses.asdict(p), "seed": 1, "split": "test"})
    a = image_store.fill_images(tmp_path / "a", 12, (32, 32), job, workers=2, chunk=3, progress=False)
    b = image_store.fill_images(tmp_path / "b", 12, (32, 32), job, workers=1, chunk=5, progress=False)
    assert np.array_equal(image_store.open_images(tmp_path / "a"), image_store.open_images(tmp_path / "b"))
    assert a["labels"].tolist() == b["labels"].tolist() == pathfinder_gen.sample_labels(1, "test", 12).tolist()
    assert pathfinder is not None


def test_registry_attributes():
    expected = {"listops": (10, 16, 2000, False, None), "text": (2, 257, 4096, False, None),
                "retrieval": (2, 257, 4096, True, None), "image": (10, 256, 1024, False, (32, 32)),
                "pathfinder32": (2, 256, 1024, False, (32, 32)), "pathfinder64": (2, 256, 4096, False, (64, 64)),
                "pathx": (2, 256, 16384, False, (128, 128)), "path256": (2, 256, 65536, False, (256, 256))}
    got = {n: (s.num_classes, s.vocab_size, s.max_len, s.dual, s.image_shape) for n, s in TASKS.items()}
    assert got == expected


@pytest.mark.parametrize("kwargs, message", [
    ({"task": "cifar"}, "unknown task 'cifar'"),
    ({"task": "listops", "batch_size": 0}, "batch_size must be an integer >= 1"),
    ({"task": "listops", "seq_len": 0}, "seq_len must be a positive integer"),
    ({"task": "listops", "limit_train": 0}, "limit_train must be a positive integer"),
    ({"task": "listops", "source": "hdf5"}, "source must be one of"),
    ({"task": "listops", "source": "tfds"}, "listops has no 'tfds' source"),
    ({"task": "text", "difficulty": "hard"}, "difficulty applies to the Pathfinder tasks only"),
])
def test_build_datamodule_rejects_bad_input(tmp_path, kwargs, message):
    args = {"data_dir": tmp_path, "batch_size": 2, **kwargs}
    task = args.pop("task")
    with pytest.raises(ValueError, match=message):
        build_datamodule(task, **args)


def test_data_dir_default_from_env(tmp_path, monkeypatch, write_listops):
    write_listops(tmp_path / "elsewhere")
    monkeypatch.setenv("LRA_DATA", str(tmp_path / "elsewhere"))
    dm = build_datamodule("listops", batch_size=2, limit_train=2, limit_eval=1)
    assert dm.source.kind == "official"
    dm.setup()
    assert dm.split_sizes == {"train": 2, "val": 1, "test": 1}         # first K examples


def _cli(argv):
    from lra.commands import data
    parser = argparse.ArgumentParser()
    data.add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_generate_and_check(tmp_path, capsys):
    assert _cli(["data", "generate", "pathfinder32", "--n", "20", "--workers", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "16/2/2 images" in out and "images/s per worker" in out
    assert _cli(["data", "generate", "pathfinder32", "--n", "20", "--workers", "1", "--out", str(tmp_path)]) == 0
    assert "nothing generated" in capsys.readouterr().out
    assert _cli(["data", "generate", "listops", "--n-train", "30", "--n-val", "5", "--n-test", "5",
                 "--min-len", "10", "--max-len", "60", "--workers", "1", "--out", str(tmp_path)]) == 0
    assert "30/5/5 examples" in capsys.readouterr().out
    assert _cli(["data", "check", "pathfinder32", "--data-dir", str(tmp_path)]) == 0
    assert "not generated yet" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--n is for Pathfinder"):
        _cli(["data", "generate", "listops", "--n", "5", "--out", str(tmp_path)])


def test_cli_check_official(tmp_path, capsys, write_aan):
    write_aan(tmp_path)
    assert _cli(["data", "check", "retrieval", "--data-dir", str(tmp_path), "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert "official AAN pairs" in out and "x2 documents" in out and "input_ids (3, 2, 16) int64" in out
    with pytest.raises(FileNotFoundError, match="AAN retrieval data not found"):
        _cli(["data", "check", "retrieval", "--data-dir", str(tmp_path / "empty")])
