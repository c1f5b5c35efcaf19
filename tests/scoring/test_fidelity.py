"""Precision and recall beside FID: fidelity and diversity apart, on constructed feature sets whose
answer is known, and read beside what real held-out images reach."""

from __future__ import annotations

import numpy as np
import pytest

from hpo.analysis.progress import fidelity_text
from hpo.records import FloorRecord
from hpo.scoring.fidelity import RealManifold, matched_reference, precision_recall

RNG = np.random.default_rng(0)
REAL = RNG.normal(size=(400, 16))


def test_identical_sets_have_full_precision_and_recall() -> None:
    pr = precision_recall(REAL, REAL.copy())
    assert pr.precision == 1.0 and pr.recall == 1.0


def test_a_collapsed_set_is_precise_but_covers_little() -> None:
    """'Sharp but all alike': every sample near one of five real images."""
    collapsed = REAL[np.arange(400) % 5] + RNG.normal(scale=0.01, size=(400, 16))
    pr = precision_recall(REAL, collapsed)
    assert pr.precision > 0.95 and pr.recall < 0.1


def test_a_noisy_set_covers_the_data_but_is_not_precise() -> None:
    """'Varied but noisy': real images pushed off the manifold."""
    noisy = REAL + RNG.normal(scale=1.5, size=REAL.shape)
    pr = precision_recall(REAL, noisy)
    assert pr.precision < 0.5 and pr.recall > pr.precision


def test_a_manifold_is_measured_once_and_reused() -> None:
    manifold = RealManifold(REAL)
    radii = manifold.radii.clone()
    assert manifold.precision_recall(REAL).precision == 1.0
    assert (manifold.radii == radii).all()
    with pytest.raises(ValueError, match="needs more than 3"):
        manifold.precision_recall(REAL[:3])


def test_the_reference_is_matched_to_the_sample_count_the_same_way_every_time() -> None:
    a, b = matched_reference(REAL, 100), matched_reference(REAL, 100)
    assert a.shape == (100, 16) and (a == b).all()
    assert matched_reference(REAL, 1000) is REAL


def test_the_second_signal_is_read_beside_real_images() -> None:
    floor = FloorRecord(
        score=3.0, score_sd=0.1, num_images=256, copy_pixels=0.0, copy_pixels_high=0.01, copy_features=0.0,
        copy_features_high=0.02, precision=0.91, recall=0.89, class_accuracy=0.96,
    )  # fmt: skip
    text = fidelity_text({"precision": 0.82, "recall": 0.64, "class_accuracy": 0.73}, floor)
    assert text == (
        "precision 0.82, recall 0.64 (real images: 0.91, 0.89); "
        "class accuracy 73 % (the classifier on real images: 96 %)"
    )
    assert fidelity_text({"class_accuracy": None}, None) is None
    assert fidelity_text({"precision": 0.5, "recall": 0.4}, None) == "precision 0.50, recall 0.40"


def test_the_floor_is_measured_once_per_study_and_stored_on_it() -> None:
    """The first trial that needs the floor measures it (the probe caches it per worker too); every
    later trial, on any worker, reads it from the study."""
    from types import SimpleNamespace

    import optuna

    from hpo.records import StudyRecord
    from hpo.service.objective import _ensure_floor

    measured: list[int] = []

    class Probe:
        @property
        def floor(self) -> SimpleNamespace:
            measured.append(1)
            return SimpleNamespace(record=lambda: FloorRecord(0.7, 0.1, 64, 0.0, 0.01, 0.0, 0.01, precision=0.9))

    study = optuna.create_study()
    ctx = SimpleNamespace(get_progress=Probe)
    for _ in range(3):
        _ensure_floor(study.ask(), ctx)  # type: ignore[arg-type]
    assert measured == [1] and StudyRecord.of(study).floor == FloorRecord(
        0.7, 0.1, 64, 0.0, 0.01, 0.0, 0.01, precision=0.9
    )
