"""A curve: what a run measured at each evaluation point, stored keyed by the point's 1-based index as
text. One entry is a :class:`CurveEntry` (every key it is stored under is named here, the per-level
keys included: :func:`level_key`, :func:`copy_key`); a curve is read back as typed points
(:class:`CurvePoint`), and what a point measured at the watched combination is a :class:`Watched`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from hpo.records.keys import COPY_SPACES, PRUNING_METRIC

KIMG_KEY = "kimg"  # the images seen by the point, in thousands
LEVEL_MARK = "@"  # a per-level key: "val_rel@+2.0" (kind @ log-SNR)
COPY_PARTS = ("", "_low", "_high")  # a copy share and its 95 % interval's ends


def level_key(kind: str, log_snr: float) -> str:
    """The key of ``kind`` ("val_loss", "val_rel") measured at one noise level (log-SNR)."""
    return f"{kind}{LEVEL_MARK}{log_snr:+.1f}"


def copy_key(space: str, part: str = "") -> str:
    """The key of the copy share in ``space`` (``COPY_SPACES``): ``part`` "" for the share, "_low" /
    "_high" for its interval's ends."""
    return f"copy_{space}{part}"


def worst_copy(entry: Mapping[str, Any], part: str = "") -> float | None:
    """The worse (larger) of the pixel and feature copy shares in a stored curve entry or floor:
    ``part`` "" for the share, "_low" / "_high" for its interval's ends; None when neither was measured."""
    values = [
        float(value)
        for space in COPY_SPACES
        if isinstance(value := entry.get(copy_key(space, part)), (int, float)) and not isinstance(value, bool)
    ]
    return max(values) if values else None


