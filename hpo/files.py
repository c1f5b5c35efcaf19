"""Writing a file so that no reader ever sees half of it, the type of what is written as JSON
(``JsonValue``), and the one writer of the ``--json`` outputs (``hpo status``, ``hpo confirm``, the
benchmarks' records: standard JSON, a NaN or infinite number, a score not measured, as ``null``);
importable by every layer (it imports nothing of hpo)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeAlias

# What json.dumps writes (a study's attributes, summary.json, ``--json`` output) and json.loads or
# yaml.safe_load reads: Mapping and Sequence rather than dict and list so that a typed dict[str, float]
# or a tuple (written as an array) fits without a copy (dict and list are invariant).
JsonValue: TypeAlias = bool | int | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None
JsonObject: TypeAlias = dict[str, JsonValue]  # a JSON object as built or read: its keys are strings


def temporary_beside(path: Path) -> Path:
    """Where ``path`` is written before it is renamed into place: the same folder (so the rename is
    one step on one filesystem), a name of this process's own (two writers never mix theirs), hidden,
    and the same suffix (libraries that choose the format by it, as PIL does, still can)."""
    return path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for the block to write (by hand or by a library: torch.save,
    PIL, safetensors); renamed over ``path`` when the block ends cleanly, deleted when it fails, so
    ``path`` is the old file or the whole new one, never half. Creates missing parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_beside(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: Path, write: Callable[[Path], object]) -> Path:
    """``write`` a temporary file beside ``path`` (with its suffix), then rename it over ``path``:
    readers never see half a file, and two writers (each its own pid) never mix theirs."""
    with replacing(path) as tmp:
        write(tmp)
    return path


def json_safe(value: object) -> object:
    """``value`` with tuples as lists, keys as strings and every non-finite float as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def json_text(data: object, indent: int | None = 2) -> str:
    return json.dumps(json_safe(data), indent=indent, allow_nan=False)
