"""The checklist as it runs: each check is handed on the moment it finishes, and a step that runs
longer than :data:`PROGRESS_EVERY` seconds says so, at doubling gaps, so a slow doctor (a large
network on a CPU) never looks hung."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from hpo.doctor.result import Check

PROGRESS_EVERY = 5.0  # seconds before the first "still running" line; the gaps then double, up to a minute
PROGRESS_MAX = 60.0


class Checklist:
    def __init__(
        self,
        on_check: Callable[[Check], None] | None = None,
        on_progress: Callable[[str], None] | None = None,
        *,
        every: float = PROGRESS_EVERY,
    ) -> None:
        self.checks: list[Check] = []
        self.on_check, self.on_progress, self.every = on_check, on_progress, every

    def add(self, *checks: Check) -> None:
        for check in checks:
            self.checks.append(check)
            if self.on_check is not None:
                self.on_check(check)

    @contextlib.contextmanager
    def running(self, what: str) -> Iterator[None]:
        """While the block runs, ``… what: still running after 15 s`` after ``every`` seconds, then
        after gaps that double (up to a minute), so a ten-minute step prints a dozen lines, not 120."""
        if self.on_progress is None:
            yield
            return
        done = threading.Event()
        started = time.monotonic()
        report = self.on_progress

        def tick() -> None:
            gap = self.every
            while not done.wait(gap):
                report(f"… {what}: still running after {time.monotonic() - started:.0f} s")
                gap = min(2 * gap, max(PROGRESS_MAX, self.every))

        thread = threading.Thread(target=tick, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
