"""The user's own network: a factory named in the spec trains, resumes, samples and scores through
``hpo train`` and through a worker; one that breaks the protocol is refused in one line; diffusers'
UNet2DModel is a ready factory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from optuna.trial import TrialState

from hpo.diffusion.network import NetInfo, ProtocolError, check_protocol
from hpo.doctor.run import run_doctor
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.config import NetworkConfig
from hpo.spec.loading import load_spec
from hpo.training.data import ImageData
from hpo.training.model import build_network
from hpo.training.trainer import Trainer, train
from tests.cli import run_cli
from tests.conftest import tiny_config
from tests.service_helpers import write_spec
from tests.user_nets import build

USER = {"factory": "tests.user_nets:build", "kwargs": {"width": 8}}


def user_spec(folder: Path, **changes: Any) -> Path:
    return write_spec(
        folder,
        **{
            "train": {"network": USER, "kimg": 0.8, "num_evals": 2, "batch_size": 16},
            "search": {"lr": {"type": "float", "low": 1e-3, "high": 3e-3, "log": True}},
            "sampling": {"guidance_scale": [1.0, 2.0], "steps": 4},
            "baselines": [{"lr": 2e-3}],
            **changes,
        },
    )


def test_hpo_train_trains_resumes_samples_and_scores_a_user_network(tmp_path: Path) -> None:
    spec, out = user_spec(tmp_path), tmp_path / "run"
    code, _stdout, err = run_cli(["train", str(spec), "-o", str(out), "--set", "kimg=0.8"])
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_parameters"] == sum(
        p.numel() for p in build(channels=1, image_size=8, num_classes=10, width=8).parameters()
    )
    assert summary["value"] > 0 and len(summary["sweep"]) == 2
    again_code, _again_out, _ = run_cli(["train", str(spec), "-o", str(out), "--set", "kimg=0.8"])
    assert again_code == 0 and json.loads((out / "summary.json").read_text())["val_loss"] == summary["val_loss"]


def test_a_resumed_user_network_continues_exactly(digits8: ImageData, tmp_path: Path) -> None:
    network = NetworkConfig("tests.user_nets:build", {"width": 8})
    cfg = tiny_config(network=network, kimg=1.2, num_evals=3, batch_size=16)
    full = train(cfg, digits8)

    def stop(point, _model):  # type: ignore[no-untyped-def]
        if point.index == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, digits8, on_eval=stop, checkpoint=tmp_path / "ckpt.pt")
    resumed = train(cfg, digits8, checkpoint=tmp_path / "ckpt.pt")
    for a, b in zip(full.model.net.state_dict().values(), resumed.model.net.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_worker_runs_a_search_over_the_user_networks_keywords(tmp_path: Path) -> None:
    spec = load_spec(
        user_spec(
            tmp_path,
            study={"name": "user-net", "n_trials": 2},
            search={"network.width": {"type": "categorical", "choices": [4, 8]}},
            sampler={"name": "grid"},
            baselines=[],
        )
    )
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(spec, open_storage(url))
    Worker(
        WorkerOptions(url=url, study="user-net", exit_when_idle=True, artifact_dir=tmp_path / "art", poll_seconds=0.1)
    ).serve()
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    widths = {t.params["network.width"]: t.user_attrs["num_parameters"] for t in trials}
    assert widths[4] < widths[8]  # the searched keyword reached the factory
    assert all(t.user_attrs.get("ema_checkpoint") and t.user_attrs.get("samples") for t in trials)


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("tests.user_nets:wrong_shape", "returned shape (2, 1, 7, 8) for input (2, 1, 8, 8)"),
        ("tests.user_nets:ignores_labels", "ignores its class labels although the data has 10 classes"),
        ("tests.user_nets:not_a_module", "not a torch.nn.Module"),
        ("tests.user_nets:takes_other_arguments", "cannot be called as f(channels=, image_size=, num_classes="),
        ("tests.no_such_module:build", "cannot import tests.no_such_module"),
        ("tests.user_nets:missing", "has no function 'missing'"),
    ],
)
def test_a_network_that_breaks_the_protocol_is_refused_in_one_line(tmp_path: Path, factory: str, message: str) -> None:
    spec = user_spec(tmp_path, train={"network": {"factory": factory}, "kimg": 0.8, "num_evals": 2, "batch_size": 16})
    code, _, err = run_cli(["train", str(spec), "-o", str(tmp_path / "run")])
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and message in errors[0] and "Traceback" not in err, err


def test_a_worker_fails_a_protocol_breaking_trial_with_its_reason(tmp_path: Path) -> None:
    spec = load_spec(
        user_spec(
            tmp_path,
            study={"name": "broken-net", "n_trials": 1},
            train={
                "network": {"factory": "tests.user_nets:wrong_shape"},
                "kimg": 0.8,
                "num_evals": 2,
                "batch_size": 16,
            },
        )
    )
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    study, _ = create_or_resume(spec, open_storage(url))
    Worker(
        WorkerOptions(url=url, study="broken-net", exit_when_idle=True, artifact_dir=tmp_path / "a", poll_seconds=0.1)
    ).serve()
    (trial,) = study.get_trials()
    assert trial.state == TrialState.FAIL and trial.user_attrs["fail_reason"] == "network_protocol"
    assert "returned shape" in trial.user_attrs["error"]


def test_the_doctor_checks_a_user_network(tmp_path: Path) -> None:
    checks = {c.name: c for c in run_doctor(load_spec(user_spec(tmp_path)), fast=True, out_dir=tmp_path)}
    assert checks["model: gradients"].status == "pass" and checks["model: uses the class"].status == "pass"
    field = checks["network: receptive field"]
    assert field.status == "pass" and "sees 7×7 of the 8×8" in field.reason  # three 3×3 convolutions
    wide = load_spec(user_spec(tmp_path, data={"image_size": 16}))
    narrow = {c.name: c for c in run_doctor(wide, fast=True, out_dir=tmp_path)}["network: receptive field"]
    assert narrow.status == "warn" and "sees 7×7 of the 16×16 px input" in narrow.reason


def test_diffusers_unet_is_a_ready_factory(digits8: ImageData) -> None:
    network = NetworkConfig(
        "diffusers",
        {
            "block_out_channels": [8, 16], "layers_per_block": 1, "norm_num_groups": 4, "attention_head_dim": 4,
            "down_block_types": ["DownBlock2D", "AttnDownBlock2D"], "up_block_types": ["AttnUpBlock2D", "UpBlock2D"],
        },
    )  # fmt: skip
    cfg = tiny_config(network=network, kimg=0.32, num_evals=1, batch_size=16)
    net, info = build_network(cfg, digits8)
    assert type(net).__name__ == "DiffusersUNet" and info == NetInfo(1, 8, 10)
    result = train(cfg, digits8)
    assert result.history[-1].metrics["val_loss"] > 0
    Trainer(cfg, digits8, torch.device("cpu"))  # builds again: the protocol check passed
    from hpo.doctor.model_checks import overfit

    check, _ = overfit(cfg, digits8, steps=80)  # the doctor's preflight passes on diffusers' UNet too
    assert check.status == "pass" and "at Adam lr" in check.reason, check.line()


def test_protocol_check_names_what_is_wrong_for_a_module_that_returns_a_tuple() -> None:
    class Pair(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(()))

        def forward(self, x, t, labels):  # type: ignore[no-untyped-def]
            return x * self.w, t

    with pytest.raises(ProtocolError, match="returned tuple, not a tensor"):
        check_protocol(Pair(), NetInfo(1, 8, 0), name="pair")
