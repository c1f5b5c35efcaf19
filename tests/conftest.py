from __future__ import annotations

from pathlib import Path

import pytest

from hpo.config import DataConfig, TrainConfig
from hpo.data import ImageData, load_data

TINY = dict(base_channels=8, channel_mult=(1, 2), num_res_blocks=1, dropout=0.0, device="cpu", val_images=64)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def digits8(cache_dir: Path) -> ImageData:
    """Real handwritten digits at 8 px: small enough for many CPU training runs."""
    return load_data(DataConfig(source="digits", image_size=8, cache_dir=str(cache_dir)))


@pytest.fixture(scope="session")
def digits16(cache_dir: Path) -> ImageData:
    return load_data(DataConfig(source="digits", image_size=16, cache_dir=str(cache_dir)))


def tiny_config(**changes: object) -> TrainConfig:
    return TrainConfig(**{**TINY, **changes})  # type: ignore[arg-type]
