"""Run records: one `result.json` per run, written atomically, read back as a pandas DataFrame.

The schema is documented in docs/interfaces.md. Writers never leave a half-written file: the record
goes to a temporary file in the same folder and is moved over the target with `os.replace`.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable

SCHEMA_VERSION = 1
RECORD_NAME = "result.json"
STATUSES = ("completed", "failed", "oom", "diverged", "interrupted", "running")
# Record fields the tables and plots compute with: a number or null (docs/interfaces.md).
NUMERIC_FIELDS = ("seq_len", "seed", "best_val_acc", "test_acc", "steps", "wall_time_s", "time_to_best_s",
                  "step_time_ms", "train_samples_per_s", "train_tokens_per_s", "peak_mem_gb")


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` so that readers see the old file or the new one, never a partial one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide records from the other users of a shared runs dir
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    return value


def write_record(path: str | Path, record: dict) -> Path:
    """Atomically write a run record (a dict following the schema) as JSON."""
    status = record.get("status")
    if status not in STATUSES:
        raise ValueError(f"record status must be one of {STATUSES}, got {status!r}")
    record = {"schema": SCHEMA_VERSION, **record}
    return atomic_write_text(path, json.dumps(_jsonable(record), indent=2, sort_keys=False) + "\n")


def read_record(path: str | Path) -> dict:
    """Read one record; raises ValueError naming the file when it is not a valid record."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from err
    if not isinstance(record, dict) or "task" not in record or "attention" not in record:
        raise ValueError(f"{path}: not a run record (needs at least 'task' and 'attention')")
    for key in NUMERIC_FIELDS:
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            # e.g. a hand-edited "test_acc": "0.37": the tables would drop the run without a word
            raise ValueError(f"{path}: not a valid run record: {key!r} is {value!r}, expected a number or null")
    return record


def find_records(root: str | Path) -> list[Path]:
    return sorted(Path(root).glob(f"**/{RECORD_NAME}"))


def iter_records(roots: Iterable[str | Path], *, warn: bool = True):
    """Yield (path, record) for every readable record under the roots; corrupt ones are reported and skipped."""
    for root in roots:
        for path in find_records(root):
            try:
                yield path, read_record(path)
            except (OSError, ValueError) as err:
                if warn:
                    warnings.warn(f"skipping corrupt run record: {err}", stacklevel=2)


def load_records(*roots: str | Path, warn: bool = True):
    """All run records under `roots` (default `runs/`) as one DataFrame, one row per run.

    Nested dicts are flattened with dots (`versions.torch`, `attention_options.nb_features`);
    the record's own path is in column `path`.
    """
    import pandas as pd

    rows = []
    for path, record in iter_records(roots or ("runs",), warn=warn):
        curve = record.pop("val_acc_curve", None)
        config = record.pop("config", None)
        row = pd.json_normalize(record, sep=".").iloc[0].to_dict() if record else {}
        row["path"] = str(path)
        row["val_acc_curve"] = curve
        row["config"] = config
        rows.append(row)
    return pd.DataFrame(rows)
