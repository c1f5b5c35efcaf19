"""Copy detection with planted faults: a denoiser that reproduces its training set (the empirically
optimal one) is caught, real held-out images sit at the floor, a short real training run does not copy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from hpo.diffusion.network import NetInfo
from hpo.diffusion.schedule import NoiseSchedule
from hpo.scoring.memorisation import bootstrap_interval, copy_share, nearest_two, pixel_rows, pixel_vectors
from hpo.scoring.progress import ProgressProbe
from hpo.scoring.score import make_scorer
from hpo.spec.config import ScoreConfig
from hpo.spec.sampling import SamplingConfig
from hpo.training.data import ImageData, to_model_range
from hpo.training.model import DiffusionModel
from hpo.training.trainer import train
from tests.conftest import tiny_config

SAMPLING = SamplingConfig(guidance_scale=1.0, steps=20, eta=0.0)


class EmpiricalDenoiser(nn.Module):
    """The exact minimiser of the training loss on a finite training set: x̂0 is the softmax-weighted
    mean of the training images given x_t. Sampling it reproduces training images — a planted copier."""

    def __init__(self, images: torch.Tensor, schedule: NoiseSchedule) -> None:
        super().__init__()
        self.x0: torch.Tensor
        self.register_buffer("x0", to_model_range(images).float())
        self.schedule = schedule
        self.anchor = nn.Parameter(torch.zeros(()))  # a DiffusionModel needs a parameter for its device

    def forward(self, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        index = (t * self.schedule.T / 1000).round().long()
        alpha, sigma = self.schedule.alpha_sigma(index)
        flat = self.x0.flatten(1).double()
        q, a = x.flatten(1).double(), alpha.flatten().double()[:, None]
        d2 = q.pow(2).sum(1, keepdim=True) - 2 * a * (q @ flat.T) + a.pow(2) * flat.pow(2).sum(1)[None]
        logits = -d2 / (2 * sigma.flatten()[:, None].double().pow(2))
        return (torch.softmax(logits, dim=1) @ flat).float().view_as(x)


def copier(data: ImageData) -> DiffusionModel:
    schedule = NoiseSchedule.create("cosine", 100)
    info = NetInfo(data.channels, data.image_size, 0)
    return DiffusionModel(EmpiricalDenoiser(data.train_images, schedule), info, schedule, "x0")


@pytest.fixture(scope="module")
def probe(digits8: ImageData, cache_dir: Path) -> ProgressProbe:
    cfg = ScoreConfig(features="classifier", num_samples=128, batch_size=128)
    scorer = make_scorer(cfg, digits8, device=torch.device("cpu"), cache_dir=cache_dir / "scoring")
    return ProgressProbe(scorer, digits8)


def test_the_training_images_themselves_are_all_copies_and_held_out_images_are_not(digits8: ImageData) -> None:
    bank = pixel_vectors(digits8.train_images)
    own = copy_share(pixel_vectors(digits8.train_images[:100]), bank, "pixels")
    assert own.share == 1.0  # distance 0 to itself: ratio 0
    held_out = copy_share(pixel_vectors(digits8.val_images), bank, "pixels")
    assert held_out.share < 0.05, held_out
    assert held_out.low <= held_out.share <= held_out.high


def test_bootstrap_interval_contains_the_share_and_narrows_with_more_samples() -> None:
    rng = np.random.default_rng(1)
    small = (rng.random(50) < 0.3).astype(float)
    large = (rng.random(2000) < 0.3).astype(float)
    lo_s, hi_s = bootstrap_interval(small)
    lo_l, hi_l = bootstrap_interval(large)
    assert lo_s <= small.mean() <= hi_s and lo_l <= large.mean() <= hi_l
    assert hi_l - lo_l < (hi_s - lo_s) / 3
    assert 0.25 < lo_l < 0.3 < hi_l < 0.35


def test_a_network_that_returns_training_images_is_flagged_as_copying(probe: ProgressProbe, digits8: ImageData) -> None:
    measured = probe.measure(copier(digits8), SAMPLING)
    assert measured.copy_pixels >= 0.9, measured
    assert measured.copy_pixels_low < measured.copy_pixels <= measured.copy_pixels_high <= 1.0
    floor = probe.floor
    assert floor.copy_pixels.share < 0.05, floor  # held-out real images sit at the floor
    assert measured.copy_pixels_low > floor.copy_pixels.high


def test_a_short_real_training_run_does_not_copy(probe: ProgressProbe, digits8: ImageData) -> None:
    result = train(tiny_config(kimg=4, batch_size=32, lr=2e-3, num_evals=1, conditional=False), digits8)
    measured = probe.measure(result.model, SAMPLING)
    assert measured.copy_pixels < 0.05, measured
    assert measured.copy_features < 0.05, measured
    assert np.isfinite(measured.score) and measured.score > probe.floor.score
    sample = copy_share(np.zeros((1, 2)), np.array([[0.0, 1.0], [0.0, 2.0]]), "features")
    assert sample.share == 0.0  # nearest 1, second 2: ratio 1/2 is not a copy


def test_a_uint8_bank_read_in_chunks_finds_what_the_whole_float_bank_finds(digits8: ImageData) -> None:
    queries = pixel_vectors(digits8.val_images[:40])
    whole = nearest_two(queries, pixel_vectors(digits8.train_images))
    chunked = nearest_two(queries, pixel_rows(digits8.train_images), cells=40 * 7)  # 7 rows at a time
    assert torch.equal(whole[0], chunked[0]) and torch.equal(whole[1], chunked[1])
