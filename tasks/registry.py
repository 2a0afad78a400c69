"""The LRA tasks as data: one TaskSpec per task.

Vocabularies (id 0 is padding wherever padding exists):
  * listops: 0 pad, 1-10 the digits 0-9, 11 `[MIN`, 12 `[MAX`, 13 `[MED`, 14 `[SM`, 15 `]`
    (parentheses are dropped, as in LRA) -> 16 ids.
  * text, retrieval: 0 pad, 1 + byte value for the UTF-8 bytes of the text -> 257 ids.
  * image, pathfinder*: the pixel value 0-255 itself -> 256 ids; no padding (mask all False).

`max_len` is the default tokens per sequence (per document for retrieval); text-like tasks accept
another `seq_len` (longer inputs are truncated, shorter ones padded); pixel tasks have exactly
H*W tokens. Sources are listed in the order `source="auto"` tries them.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TaskSpec:
    name: str
    description: str
    num_classes: int
    vocab_size: int
    max_len: int
    module: str                                   # module providing make_source(spec, kind, **ctx)
    sources: tuple[str, ...]                      # supported sources, in "auto" order
    dual: bool = False
    image_shape: tuple[int, int] | None = None
    token_offset: int = 0                         # added to stored tokens (1: keep 0 for padding)
    options: dict = field(default_factory=dict)   # module-specific settings
    # label-preserving training augmentations it admits (tasks.base.AUGMENTATIONS; data.augment)
    augmentations: tuple[str, ...] = ()

    @property
    def is_pixel(self) -> bool:
        return self.image_shape is not None


def _pathfinder(name: str, size: int, what: str) -> TaskSpec:
    return TaskSpec(name=name, description=f"{what}: are the two markers on one contour? ({size}x{size})",
                    num_classes=2, vocab_size=256, max_len=size * size, module="tasks.pathfinder",
                    sources=("official", "generated"), image_shape=(size, size),
                    augmentations=("dihedral", "hflip"),
                    options={"size": size, "difficulty": "hard", "split_seed": 0, "generator_seed": 0,
                             "split_fractions": (0.8, 0.1, 0.1)})


TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (
    TaskSpec(name="listops", description="ListOps: value of a nested MIN/MAX/MED/SM expression",
             num_classes=10, vocab_size=16, max_len=2000, module="tasks.listops",
             sources=("official", "generated"),
             options={"generator_seed": 0, "counts": (96_000, 2_000, 2_000), "lengths": (500, 2000)}),
    TaskSpec(name="text", description="IMDB sentiment from UTF-8 bytes", num_classes=2, vocab_size=257,
             max_len=4096, module="tasks.text", sources=("folder", "tfds"), token_offset=1,
             options={"val_fraction": 0.1, "split_seed": 0}),
    TaskSpec(name="retrieval", description="AAN: do two papers cite each other? (bytes, two documents)",
             num_classes=2, vocab_size=257, max_len=4096, module="tasks.retrieval", sources=("official",),
             dual=True, token_offset=1),
    TaskSpec(name="image", description="CIFAR-10 in grayscale, one token per pixel", num_classes=10,
             vocab_size=256, max_len=1024, module="tasks.image", sources=("folder", "tfds"),
             image_shape=(32, 32), augmentations=("hflip",), options={"val_fraction": 0.1}),
    _pathfinder("pathfinder32", 32, "Pathfinder"),
    _pathfinder("pathfinder64", 64, "Pathfinder"),
    _pathfinder("pathx", 128, "Path-X"),
    _pathfinder("path256", 256, "Path-256"),
)}

def check_augment(spec: TaskSpec, augment: str) -> None:
    """A clear error unless `augment` is "none" or one of the task's label-preserving ones
    (`data.augment`; the variants themselves are made in tasks.base)."""
    if augment != "none" and augment not in spec.augmentations:
        admitted = ", ".join(("none",) + tuple(spec.augmentations))
        raise ValueError(f"augmentation {augment!r} (data.augment) is not label-preserving for {spec.name} "
                         f"(or unknown); it admits: {admitted}")


SOURCES = ("auto", "official", "generated", "tfds", "folder")
