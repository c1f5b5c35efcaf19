"""``hpo sample SOURCE -n 64 -o grid.png``: samples from a trained trial (``STUDY[:TRIAL]``) or an
``hpo export`` folder, at the trial's best sampling settings unless overridden."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from PIL import Image

from hpo.errors import HpoError
from hpo.outputs import output_file, writing
from hpo.service.export import Winner, load_winner, rebuild
from hpo.spec.rules import check_guidance, check_steps
from hpo.spec.sampling import SamplingConfig
from hpo.training.generate import sample_images, save_grid


def chosen_sampling(winner: Winner, *, guidance: float | None, steps: int | None) -> SamplingConfig:
    """The trial's best combination with ``--guidance`` / ``--steps`` in place of its own."""
    sampling = winner.sampling
    if guidance is not None:
        check_guidance(guidance, key="--guidance")
        if guidance != 1.0 and not winner.info.conditional:
            raise HpoError(
                f"--guidance {guidance:g}: this network is unconditional, so there is nothing to guide; leave it out"
            )
        sampling = dataclasses.replace(sampling, guidance_scale=guidance)
    if steps is not None:
        check_steps(steps, winner.spec.train.timesteps, key="--steps")
        sampling = dataclasses.replace(sampling, steps=steps)
    return sampling


def grid_file(out: Path) -> Path:
    """``out`` if the grid can be written there (checked before the model is loaded): a file, not a
    folder, with a suffix PIL saves an image as (it picks the format by the suffix)."""
    output_file(out, example="samples.png")
    Image.init()
    if Image.registered_extensions().get(out.suffix.lower()) not in Image.SAVE:
        raise HpoError(f"{out}: name an image file (PIL saves it by its suffix), e.g. {out.with_suffix('.png')}")
    return out


def run_sample(
    source: str,
    out: Path,
    *,
    n: int,
    seed: int,
    guidance: float | None,
    steps: int | None,
    storage: str | None,
    artifacts: Path,
    max_nfe: int | None = None,
) -> tuple[Path, SamplingConfig, str | None]:
    """Draw ``n`` samples into the grid ``out``; (its path, the settings used, what ``max_nfe`` chose)."""
    grid_file(out)
    winner, state = load_winner(source, storage=storage, artifacts=artifacts, max_nfe=max_nfe)
    sampling = chosen_sampling(winner, guidance=guidance, steps=steps)
    model = rebuild(winner, state)
    images = sample_images(model, sampling, n=n, seed=seed)
    with writing(out) as tmp:
        save_grid(images, tmp)
    return out, sampling, winner.provenance.budget if max_nfe is not None else None
