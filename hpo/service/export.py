"""The export format: a trained trial (or ``hpo run``'s final run) to take away as three files, the
EMA weights (``ema.safetensors``), a spec that retrains exactly it (``spec.yaml``) and its best
sampling settings with where they came from (``sampling.json``, its provenance a typed payload,
:class:`hpo.records.export.Provenance`); written by ``hpo export`` and ``hpo run``, read by ``hpo
sample`` and the benchmarks. Reading a trial needs no torch: it is imported where weights are read,
written and rebuilt into a network."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from hpo.analysis.frontier import BudgetPick, best_within, cheapest_text
from hpo.errors import HpoError
from hpo.files import JsonObject
from hpo.outputs import make_folder, write_output, writing
from hpo.records import StudyRecord, TrialRecord, params_of
from hpo.records.export import Provenance
from hpo.service.frontiers import study_frontiers
from hpo.service.names import artifact_file
from hpo.service.study import find_trial, require_spec
from hpo.service.trials import fail_reason
from hpo.spec.loading import load_spec, section, set_fixed
from hpo.spec.params import Params
from hpo.spec.sampling import SAMPLING_FIELDS, SamplingConfig
from hpo.spec.spec import Spec, spec_from_dict

if TYPE_CHECKING:
    import torch

    from hpo.diffusion.network import NetInfo
    from hpo.training.model import DiffusionModel


WEIGHTS, SPEC, SAMPLING = "ema.safetensors", "spec.yaml", "sampling.json"


@dataclass(frozen=True)
class Winner:
    """A trained trial: the spec that retrains it, how it samples best, and what its network was built for."""

    spec: Spec  # the study's spec with the trial's parameters as fixed settings; one sampling combination
    sampling: SamplingConfig  # the trial's best combination
    info: NetInfo  # channels, image size and classes the network was built for
    provenance: Provenance


def trial_winner(
    source: str, storage: str | None, artifacts: Path, *, what: str, max_nfe: int | None = None
) -> tuple[Winner, Path]:
    """``STUDY[:TRIAL]`` (the best complete trial without ``:TRIAL``) → the winner and its EMA
    weights in the artifact store (``torch.save`` of the network's state_dict). With ``max_nfe``: the
    best trial (or the named trial's best combination) within that many network evaluations per image,
    and the provenance says what the budget cost (``budget``); its value is that combination's, at the
    trial's own count."""
    study, trial = find_trial(source, storage, what=what)
    sampling, budget, value = TrialRecord.of(trial).sampling, None, trial.value
    if max_nfe is not None:
        trial, pick = within_budget(study, trial if ":" in source else None, max_nfe, what=what)
        sampling, budget, value = pick.point.sampling, pick.text, pick.point.value
    weights = checkpoint_of(study, trial, artifacts)
    if sampling is None:
        raise HpoError(f"trial {trial.number} of study {study.study_name!r} stored no sampling; pick another trial")
    stored = require_spec(study)
    spec = spec_from_dict(fixed_spec(stored, params_of(trial), sampling), file=f"study {study.study_name}")
    provenance = Provenance(
        study=study.study_name, trial=trial.number, value=value, metric_name=stored.score.metric_name,
        max_nfe=max_nfe if budget is not None else None, budget=budget,
    )  # fmt: skip
    return Winner(spec, sampling, network_info(study, spec), provenance), weights


def within_budget(
    study: optuna.Study, trial: FrozenTrial | None, max_nfe: int, *, what: str
) -> tuple[FrozenTrial, BudgetPick]:
    """The best (trial, combination) within ``max_nfe`` over the study's frontiers (only ``trial``'s
    when one was named): the trial, and the pick (its combination, value, and the sentence saying what
    the budget costs against the unconstrained best)."""
    frontiers = study_frontiers(study)
    if trial is not None:
        frontiers = {n: f for n, f in frontiers.items() if n == trial.number}
    pick = best_within(frontiers, max_nfe)
    if pick is None:
        raise HpoError(f"{what} --max-nfe {max_nfe}: {cheapest_text(frontiers, max_nfe)}")
    chosen = next(t for t in study.get_trials(deepcopy=False) if t.number == pick.trial)
    return chosen, pick


def checkpoint_of(study: optuna.Study, trial: FrozenTrial, artifacts: Path) -> Path:
    """The trial's EMA weights in the artifact store, or a one-line error saying why there are none."""
    name, which = study.study_name, f"trial {trial.number} of study {study.study_name!r}"
    if trial.state != TrialState.COMPLETE:
        why = f" ({reason})" if (reason := fail_reason(trial)) else ""
        raise HpoError(
            f"{which} is {trial.state.name.lower()}{why}: only complete trials keep their EMA weights; pick a "
            f"complete one (`hpo status {name}`), or give just {name} for the best"
        )
    ckpt = TrialRecord.of(trial).checkpoint
    if ckpt is None:
        raise HpoError(f"{which} stored no EMA checkpoint (no ema_checkpoint attribute); pick another trial")
    path = artifact_file(artifacts, ckpt)
    if not path.is_file():
        raise HpoError(
            f"{which}: its EMA weights are not in the artifact store {artifacts} (no {path}); pass --artifacts "
            "with the folder the workers wrote to"
        )
    return path


def fixed_spec(spec: Spec, params: Params, sampling: SamplingConfig) -> JsonObject:
    """The plain spec that trains exactly this trial: its parameters fixed, no search, no baselines,
    and the sampling section the one combination ``sampling``."""
    raw: JsonObject = spec.to_dict()
    for name, value in params.items():
        set_fixed(raw, name, value)
    kept = {k: v for k, v in section(raw, "sampling").items() if k not in SAMPLING_FIELDS}
    raw["sampling"] = {**kept, **sampling.as_dict()}
    raw["search"], raw["baselines"] = {}, []
    return raw


def network_info(study: optuna.Study, spec: Spec) -> NetInfo:
    """From the data summary the workers store on the study; studies without one load the data."""
    from hpo.training.data import load_data  # torch
    from hpo.training.model import info_for, net_info

    facts = StudyRecord.of(study).data
    if not facts:
        return net_info(spec.train, load_data(spec.data))
    return info_for(
        spec.train, channels=facts.channels, image_size=facts.image_size, num_classes=facts.classes,
    )  # fmt: skip


def write_export(out: Path, winner: Winner, state: Mapping[str, torch.Tensor], *, written_by: str) -> list[Path]:
    """The three files of an export in ``out`` (created): the weights as safetensors, the spec with a
    header saying who wrote it (``written_by``) and how to retrain it, the sampling settings."""
    from safetensors.torch import save_file  # torch

    make_folder(out)
    with writing(out / WEIGHTS) as tmp:
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp))
    head = f"# Written by {written_by}.\n# `hpo train {out / SPEC}` retrains it.\n"
    write_output(out / SPEC, head + yaml.safe_dump(winner.spec.to_dict(), sort_keys=False))
    write_output(out / SAMPLING, json.dumps(exported_settings(winner), indent=2) + "\n")
    return [out / WEIGHTS, out / SPEC, out / SAMPLING]


