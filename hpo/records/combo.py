"""One sampling combination's score as a trial stores it (``ComboScore``: one per combination and stage
of the sweep, :func:`hpo.scoring.sweep.run_sweep` measures them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal

from hpo.files import JsonObject
from hpo.spec.sampling import SamplingConfig, ScreenBy

Stage = Literal["screen", "full"]


@dataclass(frozen=True)
class ComboScore:
    sampling: SamplingConfig
    stage: Stage  # screen: a first look at screen_samples; full: at score.num_samples (comparable)
    num_samples: int
    score: float  # the score's metric (FID, or classifier-FID with score.features: classifier); stored as 'fid'
    kid: float
    class_accuracy: float | None
    seconds: float
    _: KW_ONLY  # what later versions added: by name
    precision: float | None = None  # fidelity: share of samples inside the real images' manifold
    recall: float | None = None  # diversity: share of real images inside the samples' manifold
    rank_deficient: bool = False  # fewer samples than feature dimensions: this FID is biased by spread
    ranked_by: ScreenBy = "fid"  # the statistic this stage compares combinations by
    pca_fid: float | None = None  # FID in the reference's top principal components (screen_by: pca)
    nfe: int | None = None  # network evaluations per sample, counted on the schedule (None: stored before)

    def evaluations(self, conditional: bool) -> int:
        """Network evaluations per sample: as counted when scored, else as the combination implies."""
        return self.nfe if self.nfe is not None else self.sampling.evaluations(conditional)

    @property
    def rank_value(self) -> float:
        """The number this stage ranks by (lower is better)."""
        if self.ranked_by == "pca" and self.pca_fid is not None:
            return self.pca_fid
        return self.kid if self.ranked_by == "kid" else self.score

    def to_dict(self) -> JsonObject:
        return {
            **self.sampling.as_dict(),
            "stage": self.stage,
            "num_samples": self.num_samples,
            "fid": self.score,  # the stored key stays "fid": studies already stored keep loading
            "kid": self.kid,
            "class_accuracy": self.class_accuracy,
            "seconds": round(self.seconds, 3),
            "precision": self.precision,
            "recall": self.recall,
            "rank_deficient": self.rank_deficient,
            "ranked_by": self.ranked_by,
            "pca_fid": self.pca_fid,
            "nfe": self.nfe,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ComboScore:
        """A stored score (``to_dict``; a key added later may be absent); raises when a required one is."""
        accuracy = d.get("class_accuracy")
        precision, recall = d.get("precision"), d.get("recall")
        return cls(
            SamplingConfig.from_dict(d),
            d["stage"],
            int(d["num_samples"]),
            float(d["fid"]),
            float(d["kid"]),
            None if accuracy is None else float(accuracy),
            float(d.get("seconds", 0.0)),
            precision=None if precision is None else float(precision),
            recall=None if recall is None else float(recall),
            rank_deficient=bool(d.get("rank_deficient", False)),
            ranked_by=stored_ranking(d.get("ranked_by")),
            pca_fid=None if d.get("pca_fid") is None else float(d["pca_fid"]),
            nfe=None if d.get("nfe") is None else int(d["nfe"]),
        )


def stored_ranking(raw: Any) -> ScreenBy:
    """A stored score's ``ranked_by`` (scores stored before it was kept were ranked by FID)."""
    return "pca" if raw == "pca" else "kid" if raw == "kid" else "fid"
