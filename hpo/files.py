"""Writing a file so that no reader ever sees half of it; importable by every layer (it imports
nothing of hpo)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[Path], object]) -> Path:
    """``write`` a temporary file beside ``path`` (with its suffix), then rename it over ``path``:
    readers never see half a file, and two writers (each its own pid) never mix theirs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
