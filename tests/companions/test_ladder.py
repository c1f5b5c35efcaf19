"""The budget ladder reads what planted curves say: the winner holds, the order flips at a longer
budget, or two configurations tie from some rung on; forecasts and stop verdicts per configuration;
and the real thing, end to end, through `hpo confirm --budgets` and a worker process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest

from hpo.commands.confirm import parse_budgets
from hpo.companions.ladder import ladder_verdict
from hpo.errors import HpoError
from hpo.records import FLOOR_ATTR, LADDER
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, require_spec
from hpo.spec.loading import load_spec
from tests.service_helpers import storage_of, study_report, write_spec
from tests.study_builders import add, create_companion, random_params

BUDGETS = [1, 2, 4, 8, 16]


def planted(
    tmp_path: Path, curves: dict[int, list[float]], *, target_kimg: float | None = None
) -> tuple[optuna.Study, optuna.Study]:
    """A source study (#1 the winner, #2 second, #0 the baseline) and its ladder, whose runs (3 seeds)
    carry the given score per evaluation point (one point per multiple of the budget) ± a little."""
    spec = load_spec(write_spec(tmp_path, "s.yaml", study={"name": "src", "n_trials": 9, "target_kimg": target_kimg}))
    source, _ = create_or_resume(spec, open_storage(f"sqlite:///{tmp_path / 'hpo.db'}"))
    rng = np.random.default_rng(3)
    for i, value in enumerate([8.0, 6.0, 7.0]):
        add(source, random_params(rng), value=value, curve=[1.0] * 4, baseline=i == 0)
    source.set_user_attr("fid_noise", {"sd": 0.05, "pairs": 3})
    companion = create_companion(source, storage_of(source), top=2, seeds=3, kimg=None, budgets=BUDGETS)
    companion.set_user_attr(FLOOR_ATTR, {"score": 0.5, "copy_pixels_high": 0.02, "copy_features_high": 0.03})
    base = spec.train.kimg
    runs: dict[int, int] = {}
    for _ in range(9):
        trial = companion.ask()
        number = trial.user_attrs["confirm_of"]
        runs[number] = runs.get(number, 0) + 1
        seed_offset = 0.02 * (runs[number] - 2)  # seeds differ a little: -0.02, 0, +0.02
        curve = {
            str(k + 1): {"kimg": base * (k + 1), "score": v + seed_offset, "copy_pixels_low": 0.0, "copy_pixels": 0.0}
            for k, v in enumerate(curves[trial.user_attrs["confirm_of"]])
        }
        trial.set_user_attr("curve", curve)
        companion.tell(trial, curve["16"]["score"])
    return source, companion


def power(a: float, b: float) -> list[float]:
    return [a + b * k**-0.7 for k in range(1, 17)]


def test_a_winner_that_stays_ahead_holds_to_the_last_rung(tmp_path: Path) -> None:
    source, companion = planted(tmp_path, {1: power(1.0, 4.0), 2: power(2.0, 4.0), 0: power(3.0, 5.0)})
    ladder = ladder_verdict(source, companion)
    assert companion.user_attrs[LADDER] == {"base_kimg": 0.8, "budgets": BUDGETS}  # the tiny spec: 0.8 kimg
    assert [r.state for r in ladder.budgets] == ["holds"] * 5
    assert ladder.summary == "The winner holds to 16× the budget."
    assert all(r.rank_correlation == pytest.approx(1.0) for r in ladder.budgets)
    assert ladder.stops[1].kind == "improving"  # still falling by more than the noise per doubling
    page = study_report(source, tmp_path / "r.html", artifact_dir=None).read_text()
    assert "Is it still learning at longer budgets?" in page and "The winner holds to 16× the budget." in page


def test_the_printed_verdict_and_the_report_section_are_one_presentation(tmp_path: Path) -> None:
    """``hpo confirm`` prints the blocks the report draws: the same header, the same cells, the same
    sentences; only the chart is the report's alone."""
    from hpo.companions.blocks import Chart, Paragraph, Table, blocks_text
    from hpo.companions.ladder import LADDER_KIND

    source, companion = planted(tmp_path, {1: power(1.0, 4.0), 2: power(2.0, 4.0), 0: power(3.0, 5.0)})
    metric = require_spec(source).score.metric_name
    blocks = LADDER_KIND.read(source, companion, metric).blocks()
    text = blocks_text(blocks)
    page = study_report(source, tmp_path / "r.html", artifact_dir=None).read_text()
    (grid,) = [b for b in blocks if isinstance(b, Table)]
    assert grid.header[:2] == ["configuration", f"study {metric}"] and grid.rows[0][2].count(" ± ") == 1
    for cell in [*grid.header, *grid.rows[0]]:
        assert cell in text and cell in page
    lead = next(b for b in blocks if isinstance(b, Paragraph) and b.style == "lead")
    assert text.startswith(lead.text) and lead.text in page
    assert any(isinstance(b, Chart) for b in blocks) and "against kimg" not in text


def test_an_order_that_flips_at_a_longer_budget_says_the_study_budget_is_too_short(tmp_path: Path) -> None:
    # #2 starts worse but keeps learning: it passes #1 by 8x
    source, companion = planted(tmp_path, {1: power(2.0, 1.0), 2: power(0.5, 4.0), 0: power(3.0, 5.0)})
    ladder = ladder_verdict(source, companion)
    states = [r.state for r in ladder.budgets]
    assert states[0] == "holds" and states[-1] == "flips", states
    assert "The order flips at" in ladder.summary and "raise train.kimg" in ladder.summary
    assert ladder.budgets[-1].rank_correlation is not None and ladder.budgets[-1].rank_correlation < 1.0


def test_two_configurations_that_converge_read_tied_from_the_rung_where_they_meet(tmp_path: Path) -> None:
    flat = [2.0 if k < 4 else 1.0 for k in range(1, 17)]
    other = [3.0 if k < 4 else 1.0 for k in range(1, 17)]
    source, companion = planted(tmp_path, {1: flat, 2: other, 0: power(3.0, 5.0)})
    ladder = ladder_verdict(source, companion)
    assert [r.state for r in ladder.budgets] == ["holds", "holds", "tied", "tied", "tied"]
    assert ladder.summary.startswith("From 4× the budget on, the winner is tied")
    assert ladder.stops[1].kind == "plateau" and ladder.stops[1].since_kimg == pytest.approx(3.2)


def test_the_forecast_at_the_target_budget_and_its_refusal_past_four_times_the_last_rung(tmp_path: Path) -> None:
    source, companion = planted(
        tmp_path, {1: power(1.0, 4.0), 2: power(2.0, 4.0), 0: power(3.0, 5.0)}, target_kimg=20.0
    )
    ladder = ladder_verdict(source, companion)
    f = ladder.forecasts[1]
    assert f.value is not None and f.value == pytest.approx(1.0 + 4.0 * 25**-0.7, abs=0.1)
    (tmp_path / "far").mkdir()
    far, _ = planted(tmp_path / "far", {1: power(1.0, 4.0), 2: power(2.0, 4.0), 0: power(3.0, 5.0)}, target_kimg=100)
    ladder = ladder_verdict(far, optuna.load_study(study_name="src-ladder", storage=storage_of(far)))
    assert ladder.forecasts[1].value is None and "over 4× past the last point" in ladder.forecasts[1].text


@pytest.mark.parametrize("text", ["", "0,4", "1,x", "1,128"])
def test_bad_budgets_are_one_line_naming_the_fix(text: str) -> None:
    with pytest.raises(HpoError, match=r"expected whole multiples of the study's budget from 1 to 64, e\.g\. 1,4,16"):
        parse_budgets(text)
    assert parse_budgets("16,1,4,4") == [1, 4, 16]


def test_the_request_names_its_kind_from_its_flags_and_the_registry_finds_it() -> None:
    from hpo.companions import KINDS, kind_for
    from hpo.companions.base import Request

    for request, name in (
        (Request(), "confirm"),
        (Request(budgets=[1, 4]), "ladder"),
        (Request(widths=[2.0]), "widths"),
    ):
        assert request.kind == name and kind_for(request).name == name
    assert {k.name for k in KINDS} == {"confirm", "ladder", "widths"}