def _number_text(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Watched:
    """What an evaluation point measured at the watched combination (``ProgressProbe.measure``): the
    score and KID on the full sample count, and the share of those samples that copy a training image
    in pixels and in classifier features, with the ends of each share's 95 % interval."""

    score: float
    kid: float
    copy_pixels: float
    copy_pixels_low: float
    copy_pixels_high: float
    copy_features: float
    copy_features_low: float
    copy_features_high: float

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class CurveEntry:
    """One evaluation point as a trial or summary.json stores it: the images seen by then, the validation
    metric at each noise level (``levels``) and over all of them, the training-set error and the
    generalisation gap, and (``hpo train``, budget ladders) what it measured at the watched combination.
    ``as_dict`` writes the stored entry (a field that is None left out); ``read`` reads one back,
    keeping a number under a key it does not know (a newer release's) in ``other``."""

    FORMER: ClassVar[Mapping[str, str]] = {}  # a key stored by an earlier release → its field

    kimg: float = 0.0
    val_loss: float | None = None  # mean v-space error over the levels
    val_rel: float | None = None  # PRUNING_METRIC: geometric mean over the levels of the error over a Wiener filter's
    train_rel: float | None = None  # the same on training images
    gap: float | None = None  # val_rel / train_rel: 1 while the model generalises
    train_loss: float | None = None  # the mean training loss since the last point
    score: float | None = None  # the rest: Watched's fields, where the point was scored
    kid: float | None = None
    copy_pixels: float | None = None
    copy_pixels_low: float | None = None
    copy_pixels_high: float | None = None
    copy_features: float | None = None
    copy_features_low: float | None = None
    copy_features_high: float | None = None
    levels: Mapping[str, float] = field(default_factory=dict)  # level_key(kind, λ) → value
    other: Mapping[str, float] = field(default_factory=dict)  # keys this release does not know, kept as stored

    NAMED: ClassVar[tuple[str, ...]]  # the keys stored under a field of their own, set below

    def as_dict(self) -> dict[str, float]:
        named = {name: value for name in self.NAMED if (value := getattr(self, name)) is not None}
        return {KIMG_KEY: self.kimg, **self.levels, **named, **self.other}

    @property
    def metrics(self) -> dict[str, float]:
        """Everything measured at the point, by stored key (what the trackers log): the entry without kimg."""
        return {k: v for k, v in self.as_dict().items() if k != KIMG_KEY}

    def get(self, key: str) -> float | None:
        """The value stored under ``key`` (a name chosen at run time: a report's metric); None when absent."""
        return self.as_dict().get(key)

    @property
    def scored(self) -> bool:
        """Whether the watched combination was measured here (a resumed run does not measure it again)."""
        return self.score is not None

    def watched(self, measured: Watched) -> CurveEntry:
        return replace(
            self,
            score=measured.score,
            kid=measured.kid,
            copy_pixels=measured.copy_pixels,
            copy_pixels_low=measured.copy_pixels_low,
            copy_pixels_high=measured.copy_pixels_high,
            copy_features=measured.copy_features,
            copy_features_low=measured.copy_features_low,
            copy_features_high=measured.copy_features_high,
        )

    def worst_copy(self, part: str = "") -> float | None:
        return worst_copy(self.as_dict(), part)

    def per_level(self, kind: str) -> list[tuple[float, float]]:
        """(log-SNR, value) of ``kind`` at each noise level, from the noisiest."""
        found = []
        for key, value in self.levels.items():
            name, _, snr = key.partition(LEVEL_MARK)
            if name == kind and _number_text(snr) is not None:
                found.append((float(snr), value))
        return sorted(found)

    @classmethod
    def read(cls, raw: Mapping[str, Any]) -> CurveEntry:
        """A stored entry (or a point's metrics with its kimg); a value that is not a number is left out."""
        named: dict[str, float] = {}
        levels: dict[str, float] = {}
        other: dict[str, float] = {}
        for key, value in raw.items():
            number = _number(value)
            name = cls.FORMER.get(str(key), str(key))
            if number is None:
                continue
            if name == KIMG_KEY or name in cls.NAMED:
                named[name] = number
            elif LEVEL_MARK in name:
                levels[name] = number
            else:
                other[name] = number
        return cls(**named, levels=levels, other=other)


CurveEntry.NAMED = tuple(f.name for f in fields(CurveEntry) if f.name not in (KIMG_KEY, "levels", "other"))
assert PRUNING_METRIC in CurveEntry.NAMED and all(
    copy_key(s, p) in CurveEntry.NAMED for s in COPY_SPACES for p in COPY_PARTS
), "a curve entry names every key it is stored under"


@dataclass(frozen=True)
class CurvePoint:
    """One evaluation point of a stored curve: its 1-based index and its entry."""

    index: int  # 1-based
    entry: CurveEntry

    @property
    def kimg(self) -> float:
        return self.entry.kimg

    @property
    def score(self) -> float | None:
        """The score at the watched combination, where this point was scored and it was finite."""
        value = self.entry.score
        return value if value is not None and math.isfinite(value) else None

    def get(self, key: str) -> float | None:
        """The value stored under ``key`` (e.g. ``PRUNING_METRIC``); None when absent."""
        return self.entry.get(key)

    def worst_copy(self, part: str = "") -> float | None:
        return self.entry.worst_copy(part)


def curve_points(curve: Mapping[str, Any]) -> list[CurvePoint]:
    """A stored curve's points in order (an entry that is not a mapping under an integer key is left out)."""
    points = [
        CurvePoint(int(k), CurveEntry.read(v)) for k, v in curve.items() if str(k).isdigit() and isinstance(v, Mapping)
    ]
    return sorted(points, key=lambda p: p.index)


def record_entry(curve: dict[str, dict[str, float]], index: int, entry: CurveEntry) -> None:
    """Store ``entry`` as point ``index`` of ``curve`` (the one place a curve entry is written)."""
    curve[str(index)] = entry.as_dict()


def stored_entry(curve: Mapping[str, Any], index: int) -> CurveEntry | None:
    """Point ``index`` of a stored curve, if it is there."""
    raw = curve.get(str(index))
    return CurveEntry.read(raw) if isinstance(raw, Mapping) else None
