"""The payloads stored inside a study's attributes, one type each: the data it trained on
(``DataSummary``), the floor real held-out images set (``FloorRecord``), a companion's plan
(``LadderPlan``, ``WidthPlan``), a run's stop verdict (``StopVerdict``), what a trial's value is
(``ValueStatistic``) and what its post-hoc EMA kept (``EmaSnapshots``). Each is written with
``as_dict`` and read with ``read``/``from_dict`` (``Payload``), never by string key elsewhere."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from hpo.records.curve import worst_copy
from hpo.records.keys import FIDELITY_KEYS
from hpo.records.payload import Payload
from hpo.spec.sampling import ScreenBy


@dataclass(frozen=True)
class DataSummary(Payload):
    """What a study trained on, in numbers (``ImageData.summary``): the report's header, the exported
    network's shape, whether guidance costs two passes."""

    train: int  # training images
    held_out: int  # held-out images: the validation metric and the FID reference
    classes: int  # 1: unlabelled
    image_size: int
    channels: int
    skipped: int = 0  # files that could not be read


@dataclass(frozen=True)
class FloorRecord(Payload):
    """The floor as stored (``analysis.progress.Floor.record``): real held-out images scored like
    samples, the upper ends of their copy shares, and their fidelity where measured."""

    score: float  # mean over draws
    score_sd: float = 0.0
    num_images: int = 0
    copy_pixels: float | None = None  # None: not measured (a study written before copies were)
    copy_pixels_high: float | None = None
    copy_features: float | None = None
    copy_features_high: float | None = None
    precision: float | None = None
    recall: float | None = None
    class_accuracy: float | None = None
    kid: float | None = None

    @property
    def copy_high(self) -> float | None:
        """The copy share held-out real images reach (the upper end of their interval, in whichever space
        reaches higher): a run's copies count only above it. None where neither was measured."""
        return worst_copy(self.as_dict(), "_high")

    @property
    def fidelity(self) -> dict[str, float]:
        """Precision, recall and class accuracy, where measured: the ceiling a sample's are read against."""
        return {k: v for k in FIDELITY_KEYS if (v := getattr(self, k)) is not None}


@dataclass(frozen=True)
class LadderPlan(Payload):
    """A budget ladder's plan: the source study's budget and the multiples of it the ladder scores."""

    base_kimg: float
    budgets: tuple[int, ...]


@dataclass(frozen=True)
class WidthPlan(Payload):
    """A width ladder's plan: the width factors and how many learning rates each width tries."""

    factors: tuple[float, ...]
    lrs: int


StopKind = Literal["too_early", "improving", "plateau", "copying"]


@dataclass(frozen=True)
class StopVerdict(Payload):
    """When to stop a long run (``analysis.stopping.stop_verdict`` decides it): ``hpo train``'s
    summary.json, ``hpo status --json`` and the ladder store it."""

    KEEP_NONE: ClassVar[bool] = True  # since_kimg and per_doubling as null where they do not apply

    kind: StopKind
    text: str
    since_kimg: float | None = None  # plateau or copying: from when
    per_doubling: float | None = None  # score change per doubling of the budget (negative = better)


@dataclass(frozen=True)
class ScreenStatistic(Payload):
    """The screen a sweep ranked its combinations by before completing the best ones."""

    samples: int
    by: ScreenBy
    dims: int | None = None  # principal components (by: pca)


@dataclass(frozen=True)
class ValueStatistic(Payload):
    """What a trial's value is, stored beside it (``analysis.sweep.value_statistic`` builds it): the metric,
    its sample count and feature dimensions, its bias correction, and how the combination was picked."""

    NESTED: ClassVar = {"screen": ScreenStatistic}

    metric: str
    samples: int
    features: int
    bias_correction: str  # "none": the plug-in Fréchet distance, compared at equal counts only
    combinations: int  # the sweep's combinations
    completed: int  # of them, scored at the full count
    screen: ScreenStatistic | None = None  # None: no screen, every combination at the full count
    # sd of the difference between two completed combinations' values on the same samples (from their
    # samples' disjoint halves: hpo.scoring.sweep.paired_sd); None: too few completed here to estimate it
    paired_sd: float | None = None


@dataclass(frozen=True)
class EmaSnapshots(Payload):
    """What a run's post-hoc EMA kept (``hpo.scoring.pipeline.Scored.ema_summary``): a trial's and
    ``hpo train``'s ``ema_snapshots``."""

    folder: str
    count: int  # snapshots on disk
    megabytes: float
    profiles: tuple[float, ...]  # the σ_rel of each tracked EMA profile
    residual: Mapping[str, float]  # each swept length ('%g') → its rebuild's relative least-squares residual
    kept: bool | None = None  # a trial's, once it ended: whether its snapshots stay (baselines, each new best)
