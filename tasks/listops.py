"""ListOps: tokenizer, reader of the official TSV files, and a generator with LRA's distribution.

Official layout (LRA release): `listops-1000/basic_{train,val,test}.tsv`, header `Source<TAB>Target`,
96,000 / 2,000 / 2,000 rows such as `( ( ( [MAX 2 ) 9 ) ] )<TAB>9`. Parentheses only encode the
generator's tree and are dropped; `]` closes an operator. Ids: 0 pad, 1-10 digits, 11 `[MIN`,
12 `[MAX`, 13 `[MED`, 14 `[SM`, 15 `]`.

Generator (facts from lra_benchmarks/data/listops.py, re-implemented): operators MIN, MAX, MED
(integer part of the median) and SM (sum modulo 10) over values 0-9; the root has depth 1 and a
node at depth < 10 is an operator with probability 0.25, else a value; an operator takes 2-10
arguments; the length (operators + values + closing brackets) must satisfy 500 < length < 2000;
trees are de-duplicated; 96k / 2k / 2k examples, written in the same TSV format (same nesting of
parentheses) so that one reader serves both.

Both sources tokenise the three TSVs once into a memory-mapped token cache (`token_cache`,
`tasks.token_store`), keyed by the files' paths, sizes and times and by `max_len`; runs map it.
"""
from __future__ import annotations

import random
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from . import cache, release, token_store
from .base import DataSource, TokenSplit, check_utf8, file_stamps

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
TOKEN_IDS = {**{str(d): d + 1 for d in range(10)}, "[MIN": 11, "[MAX": 12, "[MED": 13, "[SM": 14, "]": 15}
VOCAB_SIZE = 16
FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
HEADER = "Source\tTarget"

# Fast tokenizer: every token becomes one character, then a lookup table maps characters to ids.
_COMPACT = (("[MIN", "a"), ("[MAX", "b"), ("[MED", "c"), ("[SM", "d"))
_LUT = np.full(256, -1, dtype=np.int16)
for _ch, _id in {**{str(d): d + 1 for d in range(10)}, "a": 11, "b": 12, "c": 13, "d": 14, "]": 15}.items():
    _LUT[ord(_ch)] = _id


def encode(expression: str) -> np.ndarray:
    """Token ids of one expression (parentheses dropped). ValueError names an unknown token."""
    text = expression
    for long, short in _COMPACT:
        text = text.replace(long, short)
    parts = text.replace("(", " ").replace(")", " ").split()
    joined = "".join(parts)
    ids = None
    # The fast path maps the stand-in letters a-d to the operators, so letters in the input itself
    # must take the checked path (else a stray "a" would silently read as [MIN).
    if len(joined) == len(parts) and joined.isascii() and not any(ch in expression for ch in "abcd"):
        ids = _LUT[np.frombuffer(joined.encode("ascii"), dtype=np.uint8)]
    if ids is None or (ids < 0).any():
        for token in expression.replace("(", " ").replace(")", " ").split():
            if token not in TOKEN_IDS:
                raise ValueError(f"unknown ListOps token {token!r}")
        raise ValueError("malformed ListOps expression")  # pragma: no cover - defensive
    if len(ids) == 0:
        raise ValueError("empty ListOps expression")
    return ids.astype(np.uint8)


def rows(path: Path) -> Iterator[tuple[tuple[np.ndarray], int]]:
    """The ((token ids,), label) rows of an official-format ListOps TSV, read line by line; errors
    name the file and the line."""
    path = Path(path)
    count = 0
    with open(path, "r", encoding="utf-8", errors="surrogateescape", newline="") as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.rstrip("\r\n")
            check_utf8(path, lineno, line)
            if lineno == 1 and line.strip() == HEADER:
                continue
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                raise ValueError(f"{path}:{lineno}: expected 2 tab-separated fields (Source, Target), "
                                 f"got {len(fields)}")
            try:
                ids = encode(fields[0])
            except ValueError as err:
                raise ValueError(f"{path}:{lineno}: {err}") from None
            try:
                label = int(fields[1])
            except ValueError:
                label = -1
            if not 0 <= label <= 9:
                raise ValueError(f"{path}:{lineno}: Target must be an integer 0-9, got {fields[1]!r}")
            count += 1
            yield (ids,), label
    if not count:
        raise ValueError(f"{path}: no examples")


