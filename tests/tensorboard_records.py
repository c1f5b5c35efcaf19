"""Reading TensorBoard event files back in tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_file_loader import EventFileLoader


def records(run_dir: Path) -> list[tuple[str, int, Any]]:
    """(tag, step, value) of every record in every event file of a run, in file order."""
    out = []
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                out.append((value.tag, event.step, value))
    return out


def scalar(value: Any) -> float:
    from tensorboard.util import tensor_util

    return float(tensor_util.make_ndarray(value.tensor)) if value.HasField("tensor") else float(value.simple_value)
