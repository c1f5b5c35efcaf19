"""The warmup-stable-decay schedule: a short run's stable phase is the prefix of a longer one, which
continues it bit for bit; the cooldown can start early and a resumed run follows it exactly."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from hpo.errors import ConfigError
from hpo.spec.config import TrainConfig
from hpo.spec.loading import load_spec
from hpo.training.data import ImageData
from hpo.training.lr import cooldown_start, cooldown_steps, end_step, lr_at
from hpo.training.trainer import EvalPoint, TrainingStopped, train
from tests.conftest import tiny_config
from tests.service_helpers import write_spec

LR = 1e-3
# 100 steps of 32 images; a stochastic network and batches, so every RNG stream has to line up
LONG = dict(kimg=3.2, batch_size=32, lr=LR, lr_schedule="wsd", num_evals=4, warmup_kimg=0.32, dropout=0.1)
LONG |= dict(hflip=True, p_uncond=0.2, ema_profiles=(0.05, 0.10), ema_halflife_kimg=0.2)
SHORT = dict(kimg=1.6, num_evals=2, ema_snapshots=4)  # 50 steps, its cooldown from step 40


def wsd(**changes: Any) -> TrainConfig:
    return tiny_config(**{**LONG, **changes})


def saved(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, weights_only=True)
    return state


def assert_same_tensors(a: Any, b: Any) -> None:
    """Every tensor of two nested states is equal, bit for bit; every other value is equal."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_tensors(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same_tensors(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


def assert_same_training(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in ("model", "ema", "power_emas", "optimizer", "step", "losses", "rng"):
        assert_same_tensors(a[key], b[key])


def test_wsd_lr_is_flat_after_warm_up_then_cools_down_as_one_minus_sqrt_to_its_floor() -> None:
    cfg = wsd(lr_floor=0.1, cooldown_share=0.2)
    assert (cfg.total_steps, cooldown_steps(cfg), cooldown_start(cfg), end_step(cfg)) == (100, 20, 80, 100)
    lrs = [lr_at(cfg, s) for s in range(cfg.total_steps)]
    assert lrs[0] == pytest.approx(LR / 10)  # warm-up: 32 of 320 images
    assert lrs[9:80] == [LR] * 71  # flat: every state up to step 80 is a prefix of a longer run
    cooldown = lrs[80:]
    assert cooldown[0] == pytest.approx(LR * (0.1 + 0.9 * (1 - math.sqrt(1 / 20))))
    assert cooldown[4] == pytest.approx(LR * (0.1 + 0.9 * (1 - math.sqrt(5 / 20))))
    assert cooldown[-1] == pytest.approx(LR * 0.1)  # the floor at the budget's last step
    assert all(a > b for a, b in itertools.pairwise(cooldown))


def test_an_early_cooldown_keeps_its_length_and_moves_the_runs_end() -> None:
    cfg = wsd()
    moved = [lr_at(cfg, s, cooldown_from=40) for s in range(cfg.total_steps)]
    assert moved[9:40] == [LR] * 31 and moved[40] < LR
    assert moved[40:60] == [lr_at(cfg, s) for s in range(80, 100)]  # the same 20 steps, 40 earlier
    assert moved[59] == pytest.approx(LR * cfg.lr_floor) and end_step(cfg, 40) == 60
    assert end_step(cfg.replace(lr_schedule="cosine"), 40) == 100  # the other schedules have no cooldown


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5])
def test_a_cooldown_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(ConfigError, match="cooldown_share"):
        wsd(cooldown_share=share)


def test_wsd_and_its_cooldown_share_are_set_like_any_train_field(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path), ["train.lr_schedule=wsd", "train.cooldown_share=0.3"], check_data=False)
    assert (spec.train.lr_schedule, spec.train.cooldown_share) == ("wsd", 0.3)
    searched = {"cooldown_share": {"type": "float", "low": 0.1, "high": 0.3}}
    assert "cooldown_share" in load_spec(write_spec(tmp_path, search=searched), check_data=False).search
    with pytest.raises(ConfigError, match="cooldown_share"):
        load_spec(write_spec(tmp_path), ["train.cooldown_share=0"], check_data=False)


@pytest.fixture(scope="module")
def short_run(digits8: ImageData, tmp_path_factory: pytest.TempPathFactory) -> tuple[TrainConfig, Path, Path]:
    """The short run of the long configuration: (its config, its branch state, its final checkpoint)."""
    folder = tmp_path_factory.mktemp("short")
    cfg, branch, ckpt = wsd(**SHORT), folder / "branch.pt", folder / "ckpt.pt"
    train(cfg, digits8, branch=branch, checkpoint=ckpt, snapshot_dir=folder / "snapshots")
    return cfg, branch, ckpt


def test_a_continued_lineage_is_bit_for_bit_the_long_run(
    digits8: ImageData, short_run: tuple[TrainConfig, Path, Path], tmp_path: Path
) -> None:
    """Run A (long, from scratch) and run C (long, continuing the short run B's branch at step 40)
    end with the same weights, EMA, power EMAs, optimizer, losses and RNG, and measure the same
    metrics at the evaluation points after the branch. Evaluation uses its own noise generator and
    the EMA in eval mode, so B's evaluation points at steps 25 and 50 take nothing from training."""
    short, branch, _ = short_run
    assert saved(branch)["step"] == cooldown_start(short) == 40
    a_ckpt, c_ckpt = tmp_path / "a.pt", tmp_path / "c.pt"
    a = train(wsd(), digits8, checkpoint=a_ckpt, snapshot_dir=tmp_path / "a")
    c = train(wsd(), digits8, checkpoint=c_ckpt, snapshot_dir=tmp_path / "c", continue_from=branch)
    assert (a.continued_from_step, c.continued_from_step) == (None, 40)
    assert c.steps == a.steps == 100
    assert_same_training(saved(a_ckpt), saved(c_ckpt))
    assert [p.index for p in c.history] == [2, 3, 4]  # the point at step 25 was the short run's
    assert [p.metrics for p in c.history] == [p.metrics for p in a.history[1:]]
    assert saved(c_ckpt)["continued_from"] == 40  # a resumed continuation still says so


