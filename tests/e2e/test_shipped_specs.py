"""Every shipped spec passes the doctor's preflight with its own network: what `hpo launch` runs
before it creates a study. Folder specs get generated photos (coloured shapes, four classes); sizes
are reduced where this CPU needs it, never the network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image

from hpo.doctor.run import run_doctor
from hpo.spec.spec import spec_from_dict
from hpo.training.shapes import render_shapes

ROOT = Path(__file__).parent.parent.parent
SHIPPED = sorted((ROOT / "search_spaces").glob("*.yaml"))
CPU_IMAGE_SIZE = {"bikes.yaml": 16, "bikes128.yaml": 32}  # the same UNets (35.7M, 38.4M) on smaller photos; 32 keeps
# bikes128's lowest level at 2x2 (at 1x1 its group norms see one value and pass no gradient)


def write_photos(folder: Path, size: int, per_class: int = 24) -> None:
    images, labels, names = render_shapes(2 * per_class, size, seed=3)
    for i, (image, label) in enumerate(zip(images, labels, strict=True)):
        target = folder / names[int(label)]
        target.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image.transpose(1, 2, 0)).save(target / f"{i}.png")


def cpu_version(path: Path, tmp_path: Path) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(path.read_text())
    raw["data"]["cache_dir"] = str(tmp_path / "cache")
    raw["data"]["image_size"] = CPU_IMAGE_SIZE.get(path.name, raw["data"]["image_size"])
    if raw["data"]["source"] == "folder":
        write_photos(tmp_path / "photos", raw["data"]["image_size"])
        raw["data"]["path"] = str(tmp_path / "photos")
    return raw


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_the_doctors_preflight_passes_every_shipped_spec_with_its_own_network(path: Path, tmp_path: Path) -> None:
    spec = spec_from_dict(cpu_version(path, tmp_path), file=path.name)
    checks = run_doctor(spec, fast=True, out_dir=tmp_path / "doctor")
    assert not [c for c in checks if c.status == "fail"], "\n".join(c.line() for c in checks)
    overfit = next(c for c in checks if c.name == "model: overfit one batch")
    assert "at Adam lr" in overfit.reason
