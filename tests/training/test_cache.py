from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from hpo import errors as errors_module
from hpo.errors import DiskFull
from hpo.spec.config import DataConfig
from hpo.training import data as data_module
from hpo.training.cache import CacheFiles
from hpo.training.checkpoint import atomic_save
from hpo.training.data import load_data
from tests.images import write_images


def shapes_config(tmp_path: Path) -> DataConfig:
    return DataConfig(source="shapes", image_size=8, num_images=40, cache_dir=str(tmp_path))


def files_of(cfg: DataConfig, key: str) -> CacheFiles:
    return CacheFiles.of(cfg.cache_path, key)


def test_the_cache_is_mapped_from_one_file_not_read_into_the_process(tmp_path: Path) -> None:
    data = load_data(shapes_config(tmp_path))
    files = files_of(shapes_config(tmp_path), data.key)
    assert files.images.exists() and files.meta.exists()
    storage = data.train_images.untyped_storage()
    # the images, the held-out images and the labels are views of one mapping of the whole file
    assert storage.nbytes() == files.images.stat().st_size
    assert data.val_images.untyped_storage().data_ptr() == storage.data_ptr()
    assert data.train_labels.untyped_storage().data_ptr() == storage.data_ptr()
    assert data.to("cpu").train_images is data.train_images  # moving to the CPU copies nothing


def test_a_mapped_cache_holds_what_was_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = shapes_config(tmp_path)
    images, labels, names, _ = data_module.read_source(cfg)
    built = data_module.split(images, labels, names, cfg, "k")
    first = load_data(cfg)
    monkeypatch.setattr(data_module, "read_source", lambda cfg: pytest.fail("cache was not used"))
    second = load_data(cfg)
    for a, b in ((built, first), (first, second)):
        assert torch.equal(a.train_images, b.train_images) and torch.equal(a.val_images, b.val_images)
        assert torch.equal(a.train_labels, b.train_labels) and torch.equal(a.val_labels, b.val_labels)
        assert a.class_names == b.class_names


@pytest.mark.parametrize("damage", ["truncated", "overwritten", "description"])
def test_a_corrupt_cache_is_rebuilt_with_one_line(
    damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = shapes_config(tmp_path)
    first = load_data(cfg)
    files = files_of(cfg, first.key)
    expected = first.train_images.clone(), first.val_labels.clone()
    del first  # a mapping of a file truncated under it faults on its lost pages (SIGBUS)
    if damage == "truncated":
        os.truncate(files.images, files.images.stat().st_size // 2)
    elif damage == "overwritten":
        with open(files.images, "r+b") as f:
            f.write(b"\xff" * 64)
    else:
        files.meta.write_text(files.meta.read_text().replace('"n_val": ', '"n_val": 1'))
    with caplog.at_level(logging.INFO, logger="hpo.data"):
        again = load_data(cfg)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"data cache {files.images} is corrupt" in warnings[0]
    assert warnings[0].endswith("; rebuilding it")
    assert torch.equal(again.train_images, expected[0]) and torch.equal(again.val_labels, expected[1])


def test_a_changed_folder_gets_a_new_cache(tmp_path: Path) -> None:
    write_images(tmp_path / "imgs", 12)
    cfg = DataConfig(source="folder", path=str(tmp_path / "imgs"), image_size=16, cache_dir=str(tmp_path / "cache"))
    before = load_data(cfg)
    write_images(tmp_path / "imgs", 1, start=50)
    after = load_data(cfg)
    assert after.key != before.key
    assert after.train_images.shape[0] + after.val_images.shape[0] == 13
    assert files_of(cfg, after.key).meta.exists()


def test_the_previous_torch_save_cache_is_converted_not_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = shapes_config(tmp_path)
    data = load_data(cfg)
    files = files_of(cfg, data.key)
    atomic_save(
        {
            "train_images": data.train_images.clone(), "train_labels": data.train_labels.clone(),
            "val_images": data.val_images.clone(), "val_labels": data.val_labels.clone(),
            "class_names": list(data.class_names), "skipped": [],
        },
        files.legacy,
    )  # fmt: skip
    files.meta.unlink()
    files.images.unlink()
    monkeypatch.setattr(data_module, "read_source", lambda cfg: pytest.fail("the old cache was not used"))
    again = load_data(cfg)
    assert torch.equal(again.train_images, data.train_images) and files.meta.exists()


def test_a_disk_too_small_for_the_cache_says_how_much_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(errors_module.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 1_000_000})())
    cfg = DataConfig(source="shapes", image_size=64, num_images=400, cache_dir=str(tmp_path))
    said = r"is full \(1 MB free, the data cache needs 5 MB\): free space there \(or set data.cache_dir to a larger"
    with pytest.raises(DiskFull, match=said):
        load_data(cfg)
    assert not list(tmp_path.glob("data-*.u8")) and not list(tmp_path.glob("data-*.json"))


def test_a_folder_is_decoded_into_a_scratch_file_not_held_in_memory(tmp_path: Path) -> None:
    write_images(tmp_path / "imgs", 12)
    (tmp_path / "imgs" / "broken.png").write_bytes(b"not a png")
    in_memory = data_module.read_folder(tmp_path / "imgs", 16)
    mapped = data_module.read_folder(tmp_path / "imgs", 16, scratch=tmp_path / "scratch")
    assert torch.equal(in_memory[0], mapped[0]) and torch.equal(in_memory[1], mapped[1])
    assert mapped[3] == in_memory[3] and len(mapped[3]) == 1  # the broken file, skipped and named
    assert not list((tmp_path / "scratch").iterdir())  # the scratch file is gone; its mapping stays readable
