"""The width-transfer verdict on planted grids: width × lr × seed, each score a bowl in log(lr)
around a planted optimum plus seed noise."""

from __future__ import annotations

import math
import random
import re

import pytest

from hpo.analysis.noise import Noise
from hpo.analysis.seeds import SeedStats, within_two_standard_errors
from hpo.analysis.transfer import LrMean, TransferRun, optimum, transfer

WIDTHS = (8, 16, 32, 64)
LRS = tuple(1e-4 * 2**k for k in range(9))  # 1e-4 .. 2.56e-2, factors of 2


def grid(
    best_lr: dict[int, float], *, seeds: int = 2, noise: float = 0.05, curvature: float = 1.0
) -> list[TransferRun]:
    rng = random.Random(0)
    return [
        TransferRun(w, lr, s, 10 + curvature * math.log2(lr / best_lr[w]) ** 2 + rng.gauss(0, noise))
        for w in best_lr
        for lr in LRS
        for s in range(seeds)
    ]


def test_an_optimum_that_holds_across_widths_is_said_to_transfer() -> None:
    result = transfer(grid({w: 1.6e-3 for w in WIDTHS}))
    assert result.state == "holds"
    assert abs(result.alpha) < 0.05
    assert all(o.lr == pytest.approx(1.6e-3, rel=0.1) for o in result.optima)
    assert result.regret < 2 * result.regret_se + 0.1
    assert result.text.startswith("the lr transfers: its optimum moves within ×1")
    assert "from width 8 to 64 (4 widths, 9 learning rates, 2 seed(s))" in result.text


def test_an_optimum_that_falls_with_width_is_said_to_drift_with_its_exponent() -> None:
    planted = {w: 6.4e-3 * (w / 8) ** -0.5 for w in WIDTHS}  # EDM2's 1/sqrt(channels)
    result = transfer(grid(planted))
    assert result.state == "drifts"
    assert result.alpha == pytest.approx(-0.5, abs=0.05)
    assert all(r == pytest.approx(1.0, abs=0.1) for r in result.residuals)
    assert result.spread == pytest.approx(8**0.5, rel=0.1)
    assert result.regret > 2 * result.regret_se  # the narrow network's lr is measurably worse at width 64
    assert re.search(
        r"drifts as width\^-0\.(49|50|51): at width 64 use the width-8 lr × \(64/8\)\^-0\.\d\d = × 0\.3[4-7]",
        result.text,
    )


def test_a_best_lr_at_the_grids_edge_is_not_called_an_optimum() -> None:
    planted = {8: 1.6e-3, 16: 1.6e-3, 32: 1e-4 / 4, 64: 1e-4 / 8}  # below the grid for the wide networks
    result = transfer(grid(planted))
    assert result.state == "undetermined"
    assert "width 32 at the low end (0.0001), width 64 at the low end (0.0001); widen the grid there" in result.text


def test_noisy_seeds_widen_the_interval_and_a_diverged_run_counts_as_the_worst() -> None:
    runs = grid({8: 1.6e-3}, seeds=3, noise=2.0, curvature=0.2)
    best = optimum(8, runs)
    assert best.low < best.grid_lr < best.high  # neighbours the seeds cannot separate from the best
    diverged = [r if r.lr != best.grid_lr or r.seed else TransferRun(8, r.lr, 0, math.nan) for r in runs]
    moved = optimum(8, diverged)
    assert moved.grid_lr != best.grid_lr
    assert math.isinf(moved.mean_at(best.grid_lr).mean)


def test_too_few_widths_or_learning_rates_are_refused_naming_what_is_missing() -> None:
    with pytest.raises(ValueError, match=r"2 or more widths .* got \[8\]"):
        transfer(grid({8: 1e-3}))
    with pytest.raises(ValueError, match="width 8: needs at least 3 learning rates"):
        optimum(8, [TransferRun(8, lr, 0, 1.0) for lr in LRS[:2]])


def test_the_tie_rule_is_twice_the_standard_error_of_the_difference() -> None:
    a, b = LrMean(1e-3, 10.0, 0.3, 2), LrMean(2e-3, 10.8, 0.3, 2)  # 2 SE of the difference = 0.85
    assert within_two_standard_errors(a, b)
    assert not within_two_standard_errors(a, LrMean(2e-3, 10.9, 0.3, 2))
    assert not within_two_standard_errors(a, LrMean(2e-3, math.inf, 0.0, 2))
    assert Noise(0.3, 4).within_tie_margin(10.0, 10.8) and not Noise(0.3, 4).within_tie_margin(10.0, 10.9)  # 2·√2·0.3


def test_mean_and_sd_over_seeds_is_one_estimate_with_its_edges() -> None:
    assert math.isnan(SeedStats.of([]).mean) and SeedStats.of([]).standard_error == math.inf
    assert SeedStats.of([4.0]) == SeedStats(4.0, 0.0, 1) and SeedStats.of([4.0]).standard_error == 0.0
    two = SeedStats.of([1.0, 3.0])
    assert (two.mean, two.sd, two.standard_error) == (2.0, math.sqrt(2), 1.0)