def test_continuing_refuses_another_configuration_in_one_line_naming_its_fields(
    digits8: ImageData, short_run: tuple[TrainConfig, Path, Path]
) -> None:
    _, branch, _ = short_run
    with pytest.raises(ValueError, match=r"differs in lr: only the budget fields") as err:
        train(wsd(lr=2e-3), digits8, continue_from=branch, snapshot_dir=Path("s"))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"differs in lr, warmup_kimg:"):
        train(wsd(lr=2e-3, warmup_kimg=0.64), digits8, continue_from=branch, snapshot_dir=Path("s"))


def test_continuing_refuses_a_state_past_its_cooldown_start(
    digits8: ImageData, short_run: tuple[TrainConfig, Path, Path]
) -> None:
    _, _, finished = short_run  # the short run's checkpoint at its end, step 50: cooled down since 40
    with pytest.raises(ValueError, match=r"past its run.s cooldown start \(step 40\): it is not a stable-phase state"):
        train(wsd(), digits8, continue_from=finished, snapshot_dir=Path("s"))


def test_a_run_continues_only_a_shorter_runs_stable_phase(
    digits8: ImageData, short_run: tuple[TrainConfig, Path, Path]
) -> None:
    _, branch, _ = short_run  # step 40; a 1.28 kimg run cools down from step 32
    with pytest.raises(ValueError, match="past this run's cooldown start"):
        train(wsd(kimg=1.28), digits8, continue_from=branch, snapshot_dir=Path("s"))


class CoolAtFourthSync:
    """A ``cool_when`` that starts the cooldown at the fourth sync of the stable phase (step 32)."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []

    def __call__(self, step: int, steps: int) -> bool:
        self.asked.append((step, steps))
        return len(self.asked) == 4


def saved_cooldown(cool: CoolAtFourthSync, ckpt: Path) -> bool:
    return len(cool.asked) == 4 and saved(ckpt)["cooldown_from"] is not None


def never_asked(step: int, steps: int) -> bool:
    raise AssertionError("cool_when was asked in the cooldown")


@pytest.mark.parametrize("killed", ["as the cooldown starts", "at an evaluation point in the cooldown"])
def test_a_run_killed_in_an_early_cooldown_resumes_to_the_uninterrupted_runs_weights(
    digits8: ImageData, tmp_path: Path, killed: str
) -> None:
    cfg = wsd(ema_profiles=())
    whole, cool = tmp_path / "whole.pt", CoolAtFourthSync()
    uninterrupted = train(cfg, digits8, checkpoint=whole, cool_when=cool)
    assert cool.asked == [(8, 20), (16, 20), (24, 20), (32, 20)]  # the step and the cooldown's length, then no more
    assert uninterrupted.steps == 32 + 20  # the cooldown from step 32, as long as planned
    assert [(p.index, p.step) for p in uninterrupted.history] == [(1, 25), (2, 50), (3, 52)]  # and its end

    ckpt, cool = tmp_path / "ckpt.pt", CoolAtFourthSync()

    def in_the_cooldown(point: EvalPoint, _: object) -> None:
        if point.step == 50:
            raise KeyboardInterrupt

    with pytest.raises((TrainingStopped, KeyboardInterrupt)):
        if killed == "as the cooldown starts":  # at the first poll after its save: the checkpoint of step 32 is all
            train(cfg, digits8, checkpoint=ckpt, cool_when=cool, should_stop=lambda: saved_cooldown(cool, ckpt))
        else:
            train(cfg, digits8, checkpoint=ckpt, cool_when=cool, on_eval=in_the_cooldown)
    assert saved(ckpt)["cooldown_from"] == 32
    resumed = train(cfg, digits8, checkpoint=ckpt, cool_when=never_asked)
    assert resumed.steps == 52 and [p.step for p in resumed.history] == [25, 50, 52]
    assert_same_training(saved(whole), saved(ckpt))


def test_a_checkpoint_written_before_the_cooldown_fields_existed_still_resumes(
    digits8: ImageData, tmp_path: Path
) -> None:
    cfg, ckpt = tiny_config(kimg=1.6, batch_size=32, num_evals=2), tmp_path / "ckpt.pt"
    with pytest.raises(TrainingStopped):  # stopped after its first point's checkpoint
        train(cfg, digits8, checkpoint=ckpt, should_stop=ckpt.exists)
    state = saved(ckpt)
    del state["config"]["cooldown_share"], state["cooldown_from"], state["continued_from"]  # as written before
    torch.save(state, ckpt)
    resumed = train(cfg, digits8, checkpoint=ckpt)
    assert resumed.eval_points == 1 and [p.index for p in resumed.history] == [1, 2]  # resumed, not restarted
    assert resumed.continued_from_step is None


def test_the_wsd_only_arguments_are_refused_for_another_schedule(digits8: ImageData, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="branch, cool_when need lr_schedule wsd, got 'cosine'"):
        train(tiny_config(), digits8, branch=tmp_path / "b.pt", cool_when=lambda step, n: False)