def token_cache(data_dir: Path, folder: Path, max_len: int, force: bool = False) -> Path:
    """The memory-mapped token cache (`tasks.token_store`) of the TSVs in `folder`, tokenised once."""
    files = {split: Path(folder) / name for split, name in FILES.items()}
    return token_store.build_files(data_dir, "listops", files, rows, documents=1, max_len=max_len, force=force)


# ---------------------------------------------------------------------------------------------
# Generator
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ListOpsParams:
    n_train: int = 96_000
    n_val: int = 2_000
    n_test: int = 2_000
    min_length: int = 500          # kept: min_length < length < max_length (as in LRA)
    max_length: int = 2000
    max_depth: int = 10
    max_args: int = 10
    operator_prob: float = 0.25
    seed: int = 0

    def __post_init__(self):
        if min(self.n_train, self.n_val, self.n_test) < 0 or self.n_train + self.n_val + self.n_test == 0:
            raise ValueError(f"ListOps counts must be >= 0 and not all 0, got {self}")
        if not 1 <= self.min_length < self.max_length - 1:
            raise ValueError(f"ListOps lengths need 1 <= min_length < max_length - 1, got "
                             f"({self.min_length}, {self.max_length})")
        if self.max_length < 5:
            # the shortest expression, [OP a b ], has 4 tokens; none would fit and the generator
            # would search for minutes before giving up
            raise ValueError(f"ListOps max_length must be at least 5 (lengths < max_length; the shortest "
                             f"expression [OP a b ] has 4 tokens), got {self.max_length} (seq_len "
                             f"{self.max_length - 1}?)")
        if self.max_args < 2 or self.max_depth < 1 or not 0 < self.operator_prob < 1:
            raise ValueError(f"invalid ListOps tree parameters: {self}")

    def key(self) -> dict:
        return {"generator": "listops", "version": 1, **self.__dict__}


class _TooLong(Exception):
    pass


def _value(op: str, args: list[int]) -> int:
    if op == "[MIN":
        return min(args)
    if op == "[MAX":
        return max(args)
    if op == "[MED":
        return int(statistics.median(args))
    return sum(args) % 10


