"""A run's hardware readings as a trial stores them, read back: the summary (``HardwareSummary``,
written by :func:`hpo.training.telemetry.summarise_hardware`), its table cell and line, and the
leak a worker process's memory shows across trials."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

INPUT_BOUND = 0.3  # a share of step time waiting for data above this is worth a line in the report


def megabytes(mb: float) -> str:
    return f"{mb / 1024:.3g} GB" if mb >= 1024 else f"{mb:.0f} MB"


@dataclass(frozen=True)
class HardwareSummary:
    """A run's readings in a few numbers (a trial's ``hardware`` attribute)."""

    rss_start_mb: float
    rss_peak_mb: float
    data_wait: float  # mean share over the run's readings
    cpu_percent: float
    cuda_peak_mb: float | None = None
    gpu_util_percent: float | None = None
    gpu_power_w: float | None = None
    pid: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareSummary:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def cell(self) -> str:
        """For a table: 'wait 38 %, RSS 1.2 GB'."""
        return f"wait {100 * self.data_wait:.0f} %, RSS {megabytes(self.rss_peak_mb)}"

    def line(self) -> str:
        """'input-bound: 38 % of step time waiting for data; RSS 1.2 GB, GPU 91 %, 310 W'."""
        parts = [f"RSS peak {megabytes(self.rss_peak_mb)}"]
        if self.cuda_peak_mb is not None:
            parts.append(f"CUDA peak {megabytes(self.cuda_peak_mb)}")
        if self.gpu_util_percent is not None:
            parts.append(f"GPU {self.gpu_util_percent:.0f} %")
        if self.gpu_power_w is not None:
            parts.append(f"{self.gpu_power_w:.0f} W")
        wait = f"{100 * self.data_wait:.0f} % of step time waiting for data"
        head = f"input-bound: {wait}" if self.data_wait > INPUT_BOUND else wait
        return f"{head}; " + ", ".join(parts)


def hardware_of(raw: object) -> HardwareSummary | None:
    """A stored hardware summary (``HardwareSummary.as_dict``), if there is one."""
    return HardwareSummary.from_dict(raw) if isinstance(raw, dict) else None


def rss_leak(starts: list[tuple[int, float, int]], *, min_trials: int = 3, min_growth_mb: float = 200.0) -> str | None:
    """Per worker process, (pid, RSS at a trial's start, that trial's batch size) in trial order → a
    sentence when the process's RSS kept growing after it had settled: counted from the first trial
    start after its warm-up (its first trial) and after the largest batch it has run (allocators keep
    what the largest batch needed), it grew at every trial start, by more than ``min_growth_mb``, over
    at least ``min_trials`` starts."""
    by_pid: dict[int, list[tuple[float, int]]] = {}
    for pid, rss, batch in starts:
        by_pid.setdefault(pid, []).append((rss, batch))
    for pid, readings in by_pid.items():
        settled = settled_from(readings)
        values = [rss for rss, _ in readings[settled:]]
        rising = all(b > a for a, b in itertools.pairwise(values))
        if len(values) >= min_trials and rising and values[-1] - values[0] > min_growth_mb:
            largest = max(batch for _, batch in readings)
            return (
                f"memory leak? worker process {pid}: RSS at trial start grew from {values[0]:.0f} MB to "
                f"{values[-1]:.0f} MB over the {len(values)} trials since its warm-up and its largest batch "
                f"({largest}), at every one"
            )
    return None


def settled_from(readings: list[tuple[float, int]]) -> int:
    """The first trial start that follows the warm-up trial and the last trial that raised the
    process's largest batch so far."""
    last_raise, largest = 0, -1
    for i, (_, batch) in enumerate(readings):
        if batch > largest:
            last_raise, largest = i, batch
    return last_raise + 1
