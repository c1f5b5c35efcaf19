"""One trial's telemetry, whatever the tools: the :class:`Tracker` interface, several runs as one, and
the rule that a tracker's failure mid-study is logged once and never takes a trial down."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from hpo.training.trainer import EvalPoint, SyncPoint

log = logging.getLogger("hpo.tracking")


@dataclass(frozen=True)
class RunInfo:
    study: str  # groups a study's runs
    trial: int  # the first attempt's number: a retry continues its predecessor's run
    params: Mapping[str, Any]


class Tracker(Protocol):
    def on_sync(self, point: SyncPoint) -> None: ...

    def on_eval(self, point: EvalPoint, grid: np.ndarray | None) -> None: ...

    def on_result(self, metrics: Mapping[str, float], images: Mapping[str, np.ndarray], step: int) -> None: ...

    def close(self) -> None: ...


class Runs:
    """Several runs as one; a run that raises is logged once and dropped, the trial goes on."""

    def __init__(self, runs: Sequence[tuple[str, Tracker]]) -> None:
        self.runs = list(runs)

    def _each(self, method: str, *args: Any) -> None:
        for name, run in list(self.runs):
            try:
                getattr(run, method)(*args)
            except Exception as err:  # telemetry must never fail a trial
                log.warning("%s tracking failed (%s: %s); this trial goes on without it", name, type(err).__name__, err)
                self.runs.remove((name, run))
                if method != "close":
                    with contextlib.suppress(Exception):
                        run.close()

    def on_sync(self, point: SyncPoint) -> None:
        self._each("on_sync", point)

    def on_eval(self, point: EvalPoint, grid: np.ndarray | None) -> None:
        if not point.replayed:
            self._each("on_eval", point, grid)

    def on_result(self, metrics: Mapping[str, float], images: Mapping[str, np.ndarray], step: int) -> None:
        self._each("on_result", metrics, images, step)

    def close(self) -> None:
        self._each("close")


def plain_params(params: Mapping[str, Any]) -> dict[str, float | int | str | bool]:
    """Parameters as the trackers' hparams tables take them (None and other types become text)."""
    return {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in params.items()}


def telemetry_name(name: str) -> str:
    """A name every tracker accepts as it is (TensorBoard: letters, digits and ``_-./``; MLflow also
    spaces and ``:``): ``val_rel@+6.0`` → ``val_rel_at_p6.0``, ``val_rel@-6.0`` → ``val_rel_at_-6.0``."""
    return re.sub(r"[^\w\-./]", "_", name.replace("@", "_at_").replace("+", "p"))


def sync_scalars(point: SyncPoint) -> dict[str, float]:
    """The numbers a sync point has once (at its last step): throughput and the hardware readings."""
    hardware = point.hardware.scalars() if point.hardware is not None else {}
    return {"train/images_per_second": point.images_per_second, **{f"hw/{k}": v for k, v in hardware.items()}}


def scalars_of(point: EvalPoint) -> dict[str, float]:
    """An evaluation point's numbers under their telemetry names."""
    return {f"val/{telemetry_name(k)}": float(v) for k, v in point.metrics.items()}
