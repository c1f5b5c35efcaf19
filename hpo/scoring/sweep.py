"""The sampling sweep: one trained model scored at every (guidance, DDIM steps, η) combination.

Every combination uses the same labels and the same initial noise per sample, so differences are
the settings' and not the noise's. With screening, every combination is first scored on the first
``screen_samples`` samples and ranked by FID in the reference's top screen_samples/4 principal
components (``screen_by: pca``; or KID, or plain FID): FID on fewer samples than feature dimensions
is biased by the samples' spread and ranks low-diversity settings first, KID ranked photo patches
differently from the full-count FID (``benchmarks/screen_agreement.py``). The best ``rescore_top`` are then completed to
``num_samples`` (the screening samples are reused, since sample i is the same image in both) and the
trial's value is the best full-count FID: FIDs are compared at equal counts only. With ``ema`` (post-hoc EMA), a
combination's EMA length picks the weights it samples: rebuilt from the run's snapshots, one length
at a time, and screened in two stages (:func:`ema_stages`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from hpo.scoring.score import SampleFeatures, Scorer, sample_features, score_labels, scores_of
from hpo.spec.counts import pca_dims
from hpo.spec.sampling import SamplingConfig, ScreenBy
from hpo.training.model import DiffusionModel
from hpo.training.posthoc_ema import PosthocEma

log = logging.getLogger("hpo.scoring")

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
    precision: float | None = None  # fidelity: share of samples inside the real images' manifold
    recall: float | None = None  # diversity: share of real images inside the samples' manifold
    rank_deficient: bool = False  # fewer samples than feature dimensions: this FID is biased by spread
    ranked_by: ScreenBy = "fid"  # the statistic this stage compares combinations by
    pca_fid: float | None = None  # FID in the reference's top principal components (screen_by: pca)

    @property
    def rank_value(self) -> float:
        """The number this stage ranks by (lower is better)."""
        if self.ranked_by == "pca" and self.pca_fid is not None:
            return self.pca_fid
        return self.kid if self.ranked_by == "kid" else self.score

    def to_dict(self) -> dict[str, Any]:
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
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ComboScore:
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
            None if precision is None else float(precision),
            None if recall is None else float(recall),
            bool(d.get("rank_deficient", False)),
            stored_ranking(d.get("ranked_by")),
            None if d.get("pca_fid") is None else float(d["pca_fid"]),
        )


@dataclass
class SweepResult:
    scores: list[ComboScore] = field(default_factory=list)  # every score, screening and full

    @property
    def full(self) -> list[ComboScore]:
        return [s for s in self.scores if s.stage == "full"]

    @property
    def best(self) -> ComboScore:
        return min(self.full, key=lambda s: s.score)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.scores)


def run_sweep(
    scorer: Scorer,
    model: DiffusionModel,
    combos: Sequence[SamplingConfig],
    *,
    screen_samples: int = 0,
    rescore_top: int = 2,
    screen_by: ScreenBy = "pca",
    class_frequencies: torch.Tensor | None = None,
    seed: int = 0,
    known: Sequence[ComboScore] = (),
    on_score: Callable[[ComboScore], None] | None = None,
    ema: PosthocEma | None = None,
) -> SweepResult:
    """Score ``model`` at every combination; scores in ``known`` (from an earlier attempt on the
    same weights) are reused, not recomputed. ``on_score`` sees each new score as it lands.
    Combinations with an EMA length sample ``ema``'s rebuilt weights (grouped by length)."""
    if ema is None and any(c.ema_sigma_rel is not None for c in combos):
        raise ValueError("combinations with ema_sigma_rel need the run's EMA snapshots (ema=PosthocEma(...))")
    combos = sorted(combos, key=ema_order)
    n = scorer.config.num_samples
    labels = score_labels(scorer, model, class_frequencies, seed=seed)
    done = {(s.sampling, s.stage): s for s in known}
    result = SweepResult()
    firsts: dict[SamplingConfig, SampleFeatures] = {}

    def measure(combo: SamplingConfig, start: int, count: int) -> SampleFeatures:
        weights = model if ema is None else ema.model(combo.ema_sigma_rel)
        return sample_features(scorer, weights, combo, labels, start=start, n=count, seed=seed)

    def record(combo: SamplingConfig, stage: Stage, sample: SampleFeatures) -> None:
        by: ScreenBy = screen_by if stage == "screen" else "fid"
        dims = pca_dims(sample.feats.shape[0], sample.feats.shape[1]) if by == "pca" else None
        s = scores_of(scorer, sample, conditional=labels is not None, pca_dims=dims)
        entry = ComboScore(
            combo, stage, s.num_samples, s.fid, s.kid, s.class_accuracy, s.sampling_seconds + s.feature_seconds,
            s.precision, s.recall, s.rank_deficient, by, s.pca_fid,
        )  # fmt: skip
        result.scores.append(entry)
        log.info(
            "%s %s: %s %.4g, KID %.4g%s (%d samples%s)", stage, combo.label, s.metric_name, s.fid, s.kid,
            "" if s.pca_fid is None else f", PCA-{dims} {s.pca_fid:.4g}", s.num_samples,
            ", FID rank-deficient" if s.rank_deficient else "",
        )  # fmt: skip
        if on_score is not None:
            on_score(entry)

    def screen(batch: Sequence[SamplingConfig]) -> None:
        for combo in batch:
            if (combo, "screen") in done:
                result.scores.append(done[(combo, "screen")])
                continue
            firsts[combo] = measure(combo, 0, screen_samples)
            record(combo, "screen", firsts[combo])

    screening = 0 < screen_samples < n and len(combos) > 1
    finalists = list(combos)
    if screening:
        first, rest = ema_stages(combos)
        screen(first)
        if rest:  # the other EMA lengths × guidance, at the DDIM steps and η that won the first stage
            won = min((s for s in result.scores if s.stage == "screen"), key=lambda s: s.rank_value).sampling
            screen([c for c in rest if (c.ddim_steps, c.eta) == (won.ddim_steps, won.eta)])
        screened = sorted((s for s in result.scores if s.stage == "screen"), key=lambda s: s.rank_value)
        finalists = sorted((s.sampling for s in screened[:rescore_top]), key=ema_order)
    for combo in finalists:
        if (combo, "full") in done:
            result.scores.append(done[(combo, "full")])
            continue
        if combo in firsts:  # the screening samples are the first screen_samples of the full set
            sample = firsts[combo] + measure(combo, screen_samples, n - screen_samples)
        else:
            sample = measure(combo, 0, n)
        record(combo, "full", sample)
    return result


