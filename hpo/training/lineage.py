"""Which saved states a run may take up: its own checkpoint (every field the same), or the branch
state of a shorter ``wsd`` run of the same configuration, which it continues as a longer run."""

from __future__ import annotations

import torch

from hpo.files import JsonObject
from hpo.spec.config import TrainConfig
from hpo.spec.typed import to_plain
from hpo.training.checkpoint import State
from hpo.training.lr import cooldown_start

# Config fields added after checkpoints were written, with the value those runs had: a checkpoint
# written before a worker's upgrade still resumes after it.
ADDED_SINCE: JsonObject = {"eval_spacing": "even", "cooldown_share": 0.2}

DEVICE_FIELD = "device"  # TrainConfig.device, in a checkpoint's plain config
# What a longer run may change and still continue a shorter one's stable phase: the budget, where it
# is evaluated and averaged, and how long it cools down. Anything else would change the prefix.
BUDGET_FIELDS = frozenset({"kimg", "num_evals", "eval_spacing", "ema_halflife_kimg", "ema_snapshots", "cooldown_share"})


def differing_fields(written: JsonObject, cfg: TrainConfig) -> set[str]:
    """The fields in which a checkpoint's configuration differs from ``cfg``; the device counts only
    by its kind (a retry or a rung's continuation may land on another GPU of the pool: cuda:1
    resumes cuda:0's)."""
    stored, mine = {**ADDED_SINCE, **written}, to_plain(cfg)
    differ = {k for k in stored.keys() | mine.keys() if stored.get(k) != mine.get(k)}
    if device_kind(str(stored.get(DEVICE_FIELD))) == device_kind(cfg.device):
        differ.discard(DEVICE_FIELD)
    return differ


def device_kind(name: str) -> str:
    """``cuda`` or ``cpu``: ``auto`` as it resolves here (a worker stores the device it resolved, an
    ``hpo train`` run the spec's ``auto``), ``cuda:1`` as ``cuda``."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name.split(":")[0]


def same_run(written: JsonObject, cfg: TrainConfig) -> bool:
    """Whether a checkpoint's configuration is this run's: every field, the device only by its kind."""
    return not differing_fields(written, cfg)


def branch_config(state: State, cfg: TrainConfig) -> TrainConfig:
    """The configuration of the shorter run that wrote branch ``state``, checked for ``cfg`` to
    continue it: the same but for the budget fields. Raises ValueError, in one line, otherwise."""
    if cfg.lr_schedule != "wsd":
        raise ValueError(f"only a wsd run continues another run's branch state; lr_schedule is {cfg.lr_schedule!r}")
    written: JsonObject = state["config"]
    differ = sorted(differing_fields(written, cfg) - BUDGET_FIELDS)
    if differ:
        raise ValueError(
            f"not continuing from a run whose configuration differs in {', '.join(differ)}: "
            "only the budget fields may differ (" + ", ".join(sorted(BUDGET_FIELDS)) + ")"
        )
    stored = {**ADDED_SINCE, **written}
    return cfg.replace(**{k: stored[k] for k in BUDGET_FIELDS})


def check_stable(state: State, written_by: TrainConfig, cfg: TrainConfig) -> int:
    """The step of branch ``state``, which must be a stable-phase state: no step of it cooled down
    (its step is at most its own cooldown start) and none of this run's would have by then."""
    step = int(state["step"])
    planned = cooldown_start(written_by)
    own = planned if state.get("cooldown_from") is None else min(planned, int(state["cooldown_from"]))
    if step > own:
        raise ValueError(
            f"the state at step {step} is past its run's cooldown start (step {own}): it is not a stable-phase "
            "state; continue from a branch state (train's branch=), not a checkpoint"
        )
    if step > cooldown_start(cfg):
        raise ValueError(
            f"the state at step {step} is past this run's cooldown start (step {cooldown_start(cfg)}): "
            "a run continues only a shorter run's stable phase"
        )
    return step
