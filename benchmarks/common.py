"""Shared by the study benchmarks: run a real study in-process (one worker, the real objective) on
the embedded database, and read what it cost."""

from __future__ import annotations

import copy
import datetime
import json
import logging
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from hpo.files import atomic_write, json_safe
from hpo.records import TrialRecord
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.service.worker import Worker, WorkerOptions
from hpo.spec.params import Params
from hpo.spec.spec import spec_from_dict

ROOT = Path(__file__).parent.parent
DIGITS: dict[str, Any] = yaml.safe_load((ROOT / "search_spaces" / "digits.yaml").read_text())
RESULTS = ROOT / "benchmarks" / "results"


def write_result(name: str, result: Mapping[str, object], *, folder: Path = RESULTS) -> Path:
    """``benchmarks/results/NAME.json``: what one run measured (``result``: the figures it printed, by
    name; non-finite numbers as null) with the command, the commit (``+`` when the checkout had changes),
    the date, the machine and the torch threads it ran on: the file the docs cite. Written atomically;
    a later run replaces it."""
    import torch

    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    payload = {
        "benchmark": name,
        "command": " ".join(["python -m benchmarks." + Path(sys.argv[0]).stem, *sys.argv[1:]]),  # the module run
        "commit": commit(),
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "gpu": cuda,
                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__},
        "result": json_safe(result),  # NaN and inf as null: strict JSON
    }  # fmt: skip
    text = json.dumps(payload, indent=1, allow_nan=False) + "\n"
    path = atomic_write(folder / f"{name}.json", lambda tmp: tmp.write_text(text))
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


def commit() -> str | None:
    """The checkout's commit, ``+`` when it has uncommitted changes; None outside a git checkout."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head, dirty = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


def quiet() -> None:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("hpo").setLevel(logging.WARNING)
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def spec_with(base: dict[str, Any], **sections: Any) -> dict[str, Any]:
    """``base`` with whole sections replaced or, for dict values under ``merge_``, merged."""
    out = copy.deepcopy(base)
    for name, value in sections.items():
        if name.startswith("merge_"):
            out[name[6:]] = {**out.get(name[6:], {}), **value}
        else:
            out[name] = value
    return out


def run_study(
    raw: dict[str, Any], folder: Path, *, enqueue: Sequence[dict[str, Any]] = ()
) -> tuple[optuna.Study, float]:
    """Create the study from ``raw`` (a spec mapping) in ``folder``, enqueue ``enqueue`` after its
    baselines, and serve it to the end with one in-process worker; (study, wall seconds)."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = copy.deepcopy(raw)
    raw["data"] = {**raw["data"], "cache_dir": str(folder.parent / "cache")}
    spec = spec_from_dict(raw, file=raw["study"]["name"])
    url = f"sqlite:///{folder / 'hpo.db'}"
    study, _ = create_or_resume(spec, open_storage(url))
    for params in enqueue:
        study.enqueue_trial(params)
    started = time.perf_counter()
    opts = WorkerOptions(
        url=url, study=spec.study.name, exit_when_idle=True, artifact_dir=folder / "artifacts", poll_seconds=0.2
    )
    Worker(opts).serve()
    return study, time.perf_counter() - started


def draw_configurations(n: int, *, seed: int = 0, lr_exponents: tuple[float, float] = (-4, -2)) -> list[Params]:
    """``n`` training configurations drawn once from the digits search space (lr log-uniform)."""
    rng = random.Random(seed)
    return [
        {
            "lr": 10 ** rng.uniform(*lr_exponents),
            "batch_size": rng.choice([32, 64, 128]),
            "timesteps": rng.choice([100, 250, 500, 1000]),
            "schedule": rng.choice(["linear", "cosine", "sigmoid"]),
        }
        for _ in range(n)
    ]


def trained_kimg(t: FrozenTrial) -> float:
    """Images a trial trained on: its whole budget, or where it was stopped."""
    record = TrialRecord.of(t)
    budget = record.budget_kimg or 0.0
    if t.state == TrialState.COMPLETE:
        return budget
    return record.stopped_at_kimg if record.stopped_at_kimg is not None else budget


def best_value(study: optuna.Study) -> float:
    values = [t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value is not None]
    return min(values) if values else float("nan")


def photo_folder(root: Path, per_image: int = 400) -> Path:
    """Patches of scikit-learn's two sample photographs (china, flower): 2 classes of real photos."""
    return cut_photos(root / "photo-patches", per_image, random_patch)


def still_folder(root: Path, per_image: int = 400) -> Path:
    """A second photo source, cut as :func:`photo_folder` cuts the first: patches of two colour
    photographs scikit-image ships (astronaut, coffee), 2 classes."""
    return cut_photos(root / "still-patches", per_image, random_patch, images=skimage_photos)


def random_patch(rng: np.random.Generator, image: np.ndarray, stem: Path) -> None:
    """A square patch of 48 to 128 px at a random place, shrunk to 32 px (PNG)."""
    from PIL import Image

    h, w, _ = image.shape
    side = int(rng.integers(48, 128))
    y, x = int(rng.integers(0, h - side)), int(rng.integers(0, w - side))
    crop = Image.fromarray(image[y : y + side, x : x + side])
    crop.resize((32, 32), Image.Resampling.BICUBIC).save(stem.with_suffix(".png"))


def patch_folder(root: Path, per_image: int = 400) -> Path:
    """The same two photographs cut another way (``../shared/cases/photo-sweep/make_patches.py``):
    fixed 96-px crops saved as JPEG (quality 90), left for the spec's image size to shrink; the case
    where a good model's best guidance never reached the sweep's finalists."""
    from PIL import Image

    def cut(rng: np.random.Generator, image: np.ndarray, stem: Path) -> None:
        h, w, _ = image.shape
        y, x = int(rng.integers(0, h - 96)), int(rng.integers(0, w - 96))
        Image.fromarray(image[y : y + 96, x : x + 96]).save(stem.with_suffix(".jpg"), quality=90)

    return cut_photos(root / "photo-patches-96", per_image, cut)


def sklearn_photos() -> dict[str, np.ndarray]:
    """scikit-learn's two sample photographs, by name."""
    from sklearn.datasets import load_sample_images

    return dict(zip(("china", "flower"), load_sample_images().images, strict=True))


def skimage_photos() -> dict[str, np.ndarray]:
    """Two colour photographs scikit-image ships in its wheel (no download): an astronaut's portrait
    and a cup of coffee."""
    try:
        from skimage import data
    except ImportError:
        raise SystemExit("the second photo source needs scikit-image: pip install -e '.[bench]'") from None
    return {"astronaut": data.astronaut(), "coffee": data.coffee()}


def cut_photos(
    folder: Path,
    per_image: int,
    cut: Callable[[np.random.Generator, np.ndarray, Path], None],
    images: Callable[[], dict[str, np.ndarray]] = sklearn_photos,
) -> Path:
    """``folder``/<name> for each of ``images``' photographs, ``per_image`` images each cut by ``cut``
    (seeded: the same folder every time); written once."""
    if (folder / "done").exists():
        return folder
    rng = np.random.default_rng(0)
    for name, image in images().items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_image):
            cut(rng, image, folder / name / f"{i:04d}")
    (folder / "done").write_text("")
    return folder
