from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hpo.errors import ConfigError, DataError
from hpo.spec.config import DataConfig
from hpo.training import data as data_module
from hpo.training.data import ImageData, load_data, to_model_range, to_uint8
from hpo.training.shapes import render_shapes
from tests.images import write_images


def folder_config(path: Path, tmp_path: Path, **kw: object) -> DataConfig:
    return DataConfig(source="folder", path=str(path), image_size=16, cache_dir=str(tmp_path / "cache"), **kw)  # type: ignore[arg-type]


def test_digits_are_real_labelled_images_normalised_to_minus_one_one(digits16: ImageData) -> None:
    assert digits16.train_images.dtype == torch.uint8
    assert digits16.train_images.shape[1:] == (1, 16, 16)
    assert digits16.num_classes == 10
    x = to_model_range(digits16.train_images)
    assert x.min() == -1.0 and x.max() == 1.0
    assert torch.equal(to_uint8(x), digits16.train_images)


def test_shapes_are_deterministic_by_seed_and_classed_by_shape() -> None:
    a, labels, names = render_shapes(8, 24, seed=1)
    b, _, _ = render_shapes(8, 24, seed=1)
    c, _, _ = render_shapes(8, 24, seed=2)
    assert a.shape == (8, 3, 24, 24) and np.array_equal(a, b) and not np.array_equal(a, c)
    assert names == ("circle", "square", "triangle", "diamond") and labels.tolist() == [0, 1, 2, 3] * 2


def test_split_is_deterministic_by_seed_and_disjoint(tmp_path: Path) -> None:
    cfg = DataConfig(source="shapes", image_size=8, num_images=50, val_fraction=0.2, cache_dir=str(tmp_path))
    images, labels, names, _ = data_module.read_source(cfg)
    a = data_module.split(images, labels, names, cfg, "k")
    b = data_module.split(*data_module.read_source(cfg)[:3], cfg, "k")
    assert torch.equal(a.val_images, b.val_images) and a.val_images.shape[0] == 10
    train_rows = {bytes(x.numpy()) for x in a.train_images}
    assert not any(bytes(x.numpy()) in train_rows for x in a.val_images)


def test_preprocessed_data_is_cached_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = DataConfig(source="shapes", image_size=8, num_images=40, cache_dir=str(tmp_path))
    first = load_data(cfg)
    monkeypatch.setattr(data_module, "read_source", lambda cfg: pytest.fail("cache was not used"))
    second = load_data(cfg)
    assert torch.equal(first.train_images, second.train_images) and first.key == second.key


def test_folder_subfolders_become_classes_and_modes_are_converted(tmp_path: Path) -> None:
    write_images(tmp_path / "imgs" / "cats", 6, mode="RGBA")
    write_images(tmp_path / "imgs" / "dogs", 6, mode="L", start=10)
    data = load_data(folder_config(tmp_path / "imgs", tmp_path))
    assert data.class_names == ("cats", "dogs")
    assert data.train_images.shape[1:] == (3, 16, 16)


def test_missing_folder_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nowhere: image folder not found"):
        load_data(folder_config(tmp_path / "nowhere", tmp_path))


def test_empty_folder_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: no images"):
        load_data(folder_config(tmp_path / "empty", tmp_path))


def test_three_images_are_too_few_to_split(tmp_path: Path) -> None:
    write_images(tmp_path / "three", 3)
    with pytest.raises(DataError, match=r"three: only 3 images; need at least 10"):
        load_data(folder_config(tmp_path / "three", tmp_path))


def test_corrupt_files_are_skipped_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_images(tmp_path / "mixed", 12)
    (tmp_path / "mixed" / "broken.jpg").write_bytes(b"not an image")
    with caplog.at_level(logging.WARNING):
        data = load_data(folder_config(tmp_path / "mixed", tmp_path))
    assert data.train_images.shape[0] + data.val_images.shape[0] == 12
    assert "skipped 1 unreadable image(s), first:" in caplog.text and "broken.jpg" in caplog.text
    assert [p for p, _ in data.skipped] == [str(tmp_path / "mixed" / "broken.jpg")]


