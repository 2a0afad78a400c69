"""Published reference numbers (FlashAttention and LRA papers), loaded from `results/published/*.csv`.

The numbers themselves are data files with their citation in a `# key: value` header (see
results/published/README.md); this module only parses them and maps the papers' names to ours.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "results" / "published"

# Our task name -> the papers' column name.  `pathfinder32` is the LRA "Pathfinder" task (32x32, 1K).
TASK_COLUMNS: dict[str, str] = {
    "listops": "ListOps",
    "text": "Text",
    "retrieval": "Retrieval",
    "image": "Image",
    "pathfinder32": "Pathfinder",
    "pathfinder64": "Path-64",
    "pathx": "Path-X",
    "path256": "Path-256",
}
# The five tasks both papers average over (Path-X / Path-256 are reported separately).
AVERAGE_TASKS: tuple[str, ...] = ("listops", "text", "retrieval", "image", "pathfinder32")

# Our attention name -> the papers' row name.  `sdpa` is exact softmax attention too, so the
# published Transformer numbers are its reference as well.
ATTENTION_ROWS: dict[str, str] = {
    "softmax": "Transformer",
    "sdpa": "Transformer",
    "flash": "FlashAttention",
    "flash_sparse": "Block-sparse FlashAttention",
    "performer": "Performer",
    "linformer": "Linformer",
    "bigbird": "BigBird",
}
# How our attentions are labelled in tables and plots (paper names where one exists).
ATTENTION_LABELS: dict[str, str] = {
    "softmax": "Transformer",
    "sdpa": "Transformer (SDPA)",
    "sdpa_flash": "Transformer (SDPA, FlashAttention-2)",
    "flash": "FlashAttention",
    "flash_sparse": "Block-sparse FlashAttention",
    "performer": "Performer",
    "linformer": "Linformer",
    "bigbird": "BigBird",
}
# Display order of attentions (others follow alphabetically).
ATTENTION_ORDER: tuple[str, ...] = ("softmax", "sdpa", "sdpa_flash", "flash", "flash_sparse", "performer", "linformer", "bigbird")

_SPECIAL_COLUMNS = {"Avg": "avg", "Speedup": "speedup"}
_FAIL = {"fail", "failed", "✗", "x"}
_MISSING = {"", "-", "–", "—", "n/a", "na"}


def attention_label(name: str) -> str:
    return ATTENTION_LABELS.get(name, name)


def task_label(task: str) -> str:
    return TASK_COLUMNS.get(task, task)


def attention_sort_key(name: str) -> tuple:
    return (ATTENTION_ORDER.index(name), "") if name in ATTENTION_ORDER else (len(ATTENTION_ORDER), name)


def task_sort_key(task: str) -> tuple:
    order = list(TASK_COLUMNS)
    return (order.index(task), "") if task in order else (len(order), task)


def read_header(path: str | Path) -> dict[str, str]:
    """The `# key: value` lines at the top of a published CSV."""
    header: dict[str, str] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.startswith("#"):
                break
            key, sep, value = line[1:].partition(":")
            if sep:
                header[key.strip().lower()] = value.strip()
    return header


def parse_cell(value) -> tuple[float, bool]:
    """A published cell -> (number, failed). `fail` -> (nan, True); `-` -> (nan, False); `2.4x` -> 2.4."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.nan, False
    text = str(value).strip()
    if text.lower() in _FAIL:
        return math.nan, True
    if text.lower() in _MISSING:
        return math.nan, False
    match = re.fullmatch(r"([-+]?\d+(?:\.\d+)?)\s*[x×]?", text)
    if not match:
        raise ValueError(f"cannot read published value {text!r} (expected a number, 'fail', '-' or e.g. '2.4x')")
    return float(match.group(1)), False


def _read(path: Path) -> tuple[dict[str, str], pd.DataFrame]:
    header = read_header(path)
    missing = [key for key in ("id", "kind", "source", "citation") if key not in header]
    if missing:
        raise ValueError(f"{path}: published table lacks header line(s) {', '.join('# ' + k + ':' for k in missing)}")
    frame = pd.read_csv(path, comment="#", dtype=str, keep_default_na=False, skipinitialspace=True)
    if "model" not in frame.columns:
        raise ValueError(f"{path}: published table needs a 'model' column, has {list(frame.columns)}")
    return header, frame


def _files(directory: str | Path | None) -> list[Path]:
    directory = Path(directory) if directory is not None else DEFAULT_DIR
    if not directory.is_dir():
        raise FileNotFoundError(
            f"published numbers not found: {directory} is not a directory (they live in results/published/ of "
            "the lra checkout; pass the folder with --published)")
    return sorted(directory.glob("*.csv"))