def _tree(rng: random.Random, depth: int, p: ListOpsParams, budget: list[int]):
    """Random tree as (text, value). `budget` holds the tokens still allowed; _TooLong if spent."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLong
    if depth < p.max_depth and rng.random() < p.operator_prob:
        n = rng.randint(2, p.max_args)
        op = rng.choice(OPERATORS)
        budget[0] -= 1                        # the closing bracket
        texts, values = [], []
        for _ in range(n):
            text, value = _tree(rng, depth + 1, p, budget)
            texts.append(text)
            values.append(value)
        # Same nesting as LRA's writer: (((op a1) a2) ... an) ] )
        out = "( " * (n + 1) + op + " " + texts[0] + "".join(" ) " + t for t in texts[1:]) + " ) ] )"
        return out, _value(op, values)
    value = rng.randrange(10)
    return str(value), value


def _chunk(p: ListOpsParams, index: int, attempts: int) -> list[tuple[str, int]]:
    """Accepted (expression, value) pairs from `attempts` random trees of chunk `index`."""
    rng = random.Random(f"listops/{p.seed}/{index}")
    kept = []
    for _ in range(attempts):
        budget = [p.max_length - 1]           # length < max_length
        try:
            text, value = _tree(rng, 1, p, budget)
        except _TooLong:
            continue
        length = p.max_length - 1 - budget[0]
        if length > p.min_length:
            kept.append((text, value))
    return kept


def expected_row_bytes(p: ListOpsParams) -> float:
    """Rough size of one TSV row: about 6 characters per token (the token, its space and the
    parentheses of LRA's nesting), lengths spread over (min_length, max_length)."""
    return 6.0 * (p.min_length + p.max_length) / 2


def generate(p: ListOpsParams, out_dir: Path, *, workers: int = 1, progress: bool | None = None,
             where: Path | None = None) -> dict:
    """Write basic_{train,val,test}.tsv with de-duplicated trees; deterministic for a given `p`
    whatever the number of workers (chunks are consumed in order). `where`: the folder named in the
    progress lines (the cache entry `out_dir` becomes; default `out_dir`)."""
    import time

    from .build_progress import BuildProgress
    from .image_store import process_pool

    total = p.n_train + p.n_val + p.n_test
    attempts = 256
    seen: set[str] = set()
    rows: list[tuple[str, int]] = []
    t0 = time.perf_counter()
    with BuildProgress(f"generating ListOps (lengths {p.min_length}-{p.max_length})", total, "expressions",
                       where or out_dir, nbytes=total * expected_row_bytes(p), show=progress) as bar:

        def take(batch):
            for text, value in batch:
                if len(rows) < total and text not in seen:
                    seen.add(text)
                    rows.append((text, value))
            bar.update(len(rows))

        index = 0
        if workers <= 1:
            while len(rows) < total:
                take(_chunk(p, index, attempts))
                index += 1
                if index > 1_000_000:
                    raise RuntimeError(f"ListOps generator found too few trees with {p}")
        else:
            with process_pool(workers) as pool:
                window = [pool.submit(_chunk, p, i, attempts) for i in range(workers * 4)]
                index = len(window)
                while len(rows) < total:
                    take(window.pop(0).result())
                    window.append(pool.submit(_chunk, p, index, attempts))
                    index += 1
                    if index > 1_000_000:
                        raise RuntimeError(f"ListOps generator found too few trees with {p}")
                for future in window:
                    future.cancel()
    out_dir = Path(out_dir)
    bounds = {"train": (0, p.n_train), "val": (p.n_train, p.n_train + p.n_val),
              "test": (p.n_train + p.n_val, total)}
    for split, (lo, hi) in bounds.items():
        path = out_dir / FILES[split]
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", encoding="utf-8", newline="") as handle:
            handle.write(HEADER + "\n")
            for text, value in rows[lo:hi]:
                handle.write(f"{text}\t{value}\n")
        tmp.replace(path)
    return {"examples": total, "seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------
class OfficialListOps(DataSource):
    kind = "official"

    def __init__(self, data_dir: Path, max_len: int):
        self.data_dir = Path(data_dir)
        self.max_len = max_len
        self.folder = release.find_folder(self.data_dir, "listops-1000", FILES.values())

    def available(self) -> bool:
        return self.folder is not None

    def missing_help(self) -> str:
        return ("ListOps data not found: " + release.release_help(self.data_dir, "listops-1000/basic_{train,val,test}.tsv")
                + f". Or let the built-in generator make it: lra data generate listops --data-dir {self.data_dir} "
                "(source='generated').")

    def incomplete(self) -> str | None:
        if self.folder is not None:
            return None
        return release.incomplete_folder(
            self.data_dir, "listops-1000", FILES.values(), "the ListOps release folder",
            f"Unpack it again from {release.LRA_RELEASE_URL}, or use the generator: "
            f"lra data generate listops --data-dir {self.data_dir} (source='generated').")

    def prepare(self, force: bool = False) -> Path:
        self.require()
        return token_cache(self.data_dir, self.folder, self.max_len, force=force)

    def load(self, split: str) -> TokenSplit:
        return token_store.open_split(self.prepare() / split)

    def describe(self) -> str:
        return f"official ListOps TSV in {self.folder}"

    def _files(self) -> list[Path]:
        return [self.folder / name for name in FILES.values()]

    def identity(self) -> dict:
        if self.folder is None:
            return {"source": self.kind, "files": None}
        return {"source": self.kind, "files": file_stamps(self._files(), self.folder)}

    def content_hash(self) -> str | None:
        return cache.content_hash(self._files(), self.folder) if self.folder is not None else None


class GeneratedListOps(DataSource):
    kind = "generated"

    def __init__(self, data_dir: Path, max_len: int, params: ListOpsParams, workers: int | None = None):
        self.data_dir = Path(data_dir)
        self.max_len = max_len
        self.params = params
        self.workers = workers

    def folder(self) -> Path:
        return cache_folder(self.data_dir, self.params)

    def available(self) -> bool:
        return True

    def missing_help(self) -> str:  # pragma: no cover - a generator is always available
        return ""

    def prepare(self, progress: bool | None = None, force: bool = False) -> Path:
        """Generate the TSVs (once) and tokenise them into the token cache; returns the TSVs' folder."""
        from .image_store import default_workers
        workers = self.workers if self.workers is not None else min(default_workers(), 16)
        folder = cache.build_once(self.folder(), lambda staging: generate(self.params, staging, workers=workers,
                                                                          progress=progress, where=self.folder()),
                                  meta=self.params.key(), force=force, rebuild=self.rebuild_command())
        token_cache(self.data_dir, folder, self.max_len, force=force)
        return folder

    def rebuild_command(self) -> str:
        """The `lra data generate` command that makes exactly this data set again."""
        p = self.params
        return (f"lra data generate listops --data-dir {shlex.quote(str(self.data_dir))} --n-train {p.n_train} "
                f"--n-val {p.n_val} --n-test {p.n_test} --min-len {p.min_length} --max-len {p.max_length}"
                f"{f' --seed {p.seed}' if p.seed else ''} --force")

    def load(self, split: str) -> TokenSplit:
        folder = self.folder() if cache.is_complete(self.folder()) else self.prepare()
        return token_store.open_split(token_cache(self.data_dir, folder, self.max_len) / split)

    def identity(self) -> dict:
        key = dict(self.params.key())
        return {"source": self.kind, "generator": {"name": key.pop("generator"), "version": key.pop("version"),
                                                   "params": key}}

    def content_hash(self) -> str | None:
        return cache.entry_hash(self.folder()) if cache.is_complete(self.folder()) else None

    def describe(self) -> str:
        p = self.params
        return (f"generated ListOps ({p.n_train}/{p.n_val}/{p.n_test}, lengths {p.min_length}-{p.max_length}, "
                f"seed {p.seed}) in {self.folder()}")


def cache_folder(data_dir: Path, params: ListOpsParams) -> Path:
    return Path(data_dir) / "generated" / "listops" / f"listops-{cache.param_hash(params.key())}"


def make_source(spec, kind: str, *, data_dir: Path, max_len: int, limit_train=None, limit_eval=None,
                seq_len=None, workers=None, **_unused) -> DataSource:
    if kind == "official":
        return OfficialListOps(data_dir, max_len)
    if kind == "generated":
        return GeneratedListOps(data_dir, max_len, default_params(spec, limit_train, limit_eval, seq_len),
                                workers=workers)
    raise ValueError(f"listops has no {kind!r} source")


def default_params(spec, limit_train=None, limit_eval=None, seq_len=None) -> ListOpsParams:
    """LRA's generator settings; smoke runs (limits) generate only what they use, and a `seq_len`
    below LRA's 2,000 keeps trees that fit it (no example is cut)."""
    n_train, n_val, n_test = spec.options["counts"]
    lo, hi = spec.options["lengths"]
    if limit_train is not None:
        n_train = min(n_train, int(limit_train))
    if limit_eval is not None:
        n_val, n_test = min(n_val, int(limit_eval)), min(n_test, int(limit_eval))
    if seq_len is not None and seq_len < hi:
        hi = int(seq_len) + 1
        lo = min(lo, max(1, hi // 4))
    return ListOpsParams(n_train=n_train, n_val=n_val, n_test=n_test, min_length=lo, max_length=hi,
                         seed=spec.options["generator_seed"])