def test_mostly_corrupt_folder_fails(tmp_path: Path) -> None:
    write_images(tmp_path / "bad", 2)
    for i in range(5):
        (tmp_path / "bad" / f"x{i}.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(DataError, match=r"5 of 7 images are unreadable"):
        load_data(folder_config(tmp_path / "bad", tmp_path))


def test_images_smaller_than_image_size_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_images(tmp_path / "small", 12, size=10)
    with caplog.at_level(logging.WARNING):
        load_data(folder_config(tmp_path / "small", tmp_path))
    assert "12 image(s) are smaller than image_size=16" in caplog.text


def test_torchvision_dataset_offline_fails_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.request

    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setattr(urllib.request.OpenerDirector, "open", offline)
    cfg = DataConfig(source="torchvision:CIFAR10", path=str(tmp_path / "root"), image_size=16, cache_dir=str(tmp_path))
    with pytest.raises(DataError, match=r"torchvision:CIFAR10: cannot download to .*root"):
        load_data(cfg)


def test_unknown_torchvision_dataset_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown torchvision dataset 'CIFAR11'; expected one of CIFAR10"):
        DataConfig(source="torchvision:CIFAR11", image_size=16, cache_dir=str(tmp_path))


def gradient(size: int = 20) -> np.ndarray:
    """A horizontal ramp 0 → 1, so a mode's values can be checked after decoding."""
    return np.tile(np.linspace(0.0, 1.0, size), (size, 1))


def mode_files(folder: Path) -> dict[str, Path]:
    """One file per Pillow mode a photo folder can hold, each a ramp from black to white."""
    folder.mkdir(parents=True)
    ramp = gradient()
    rgba = np.dstack(
        [np.repeat((ramp * 255).astype(np.uint8)[..., None], 3, axis=2), np.full(ramp.shape, 255, np.uint8)]
    )
    images = {
        "I;16": Image.fromarray((ramp * 65535).astype(np.uint16)),
        "I": Image.fromarray((ramp * 65535).astype(np.int32), "I"),
        "F": Image.fromarray(ramp.astype(np.float32), "F"),
        "L": Image.fromarray((ramp * 255).astype(np.uint8), "L"),
        "LA": Image.fromarray(rgba[..., [0, 3]], "LA"),
        "RGBA": Image.fromarray(rgba, "RGBA"),
        "P": Image.fromarray((ramp * 255).astype(np.uint8), "L").convert("P"),
        "CMYK": Image.fromarray((ramp * 255).astype(np.uint8), "L").convert("RGB").convert("CMYK"),
    }
    out = {}
    for mode, image in images.items():
        suffix = ".tif" if mode in ("I", "F", "CMYK") else ".png"
        out[mode] = folder / f"{mode.replace(';', '_')}{suffix}"
        image.save(out[mode])
    return out


@pytest.mark.parametrize("mode", ["I;16", "I", "F", "L", "LA", "RGBA", "P", "CMYK"])
def test_every_image_mode_is_read_as_what_it_is(mode: str, tmp_path: Path) -> None:
    from hpo.training.images import open_rgb

    path = mode_files(tmp_path / "modes")[mode]
    with Image.open(path) as raw:
        assert raw.mode == mode or (mode == "I;16" and raw.mode.startswith("I")), raw.mode
    pixels = np.asarray(open_rgb(path)).astype(int)
    assert pixels.shape == (20, 20, 3)
    assert pixels[:, 0].max() <= 2 and pixels[:, -1].min() >= 250, (mode, pixels[0, ::5])  # black → white
    assert np.abs(pixels[0, 10] - 255 * 10 / 19).max() <= 3  # the middle is mid-grey, not clipped to 255


def test_transparent_pixels_become_white_and_odd_modes_are_refused(tmp_path: Path) -> None:
    from hpo.training.images import UnreadableImage, open_rgb

    clear = tmp_path / "clear.png"
    Image.new("RGBA", (8, 8), (0, 0, 0, 0)).save(clear)
    assert np.asarray(open_rgb(clear)).min() == 255
    negative = tmp_path / "negative.tif"
    Image.fromarray(np.full((8, 8), -5.0, np.float32), "F").save(negative)
    with pytest.raises(UnreadableImage, match="negative pixel values"):
        open_rgb(negative)


def test_a_16_bit_png_folder_trains_on_its_real_values(tmp_path: Path) -> None:
    folder = tmp_path / "sixteen"
    folder.mkdir()
    for i in range(12):
        Image.fromarray(np.full((16, 16), 30000 + i, np.uint16)).save(folder / f"{i}.png")
    data = load_data(folder_config(folder, tmp_path))
    values = torch.cat([data.train_images, data.val_images]).float()
    assert values.min() >= 110 and values.max() <= 125  # 30000/65535·255 ≈ 117, not the clipped 255
