"""The leak a worker process's memory shows across trials, read from the hardware summaries its trials
stored (``hpo.records.HardwareSummary``)."""

from __future__ import annotations

import itertools


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
