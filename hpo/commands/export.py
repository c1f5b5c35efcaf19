"""``hpo export STUDY[:TRIAL] -o DIR``: a trained trial to take away: its EMA weights
(``ema.safetensors``), a spec that retrains exactly it (``spec.yaml``, for ``hpo train``) and its
best sampling settings with where they came from (``sampling.json``). Reading the trial needs no
torch: it is imported where the weights are read and written and the network is described."""

from __future__ import annotations

from pathlib import Path

from hpo.outputs import output_folder
from hpo.service.export import SAMPLING, SPEC, WEIGHTS, trial_winner, write_export


def run_export(
    source: str, out: Path, *, storage: str | None, artifacts: Path, max_nfe: int | None = None
) -> tuple[list[Path], str | None]:
    """Write the three files into ``out`` (absent or empty, checked before the trial is read); their paths."""
    from hpo.training.checkpoint import load_checkpoint

    output_folder(out, holds=f"the export ({WEIGHTS}, {SPEC}, {SAMPLING})", empty=True)
    winner, weights = trial_winner(source, storage, artifacts, what=f"hpo export {source!r}", max_nfe=max_nfe)
    who = winner.provenance
    written_by = (
        f"`hpo export {who.study}:{who.trial}`: the trial's parameters fixed, its best sampling combination "
        f"({winner.sampling.words}" + (f"; {who.budget}" if who.budget is not None else "") + ")"
    )
    return write_export(out, winner, load_checkpoint(weights), written_by=written_by), who.budget
