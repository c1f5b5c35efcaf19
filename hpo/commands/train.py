"""``hpo train``: one run by hand: train, sweep the sampling combinations, print the table, write a
sample grid, a checkpoint and a TensorBoard log. ``--from STUDY:TRIAL`` reproduces a trial. The run
itself is :func:`hpo.run.train.train_run`; this prints its summary."""

from __future__ import annotations

import json
from pathlib import Path

from hpo.run.train import train_run


def run_train(
    spec_path: Path | None, overrides: list[str], out: Path, *, source: str | None, storage: str | None
) -> None:
    """Train and score one configuration into ``out``; print its summary as one line of JSON."""
    print(json.dumps(train_run(spec_path, overrides, out, source=source, storage=storage)))
