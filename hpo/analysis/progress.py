"""What a long run measured at its evaluation points, read back (:mod:`hpo.scoring.progress`
measures it): the share of samples that copy a training image (``CopyShare``), the floor that
held-out real images set (``Floor``), and the sentences ``hpo train``, ``hpo status`` and the report
say about them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hpo.analysis.noise import Noise
from hpo.files import JsonObject
from hpo.records import CurveEntry, FloorRecord

Space = Literal["pixels", "features"]


@dataclass(frozen=True)
class CopyShare:
    share: float  # the share of queries that copy a training image
    low: float  # bootstrap 95 % interval
    high: float
    n: int  # queries it rests on
    space: Space
    nearest: tuple[int, ...] = ()  # index of each query's nearest training image (for showing pairs)

    def as_dict(self) -> JsonObject:
        return {"share": self.share, "low": self.low, "high": self.high, "n": self.n, "space": self.space}

    @property
    def text(self) -> str:
        return f"{100 * self.share:.1f} % (95 % interval {100 * self.low:.1f}–{100 * self.high:.1f} %, n={self.n})"


@dataclass(frozen=True)
class Floor:
    """Held-out real images measured like samples: against the training reference, at the score's
    sample count (or all held-out images when there are fewer)."""

    score: float  # mean over draws
    score_sd: float
    num_images: int
    copy_pixels: CopyShare
    copy_features: CopyShare
    precision: float | None = None  # real images against the reference, like samples: the ceiling
    recall: float | None = None
    class_accuracy: float | None = None  # the classifier on held-out real images (labelled data only)
    kid: float | None = None  # KID of the held-out images (mean over draws): the scale a sample's KID is read on

    def record(self) -> FloorRecord:
        """What a study and summary.json store of it: the copy shares' upper ends, not their queries."""
        return FloorRecord(
            score=self.score, score_sd=self.score_sd, num_images=self.num_images,
            copy_pixels=self.copy_pixels.share, copy_pixels_high=self.copy_pixels.high,
            copy_features=self.copy_features.share, copy_features_high=self.copy_features.high,
            precision=self.precision, recall=self.recall, class_accuracy=self.class_accuracy, kid=self.kid,
        )  # fmt: skip


def copy_floor_of(floor: Floor | FloorRecord | None) -> float | None:
    """The copy share that held-out real images reach (the upper end of their interval, in whichever
    space reaches higher): a run's copies count only above it. Takes a floor or its stored record."""
    if floor is None:
        return None
    return (floor.record() if isinstance(floor, Floor) else floor).copy_high


def fidelity_pair(values: Mapping[str, Any]) -> tuple[float, float] | None:
    """(precision, recall) from stored attributes when both are numbers; the one reader of the pair."""
    precision, recall = values.get("precision"), values.get("recall")
    if isinstance(precision, (int, float)) and isinstance(recall, (int, float)):
        return float(precision), float(recall)
    return None


def fidelity_text(scores: Mapping[str, Any], floor_record: FloorRecord | None) -> str | None:
    """A score's second signal, each beside what real held-out images reach: 'precision 0.82, recall
    0.64 (real images: 0.91, 0.89); class accuracy 73 % (the classifier on real images: 96 %)'."""
    floor = floor_record.fidelity if floor_record is not None else {}
    parts = []
    if (pair := fidelity_pair(scores)) is not None:
        real = (
            "" if (ceiling := fidelity_pair(floor)) is None else f" (real images: {ceiling[0]:.2f}, {ceiling[1]:.2f})"
        )
        parts.append(f"precision {pair[0]:.2f}, recall {pair[1]:.2f}{real}")
    accuracy = scores.get("class_accuracy")
    if isinstance(accuracy, (int, float)):
        real_accuracy = floor.get("class_accuracy")
        real = (
            f" (the classifier on real images: {100 * real_accuracy:.0f} %)"
            if isinstance(real_accuracy, (int, float))
            else ""
        )
        parts.append(f"class accuracy {100 * accuracy:.0f} %{real}")
    return "; ".join(parts) or None


def eval_point_text(entry: CurveEntry, metric_name: str) -> str:
    """One evaluation point's score, copy share and generalisation gap, as ``hpo train`` prints it."""
    parts = []
    if entry.score is not None:
        parts.append(f"{metric_name} {entry.score:.4g}")
    share, high = entry.worst_copy(), entry.worst_copy("_high")
    if share is not None and high is not None:
        parts.append(f"copies {100 * share:.1f} % (up to {100 * high:.1f} %)")
    if entry.gap is not None:
        parts.append(f"gap {entry.gap:.3f}")
    return ", ".join(parts)


def floor_reading(best: float | None, noise: Noise, floor: FloorRecord | None) -> str:
    """Where the best score sits against real held-out images, in words (empty without a floor)."""
    if floor is None:
        return ""
    text = f"real held-out images score {floor.score:.4g} ({floor.num_images:g} images)"
    if best is None or noise.sd is None:
        return text
    if noise.within_tie_margin(best, floor.score):
        return (
            f"{text}: the best is at the floor, so the metric can no longer rank the best trials; use more samples "
            "(score.num_samples), other features, or a longer budget"
        )
    if best < floor.score:
        return f"{text}: the best scores below them, closer to the training images than new real images are (copies?)"
    return f"{text}: the best is {best - floor.score:.3g} above them"
