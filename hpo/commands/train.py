"""``hpo train``: one run by hand, with progress output and a sample grid."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hpo.data import load_data
from hpo.errors import ConfigError, HpoError
from hpo.generate import sample_images, save_grid
from hpo.spec import load_spec, parse_overrides
from hpo.train import EvalPoint, TrainingAborted, train

log = logging.getLogger("hpo")


def run_train(spec_path: Path, overrides: list[str], out: Path) -> None:
    spec = load_spec(spec_path, overrides)
    params = {**(spec.baselines[0] if spec.baselines else {}), **parse_overrides(overrides).get("train", {})}
    try:
        cfg = spec.train_config(params)
    except ConfigError as err:
        raise err.in_file(str(spec_path)) from None
    data = load_data(spec.data)
    log.info(
        "data: %d training / %d validation images, %d classes, %d px",
        data.train_images.shape[0],
        data.val_images.shape[0],
        data.num_classes,
        data.image_size,
    )

    def show(point: EvalPoint, _ema: object) -> None:
        log.info(
            "eval %d/%d at %.1f kimg: val_loss %.4f", point.index, cfg.num_evals, point.kimg, point.metrics["val_loss"]
        )

    try:
        result = train(cfg, data, on_eval=show, checkpoint=out / "checkpoint.pt")
    except TrainingAborted as err:
        raise HpoError(f"training stopped: {err}; try a lower lr or stronger grad_clip") from None
    images = sample_images(result.ema, result.schedule, cfg, n=64, seed=cfg.seed)
    grid = save_grid(images, out / "samples.png", nrow=8)
    summary = {
        "val_loss": result.history[-1].metrics["val_loss"],
        "seconds": round(result.seconds, 1),
        "images_per_second": round(result.images_per_second, 1),
        "parameters": result.num_parameters,
        "samples": str(grid),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))
