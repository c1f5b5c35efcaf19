"""What a long run measures at each evaluation point beside the validation metric: the score at one
sampling combination, the share of samples that copy a training image (pixels and features), and
the floor that held-out real images set for both (its record and what is said about it:
:mod:`hpo.analysis.progress`). The stop verdict (:mod:`hpo.analysis.stopping`) reads these points."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from hpo.analysis.progress import Floor
from hpo.records import KIMG_KEY, CurveEntry, Watched, record_entry, stored_entry
from hpo.scoring.features import classified_share, extract
from hpo.scoring.fidelity import K
from hpo.scoring.memorisation import copy_share, pixel_rows, pixel_vectors
from hpo.scoring.score import Scorer, fid_kid, sample_features, score_labels
from hpo.spec.sampling import SamplingConfig
from hpo.training.data import ImageData
from hpo.training.model import DiffusionModel
from hpo.training.trainer import EvalPoint

FLOOR_DRAWS = 4  # random subsets of the held-out images whose score spread is the floor's


@dataclass
class ProgressProbe:
    """Built once per run (or per worker and study): the training banks and the floor are computed
    on first use and kept."""

    scorer: Scorer
    data: ImageData
    _floor: Floor | None = field(default=None, init=False)
    _pixels: torch.Tensor | None = field(default=None, init=False)

    @property
    def train_pixels(self) -> torch.Tensor:
        if self._pixels is None:
            self._pixels = pixel_rows(self.data.train_images.cpu())  # a view: nearest_two reads it in chunks
        return self._pixels

    @property
    def floor(self) -> Floor:
        if self._floor is None:
            self._floor = self._measure_floor()
        return self._floor

    def _measure_floor(self) -> Floor:
        images = self.data.val_images.cpu()
        feats = extract(self.scorer.extractor, images, batch_size=self.scorer.config.batch_size)
        n = min(self.scorer.config.num_samples, feats.shape[0])
        rng = np.random.default_rng(0)
        draws = [feats[rng.permutation(feats.shape[0])[:n]] for _ in range(FLOOR_DRAWS)]
        scores, kids = zip(*(fid_kid(d, self.scorer.reference) for d in draws), strict=True)
        fidelity = [self.scorer.precision_recall(d) for d in draws] if n > K else []
        labelled = self.data.num_classes > 1
        accuracy = classified_share(self.scorer.extractor, images, self.data.val_labels) if labelled else None
        return Floor(
            float(np.mean(scores)),
            float(np.std(scores, ddof=1)) if n < feats.shape[0] else 0.0,
            n,
            copy_share(pixel_vectors(images), self.train_pixels, "pixels"),
            copy_share(feats, self.scorer.reference.features, "features"),
            float(np.mean([f.precision for f in fidelity])) if fidelity else None,
            float(np.mean([f.recall for f in fidelity])) if fidelity else None,
            accuracy,
            float(np.mean(kids)),
        )

    def measure(
        self,
        model: DiffusionModel,
        sampling: SamplingConfig,
        *,
        class_frequencies: torch.Tensor | None = None,
        seed: int = 0,
    ) -> Watched:
        """Score ``model`` at ``sampling`` on the full sample count and look for copies among the
        same samples; the numbers go into the run's curve (``CurveEntry.watched``)."""
        n = self.scorer.config.num_samples
        labels = score_labels(self.scorer, model, class_frequencies, seed=seed)
        sample = sample_features(self.scorer, model, sampling, labels, start=0, n=n, seed=seed, keep_images=True)
        assert sample.images is not None
        fid, kid = fid_kid(sample.feats, self.scorer.reference)
        pixels = copy_share(pixel_vectors(sample.images), self.train_pixels, "pixels")
        feats = copy_share(sample.feats, self.scorer.reference.features, "features")
        return Watched(fid, kid, pixels.share, pixels.low, pixels.high, feats.share, feats.low, feats.high)


def record_point(
    curve: dict[str, dict[str, float]], point: EvalPoint, measure: Callable[[], Watched] | None
) -> EvalPoint:
    """One evaluation point into a run's ``curve`` (keyed by its index, with its kimg), a trial's and
    ``hpo train``'s alike; with ``measure``, the watched combination's score, copy share and gap too,
    unless the curve holds them already (a resumed run replays the point: measured once). Returns
    the point with everything the curve holds for it, for the trackers."""
    before = stored_entry(curve, point.index)
    entry = CurveEntry.read({**(before.as_dict() if before else {}), KIMG_KEY: point.kimg, **point.metrics})
    if measure is not None and not entry.scored:
        entry = entry.watched(measure())
    record_entry(curve, point.index, entry)
    return replace(point, metrics=entry.metrics)
