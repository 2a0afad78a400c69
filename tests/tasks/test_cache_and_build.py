"""Atomic keyed caches, resumable image fills, build_datamodule's contract and `lra data`."""
from __future__ import annotations


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
    from lra.cli import build_parser

    args = build_parser().parse_args(argv)
    return args.func(args)


def test_cli_generate_and_check(tmp_path, capsys):
    assert _cli(["data", "generate", "pathfinder32", "--n", "20", "--workers", "1", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "16/2/2 images" in out and "images/s per worker" in out
    assert _cli(["data", "generate", "pathfinder32", "--n", "20", "--workers", "1", "--data-dir", str(tmp_path)]) == 0
    assert "nothing generated" in capsys.readouterr().out
    assert _cli(["data", "generate", "listops", "--n-train", "30", "--n-val", "5", "--n-test", "5",
                 "--min-len", "10", "--max-len", "60", "--workers", "1", "--data-dir", str(tmp_path)]) == 0
    assert "30/5/5 examples" in capsys.readouterr().out
    assert _cli(["data", "check", "pathfinder32", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # the full set is not there, the 20 images made above are, and the check says how runs read them
    assert "not generated yet" in out and "a smaller set is there, 16/2/2 in " in out
    assert "runs read it with data.limit_train=16 data.limit_eval=2" in out
    with pytest.raises(ValueError, match="--n is for Pathfinder"):
        _cli(["data", "generate", "listops", "--n", "5", "--data-dir", str(tmp_path)])


def test_cli_check_official(tmp_path, capsys, write_aan):
    write_aan(tmp_path)
    assert _cli(["data", "check", "retrieval", "--data-dir", str(tmp_path), "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert "official AAN pairs" in out and "x2 documents" in out and "input_ids (3, 2, 16) int64" in out
    with pytest.raises(FileNotFoundError, match="AAN retrieval data not found"):
        _cli(["data", "check", "retrieval", "--data-dir", str(tmp_path / "empty")])


def test_fill_images_drops_stale_bookkeeping_with_a_new_image_file(tmp_path, monkeypatch):
    monkeypatch.setattr(image_store, "_resolve", lambda name: _fill)
    image_store.fill_images(tmp_path, 50, (2, 2), image_store.Job("x:_fill", {}), workers=1, chunk=10,
                            progress=False)
    assert np.load(tmp_path / image_store.DONE).all()
    (tmp_path / image_store.IMAGES).unlink()              # the image file is lost, its bookkeeping not
    with pytest.raises(RuntimeError, match="stop at 0"):   # interrupted before the first chunk is done
        image_store.fill_images(tmp_path, 50, (2, 2), image_store.Job("x:_fill", {"fail_at": 0}), workers=1,
                                chunk=10, progress=False)
    result = image_store.fill_images(tmp_path, 50, (2, 2), image_store.Job("x:_fill", {}), workers=1,
                                     chunk=10, progress=False)
    assert result["images"] == 50                          # nothing is taken as done over zero images
    assert image_store.open_images(tmp_path)[:, 0, 0].tolist() == list(range(50))


def test_generated_pathfinder_resume_keeps_finished_splits(tmp_path, monkeypatch):
    from tasks import pathfinder_gen

    made = []
    original = pathfinder_gen.generate_into

    def interrupted_in_test(params, seed, split, indices, out):
        made.append((split, len(indices)))
        if split == "test":
            raise KeyboardInterrupt
        return original(params, seed, split, indices, out)

    monkeypatch.setattr(pathfinder_gen, "generate_into", interrupted_in_test)
    dm = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=2, limit_train=16, limit_eval=8,
                          generator_workers=1)
    with pytest.raises(KeyboardInterrupt):
        dm.prepare_data()
    assert ("train", 8) in made and ("val", 8) in made
    made.clear()
    monkeypatch.setattr(pathfinder_gen, "generate_into", lambda *a: made.append((a[2], len(a[3]))) or original(*a))
    dm.prepare_data()
    assert made == [("test", 8)]                           # train and val are not made again
    dm.setup()
    labels = [dm.dataset("train")[i]["label"].item() for i in range(16)]
    assert labels == pathfinder_gen.sample_labels(0, "train", 16).tolist()
    sample = pathfinder_gen.generate_sample(pathfinder_gen.params_for(32), 0, "train", 5)
    assert np.array_equal(dm.dataset("train")[5]["input_ids"].numpy(), sample.image.reshape(-1))


def test_auto_never_falls_back_next_to_an_incomplete_release(tmp_path, write_listops, write_pathfinder,
                                                             write_imdb, write_cifar, write_aan):
    import shutil

    write_listops(tmp_path / "a")
    (tmp_path / "a" / "listops-1000" / "basic_test.tsv").unlink()
    with pytest.raises(FileNotFoundError, match=r"listops-1000 is incomplete: missing basic_test\.tsv.*"
                                                r"lra data generate listops"):
        build_datamodule("listops", data_dir=tmp_path / "a", batch_size=2)      # was: the generator
    with pytest.raises(FileNotFoundError, match=r"missing basic_test\.tsv"):
        build_datamodule("listops", data_dir=tmp_path / "a", batch_size=2, source="official")
    assert build_datamodule("listops", data_dir=tmp_path / "a", batch_size=2,
                            source="generated").source.kind == "generated"     # asked for: fine
    folder, _, _ = write_pathfinder(tmp_path / "b", n=4)
    shutil.rmtree(folder / "metadata")
    with pytest.raises(FileNotFoundError, match=r"curv_contour_length_14 is incomplete: missing metadata/"):
        build_datamodule("pathfinder32", data_dir=tmp_path / "b", batch_size=2)
    # Another difficulty that is not there at all is generated as before.
    assert build_datamodule("pathfinder32", data_dir=tmp_path / "b", batch_size=2,
                            difficulty="easy").source.kind == "generated"
    root = write_imdb(tmp_path / "c")
    shutil.rmtree(root / "test" / "neg")
    with pytest.raises(FileNotFoundError, match=r"aclImdb is incomplete: missing test/neg"):
        build_datamodule("text", data_dir=tmp_path / "c", batch_size=2)          # was: tfds (a download)
    folder, _ = write_cifar(tmp_path / "d", per_batch=2)
    (folder / "data_batch_4").unlink()
    with pytest.raises(FileNotFoundError, match=r"cifar-10-batches-py is incomplete: missing data_batch_4"):
        build_datamodule("image", data_dir=tmp_path / "d", batch_size=2)
    folder = write_aan(tmp_path / "e")
    (folder / "new_aan_pairs.eval.tsv").unlink()
    with pytest.raises(FileNotFoundError, match=r"tsv_data is incomplete: missing new_aan_pairs\.eval\.tsv"):
        build_datamodule("retrieval", data_dir=tmp_path / "e", batch_size=2)


def test_parallel_fill_reports_a_failed_chunk_without_running_the_rest(tmp_path, monkeypatch):
    import time

    log = tmp_path / "started.log"

    def slow(start, stop, out, *, fail_at):
        with open(log, "a") as handle:
            handle.write(f"{start}\n")
        if start == fail_at:
            raise ValueError(f"corrupt image in chunk {start}")
        time.sleep(0.05)
        out[:] = 1

    monkeypatch.setattr(image_store, "_resolve", lambda name: slow)   # forked workers inherit it
    with pytest.raises(ValueError, match="corrupt image in chunk 8"):
        image_store.fill_images(tmp_path / "fill", 800, (2, 2), image_store.Job("x:slow", {"fail_at": 8}),
                                workers=2, chunk=8, progress=False)
    started = len(log.read_text().split())
    assert started < 20, f"{started} of 100 chunks ran after the error"     # was: all 100


def _truncate(path, keep: int) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(keep)


def test_a_truncated_listops_cache_stops_training_with_how_to_rebuild_it(tmp_path, capsys):
    import shlex

    from lra.cli import main

    data, runs = tmp_path / "data", tmp_path / "runs"
    argv = ["train", "--task", "listops", "--attention", "softmax", "--preset", "smoke", "--seq-len", "64",
            "--runs-dir", str(runs), "--data-dir", str(data), "--no-progress", "train.max_steps=2",
            "train.val_check_interval=2", "train.batch_size=4", "data.limit_train=16", "data.limit_eval=4",
            "optim.warmup_steps=1"]
    dm = build_datamodule("listops", data_dir=data, batch_size=4, seq_len=64, limit_train=16, limit_eval=4)
    dm.prepare_data()
    train_tsv = dm.source.folder() / "basic_train.tsv"
    _truncate(train_tsv, train_tsv.stat().st_size // 2)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"damaged data cache {dm.source.folder()}: {train_tsv} has" in err and "truncated" in err
    assert not runs.exists()  # checked before the run folder is made: nothing of the run is left
    rebuild = err.split("Rebuild it: ")[1].strip()
    assert rebuild.startswith("lra data generate listops ") and rebuild.endswith(" --force")
    assert main(shlex.split(rebuild)[1:]) == 0                 # the command it names makes that cache again
    cache.check_entry(dm.source.folder())
    assert main(argv) == 0


def test_a_truncated_image_cache_is_named_not_an_mmap_error(tmp_path):
    dm = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=2, limit_train=8, limit_eval=4,
                          generator_workers=1)
    dm.prepare_data()
    images = dm.source.folder() / "train" / image_store.IMAGES
    _truncate(images, images.stat().st_size - 100)
    with pytest.raises(cache.DamagedCache, match=rf"{images} has \d+ bytes.*lra data generate pathfinder32 .*--force"):
        dm.prepare_data()
    with pytest.raises(cache.DamagedCache):
        dm.setup()


def test_manifest_records_sizes_shapes_and_the_content_hash(tmp_path):
    def build(staging):
        np.save(staging / "a.npy", np.zeros((5, 3), dtype=np.uint8))

    entry = cache.build_once(tmp_path / "entry", build, meta={})
    import json

    manifest = json.loads((entry / cache.MANIFEST).read_text())
    assert manifest["files"]["a.npy"]["shape"] == [5, 3] and manifest["content_hash"] == cache.entry_hash(entry)
    np.save(entry / "a.npy", np.zeros((3, 5), dtype=np.uint8))  # same size, other shape
    with pytest.raises(cache.DamagedCache, match=r"shape \[3, 5\], \[5, 3\] when it was written"):
        cache.build_once(entry, build, meta={})
    (entry / "a.npy").unlink()
    with pytest.raises(cache.DamagedCache, match="a.npy is missing"):
        cache.build_once(entry, build, meta={})
    assert cache.build_once(entry, build, meta={}, force=True) == entry
    cache.check_entry(entry)
