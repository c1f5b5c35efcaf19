"""The companions' verdicts as pure functions of typed rows (``hpo.analysis.confirmation`` and
``budget_ladder``): planted seed values where the winner holds, is tied, or is beaten beyond the noise,
and a ladder whose order flips at a longer budget."""

from __future__ import annotations

from hpo.analysis.budget_ladder import ladder_budget, ladder_summary
from hpo.analysis.confirmation import (
    NOT_RANKED,
    Confirmed,
    agreement_state,
    confirmation_verdict,
    rank_correlation,
)

WINNER, SECOND, BASELINE = 1, 2, 3


def rows(winner: list[float], second: list[float], baseline: list[float] | None = None) -> list[Confirmed]:
    """The study's order: its winner (study value 5), its second (6), and its baseline (9) when given."""
    out = [Confirmed(WINNER, 5.0, False, winner), Confirmed(SECOND, 6.0, False, second)]
    return out + ([Confirmed(BASELINE, 9.0, True, baseline)] if baseline is not None else [])


def test_a_winner_beyond_twice_the_standard_error_holds_and_the_baseline_is_beaten_by_a_number() -> None:
    configs = rows([4.0, 4.2, 4.1], [6.0, 6.2, 6.1], baseline=[8.0, 8.2, 8.1])
    v = confirmation_verdict(configs, ratio=1.0, seeds=3, finished=9)
    assert agreement_state(configs) == "holds" and v.expected == 9
    assert v.text.startswith("The winner holds at 1× the budget: trial 1 (4.1 ± 0.1 over 3 seeds) beats every other")
    assert v.text.endswith("The best beats the baseline (trial 3, 8.1 ± 0.1 over 3 seeds) by 4.")
    assert v.rank_correlation == 1.0  # the study's order is the seeds' order


def test_means_closer_than_twice_the_standard_error_of_their_difference_are_tied() -> None:
    configs = rows([4.0, 5.0, 6.0], [4.5, 5.5, 6.5])  # difference 0.5, its standard error 0.82
    assert agreement_state(configs) == "tied"
    assert "trial 1 and trial 2 are tied" in confirmation_verdict(configs, ratio=4.0, seeds=3, finished=6).text


def test_a_second_beyond_the_noise_flips_the_order_and_a_ladder_says_at_which_budget() -> None:
    holds, flips = rows([4.0, 4.2, 4.1], [6.0, 6.2, 6.1]), rows([7.0, 7.2, 7.1], [5.0, 5.2, 5.1])
    assert agreement_state(flips) == "flips"
    text = confirmation_verdict(flips, ratio=4.0, seeds=3, finished=6).text
    assert text.startswith("The winner does not hold at 4× the budget: trial 2 (5.1 ± 0.1 over 3 seeds) beats trial 1")
    ladder = [ladder_budget(1, 0.8, holds), ladder_budget(4, 0.8, flips)]
    assert ladder_summary(ladder).startswith("The order flips at 4× the budget")
    assert ladder_summary([ladder_budget(1, 0.8, flips)]).startswith("At the study's own budget, fresh seeds reorder")


def test_fewer_than_three_scored_configurations_give_no_rank_correlation_and_one_is_pending() -> None:
    assert rank_correlation(rows([4.0], [6.0])) is None and NOT_RANKED.startswith("n/a (fewer than 3")
    only = [Confirmed(WINNER, 5.0, False, [4.0]), Confirmed(SECOND, 6.0, False, [])]
    assert agreement_state([c for c in only if c.values]) == "pending"
    v = confirmation_verdict(only, ratio=1.0, seeds=1, finished=1)
    assert v.text == "Only trial 1 has confirmation runs so far: 4 ± 0 over 1 seed at 1× the budget."
