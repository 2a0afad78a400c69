"""The one LightningDataModule every LRA task uses, its two dataset kinds and the data-source API.

Data sources (official files, generators, tfds, local folders) hand over each split in one of two
forms:
  * `TokenSplit`: one or two (retrieval) ragged token arrays plus labels. Tokens are stored as
    they come (raw bytes for text, ids for ListOps); the dataset adds `token_offset` so that id 0
    stays free for padding. The sources tokenise once into a memory-mapped cache
    (`tasks.token_store`), so a split's arrays are usually memory maps read page by page.
  * `PixelSplit`: a uint8 (N, H, W) array (usually memory-mapped) plus labels. Every pixel is a
    token (ids 0..255); pixel 0 is black, a real value, and is never padding.

Training augmentation (pixel tasks whose label survives it, `TaskSpec.augmentations`): the
training dataset lists every image once per variant — `dihedral`, the 8 rotations / reflections of
a square image (Pathfinder: whether two markers share a contour is invariant under them), or
`hflip`, the image and its mirror. Example i is variant i // M of image i % M (M images), so an
epoch shows every image in every variant, in the run's shuffled order; no random state is involved,
so a resumed run sees exactly the batches it would have seen.

Batches are dicts: `input_ids` LongTensor (B, N) — (B, 2, N) for two-document tasks —,
`padding_mask` bool of the same shape (True = padding), `label` LongTensor (B,). Token sequences
are truncated to `max_len` and padded to exactly `max_len` (fixed shapes, as in the LRA code).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from .eval_sampler import EvalShardSampler
from .registry import check_augment
from .resumable_loader import train_loader

SPLITS = ("train", "val", "test")


def check_utf8(path: Path, lineno: int, line: str) -> None:
    """ValueError naming file and line when `line` (read with errors="surrogateescape") held bytes
    that are not UTF-8."""
    if line.isascii():
        return
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{path}:{lineno}: not valid UTF-8 (byte 0x{ord(line[err.start]) - 0xDC00:02x} at "
                         f"column {err.start + 1})") from None


class Ragged:
    """N variable-length 1-D arrays stored as one flat array + offsets (N + 1), either of which may
    be a memory map: an item is a slice of `flat`, read from disk when used."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray):
        self.flat = flat
        self.offsets = offsets.astype(np.int64, copy=False)

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray], dtype=np.uint8, max_len: int | None = None) -> "Ragged":
        if max_len is not None:
            arrays = [a[:max_len] for a in arrays]
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.concatenate(arrays).astype(dtype, copy=False) if len(arrays) else np.zeros(0, dtype)
        return cls(flat, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.flat[self.offsets[i]:self.offsets[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def take(self, indices: np.ndarray) -> "Ragged":
        return Ragged.from_arrays([self[int(i)] for i in indices], dtype=self.flat.dtype)


@dataclass
class TokenSplit:
    sequences: tuple[Ragged, ...]     # one per document (two for retrieval)
    labels: np.ndarray                # (N,) int64
    folder: Path | None = None        # the split folder its arrays are mapped from (tasks.token_store)

    def __len__(self) -> int:
        return len(self.labels)

    def __reduce__(self):
        # A split mapped from a folder pickles as that folder (DataLoader workers started with
        # "spawn" map the files again instead of receiving a copy of the data).
        if self.folder is None:
            return super().__reduce__()
        from .token_store import open_split
        return open_split, (self.folder,)


@dataclass
class PixelSplit:
    images: np.ndarray                # (M, H, W) uint8, possibly a memmap
    labels: np.ndarray                # (N,) int64 label of example i
    indices: np.ndarray | None = None # example i is images[indices[i]] (None: identity)

    def __len__(self) -> int:
        return len(self.labels)


class TokenDataset(Dataset):
    """Ragged token sequences -> fixed-length ids + padding mask (pad id 0)."""

    def __init__(self, split: TokenSplit, max_len: int, token_offset: int, limit: int | None = None):
        self.split = split
        self.max_len = int(max_len)
        self.token_offset = int(token_offset)
        self.size = len(split) if limit is None else min(len(split), int(limit))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < self.size:
            raise IndexError(i)
        docs = self.split.sequences
        ids = np.zeros((len(docs), self.max_len), dtype=np.int64)
        mask = np.ones((len(docs), self.max_len), dtype=bool)
        for d, seq in enumerate(docs):
            tokens = seq[i][: self.max_len]
            ids[d, : len(tokens)] = tokens.astype(np.int64) + self.token_offset
            mask[d, : len(tokens)] = False
        if len(docs) == 1:
            ids, mask = ids[0], mask[0]
        return {"input_ids": torch.from_numpy(ids), "padding_mask": torch.from_numpy(mask),
                "label": torch.tensor(int(self.split.labels[i]), dtype=torch.long)}


AUGMENTATIONS = {"none": 1, "dihedral": 8, "hflip": 2}   # name -> variants per image


def augment_image(image: np.ndarray, augment: str, variant: int) -> np.ndarray:
    """Variant `variant` of an (H, W) image: `dihedral` 0..7 = rotation by 90 * (v % 4) degrees,
    then a left-right mirror for v >= 4 (0 is the image itself); `hflip` 0..1 = itself, mirror."""
    if augment not in AUGMENTATIONS:
        raise ValueError(f"unknown augmentation {augment!r}; use one of {', '.join(AUGMENTATIONS)}")
    if not 0 <= variant < AUGMENTATIONS[augment]:
        raise ValueError(f"{augment} has variants 0..{AUGMENTATIONS[augment] - 1}, got {variant}")
    if augment == "dihedral":
        if image.shape[0] != image.shape[1]:
            raise ValueError(f"dihedral augmentation needs square images, got {image.shape[0]}x{image.shape[1]}")
        image = np.rot90(image, variant % 4)
        return image[:, ::-1] if variant >= 4 else image
    return image[:, ::-1] if variant == 1 else image


class PixelDataset(Dataset):
    """uint8 images -> flattened pixel ids 0..255; the padding mask is all False.

    `augment` (training only): every image once per variant of the augmentation (module docstring)."""

    def __init__(self, split: PixelSplit, limit: int | None = None, augment: str = "none"):
        if augment not in AUGMENTATIONS:
            raise ValueError(f"unknown augmentation {augment!r}; use one of {', '.join(AUGMENTATIONS)}")
        self.split = split
        self.images = len(split) if limit is None else min(len(split), int(limit))
        self.augment = augment
        self.size = self.images * AUGMENTATIONS[augment]

    def __len__(self) -> int:
        return self.size

    def __getstate__(self):
        # DataLoader workers started with "spawn" get the memory map's path, not a copy of the data.
        state = dict(self.__dict__)
        images = self.split.images
        if isinstance(images, np.memmap) and images.filename:
            state["split"] = PixelSplit(None, self.split.labels, self.split.indices)
            state["_images_path"] = images.filename
        return state

    def __setstate__(self, state):
        path = state.pop("_images_path", None)
        self.__dict__.update(state)
        if path is not None:
            self.split.images = np.load(path, mmap_mode="r")

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < self.size:
            raise IndexError(i)
        variant, i = divmod(i, self.images)
        j = i if self.split.indices is None else int(self.split.indices[i])
        image = np.asarray(self.split.images[j])
        if self.augment != "none":
            image = augment_image(image, self.augment, variant)
        pixels = np.ascontiguousarray(image, dtype=np.int64).reshape(-1)
        return {"input_ids": torch.from_numpy(pixels),
                "padding_mask": torch.zeros(pixels.shape[0], dtype=torch.bool),
                "label": torch.tensor(int(self.split.labels[i]), dtype=torch.long)}


class DataSource(ABC):
    """One way of getting a task's data (official files, a generator, tfds, a local folder)."""

    kind: str = "?"

    @abstractmethod
    def available(self) -> bool:
        """True when this source can serve data now (or, for generators, can make it)."""

    @abstractmethod
    def missing_help(self) -> str:
        """What to put where (or what to install) when `available()` is False."""

    def incomplete(self) -> str | None:
        """When this source's data are there in part (e.g. a release folder lacking a file): what is
        missing and how to fix it; `source="auto"` then stops with it instead of falling back."""
        return None

    def prepare(self) -> None:
        """Generate / convert / download; called once per node before `load`."""
        self.require()

    @abstractmethod
    def load(self, split: str) -> TokenSplit | PixelSplit:
        """The split's data ('train', 'val' or 'test')."""

    @abstractmethod
    def describe(self) -> str:
        """One line saying where the data comes from."""

    def identity(self) -> dict:
        """What identifies the data this source serves, the same on every machine (no absolute
        paths): its kind plus, for a generator, its name, version and parameters, for released files
        their names and sizes. Part of every run id (`lra.config.RunConfig.data_identity`)."""
        return {"source": self.kind, "reader": type(self).__name__}

    def planned_split_sizes(self) -> dict[str, int] | None:
        """The examples per split ('train', 'val', 'test') this source will serve, when known without
        reading or making the data (a generator's counts); None when only the data can tell."""
        return None

    def content_hash(self) -> str | None:
        """A hash of the bytes `load` reads once prepared (`tasks.cache.content_hash`); None when the
        source cannot tell (e.g. data held by tfds)."""
        return None

    def require(self) -> None:
        if not self.available():
            raise FileNotFoundError(self.incomplete() or self.missing_help())


class LraDataModule(pl.LightningDataModule):
    """A task's train/val/test data as batches of the layout described in the module docstring.

    Attributes the model reads after construction: `num_classes`, `vocab_size`, `max_len`,
    `dual`, `image_shape`; also `task`, `source` (a DataSource) and, after `setup`, `split_sizes`."""

    def __init__(self, spec, source: DataSource, *, batch_size: int, max_len: int, num_workers: int = 0,
                 seed: int = 0, limit_train: int | None = None, limit_eval: int | None = None,
                 augment: str = "none"):
        super().__init__()
        check_augment(spec, augment)
        self.augment = augment
        self.spec = spec
        self.task = spec.name
        self.source = source
        self.num_classes = spec.num_classes
        self.vocab_size = spec.vocab_size
        self.max_len = int(max_len)
        self.dual = spec.dual
        self.image_shape = spec.image_shape
        self.token_offset = spec.token_offset
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.seed = int(seed)
        self.limits = {"train": limit_train, "val": limit_eval, "test": limit_eval}
        self.datasets: dict[str, Dataset] = {}
        self.split_sizes: dict[str, int] = {}

    def limit_evaluation(self, n: int) -> None:
        """Validate and test on at most the first `n` examples of the same splits (set before `setup`)."""
        for split in ("val", "test"):
            self.limits[split] = min(n, self.limits[split]) if self.limits[split] is not None else n
            self.datasets.pop(split, None)

    def prepare_data(self) -> None:
        self.source.prepare()

    def setup(self, stage: str | None = None) -> None:
        wanted = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",),
                  "predict": ("test",)}.get(stage, SPLITS)
        for split in wanted:
            if split not in self.datasets:
                self.datasets[split] = self._dataset(split)
                self.split_sizes[split] = len(self.datasets[split])

    def _dataset(self, split: str) -> Dataset:
        data = self.source.load(split)
        limit = self.limits[split]
        if isinstance(data, PixelSplit):
            return PixelDataset(data, limit=limit, augment=self.augment if split == "train" else "none")
        return TokenDataset(data, self.max_len, self.token_offset, limit=limit)

    def dataset(self, split: str) -> Dataset:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if split not in self.datasets:
            self.datasets[split] = self._dataset(split)
            self.split_sizes[split] = len(self.datasets[split])
        return self.datasets[split]

    def _shard(self) -> tuple[int, int]:
        """(world size, global rank) of the attached trainer; (1, 0) outside one."""
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return 1, 0
        return int(trainer.world_size), int(trainer.global_rank)

    def _loader(self, split: str) -> DataLoader:
        """An evaluation loader in the split's order; under DDP each rank reads a disjoint, unpadded
        shard (`EvalShardSampler`), so the synced accuracy counts every example exactly once."""
        world, rank = self._shard()
        dataset = self.dataset(split)
        sampler = EvalShardSampler(dataset, num_replicas=world, rank=rank) if world > 1 else None
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=False, sampler=sampler,
                          num_workers=self.num_workers, pin_memory=torch.cuda.is_available(),
                          persistent_workers=self.num_workers > 0, drop_last=False)

    def train_dataloader(self) -> StatefulDataLoader:
        """Shuffled by the run seed, a new order each epoch (a permutation of (seed, epoch)); under
        DDP each rank reads its own disjoint shard. Resumable mid-epoch (`tasks.resumable_loader`):
        Lightning checkpoints its position and a resumed run continues with exactly the batches it
        would have seen."""
        world, rank = self._shard()
        generator = torch.Generator()  # seeds the worker processes' RNGs reproducibly
        generator.manual_seed(self.seed)
        return train_loader(self.dataset("train"), seed=self.seed, batch_size=self.batch_size, num_replicas=world,
                            rank=rank, num_workers=self.num_workers, generator=generator,
                            pin_memory=torch.cuda.is_available(), persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def describe(self) -> str:
        return f"{self.task}: {self.source.describe()}"


def file_stamps(files, root: Path) -> list[list]:
    """[relative name, size] of each file: an identity of released files that holds on every machine."""
    return [[str(Path(f).relative_to(root)), Path(f).stat().st_size] for f in sorted(files)]


def identity_id(identity: dict) -> str:
    """The short id of a data identity (`DataSource.identity`)."""
    from .cache import param_hash

    return param_hash(identity)


def data_summary(source: DataSource) -> dict:
    """`{source, id, description, generator, identity}`: which data a source is, without reading it."""
    identity = source.identity()
    return {"source": identity.get("source", source.kind), "id": identity_id(identity),
            "description": source.describe(), "generator": identity.get("generator"), "identity": identity}


def data_record(source: DataSource, split_sizes: dict[str, int], content_hash: str | None) -> dict:
    """The run record's `data` section of a prepared source: `data_summary`, the split sizes read and
    the source's `content_hash` (which reads every data file: the caller computes it once)."""
    return {**data_summary(source), "splits": dict(split_sizes), "content_hash": content_hash}
