"""The sampling sweep: one trained model scored at every (guidance, sampler steps, η, ...) combination.

Every combination uses the same labels and the same initial noise per sample, so differences are
the settings' and not the noise's. With screening, every combination is first scored on the first
``screen_samples`` samples and ranked by FID in the reference's top screen_samples/4 principal
components (``screen_by: pca``; or KID, or plain FID): FID on fewer samples than feature dimensions
is biased by the samples' spread and ranks low-diversity settings first, KID ranked photo patches
differently from the full-count FID (``benchmarks/screen_agreement.py``). The best ``rescore_top`` are then completed to
``num_samples`` (the screening samples are reused, since sample i is the same image in both), and so
are the screen's best at each guidance scale and at each cost that beats every cheaper one
(:func:`hpo.analysis.frontier.finalists` says why); the trial's value is the best full-count FID: FIDs
are compared at equal counts only. Which of two completed combinations is better is read against the
noise of their *difference* on the same samples (:func:`paired_sd`), smaller than two independent
values' because the noise they share cancels. With ``ema`` (post-hoc EMA), a
combination's EMA length picks the weights it samples: rebuilt from the run's snapshots, one length
at a time, and screened in two stages (:func:`ema_stages`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

import numpy as np
import torch

from hpo.analysis.frontier import screen_finalists
from hpo.analysis.noise import halves_difference_sd
from hpo.analysis.sweep import SweepResult
from hpo.records import ComboScore, Stage
from hpo.scoring.distance import Reference, frechet
from hpo.scoring.score import SampleFeatures, Scorer, sample_features, score_labels, scores_of
from hpo.spec.counts import pca_dims
from hpo.spec.sampling import SamplingConfig, ScreenBy
from hpo.training.generate import network_evaluations
from hpo.training.model import DiffusionModel
from hpo.training.posthoc_ema import PosthocEma

log = logging.getLogger("hpo.scoring")
# the least completed combinations a paired sd is estimated from: k of them give it k − 1 degrees of
# freedom, and with 1 or 2 it falls below half the true sd in a third of draws (simulated)
MIN_PAIRED_COMBINATIONS = 4


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
        nfe = network_evaluations(combo, model.schedule, conditional=labels is not None)
        entry = ComboScore(
            combo, stage, s.num_samples, s.fid, s.kid, s.class_accuracy, s.sampling_seconds + s.feature_seconds,
            precision=s.precision, recall=s.recall, rank_deficient=s.rank_deficient, ranked_by=by, pca_fid=s.pca_fid,
            nfe=nfe,
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
        if rest:  # the other EMA lengths × guidance, at the sampler settings that won the first stage
            won = min((s for s in result.scores if s.stage == "screen"), key=lambda s: s.rank_value).sampling
            screen(at_settings_of(won, rest))
        finalists = sorted(screen_finalists(result.scores, rescore_top, labels is not None), key=ema_order)
    halves: list[tuple[float, float]] = []  # each completed combination's FID on its samples' two halves
    pairing = sum((c, "full") not in done for c in finalists) >= MIN_PAIRED_COMBINATIONS  # else none is stored
    for combo in finalists:
        if (combo, "full") in done:
            result.scores.append(done[(combo, "full")])
            continue
        if combo in firsts:  # the screening samples are the first screen_samples of the full set
            sample = firsts[combo] + measure(combo, screen_samples, n - screen_samples)
        else:
            sample = measure(combo, 0, n)
        record(combo, "full", sample)
        if pairing:
            halves.append(half_fids(scorer.reference.space, sample.feats))  # two numbers kept, not the features
    result.paired_sd = paired_sd(halves)
    return result


def half_fids(reference: Reference, feats: np.ndarray) -> tuple[float, float]:
    """FID of the first and of the second half of one combination's samples."""
    half = len(feats) // 2
    return frechet(feats[:half], reference).value, frechet(feats[half:], reference).value


def paired_sd(halves: Sequence[tuple[float, float]]) -> float | None:
    """The sd of the difference between two combinations' FIDs on the same samples (sample i is the
    same label and initial noise in both), from each combination's :func:`half_fids`
    (:func:`~hpo.analysis.noise.halves_difference_sd`). None with fewer than MIN_PAIRED_COMBINATIONS
    measured here (a retried trial's reused scores bring no samples)."""
    return halves_difference_sd(halves) if len(halves) >= MIN_PAIRED_COMBINATIONS else None


def ema_stages(combos: Sequence[SamplingConfig]) -> tuple[list[SamplingConfig], list[SamplingConfig]]:
    """Screening in two stages when the EMA length is swept beside other settings: first every
    combination at the middle length, then the other lengths (× guidance, which they interact with)
    only at the solver settings (sampler, spacing, steps, η) that won. The cost grows with lengths +
    combinations, not with their product. Without an EMA sweep: one stage, every combination."""
    lengths = sorted({c.ema_sigma_rel for c in combos if c.ema_sigma_rel is not None})
    if len(lengths) < 2 or len({solver_settings(c) for c in combos}) < 2:
        return list(combos), []
    pivot = lengths[(len(lengths) - 1) // 2]
    return [c for c in combos if c.ema_sigma_rel == pivot], [c for c in combos if c.ema_sigma_rel != pivot]


def solver_settings(combo: SamplingConfig) -> SamplingConfig:
    """What the EMA stage keeps from the first stage's winner: every setting but the guidance scale and
    the EMA length (sampler, spacing, steps, η, guidance interval)."""
    return dataclasses.replace(combo, guidance_scale=1.0, ema_sigma_rel=None)


def at_settings_of(won: SamplingConfig, combos: Sequence[SamplingConfig]) -> list[SamplingConfig]:
    """The combinations of ``combos`` that share ``won``'s solver settings (:func:`solver_settings`)."""
    return [c for c in combos if solver_settings(c) == solver_settings(won)]


def ema_order(combo: SamplingConfig) -> float:
    """Combinations grouped by EMA length (the run's own EMA first): each length is rebuilt once."""
    return -1.0 if combo.ema_sigma_rel is None else combo.ema_sigma_rel
