"""What may end a run before its budget (``hpo train``'s ``--deadline`` as ``hpo run``'s final phase sets it,
and the stop verdict reading copying): the trainer's ``end_early`` rule; and when a warmup-stable-decay
run starts its cooldown so that the deadline finds it cooled, not at full learning rate."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hpo.analysis.stopping import points_from_curve, stop_verdict
from hpo.records import curve_points


@dataclass
class Deadline:
    """True at an evaluation point when one more interval as long as the last one would pass ``at``."""

    at: float  # time.time() by which training must have ended
    last: float = field(default_factory=time.time)

    def __call__(self) -> bool:
        now = time.time()
        interval, self.last = now - self.last, now
        return now + interval > self.at

    def passed(self) -> bool:
        """The deadline itself: a wsd run's cooldown clock plans its end, so only a late one is cut."""
        return time.time() > self.at


@dataclass
class CooldownClock:
    """The trainer's ``cool_when`` for a deadline: True at a sync point of the stable phase once the
    cooldown's steps, at this run's mean time per step since the first call (its evaluation points
    included) and with ``margin`` to spare, would reach ``at``. A run whose planned cooldown ends
    before the deadline never hears True."""

    at: float  # time.time() by which training must have ended
    margin: float = 1.15
    first: tuple[float, int] | None = None

    def __call__(self, step: int, cooldown_steps: int) -> bool:
        now = time.time()
        if self.first is None or step <= self.first[1]:
            self.first = (now, step)
            return now >= self.at
        per_step = (now - self.first[0]) / (step - self.first[1])
        return now + self.margin * cooldown_steps * per_step >= self.at


@dataclass(frozen=True)
class Ends:
    """What may end a run before its budget: a deadline, and the stop verdict reading copying."""

    deadline: Deadline | None = None
    when_copying: bool = False

    def rule(
        self, curve: dict[str, dict[str, float]], copy_floor: float | None, *, cooled: bool = False
    ) -> Callable[[], bool] | None:
        """The trainer's ``end_early`` over the run's ``curve`` as it grows; ``cooled`` (a wsd run, whose
        cooldown :class:`CooldownClock` starts so that it ends by the deadline): only a run that is late
        anyway is cut, not one whose next interval would pass the deadline."""
        if self.deadline is None and not self.when_copying:
            return None
        deadline = self.deadline

        def end() -> bool:
            # asked at every point: an interval deadline times the intervals
            passed = deadline is not None and (deadline.passed() if cooled else deadline())
            return passed or (self.when_copying and copying(curve, copy_floor))

        return end

    def cool_when(self) -> Callable[[int, int], bool] | None:
        """When a warmup-stable-decay run starts its cooldown: early enough to finish it by the deadline."""
        return CooldownClock(self.deadline.at) if self.deadline is not None else None


def copying(curve: dict[str, dict[str, float]], copy_floor: float | None) -> bool:
    """Whether the stop verdict reads ``curve`` so far as copying training images (more training only
    copies more); the noise is left to the verdict's estimate, as no re-measure exists mid-run."""
    return stop_verdict(points_from_curve(curve_points(curve)), noise=None, copy_floor=copy_floor).kind == "copying"