def exported_settings(winner: Winner) -> JsonObject:
    """``sampling.json``: the best sampling settings, provenance and the network's input description."""
    info = winner.info
    network = {"channels": info.channels, "image_size": info.image_size, "num_classes": info.num_classes}
    return {"sampling": winner.sampling.as_dict(), **winner.provenance.as_dict(), "network": network}


def read_export(folder: Path) -> tuple[Winner, dict[str, torch.Tensor]]:
    """An exported folder → the winner and its EMA weights (on the CPU)."""
    from safetensors.torch import load_file  # torch

    from hpo.diffusion.network import NetInfo

    missing = [f for f in (WEIGHTS, SPEC, SAMPLING) if not (folder / f).is_file()]
    if missing:
        raise HpoError(
            f"{folder}: not an hpo export (no {', '.join(missing)}); make one with `hpo export STUDY:TRIAL -o {folder}`"
        )
    try:
        settings = json.loads((folder / SAMPLING).read_text())
        info = NetInfo(**settings["network"])
        sampling = SamplingConfig.from_dict(settings["sampling"])
    except (ValueError, KeyError, TypeError, HpoError) as err:
        why = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        raise HpoError(f"{folder / SAMPLING}: not a sampling.json hpo writes ({why}); export again") from None
    provenance = Provenance.read(settings)
    if provenance is None:
        raise HpoError(f"{folder / SAMPLING}: no study, trial, value and metric_name as hpo writes them; export again")
    spec = load_spec(folder / SPEC, check_data=False)
    return Winner(spec, sampling, info, provenance), load_file(folder / WEIGHTS)


def load_winner(
    source: str, *, storage: str | None, artifacts: Path, max_nfe: int | None = None
) -> tuple[Winner, dict[str, torch.Tensor]]:
    """An export folder when ``source`` is a directory, else ``STUDY[:TRIAL]`` (within ``max_nfe``)."""
    from hpo.training.checkpoint import load_checkpoint

    folder = Path(source)
    if folder.is_dir():
        if max_nfe is not None:
            raise HpoError(f"--max-nfe chooses among a study's trials; {source} is an export folder: give STUDY")
        return read_export(folder)
    winner, weights = trial_winner(source, storage, artifacts, what=f"hpo sample {source!r}", max_nfe=max_nfe)
    return winner, load_checkpoint(weights)


def rebuild(winner: Winner, state: Mapping[str, torch.Tensor]) -> DiffusionModel:
    """The trial's network with its EMA weights (every key must match), on the spec's device."""
    from hpo.training.model import DiffusionModel, network_for
    from hpo.training.runtime import resolve_device
    from hpo.training.trainer import make_schedule

    cfg = winner.spec.train
    net = network_for(cfg, winner.info)
    net.load_state_dict(state, strict=True)
    net = net.to(resolve_device(cfg.device)).eval().requires_grad_(False)
    return DiffusionModel(net, winner.info, make_schedule(cfg), cfg.prediction)
