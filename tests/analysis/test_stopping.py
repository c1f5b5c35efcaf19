"""The stop verdict on planted curves, and the power-law forecast on a known law."""

from __future__ import annotations

import re

import numpy as np
import pytest

from hpo.analysis.stopping import Point, fit_power_law, forecast, points_from_curve, power_law, stop_verdict
from hpo.records import curve_points

KIMG = [16, 32, 48, 64, 96, 128, 192, 256]


def test_a_curve_still_falling_by_more_than_the_noise_reads_improving() -> None:
    points = [Point(k, 1.0 + 4.0 * k**-0.5) for k in KIMG]
    v = stop_verdict(points, noise=0.01)
    assert v.kind == "improving", v.text
    assert v.per_doubling is not None and v.per_doubling < -0.05
    assert "per doubling" in v.text and "train longer" in v.text


def test_the_improving_verdict_shows_the_gain_it_compared_with_the_margin() -> None:
    """A slope smaller than the margin, over doublings whose total gain exceeds it: the sentence
    names the total it compared, which is larger than the margin, not only the slope."""
    points = [Point(k, 40.0 - 4.07 * np.log2(k / 16)) for k in KIMG]
    v = stop_verdict(points, noise=2.65)  # tie margin 2·√2·2.65 = 7.5
    assert v.kind == "improving", v.text
    gain = re.search(r", ([+-]\d+\.?\d*) in all \(a gain larger than the tie margin (\d+\.?\d*);", v.text)
    assert gain is not None, v.text
    assert -float(gain.group(1)) > float(gain.group(2)) > 4.07 and "-4.07 per doubling" in v.text


def test_a_flat_tail_within_the_noise_reads_plateau_since_its_start() -> None:
    rng = np.random.default_rng(0)
    points = [Point(k, (2.0 - k / 64) if k < 64 else 1.0 + rng.normal(0, 0.01)) for k in KIMG]
    v = stop_verdict(points, noise=0.02)
    assert v.kind == "plateau", v.text
    assert v.since_kimg == 64
    assert "plateaued since 64 kimg" in v.text


def test_a_curve_that_turns_worse_reads_no_better_since_the_best() -> None:
    points = [Point(k, s) for k, s in zip(KIMG, [2.0, 1.5, 1.2, 1.0, 1.3, 1.6, 1.9, 2.2], strict=True)]
    v = stop_verdict(points, noise=0.02)
    assert v.kind == "plateau" and v.since_kimg == 64
    assert "no better since 64 kimg" in v.text


def test_copies_above_the_floor_read_copying_from_their_onset_whatever_the_score() -> None:
    lows = [0.0, 0.0, 0.01, 0.02, 0.2, 0.4, 0.6, 0.8]
    points = [Point(k, 2.0 / (i + 1), low, low + 0.05) for i, (k, low) in enumerate(zip(KIMG, lows, strict=True))]
    v = stop_verdict(points, noise=0.01, copy_floor=0.03)
    assert v.kind == "copying", v.text
    assert v.since_kimg == 96
    assert "copying began at 96 kimg" in v.text
    assert stop_verdict(points, noise=0.01, copy_floor=0.9).kind == "improving"  # under a high floor: no copying


def test_two_points_are_too_early_to_tell() -> None:
    assert stop_verdict([Point(16, 2.0), Point(32, 1.0)], noise=0.1).kind == "too_early"


def test_the_fit_recovers_a_known_power_law_and_forecasts_within_its_interval() -> None:
    a, b, c = 0.5, 6.0, 0.7
    x = np.array(KIMG, dtype=float)
    noise = np.random.default_rng(3).normal(0, 0.005, x.size)
    fitted = fit_power_law(x, power_law(x, a, b, c) + noise)
    assert fitted == pytest.approx((a, b, c), rel=0.1)
    f = forecast([Point(k, float(s)) for k, s in zip(x, power_law(x, a, b, c) + noise, strict=True)], 1024)
    truth = float(power_law(np.array([1024.0]), a, b, c)[0])
    assert f.value == pytest.approx(truth, abs=0.03)
    assert f.low is not None and f.high is not None and f.low - 0.02 <= truth <= f.high + 0.02


def test_forecast_refuses_more_than_four_times_past_the_last_point() -> None:
    points = [Point(k, 1.0 + k**-0.5) for k in KIMG]
    f = forecast(points, 256 * 4 + 1)
    assert f.value is None
    assert "over 4× past the last point (256 kimg)" in f.text


def test_points_come_from_a_stored_curve_with_the_larger_copy_interval() -> None:
    curve = {
        "2": {"kimg": 32.0, "score": 1.0, "copy_pixels_low": 0.1, "copy_features_low": 0.3, "copy_pixels": 0.2},
        "1": {"kimg": 16.0, "score": 2.0},
        "3": {"kimg": 48.0, "val_rel": 0.5},  # no score at this point
    }
    assert points_from_curve(curve_points(curve)) == [Point(16.0, 2.0), Point(32.0, 1.0, 0.3, 0.2)]