SCREEN_NAMES = {"pca": "FID in the reference's top principal components", "kid": "KID", "fid": "FID"}


def stored_ranking(raw: Any) -> ScreenBy:
    """A stored score's ``ranked_by`` (scores stored before it was kept were ranked by FID)."""
    return "pca" if raw == "pca" else "kid" if raw == "kid" else "fid"


def ema_stages(combos: Sequence[SamplingConfig]) -> tuple[list[SamplingConfig], list[SamplingConfig]]:
    """Screening in two stages when the EMA length is swept beside other settings: first every
    combination at the middle length, then the other lengths (× guidance, which they interact with)
    only at the DDIM steps and η that won. The cost grows with lengths + combinations, not with
    their product. Without an EMA sweep: one stage, every combination."""
    lengths = sorted({c.ema_sigma_rel for c in combos if c.ema_sigma_rel is not None})
    if len(lengths) < 2 or len({(c.ddim_steps, c.eta) for c in combos}) < 2:
        return list(combos), []
    pivot = lengths[(len(lengths) - 1) // 2]
    return [c for c in combos if c.ema_sigma_rel == pivot], [c for c in combos if c.ema_sigma_rel != pivot]


def ema_order(combo: SamplingConfig) -> float:
    """Combinations grouped by EMA length (the run's own EMA first): each length is rebuilt once."""
    return -1.0 if combo.ema_sigma_rel is None else combo.ema_sigma_rel


def sweep_table(result: SweepResult, metric: str) -> str:
    """The sweep as aligned text, best full-count score marked; an EMA column when it was swept."""
    best = result.best
    with_ema = any(s.sampling.ema_sigma_rel is not None for s in result.scores)
    ema_head = f" {'EMA':>5}" if with_ema else ""
    lines = [
        f"{'guidance':>8} {'steps':>5} {'eta':>4}{ema_head} {'stage':>6} {'samples':>7} {metric:>15} {'KID':>9} "
        f"{'prec':>5} {'recall':>6}"
    ]
    for s in sorted(result.scores, key=lambda s: (s.stage != "full", s.rank_value)):
        mark = "  <- best" if s is best else ""
        sigma = s.sampling.ema_sigma_rel
        ema = (f" {'own':>5}" if sigma is None else f" {sigma:5.3g}") if with_ema else ""
        lines.append(
            f"{s.sampling.guidance_scale:8.3g} {s.sampling.ddim_steps:5d} {s.sampling.eta:4.2g}{ema} {s.stage:>6} "
            f"{s.num_samples:7d} {s.score:15.4g} {s.kid:9.4g} {fraction(s.precision):>5} {fraction(s.recall):>6}{mark}"
        )
    by = {s.ranked_by for s in result.scores if s.stage == "screen"} - {"fid"}
    if by:
        name = SCREEN_NAMES[by.pop()]
        lines.append(f"screen rows are ranked by {name} (well-posed at their count); full rows by the score itself")
    return "\n".join(lines)


def fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def best_ema_by_guidance(scores: Sequence[ComboScore]) -> dict[float, float]:
    """Guidance scale → the EMA length of its best score, read at the stage that scored every
    combination (screening when there was one); empty when the EMA length was not swept."""
    staged = [s for s in scores if s.stage == "screen"] or [s for s in scores if s.stage == "full"]
    swept = [s for s in staged if s.sampling.ema_sigma_rel is not None]
    best: dict[float, ComboScore] = {}
    for s in swept:
        w = s.sampling.guidance_scale
        if w not in best or s.rank_value < best[w].rank_value:
            best[w] = s
    return {w: float(s.sampling.ema_sigma_rel or 0.0) for w, s in sorted(best.items())}


def ema_sentence(scores: Sequence[ComboScore]) -> str | None:
    """'EMA σ_rel 0.08 is best at guidance 1; 0.15 at guidance 3' (None without an EMA sweep)."""
    by_guidance = best_ema_by_guidance(scores)
    if not by_guidance:
        return None
    parts = [f"{sigma:g} at guidance {w:g}" for w, sigma in by_guidance.items()]
    return f"EMA σ_rel {parts[0].replace(' at', ' is best at', 1)}" + "".join(f"; {p}" for p in parts[1:])
