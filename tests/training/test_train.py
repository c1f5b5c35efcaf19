from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
import torch

from hpo.diffusion.parameterization import target
from hpo.diffusion.schedule import NoiseSchedule
from hpo.doctor.diagnose import overfit_single_batch
from hpo.spec.typed import to_plain
from hpo.training import trainer as train_module
from hpo.training.batches import batch_indices
from hpo.training.data import ImageData, to_model_range
from hpo.training.runtime import eval_mode
from hpo.training.trainer import (
    EvalPoint,
    SyncPoint,
    Trainer,
    TrainingAborted,
    TrainingStopped,
    ema_beta,
    same_run,
    train,
)
from hpo.training.validation import ValidationProbe, evaluate_probe
from tests.conftest import tiny_config


def test_tiny_model_overfits_a_single_batch(digits8: ImageData) -> None:
    result = overfit_single_batch(tiny_config(), digits8, steps=200)
    assert result.factor > 50, result


def test_short_run_on_digits_lowers_the_validation_metric(digits8: ImageData) -> None:
    cfg = tiny_config(kimg=8, batch_size=32, lr=2e-3, num_evals=4)
    seen: list[EvalPoint] = []
    result = train(cfg, digits8, on_eval=lambda p, _: seen.append(p))
    assert [p.index for p in seen] == [1, 2, 3, 4]
    assert [p.step for p in seen] == cfg.eval_steps() == [62, 125, 188, 250]
    assert seen[-1].metrics["val_loss"] < 0.8 * seen[0].metrics["val_loss"]
    assert {"val_loss@-6.0", "val_loss@+6.0", "val_rel@-6.0", "val_rel", "train_loss"} <= set(seen[0].metrics)
    assert seen[-1].metrics["val_rel"] < seen[0].metrics["val_rel"]
    assert result.images_seen == 250 * 32


def test_validation_metric_is_identical_for_two_evaluations_of_the_same_weights(digits8: ImageData) -> None:
    trainer = Trainer(tiny_config(), digits8, torch.device("cpu"))
    with eval_mode(trainer.ema):
        a = evaluate_probe(trainer.ema, trainer.schedule, trainer.probe, prediction="eps", conditional=True)
        b = evaluate_probe(trainer.ema, trainer.schedule, trainer.probe, prediction="eps", conditional=True)
    assert a == b


