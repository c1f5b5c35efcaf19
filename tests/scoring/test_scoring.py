from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from cleanfid import fid as cleanfid
from PIL import Image

from hpo.errors import HpoError
from hpo.scoring import reference as reference_module
from hpo.scoring.features import FeatureExtractor, classifier_extractor, extract
from hpo.scoring.reference import reference_stats
from hpo.scoring.score import fid_kid, preflight
from hpo.scoring.weights import WEIGHTS_ENV, fetch_weights, verify_weights
from hpo.spec.config import ScoreConfig
from hpo.training.data import ImageData, to_model_range, to_uint8

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def extractor(digits16: ImageData, cache_dir: Path) -> FeatureExtractor:
    return classifier_extractor(digits16, cache_dir / "scoring", CPU)


def noisy(images: torch.Tensor, level: float, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = to_model_range(images)
    return to_uint8(x + level * torch.randn(x.shape, generator=gen))


def test_fid_of_a_sample_set_against_its_own_statistics_is_zero(
    digits16: ImageData, extractor: FeatureExtractor, tmp_path: Path
) -> None:
    ref = reference_stats(digits16, extractor, split="val", cache_dir=tmp_path)
    fid, _ = fid_kid(extract(extractor, digits16.val_images), ref)
    assert abs(fid) < 1e-6


def test_fid_grows_monotonically_with_added_noise(
    digits16: ImageData, extractor: FeatureExtractor, tmp_path: Path
) -> None:
    ref = reference_stats(digits16, extractor, split="train", cache_dir=tmp_path)
    scores = [fid_kid(extract(extractor, noisy(digits16.val_images, s)), ref) for s in (0.0, 0.25, 0.5, 0.75, 1.0)]
    fids, kids = [f for f, _ in scores], [k for _, k in scores]
    assert fids == sorted(fids) and fids[-1] > 5 * fids[0], fids
    assert kids == sorted(kids), kids


def test_defects_a_person_sees_in_a_grid_move_the_classifier_score(
    digits16: ImageData, extractor: FeatureExtractor, tmp_path: Path
) -> None:
    """Grain (σ = 6 % of the range), a lifted background (+16 grey levels) and blur: each moves
    classifier-FID by several times the spread of real image sets (benchmarks/metric_sensitivity.py
    measures the full table); a classifier alone learns to ignore all three."""
    ref = reference_stats(digits16, extractor, split="train", cache_dir=tmp_path)
    images = digits16.val_images

    def fid(x: torch.Tensor) -> float:
        return fid_kid(extract(extractor, x), ref)[0]

    floor = fid(images)
    lifted = (images.float() + 16).clamp(0, 255).to(torch.uint8)
    blurred = torch.nn.functional.avg_pool2d(images.float(), 3, 1, 1, count_include_pad=False).round().to(torch.uint8)
    for name, degraded in (("grain", noisy(images, 0.12)), ("background", lifted), ("blur", blurred)):
        assert fid(degraded) > floor + 3.0, name


def test_image_statistics_follow_brightness_contrast_and_grain() -> None:
    from hpo.scoring.classifier import image_statistics

    x = torch.rand(4, 3, 16, 16) * 0.5 - 0.25
    base = image_statistics(x)
    assert base.shape == (4, 15)
    shifted = image_statistics(x + 0.2)
    assert torch.allclose(shifted[:, :3], base[:, :3] + 0.2, atol=1e-5)  # mean follows a shift
    assert torch.allclose(shifted[:, 3:9], base[:, 3:9], atol=1e-5)  # spread and grain do not
    assert (image_statistics(x + 0.3 * torch.randn_like(x))[:, 6:9] > base[:, 6:9]).all()  # grain


def save_folder(images: torch.Tensor, folder: Path) -> None:
    folder.mkdir()
    for i, im in enumerate(images):
        Image.fromarray(im[0].numpy(), "L").save(folder / f"{i:05d}.png")


def test_our_fid_equals_clean_fids_compute_fid_on_the_same_folders(
    digits16: ImageData, extractor: FeatureExtractor, tmp_path: Path
) -> None:
    real, fake = digits16.train_images[:400], noisy(digits16.val_images, 0.3)
    save_folder(real, tmp_path / "real")
    save_folder(fake, tmp_path / "fake")
    theirs = cleanfid.compute_fid(
        str(tmp_path / "fake"),
        str(tmp_path / "real"),
        mode="clean",
        custom_feat_extractor=extractor,
        custom_fn_resize=extractor.resize,
        num_workers=0,
        batch_size=100,
        device=CPU,
        use_dataparallel=False,
        verbose=False,
    )
    ours_ref = extract(extractor, real)
    ours = cleanfid.frechet_distance(
        extract(extractor, fake).mean(0),
        np.cov(extract(extractor, fake), rowvar=False),
        ours_ref.mean(0),
        np.cov(ours_ref, rowvar=False),
    )
    assert ours == pytest.approx(theirs, abs=1e-3)


def test_reference_statistics_are_cached_and_not_recomputed(
    digits16: ImageData, extractor: FeatureExtractor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = reference_stats(digits16, extractor, split="train", cache_dir=tmp_path)
    monkeypatch.setattr(reference_module, "extract", lambda *a, **k: pytest.fail("statistics were recomputed"))
    second = reference_stats(digits16, extractor, split="train", cache_dir=tmp_path)
    np.testing.assert_array_equal(first.mu, second.mu)


COMPUTE_STATS = """
import logging, sys, torch
logging.basicConfig(level=logging.INFO)
from pathlib import Path
from hpo.spec.config import DataConfig
from hpo.training.data import load_data
from hpo.scoring.features import classifier_extractor
from hpo.scoring.reference import reference_stats
data = load_data(DataConfig(source="digits", image_size=16, cache_dir=sys.argv[1]))
ex = classifier_extractor(data, Path(sys.argv[1]) / "scoring", torch.device("cpu"))
ref = reference_stats(data, ex, split="all", cache_dir=Path(sys.argv[2]))
print(ref.path, ref.path.stat().st_mtime_ns, float(ref.mu.sum()))
"""


def test_model_range_images_cannot_reach_the_feature_extractor(extractor: FeatureExtractor) -> None:
    with pytest.raises(TypeError, match="uint8 images in \\[0, 255\\]"):
        extract(extractor, torch.rand(4, 1, 16, 16) * 2 - 1)


def test_missing_weights_fail_preflight_with_one_line_naming_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WEIGHTS_ENV, str(tmp_path / "absent.pt"))
    with pytest.raises(HpoError) as err:
        preflight(ScoreConfig(features="inception"))
    message = str(err.value)
    assert "\n" not in message and "absent.pt" in message and "hpo fetch-weights" in message


def test_corrupt_weights_are_caught_by_checksum(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    truncated = tmp_path / "inception-2015-12-05.pt"
    truncated.write_bytes(b"PK\x03\x04 truncated download")
    monkeypatch.setenv(WEIGHTS_ENV, str(truncated))
    with pytest.raises(HpoError, match="are corrupt \\(sha256"):
        preflight(ScoreConfig(features="inception"))
    preflight(ScoreConfig(features="classifier"))  # classifier features need no weights


def test_fetch_weights_verifies_the_checksum_and_writes_atomically(tmp_path: Path) -> None:
    source = tmp_path / "served.pt"
    source.write_bytes(os.urandom(3_000_000))
    good = hashlib.sha256(source.read_bytes()).hexdigest()
    dest = tmp_path / "out" / "weights.pt"
    with pytest.raises(HpoError, match="fail their checksum"):
        fetch_weights(dest, url=source.as_uri(), expected="0" * 64)
    assert not dest.exists() and not list(dest.parent.iterdir())  # nothing partial left behind
    assert fetch_weights(dest, url=source.as_uri(), expected=good) == dest
    assert verify_weights(dest, expected=good) == dest


def test_fetch_weights_offline_says_how_to_provision_them(tmp_path: Path) -> None:
    with pytest.raises(HpoError, match=r"cannot download Inception weights .*hpo fetch-weights --dest FILE"):
        fetch_weights(tmp_path / "w.pt", url="http://127.0.0.1:9/inception.pt", timeout=5)
    assert not (tmp_path / "w.pt").exists()
