"""Confirmation: does the winner of short runs still win at full length?

The top K configurations of a study and its baseline are retrained with S fresh seeds each, as the
trials of a companion study on the same storage (so the same workers serve them and a crash is
retried like any trial). The verdict (:mod:`hpo.analysis.confirmation`) compares each
configuration's mean over seeds, with its spread, and says whether the winner holds, or which
configurations are tied.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.storages import RDBStorage

from hpo.analysis.confirmation import NOT_RANKED, Confirmed, Verdict, confirmation_verdict
from hpo.companions.base import (
    Request,
    companion_name,
    confirmed_results,
    create_companion,
    finished_count,
    pick_configurations,
    seed_choices,
)
from hpo.companions.blocks import Block, NextStep, Paragraph, Table
from hpo.files import JsonObject
from hpo.records import CONFIRMED_BY, FloorRecord, StudyRecord, companion_attrs
from hpo.service.study import require_spec
from hpo.spec.params import candidates


def create(
    study: optuna.Study,
    storage: RDBStorage,
    request: Request,
    *,
    train: JsonObject,
    name: str,
    pointer: str,
    attrs: JsonObject | None = None,
) -> optuna.Study:
    """A companion with one trial per (configuration, seed), or the existing one, trained with
    ``train`` settings and carrying ``attrs``; the source study's ``pointer`` attribute names it. The
    budget ladder is the same study trained longer (:mod:`hpo.companions.ladder`)."""
    configs = pick_configurations(study, request.top)
    seed_values = seed_choices(request.seeds)
    runs = (
        ({**{k: v for k, v in trial.params.items() if k != "kimg"}, "seed": seed}, companion_attrs(trial, watch=True))
        for trial in configs
        for seed in seed_values
    )
    return create_companion(
        study, storage, name=name, what="confirmation", n_trials=len(configs) * request.seeds, train=train,
        search={"seed": seed_values}, attrs=attrs or {}, runs=runs, pointer=pointer,
    )  # fmt: skip


def verdict(source: optuna.Study, companion: optuna.Study) -> Verdict:
    spec, own = require_spec(companion), require_spec(source)
    seeds = len(candidates(spec.search["seed"])) if "seed" in spec.search else 1
    ratio = spec.train.kimg / own.train.kimg
    return confirmation_verdict(
        confirmed_results(source, companion), ratio=ratio, seeds=seeds, finished=finished_count(companion)
    )


def configuration_json(c: Confirmed) -> JsonObject:
    return {
        "trial": c.trial, "baseline": c.baseline, "study_value": c.study_value, "values": c.values,
        "mean": c.mean if c.values else None, "spread": c.spread if len(c.values) > 1 else None,
    }  # fmt: skip


@dataclass(frozen=True)
class ConfirmReading:
    verdict: Verdict
    metric: str
    floor: FloorRecord | None  # where real held-out images land on the same score

    def json(self) -> JsonObject:
        v = self.verdict
        return {
            "budget_ratio": v.budget_ratio, "seeds": v.seeds, "finished": v.finished, "expected": v.expected,
            "configurations": [configuration_json(c) for c in v.configs], "rank_correlation": v.rank_correlation,
            "verdict": v.text, "floor": self.floor.as_dict() if self.floor is not None else None,
        }  # fmt: skip

    def blocks(self) -> list[Block]:
        v = self.verdict
        rows = [
            [c.label, f"{c.study_value:.4g}", f"{c.mean:.4g} ± {c.spread:.2g}" if c.values else "—", str(len(c.values))]
            for c in v.configs
        ]
        rho = f"{v.rank_correlation:.2f}" if v.rank_correlation is not None else NOT_RANKED
        blocks: list[Block] = [
            Paragraph(v.text, "lead"),
            Table(["configuration", f"study {self.metric}", f"confirmed {self.metric} (mean ± sd)", "seeds"], rows),
            Paragraph(
                f"{v.finished} of {v.expected} runs finished at {v.budget_ratio:g}× the study's budget; rank "
                f"correlation of study and confirmed order: {rho}.",
                "note",
            ),
        ]
        if self.floor is not None:
            blocks.append(Paragraph(f"Real held-out images score {self.floor.score:.4g} (the floor).", "note"))
        return blocks


@dataclass(frozen=True)
class ConfirmKind:
    name: str = "confirm"
    pointer: str = CONFIRMED_BY
    heading: str = "Confirmed at full length?"

    def create(self, source: optuna.Study, storage: RDBStorage, request: Request) -> optuna.Study:
        kimg = request.kimg if request.kimg is not None else require_spec(source).train.kimg
        name = companion_name(source.study_name, self.name)
        return create(source, storage, request, train={"kimg": kimg}, name=name, pointer=self.pointer)

    def plan_text(self, request: Request) -> str:
        return ""

    def flags(self, request: Request) -> str:
        return ""

    def read(self, source: optuna.Study, companion: optuna.Study, metric: str) -> ConfirmReading:
        floor = StudyRecord.of(companion).floor or StudyRecord.of(source).floor
        return ConfirmReading(verdict(source, companion), metric, floor)

    def absent(self, study_name: str) -> list[Block]:
        return [
            Paragraph("Not confirmed yet: the ranking above comes from shortened runs."),
            NextStep(f"hpo confirm {study_name}", "retrain the top configurations with fresh seeds"),
        ]


CONFIRM = ConfirmKind()
