"""Where an export came from (``sampling.json``'s provenance): one typed payload that ``hpo export``,
``hpo run`` and the benchmarks write and ``hpo sample`` reads back."""

from __future__ import annotations

from dataclasses import dataclass

from hpo.records.payload import Payload


@dataclass(frozen=True)
class Provenance(Payload):
    """The study and trial an export's weights were trained as, its score and the score's name; with
    ``--max-nfe`` the budget and what it cost, and for ``hpo run`` the run's folder."""

    study: str
    trial: int  # -1: not a trial of a study (a benchmark's `hpo train` run)
    value: float | None  # the score of the exported sampling combination
    metric_name: str
    max_nfe: int | None = None  # hpo export --max-nfe
    budget: str | None = None  # what the --max-nfe budget cost against the unconstrained best
    run: str | None = None  # hpo run's folder