def load_accuracy(directory: str | Path | None = None) -> pd.DataFrame:
    """Every accuracy table as one long frame.

    Columns: `id`, `source`, `citation`, `file`, `model` (paper row), `column` (paper column), `task` (our
    name, or `avg` / `speedup`), `value` (float: percent, or x-factor for `speedup`), `failed` (bool).
    """
    reverse_columns = {column: task for task, column in TASK_COLUMNS.items()}
    rows = []
    for path in _files(directory):
        header, frame = _read(path)
        if header["kind"] != "accuracy":
            continue
        for column in frame.columns:
            if column == "model":
                continue
            task = _SPECIAL_COLUMNS.get(column) or reverse_columns.get(column)
            if task is None:
                raise ValueError(f"{path}: unknown column {column!r}; known: {sorted(reverse_columns)} + Avg, Speedup "
                                 "(add new task columns to lra.published.TASK_COLUMNS)")
            for model, cell in zip(frame["model"], frame[column]):
                try:
                    value, failed = parse_cell(cell)
                except ValueError as err:
                    raise ValueError(f"{path}: row {model!r}, column {column!r}: {err}") from None
                rows.append({"id": header["id"], "source": header["source"], "citation": header["citation"],
                             "file": path.name, "model": model.strip(), "column": column, "task": task,
                             "value": value, "failed": failed})
    columns = ["id", "source", "citation", "file", "model", "column", "task", "value", "failed"]
    return pd.DataFrame(rows, columns=columns)


def load_efficiency(directory: str | Path | None = None) -> pd.DataFrame:
    """Every efficiency table (long format): `id, source, citation, file, model, seq_len, ...metrics`."""
    frames = []
    for path in _files(directory):
        header, frame = _read(path)
        if header["kind"] != "efficiency":
            continue
        frame = frame.copy()
        for column in frame.columns:
            if column != "model":
                frame[column] = [parse_cell(cell)[0] for cell in frame[column]]
        frame.insert(0, "file", path.name)
        frame.insert(0, "citation", header["citation"])
        frame.insert(0, "source", header["source"])
        frame.insert(0, "id", header["id"])
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["id", "source", "citation", "file", "model", "seq_len"])
    return pd.concat(frames, ignore_index=True)


def sources(published: pd.DataFrame) -> list[tuple[str, str]]:
    """(id, label) of every paper in a `load_accuracy` frame, in file order."""
    if published.empty:
        return []
    pairs = published[["id", "source"]].drop_duplicates("id")
    return list(pairs.itertuples(index=False, name=None))


def paper_tasks(published: pd.DataFrame, paper_id: str) -> list[str]:
    """Our names of the tasks one paper reports (a number or `fail` for some model), in display order."""
    if published.empty:
        return []
    rows = published[(published["id"] == paper_id) & ~published["task"].isin(list(_SPECIAL_COLUMNS.values()))]
    reported = rows[rows["value"].notna() | rows["failed"].astype(bool)]
    return sorted(set(reported["task"]), key=task_sort_key)


def citation_text(published: pd.DataFrame, paper_id: str) -> str:
    """The citation of one paper's tables, merged: '... arXiv:X. Table 3.' + '... Table 6.' ->
    '... arXiv:X. Tables 3, 6.'"""
    works: dict[str, list[str]] = {}
    if published.empty:
        return ""
    for citation in published.loc[published["id"] == paper_id, "citation"].drop_duplicates():
        match = re.fullmatch(r"(.*?)\s*Table\s+(\S+?)\.?", str(citation).strip())
        base, number = (match.group(1), match.group(2)) if match else (str(citation), None)
        works.setdefault(base, [])
        if number:
            works[base].append(number)
    return "; ".join(base + (f" Table{'s' if len(n) > 1 else ''} {', '.join(n)}." if n else "")
                     for base, n in works.items())


def lookup(published: pd.DataFrame, paper_id: str, attention: str, task: str) -> tuple[float, bool]:
    """Published value for our attention name and task (or `avg`/`speedup`) in one paper; (nan, False) if none."""
    model = ATTENTION_ROWS.get(attention)
    if model is None or published.empty:
        return math.nan, False
    hit = published[(published["id"] == paper_id) & (published["model"] == model) & (published["task"] == task)]
    if hit.empty:
        return math.nan, False
    row = hit.iloc[-1]
    return float(row["value"]), bool(row["failed"])
