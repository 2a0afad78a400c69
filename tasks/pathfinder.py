"""Pathfinder / Path-X / Path-256: the official PNG release and the built-in generator.

Official layout (LRA release): `pathfinder{32,64,128,256}/curv_contour_length_14/` (also `_9` and
`curv_baseline` for contour length 6) with `imgs/<batch>/sample_<i>.png` (8-bit grayscale) and
`metadata/<batch>.npy`. Despite the suffix the metadata files are plain text (np.load cannot read
them): one line per image, 11 space-separated fields, e.g.
`imgs/0 sample_0.png 0 1 1.8 14 4 5 1.5 3 1` = folder, file, index, label, continuity, contour
length, distractor length, paddle length, thickness, margin, contrasts. LRA uses contour length 14
("hard") for Pathfinder and Path-X, splits 80/10/10 and drops empty (0-byte) images.

We decode the PNGs once into a uint8 array cache (`<data_dir>/cache/...`, keyed by the folder and
the metadata files' sizes and times) and split it with a fixed seed, so every run sees the same
test set whatever its training seed. Generated data go to `<data_dir>/generated/<task>/...`, one
array per split, keyed by every generator parameter.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import warnings
from pathlib import Path

import numpy as np

from . import cache, image_store, pathfinder_gen, release
from .build_progress import BuildProgress
from .base import DataSource, PixelSplit, file_stamps

SPLITS = ("train", "val", "test")
METADATA_FIELDS = 11
EIGHT_BIT_MODES = ("L", "P", "1", "LA", "RGB", "RGBA")   # PIL modes that convert to "L" without loss of range


@dataclasses.dataclass(frozen=True)
class MetadataRow:
    image: Path
    label: int
    source: str          # "metadata/3.npy:17" for error messages


def read_metadata(folder: Path) -> list[MetadataRow]:
    """All rows of `folder/metadata/*.npy` in numeric file order; ValueError names file and line."""
    folder = Path(folder)
    meta_dir = folder / "metadata"
    files = sorted(meta_dir.glob("*.npy"), key=lambda p: (int(p.stem) if p.stem.isdigit() else 1 << 60, p.name))
    if not files:
        raise FileNotFoundError(f"no metadata/*.npy files in {folder}")
    rows: list[MetadataRow] = []
    empty: list[str] = []
    for path in files:
        if path.stat().st_size == 0:
            empty.append(path.name)   # its images (if any) are left out: say so
            continue
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not a text metadata file (the LRA release stores text lines "
                             "despite the .npy suffix)") from None
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            fields = line.split()
            if len(fields) != METADATA_FIELDS:
                raise ValueError(f"{path}:{lineno}: expected {METADATA_FIELDS} space-separated fields, "
                                 f"got {len(fields)}: {line[:120]!r}")
            if fields[3] not in ("0", "1"):
                raise ValueError(f"{path}:{lineno}: label (field 4) must be 0 or 1, got {fields[3]!r}")
            image = Path(fields[0]) / fields[1]
            if image.is_absolute() or ".." in image.parts:
                raise ValueError(f"{path}:{lineno}: image path {str(image)!r} leaves the data folder {folder} "
                                 "(absolute or with '..'); the release lists images inside it only")
            rows.append(MetadataRow(folder / image, int(fields[3]), f"{path}:{lineno}"))
    if not rows:
        raise ValueError(f"{meta_dir}: metadata files hold no rows")
    if empty:
        warnings.warn(f"{meta_dir}: {len(empty)} empty metadata file(s) ({', '.join(empty[:5])}"
                      f"{', ...' if len(empty) > 5 else ''}): the images they would list are left out "
                      "(an interrupted unpack?)", stacklevel=2)
    # An image listed twice would be split into train and test alike (leakage): keep its first row.
    first: dict[str, MetadataRow] = {}
    unique, repeated = [], []
    for row in rows:
        key = os.path.normpath(row.image)
        seen = first.setdefault(key, row)
        if seen is row:
            unique.append(row)
            continue
        if seen.label != row.label:
            raise ValueError(f"{row.source}: image {row.image} has label {row.label}, but {seen.source} "
                             f"lists it with label {seen.label}")
        repeated.append((row, seen))
    if repeated:
        row, seen = repeated[0]
        warnings.warn(f"{folder}: skipping {len(repeated)} repeated metadata row(s) (an image listed twice "
                      f"would land in more than one split), e.g. {row.source} repeats {seen.source}",
                      stacklevel=2)
    return unique


def split_indices(n: int, seed: int, fractions=(0.8, 0.1, 0.1)) -> dict[str, np.ndarray]:
    """Seeded permutation of range(n) cut into train/val/test by `fractions`."""
    order = np.random.default_rng(seed).permutation(n)
    n_train = int(round(fractions[0] * n))
    n_val = int(round(fractions[1] * n))
    return {"train": order[:n_train], "val": order[n_train:n_train + n_val], "test": order[n_train + n_val:]}


def decode_pngs(start: int, stop: int, out: np.ndarray, *, paths: list[str], sources: list[str]) -> None:
    """Worker job: decode paths[start:stop] into out (8-bit grayscale, shape checked)."""
    from PIL import Image

    size = out.shape[1:]
    for j, k in enumerate(range(start, stop)):
        try:
            with Image.open(paths[k]) as img:
                img.load()
                if img.mode not in EIGHT_BIT_MODES:
                    # convert("L") would clip 16-bit / 32-bit values at 255 without a word
                    raise ValueError(f"pixel mode {img.mode!r} is not 8-bit (expected 8-bit grayscale 'L')")
                if img.mode != "L":
                    img = img.convert("L")
                arr = np.asarray(img, dtype=np.uint8)
        except Exception as err:  # noqa: BLE001 - any decoding failure is a corrupt image
            raise ValueError(f"unreadable image {paths[k]} (listed at {sources[k]}): {err}") from None
        if arr.shape != size:
            raise ValueError(f"image {paths[k]} (listed at {sources[k]}) is {arr.shape[1]}x{arr.shape[0]}, "
                             f"expected {size[1]}x{size[0]}")
        out[j] = arr


def generate_chunk(start: int, stop: int, out: np.ndarray, *, params: dict, seed: int, split: str) -> np.ndarray:
    """Worker job: generated images start..stop of `split`."""
    p = pathfinder_gen.PathfinderParams(**{k: tuple(v) if isinstance(v, list) else v for k, v in params.items()})
    return pathfinder_gen.generate_into(p, seed, split, range(start, stop), out)


class OfficialPathfinder(DataSource):
    kind = "official"

    def __init__(self, data_dir: Path, size: int, contour_length: int, split_seed: int, fractions,
                 workers: int | None = None):
        self.data_dir = Path(data_dir)
        self.size = size
        self.contour_length = contour_length
        self.split_seed = split_seed
        self.fractions = tuple(fractions)
        self.workers = workers
        self.subfolder = pathfinder_gen.OFFICIAL_FOLDERS[contour_length]
        root = release.find_folder(self.data_dir, f"pathfinder{size}", (f"{self.subfolder}/metadata",))
        self.folder = root / self.subfolder if root is not None else None

    def available(self) -> bool:
        return self.folder is not None

    def missing_help(self) -> str:
        return (f"Pathfinder-{self.size} data not found: " + release.release_help(
            self.data_dir, f"pathfinder{self.size}/{self.subfolder}/{{imgs,metadata}}")
            + f". Or generate it: lra data generate {task_for_size(self.size)} --data-dir {self.data_dir} "
            "(source='generated').")

    def incomplete(self) -> str | None:
        if self.folder is not None:
            return None
        root = release.find_folder(self.data_dir, f"pathfinder{self.size}", (self.subfolder,))
        if root is None:   # this difficulty is not there at all (generating it is then fine)
            return None
        return (f"the Pathfinder-{self.size} release folder {root / self.subfolder} is incomplete: missing "
                f"metadata/ (an interrupted unpack?). Unpack it again from {release.LRA_RELEASE_URL}, or "
                f"generate the data: lra data generate {task_for_size(self.size)} --data-dir {self.data_dir} "
                "(source='generated').")

    def _cache_folder(self) -> Path:
        meta = sorted((self.folder / "metadata").glob("*.npy"))
        stamp = [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in meta]
        key = {"source": str(self.folder.resolve()), "size": self.size, "metadata": stamp, "version": 1}
        return self.data_dir / "cache" / f"pathfinder{self.size}-official-c{self.contour_length}-{cache.param_hash(key)}"

    def prepare(self, progress: bool | None = None, force: bool = False) -> Path:
        self.require()
        target = self._cache_folder()

        def build(staging: Path) -> None:
            rows = read_metadata(self.folder)
            keep, empty = [], []
            for row in rows:
                try:
                    size = row.image.stat().st_size
                except OSError:
                    raise FileNotFoundError(f"image {row.image} listed at {row.source} does not exist") from None
                (keep if size > 0 else empty).append(row)
            if empty:
                shown = ", ".join(str(r.image) for r in empty[:3])
                warnings.warn(f"Pathfinder-{self.size}: skipping {len(empty)} empty image file(s) "
                              f"(known in the LRA release), e.g. {shown}", stacklevel=2)
            if not keep:
                raise ValueError(f"{self.folder}: every listed image is empty")
            job = image_store.Job("tasks.pathfinder:decode_pngs",
                                  {"paths": [str(r.image) for r in keep], "sources": [r.source for r in keep]})
            with BuildProgress(f"decoding {pretty_name(self.size)} PNGs of {self.folder}", len(keep), "images",
                               target, nbytes=len(keep) * self.size * self.size, show=progress) as bar:
                image_store.fill_images(staging, len(keep), (self.size, self.size), job, workers=self.workers,
                                        report=bar)
            image_store.save_labels(staging, np.array([r.label for r in keep], dtype=np.int64))
            image_store.finish(staging)

        return cache.build_once(target, build, meta={"source": str(self.folder), "size": self.size,
                                                     "contour_length": self.contour_length}, force=force,
                                rebuild=f"remove {target}; the next run decodes the PNGs again")

    def load(self, split: str) -> PixelSplit:
        folder = self.prepare()
        labels = image_store.load_labels(folder)
        idx = split_indices(len(labels), self.split_seed, self.fractions)[split]
        return PixelSplit(image_store.open_images(folder), labels[idx], idx)

    def describe(self) -> str:
        return f"official Pathfinder-{self.size} ({self.subfolder}) in {self.folder}"

    def identity(self) -> dict:
        meta = sorted((self.folder / "metadata").glob("*.npy")) if self.folder is not None else []
        return {"source": self.kind, "size": self.size, "contour_length": self.contour_length,
                "split_seed": self.split_seed, "fractions": list(self.fractions),
                "metadata": file_stamps(meta, self.folder) if meta else None}

    def content_hash(self) -> str | None:
        target = self._cache_folder() if self.folder is not None else None
        return cache.entry_hash(target) if target is not None and cache.is_complete(target) else None


@dataclasses.dataclass(frozen=True)
class GeneratedCounts:
    train: int
    val: int
    test: int


class GeneratedPathfinder(DataSource):
    kind = "generated"

    def __init__(self, data_dir: Path, params: pathfinder_gen.PathfinderParams, counts: GeneratedCounts,
                 seed: int, workers: int | None = None):
        self.data_dir = Path(data_dir)
        self.params = params
        self.counts = counts
        self.seed = seed
        self.workers = workers
        self.key = {**params.key(), "seed": seed}
        self.parent = self.data_dir / "generated" / task_for_size(params.size)
        self.prefix = f"c{params.contour_length}-{cache.param_hash(self.key)}-"

    def available(self) -> bool:
        return True

    def missing_help(self) -> str:  # pragma: no cover - a generator is always available
        return ""

    def folder(self) -> Path:
        """A complete cache with at least the wanted counts if there is one (image i of a split is
        the same in every cache with these parameters), else the folder to build."""
        for entry in cache.complete_entries(self.parent, self.prefix):
            have = cache.read_meta(entry).get("counts", {})
            if all(have.get(s, -1) >= getattr(self.counts, s) for s in SPLITS):
                return entry
        c = self.counts
        return self.parent / f"{self.prefix}n{c.train}-{c.val}-{c.test}"

    def other_sets(self) -> list[tuple[Path, dict]]:
        """The complete caches of these generator parameters and seed other than :meth:`folder`'s
        (e.g. a small set made with `lra data generate --n`), with their counts per split."""
        wanted = self.folder()
        return [(entry, cache.read_meta(entry).get("counts", {}))
                for entry in cache.complete_entries(self.parent, self.prefix) if entry != wanted]

    def prepare(self, progress: bool | None = None, force: bool = False) -> Path:
        target = self.folder()
        if cache.is_complete(target) and not force:
            cache.check_entry(target, self.rebuild_command())
            return target
        params = dataclasses.asdict(self.params)
        stats = {}

        def build(staging: Path) -> None:
            shape = (self.params.size, self.params.size)
            total = sum(getattr(self.counts, split) for split in SPLITS)
            filled = [split for split in SPLITS
                      if image_store.is_filled(staging / split, getattr(self.counts, split), shape)]
            with BuildProgress(f"generating {self.title()}", total, "images", target,
                               nbytes=total * shape[0] * shape[1], show=progress,
                               completed=sum(getattr(self.counts, split) for split in filled)) as bar:
                for split in SPLITS:
                    self._build_split(staging, split, shape, params, split in filled, bar, stats)

        out = cache.build_once(target, build, meta={**self.key, "counts": dataclasses.asdict(self.counts)},
                               force=force, rebuild=self.rebuild_command())
        self.last_stats = stats
        return out

    def rebuild_command(self) -> str:
        """The `lra data generate` command that makes exactly this data set again."""
        c = self.counts
        return (f"lra data generate {task_for_size(self.params.size)} --data-dir {shlex.quote(str(self.data_dir))} "
                f"--n-train {c.train} --n-val {c.val} --n-test {c.test} --difficulty {self.params.contour_length} "
                f"--seed {self.seed} --force")

    def title(self) -> str:
        """E.g. 'Pathfinder-32 hard (contour length 14)'."""
        names = {length: name for name, length in pathfinder_gen.DIFFICULTIES.items()}
        length = self.params.contour_length
        return f"{pretty_name(self.params.size)} {names.get(length, '')} (contour length {length})".replace("  ", " ")

    def _build_split(self, staging: Path, split: str, shape, params: dict, filled: bool, bar, stats: dict) -> None:
        """Images and labels of one split into `staging/split`, reported to `bar`."""
        n = getattr(self.counts, split)
        if filled:
            # finished before an interruption: resume with the next split
            stats[split] = {"seconds": 0.0, "cpu_seconds": 0.0, "images": 0}
            return
        job = image_store.Job("tasks.pathfinder:generate_chunk",
                              {"params": params, "seed": self.seed, "split": split})
        result = image_store.fill_images(
            staging / split, n, shape, job, workers=self.workers,
            description=f"{task_for_size(self.params.size)} {split}", report=bar)
        labels = result["labels"] if result["labels"] is not None else np.zeros(0, np.int64)
        image_store.save_labels(staging / split, labels)
        image_store.finish(staging / split)
        stats[split] = {"seconds": result["seconds"], "cpu_seconds": result["cpu_seconds"],
                        "images": result["images"]}

    def load(self, split: str) -> PixelSplit:
        folder = self.prepare()
        n = getattr(self.counts, split)
        labels = image_store.load_labels(folder / split)[:n]
        return PixelSplit(image_store.open_images(folder / split), labels)

    def identity(self) -> dict:
        params = dict(self.params.key())
        name, version = params.pop("generator"), params.pop("generator_version")
        return {"source": self.kind, "generator": {"name": name, "version": version,
                                                   "params": {**params, "seed": self.seed,
                                                              "counts": dataclasses.asdict(self.counts)}}}

    def planned_split_sizes(self) -> dict[str, int]:
        return dataclasses.asdict(self.counts)

    def content_hash(self) -> str | None:
        target = self.folder()
        return cache.entry_hash(target) if cache.is_complete(target) else None

    def describe(self) -> str:
        c = self.counts
        return (f"generated {task_for_size(self.params.size)} (contour length {self.params.contour_length}, "
                f"{c.train}/{c.val}/{c.test}, seed {self.seed}) in {self.parent}")


def pretty_name(size: int) -> str:
    """32 -> 'Pathfinder-32', 128 -> 'Path-X (128x128)'."""
    return {128: "Path-X (128x128)", 256: "Path-256"}.get(size, f"Pathfinder-{size}")


def task_for_size(size: int) -> str:
    return {32: "pathfinder32", 64: "pathfinder64", 128: "pathx", 256: "path256"}[size]


DEFAULT_TOTAL = 200_000   # images per difficulty in the LRA release


def default_counts(spec, limit_train=None, limit_eval=None, total: int = DEFAULT_TOTAL) -> GeneratedCounts:
    f = spec.options["split_fractions"]
    n_train = int(round(f[0] * total))
    n_val = int(round(f[1] * total))
    counts = [n_train, n_val, total - n_train - n_val]
    if limit_train is not None:
        counts[0] = min(counts[0], int(limit_train))
    if limit_eval is not None:
        counts[1] = min(counts[1], int(limit_eval))
        counts[2] = min(counts[2], int(limit_eval))
    return GeneratedCounts(*counts)


def make_source(spec, kind: str, *, data_dir: Path, limit_train=None, limit_eval=None, difficulty=None,
                workers=None, **_unused) -> DataSource:
    o = spec.options
    contour = pathfinder_gen.contour_length_of(difficulty if difficulty is not None else o["difficulty"])
    if kind == "official":
        return OfficialPathfinder(data_dir, o["size"], contour, o["split_seed"], o["split_fractions"], workers)
    if kind == "generated":
        params = pathfinder_gen.params_for(o["size"], contour)
        return GeneratedPathfinder(data_dir, params, default_counts(spec, limit_train, limit_eval),
                                   o["generator_seed"], workers)
    raise ValueError(f"{spec.name} has no {kind!r} source")

