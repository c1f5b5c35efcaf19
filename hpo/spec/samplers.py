"""What the spec knows of each sampler and timestep spacing, in one table each: the names a spec
may give, the words a person reads, what a step costs, the fewest steps each is trusted at and why.

The doctor (the fewest steps), planning (the comment ``hpo init`` writes beside its choice), the
sampling combinations (evaluations, η) and analysis (which columns differ from the default) read
these tables; the functions that take the steps live in :mod:`hpo.diffusion.sampler` under the
same names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SamplerName = Literal["ddim", "dpmpp_2m", "heun"]  # hpo.diffusion.sampler.SAMPLERS: the functions, same names
Spacing = Literal["trailing", "karras"]  # hpo.diffusion.sampler.SPACINGS: the timesteps a sampler visits
DEFAULT_SAMPLER: SamplerName = "ddim"
DEFAULT_SPACING: Spacing = "trailing"


@dataclass(frozen=True)
class SamplerFacts:
    name: SamplerName
    words: str  # what a person reads, e.g. "DPM-Solver++(2M)"
    stochastic: bool  # whether η > 0 means anything (else η must be 0)
    per_step: int  # network evaluations per step (before guidance doubles them); the last step takes one
    fewest_steps: int  # below this the doctor warns ...
    few_steps_why: str  # ... saying this
    why: str  # the comment ``hpo init`` writes beside it

    def evaluations(self, steps: int) -> int:
        """Network evaluations of ``steps`` steps, unguided: Heun's last step is Euler's, one evaluation."""
        return self.per_step * steps - (self.per_step - 1)


# The fewest steps: DDIM's FID 13.4 at 10 steps vs 4.2 at 100 on CIFAR-10 (Song et al. 2021, Table 1).
# DPM-Solver++(2M) and Heun: 5 is the fewest benchmarks/sampler_frontier.py measured (at 5 on the
# Karras spacing DPM-Solver++ was best on 3 of 18 trained models); Heun on that spacing broke at 3
# guided steps on all 18 (FID∞ 1 581-3 092, docs/spec.md).
SAMPLER_TABLE: tuple[SamplerFacts, ...] = (
    SamplerFacts(
        "ddim", "DDIM", True, 1, 10,
        "below 10 steps DDIM quality drops sharply (FID 13.4 at 10 vs 4.2 at 100 on CIFAR-10)",
        "DDIM: few-step solvers are benchmarked on small models only (docs/benchmarks.md)",
    ),
    SamplerFacts(
        "dpmpp_2m", "DPM-Solver++(2M)", False, 1, 5,
        "below 5 steps DPM-Solver++ was never benchmarked here (docs/benchmarks.md)",
        "DPM-Solver++(2M): within 20 evaluations it beat DDIM's best within 60 on 13 of 18 small models",
    ),
    SamplerFacts(
        "heun", "Heun (EDM)", False, 2, 5,
        "below 5 steps Heun on the Karras spacing broke at guidance on all 18 benchmark models (docs/spec.md)",
        "Heun (EDM): two evaluations a step; within 20 it beat DDIM on 13 of 18 small models and lost on 3",
    ),
)  # fmt: skip
SAMPLERS: dict[str, SamplerFacts] = {s.name: s for s in SAMPLER_TABLE}
SAMPLER_NAMES: tuple[SamplerName, ...] = tuple(s.name for s in SAMPLER_TABLE)


@dataclass(frozen=True)
class SpacingFacts:
    name: Spacing
    words: str  # after "10 DPM-Solver++(2M) steps", e.g. " on the Karras σ spacing (ρ = 7)"; "" for trailing
    why: str  # the comment ``hpo init`` writes beside it


SPACING_TABLE: tuple[SpacingFacts, ...] = (
    SpacingFacts("trailing", "", "trailing timesteps (Lin et al. 2024): evenly spaced in t from t = T − 1"),
    SpacingFacts(
        "karras", " on the Karras σ spacing (ρ = 7)",
        "Karras et al.'s σ spacing (ρ = 7, EDM's): better than trailing for DPM-Solver++ on 10 of 18, worse on 1",
    ),
)  # fmt: skip
SPACINGS: dict[str, SpacingFacts] = {s.name: s for s in SPACING_TABLE}
SPACING_NAMES: tuple[Spacing, ...] = tuple(s.name for s in SPACING_TABLE)


def sampler_facts(name: str) -> SamplerFacts:
    """The table's row for ``name``; an unknown name fails loudly with the known ones."""
    if name not in SAMPLERS:
        raise KeyError(f"unknown sampler {name!r}; expected one of {', '.join(SAMPLER_NAMES)}")
    return SAMPLERS[name]


def spacing_facts(name: str) -> SpacingFacts:
    if name not in SPACINGS:
        raise KeyError(f"unknown spacing {name!r}; expected one of {', '.join(SPACING_NAMES)}")
    return SPACINGS[name]