def test_validation_metric_is_measured_in_one_parameterisation(digits8: ImageData) -> None:
    """Networks making the same x0 error score the same whatever they predict; the truth scores 0."""
    trainer = Trainer(tiny_config(timesteps=300, schedule="cosine"), digits8, torch.device("cpu"))
    sched, probe = trainer.schedule, trainer.probe
    x0_true = to_model_range(probe.images)

    def oracle(prediction: str, shrink: float):  # type: ignore[no-untyped-def]
        def net(x_t: torch.Tensor, t_model: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
            alpha, sigma = sched.alpha_sigma((t_model * sched.T / 1000).round().long())
            x0 = shrink * x0_true[: x_t.shape[0]]
            return target(prediction, x0, (x_t - alpha * x0) / sigma, alpha, sigma)

        return net

    def score(prediction: str, shrink: float, metric: str) -> float:
        net = oracle(prediction, shrink)
        return evaluate_probe(net, sched, probe, prediction=prediction, conditional=False)[metric]

    for metric in ("val_loss", "val_rel"):
        wrong = {p: score(p, 0.8, metric) for p in ("eps", "v", "x0")}
        assert wrong["eps"] > 0.01
        assert wrong["v"] == pytest.approx(wrong["eps"], rel=1e-3) == pytest.approx(wrong["x0"], rel=1e-3)
        assert all(score(p, 1.0, metric) < 1e-6 for p in ("eps", "v", "x0"))


def test_reference_denoiser_scores_one_on_the_relative_metric(digits8: ImageData) -> None:
    """A network that is the per-pixel Wiener denoiser scores exactly the reference: val_rel 1 at
    every level, whatever T and schedule."""
    for T, schedule in ((100, "linear"), (1000, "cosine")):
        trainer = Trainer(tiny_config(timesteps=T, schedule=schedule), digits8, torch.device("cpu"))
        sched, probe = trainer.schedule, trainer.probe

        def wiener(
            x_t: torch.Tensor,
            t_model: torch.Tensor,
            labels: torch.Tensor | None,
            sched: NoiseSchedule = sched,
            probe: ValidationProbe = probe,
        ) -> torch.Tensor:
            alpha, sigma = sched.alpha_sigma((t_model * sched.T / 1000).round().long())
            gain = alpha * probe.var / (alpha**2 * probe.var + sigma**2)
            return probe.mean + gain * (x_t - alpha * probe.mean)  # an x0 prediction

        metrics = evaluate_probe(wiener, sched, probe, prediction="x0", conditional=False)
        assert metrics["val_rel"] == pytest.approx(1.0, rel=1e-4)


def test_planted_nan_stops_the_run_as_nan_loss(digits8: ImageData, monkeypatch: pytest.MonkeyPatch) -> None:
    real = train_module.diffusion_loss
    calls = {"n": 0}

    def poisoned(*args: object, **kwargs: object) -> torch.Tensor:
        calls["n"] += 1
        loss = real(*args, **kwargs)  # type: ignore[arg-type]
        return loss * float("nan") if calls["n"] >= 5 else loss

    monkeypatch.setattr(train_module, "diffusion_loss", poisoned)
    with pytest.raises(TrainingAborted) as err:
        train(tiny_config(kimg=2, batch_size=32), digits8)
    assert err.value.reason == "nan_loss"
    assert err.value.step <= 16


def test_loss_exploding_above_its_running_median_stops_the_run_as_diverged() -> None:
    losses = [0.1] * 100 + [5.0] * 10
    with pytest.raises(TrainingAborted, match="diverged"):
        train_module.check_losses(losses, 10.0, 110)
    train_module.check_losses([0.1] * 100 + [0.5] * 10, 10.0, 110)  # a bump is not divergence


def test_resume_from_checkpoint_equals_an_uninterrupted_run(digits8: ImageData, tmp_path: Path) -> None:
    cfg = tiny_config(kimg=3, batch_size=32, num_evals=3, dropout=0.1, hflip=True, p_uncond=0.2, lr=1e-3)
    full = train(cfg, digits8)

    def stop_at_second(point: EvalPoint, _ema: object) -> None:
        if point.index == 2:
            raise KeyboardInterrupt

    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(KeyboardInterrupt):
        train(cfg, digits8, on_eval=stop_at_second, checkpoint=ckpt)
    replayed: list[EvalPoint] = []
    resumed = train(cfg, digits8, on_eval=lambda p, _: replayed.append(p), checkpoint=ckpt)
    assert [(p.index, p.replayed) for p in replayed] == [(1, True), (2, True), (3, False)]
    for a, b in zip(full.model.net.state_dict().values(), resumed.model.net.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert [p.metrics for p in full.history] == [p.metrics for p in resumed.history]


def test_checkpoint_of_another_configuration_is_refused(digits8: ImageData, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt.pt"
    train(tiny_config(kimg=1, batch_size=32, num_evals=1), digits8, checkpoint=ckpt)
    with pytest.raises(ValueError, match="different configuration"):
        train(tiny_config(kimg=1, batch_size=32, num_evals=1, lr=1e-3), digits8, checkpoint=ckpt)


def test_a_checkpoint_resumes_on_another_gpu_of_the_pool_but_not_on_another_kind_of_device() -> None:
    """A retry or a rung's continuation is taken by whichever worker asks first: cuda:1 resumes what
    cuda:0 wrote (the checkpoint is loaded to the CPU first); a CPU run does not resume a GPU run's."""
    cfg = tiny_config(kimg=1, batch_size=32, num_evals=1)
    on = {device: to_plain(cfg.replace(device=device)) for device in ("cuda:0", "cuda:1", "cuda", "cpu")}
    assert same_run(on["cuda:0"], cfg.replace(device="cuda:1")) and same_run(on["cuda"], cfg.replace(device="cuda:0"))
    assert not same_run(on["cuda:0"], cfg.replace(device="cpu")) and not same_run(on["cpu"], cfg.replace(device="cuda"))
    assert not same_run(to_plain(cfg.replace(device="cuda:0", lr=2e-3)), cfg.replace(device="cuda:1"))


def test_batches_cover_each_epoch_once_and_are_stateless() -> None:
    first_epoch = torch.cat([batch_indices(10, 4, step, seed=3) for step in range(3)])[:10]
    assert sorted(first_epoch.tolist()) == list(range(10))
    assert torch.equal(batch_indices(10, 4, 7, seed=3), batch_indices(10, 4, 7, seed=3))


def test_ema_warms_up_so_short_runs_get_a_useful_average() -> None:
    cfg = tiny_config(batch_size=32, ema_halflife_kimg=10.0, ema_rampup=0.05)
    assert ema_beta(cfg, 320) <= 0.25  # 10 steps in: the EMA follows the weights closely
    assert ema_beta(cfg, 1_000_000) == pytest.approx(0.5 ** (32 / 10_000))


def test_sync_points_cover_every_step_once_with_finite_values(digits8: ImageData) -> None:
    cfg = tiny_config(kimg=1.6, batch_size=32, num_evals=2, warmup_kimg=0.32)
    synced: list[SyncPoint] = []
    train(cfg, digits8, on_sync=synced.append)
    steps = [s for p in synced for s in p.steps]
    assert steps == list(range(1, cfg.total_steps + 1))
    assert all(v > 0 for p in synced for v in p.losses + p.grad_norms + [p.images_per_second])
    lrs = [lr for p in synced for lr in p.lrs]
    assert lrs[0] == pytest.approx(cfg.lr * 32 / 320)  # warm-up
    assert lrs[-1] == pytest.approx(cfg.lr * cfg.lr_floor)  # then the default cosine decay to its floor


def test_progress_log_shows_only_synced_losses(digits8: ImageData, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="hpo.train"):
        train(tiny_config(kimg=1.6, batch_size=16, num_evals=2), digits8)
    lines = [r.getMessage() for r in caplog.records if "loss" in r.getMessage()]
    assert lines and not any("nan" in line.lower() for line in lines), lines


def test_should_stop_ends_the_run_at_once_and_writes_no_checkpoint_after(digits8: ImageData, tmp_path: Path) -> None:
    cfg = tiny_config(kimg=3, batch_size=32, num_evals=3)
    ckpt = tmp_path / "ckpt.pt"
    calls = {"n": 0}

    def stop_after_first_eval() -> bool:
        calls["n"] += 1
        return ckpt.exists()

    with pytest.raises(TrainingStopped) as err:
        train(cfg, digits8, should_stop=stop_after_first_eval, checkpoint=ckpt)
    assert err.value.step == cfg.eval_steps()[0]  # stopped at the first poll after the first save
    state = torch.load(ckpt, weights_only=True)
    assert state["step"] == cfg.eval_steps()[0]  # nothing saved after the stop


def test_may_save_is_asked_before_each_save_and_refusing_stops_the_run(digits8: ImageData, tmp_path: Path) -> None:
    cfg = tiny_config(kimg=3, batch_size=32, num_evals=3)
    ckpt = tmp_path / "ckpt.pt"
    asked: list[bool] = []

    def only_the_first_save() -> bool:
        asked.append(not ckpt.exists())
        return asked[-1]

    with pytest.raises(TrainingStopped) as err:
        train(cfg, digits8, may_save=only_the_first_save, checkpoint=ckpt)
    assert asked == [True, False]  # asked at save points only, not at every step
    assert err.value.step == cfg.eval_steps()[1]
    assert torch.load(ckpt, weights_only=True)["step"] == cfg.eval_steps()[0]


def test_a_deadline_ends_training_when_one_more_interval_as_long_as_the_last_would_pass_it() -> None:
    import time

    from hpo.run.ends import Deadline

    now = time.time()
    assert not Deadline(at=now + 10, last=now - 3)()  # 3 s intervals, 10 s left: one more fits
    assert Deadline(at=now + 2, last=now - 3)()  # 2 s left: the next 3 s interval would pass it


def test_doubling_evaluation_points_fall_at_halvings_of_the_budget_back_from_its_end(digits8: ImageData) -> None:
    cfg = tiny_config(kimg=2.048, batch_size=32, num_evals=5, eval_spacing="doubling")
    seen: list[EvalPoint] = []
    train(cfg, digits8, on_eval=lambda p, _: seen.append(p))
    assert cfg.eval_fractions() == (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1)
    assert [p.index for p in seen] == [1, 2, 3, 4, 5]  # the pruners read the index, as with even points
    assert [p.step for p in seen] == cfg.eval_steps() == [4, 8, 16, 32, 64]


def test_a_checkpoint_written_before_eval_spacing_existed_still_resumes(digits8: ImageData, tmp_path: Path) -> None:
    cfg, ckpt = tiny_config(kimg=1.6, batch_size=32, num_evals=2), tmp_path / "ckpt.pt"
    with pytest.raises(TrainingStopped):  # stopped after its first point's checkpoint
        train(cfg, digits8, checkpoint=ckpt, should_stop=ckpt.exists)
    state = torch.load(ckpt, weights_only=True)
    del state["config"]["eval_spacing"]  # as a worker before the upgrade wrote it
    torch.save(state, ckpt)
    resumed = train(cfg, digits8, checkpoint=ckpt)
    assert resumed.eval_points == 1 and [p.index for p in resumed.history] == [1, 2]  # resumed, not restarted
    with pytest.raises(ValueError, match="different configuration"):
        train(cfg.replace(eval_spacing="doubling"), digits8, checkpoint=ckpt)  # a doubling run is another run


def test_end_early_ends_the_run_at_an_evaluation_point_with_its_checkpoint_and_weights_for_good(
    digits8: ImageData, tmp_path: Path
) -> None:
    cfg = tiny_config(kimg=3, batch_size=32, num_evals=3)
    ckpt = tmp_path / "ckpt.pt"
    asked: list[int] = []

    def after_the_second_point() -> bool:
        asked.append(torch.load(ckpt, weights_only=True)["step"])
        return len(asked) == 2

    result = train(cfg, digits8, end_early=after_the_second_point, checkpoint=ckpt)
    assert asked == list(cfg.eval_steps()[:2])  # asked once per point, after its save; never after the last
    assert result.steps == cfg.eval_steps()[1] and [p.index for p in result.history] == [1, 2]
    assert torch.load(ckpt, weights_only=True)["step"] == result.steps
    again = train(cfg, digits8, checkpoint=ckpt)  # stopped after it ended (in its sweep, say), then resumed
    assert again.steps == result.steps and [p.index for p in again.history] == [1, 2]  # it stays ended there


def test_the_seconds_of_the_evaluation_points_are_counted_apart_from_training(
    digits8: ImageData, tmp_path: Path
) -> None:
    cfg, ckpt = tiny_config(kimg=1.6, batch_size=32, num_evals=2), tmp_path / "ckpt.pt"
    whole = train(cfg, digits8, on_eval=lambda p, _: time.sleep(0.25))
    assert whole.eval_points == 2 and 0.5 <= whole.eval_seconds < whole.seconds
    with pytest.raises(TrainingStopped):  # stopped after its first point's checkpoint
        train(cfg, digits8, on_eval=lambda p, _: time.sleep(0.25), checkpoint=ckpt, should_stop=ckpt.exists)
    resumed = train(cfg, digits8, on_eval=lambda p, _: time.sleep(0.25), checkpoint=ckpt)
    assert resumed.eval_points == 1  # the replayed point is not counted again: this call ran one
    assert 0.25 <= resumed.eval_seconds < resumed.seconds


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_a_decaying_lr_schedule_reaches_its_floor_at_the_budgets_last_step(schedule: str) -> None:
    from hpo.training.trainer import lr_at

    cfg = tiny_config(kimg=3.2, batch_size=32, lr=1e-3, lr_schedule=schedule, lr_floor=0.1, warmup_kimg=0.32)
    lrs = [lr_at(cfg, s) for s in range(cfg.total_steps)]
    assert lrs[0] == pytest.approx(1e-3 * 32 / 320)  # warm-up first: step 0 is 1/10 of the way
    assert max(lrs) <= 1e-3
    assert lrs[-1] == pytest.approx(1e-4)
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(lrs[10:]))  # monotone after warm-up
    middle = lrs[cfg.total_steps // 2]
    assert middle == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5), rel=0.02)  # both schedules pass half-way at the midpoint
    constant = [lr_at(cfg.replace(lr_schedule="constant"), s) for s in range(cfg.total_steps)]
    assert constant[-1] == 1e-3 == constant[50]


def test_every_evaluation_point_carries_the_generalisation_gap(digits8: ImageData) -> None:
    seen: list[EvalPoint] = []
    train(tiny_config(kimg=1.6, batch_size=32, num_evals=2), digits8, on_eval=lambda p, _: seen.append(p))
    for p in seen:
        assert p.metrics["train_rel"] > 0
        assert p.metrics["gap"] == pytest.approx(p.metrics["val_rel"] / p.metrics["train_rel"])
