"""The width ladder: `hpo confirm --widths` trains the study's top configurations over an lr grid at
each width, and reads whether the lr optimum holds or drifts with width and whether the study's
ranking carries over — on planted grids, and end to end through a worker process."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pytest

from hpo.commands.confirm import parse_widths
from hpo.companions.widths import create as create_width_companion
from hpo.companions.widths import lr_grid, width_verdict, widths_of
from hpo.errors import HpoError
from hpo.records import WIDTHS
from hpo.service.space import suggest
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, require_spec
from hpo.spec.loading import load_spec
from tests.service_helpers import write_spec
from tests.study_builders import add, random_params


def planted(tmp_path: Path, alpha: float, *, second_wins_at_width: bool = False) -> tuple[optuna.Study, optuna.Study]:
    """A source study (#1 the winner, #2 second, #0 baseline) whose width ladder (widths 8/16/32, 5 lrs,
    2 seeds) scores (log lr − log lr_opt)² + the configuration's offset, lr_opt = lr × (width/8)^alpha."""
    spec = load_spec(write_spec(tmp_path, "s.yaml", study={"name": "src", "n_trials": 9}))
    store = open_storage(f"sqlite:///{tmp_path / 'hpo.db'}")
    source, _ = create_or_resume(spec, store)
    rng = np.random.default_rng(5)
    for i, value in enumerate([8.0, 6.0, 7.0]):
        add(source, {**random_params(rng), "lr": 1e-3}, value=value, curve=[1.0] * 2, baseline=i == 0)
    companion = create_width_companion(source, store, top=2, seeds=2, factors=[1, 2, 4], lrs=5)
    offsets = {1: 1.0, 2: 1.5, 0: 3.0}
    search = require_spec(companion).search
    for _ in range(companion_size(companion)):
        trial = companion.ask()
        params = suggest(trial, search)  # the enqueued width, lr and seed, as a worker reads them
        number, width, lr, seed = trial.user_attrs["confirm_of"], params["base_channels"], params["lr"], params["seed"]
        assert isinstance(width, int) and isinstance(lr, float) and isinstance(seed, int)
        offset = offsets[number]
        if second_wins_at_width and number == 2 and width == 32:
            offset = 0.2
        seed_noise = 0.01 * (1 if seed % 2 else -1)
        optimum = 1e-3 * (width / 8) ** alpha
        companion.tell(trial, math.log(lr / optimum) ** 2 + offset + seed_noise)
    return source, companion


def companion_size(companion: optuna.Study) -> int:
    return sum(1 for t in companion.get_trials() if t.state.name == "WAITING")


def test_an_lr_optimum_that_stays_put_across_widths_is_said_to_transfer(tmp_path: Path) -> None:
    ladder = width_verdict(*planted(tmp_path, alpha=0.0))
    assert [c.trial for c in ladder.transfers] == [1, 2, 0]  # the study's order
    winner = ladder.transfers[0]
    assert winner.result is not None and winner.result.state == "holds"
    assert [o.width for o in winner.result.optima] == [8, 16, 32]
    assert all(o.lr == pytest.approx(1e-3, rel=0.05) for o in winner.result.optima)
    assert ladder.summary.startswith("Trial 1: the lr transfers")
    assert [r.state for r in ladder.widths] == ["holds"] * 3
    assert ladder.finished == ladder.expected == 90  # 3 configurations × 3 widths × 5 lrs × 2 seeds


def test_an_lr_optimum_that_falls_with_width_is_fitted_and_the_rule_given(tmp_path: Path) -> None:
    ladder = width_verdict(*planted(tmp_path, alpha=-0.5))
    result = ladder.transfers[0].result
    assert result is not None and result.state == "drifts"
    assert result.alpha == pytest.approx(-0.5, abs=0.1)
    assert "drifts as width^-0.5" in ladder.summary and "× 0.5" in ladder.summary


def test_an_optimum_that_leaves_the_lr_grid_is_not_placed_and_says_where(tmp_path: Path) -> None:
    ladder = width_verdict(*planted(tmp_path, alpha=-1.0))  # width 32's optimum, 2.5e-4, is the grid's lowest lr
    assert "not placed" in ladder.summary and "width 32 at the low end" in ladder.summary


def test_a_ranking_that_flips_at_a_wider_network_is_named(tmp_path: Path) -> None:
    ladder = width_verdict(*planted(tmp_path, alpha=0.0, second_wins_at_width=True))
    assert [r.state for r in ladder.widths] == ["holds", "holds", "flips"]
    assert "the ranking does not carry over: at 4× the width, trial 2" in ladder.summary


def test_an_unfinished_ladder_says_how_far_it_is(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path, "s.yaml", study={"name": "src", "n_trials": 9}))
    store = open_storage(f"sqlite:///{tmp_path / 'hpo.db'}")
    source, _ = create_or_resume(spec, store)
    add(source, {**random_params(np.random.default_rng(0)), "lr": 1e-3}, value=5.0, curve=[1.0])
    companion = create_width_companion(source, store, top=1, seeds=1, factors=[1, 2], lrs=3)
    trial = companion.ask()
    suggest(trial, require_spec(companion).search)
    companion.tell(trial, 4.0)
    ladder = width_verdict(source, companion)
    assert ladder.summary == "The width ladder is not finished: 1 of 6 runs finished"
    assert companion.user_attrs[WIDTHS] == {"factors": [1, 2], "lrs": 3}


@pytest.mark.parametrize("text", ["", "1", "0,1", "1,x", "1,32"])
def test_bad_widths_are_one_line_naming_the_fix(text: str) -> None:
    with pytest.raises(HpoError, match=r"expected two or more multiples of the study's base channels.*e\.g\. 0\.5,1,2"):
        parse_widths(text)
    assert parse_widths("2,0.5,1") == [0.5, 1.0, 2.0]


def test_widths_and_lr_grid_are_what_the_ladder_trains() -> None:
    assert widths_of(32, [0.25, 0.5, 1, 2]) == [8, 16, 32, 64]
    assert lr_grid(1e-3, 5) == [0.00025, 0.0005, 0.001, 0.002, 0.004]
    with pytest.raises(HpoError, match="some twice"):
        widths_of(8, [0.25, 0.5])
