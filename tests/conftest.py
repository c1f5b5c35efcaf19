from __future__ import annotations

from pathlib import Path

import pytest

from hpo.spec.config import DataConfig, TrainConfig
from hpo.training.data import ImageData, load_data

TINY = dict(base_channels=8, channel_mult=(1, 2), num_res_blocks=1, dropout=0.0, device="cpu", val_images=64)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own folder with no storage URL, Inception weights or user cache from
    the environment: nothing a test writes by default (hpo.db, reports/, mlruns/, runs/, the data
    and feature caches) lands in the checkout or the user's ~/.cache, and nothing there is read."""
    from tests.service_helpers import SHARED_CACHE

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HPO_STORAGE", raising=False)
    monkeypatch.delenv("HPO_FID_WEIGHTS", raising=False)
    monkeypatch.delenv("HPO_CPU_BF16", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(SHARED_CACHE / "xdg"))


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


@pytest.fixture(scope="session")
def pg_server():  # type: ignore[no-untyped-def]
    """A real PostgreSQL server; HPO_TEST_DATABASE_URL uses an existing one instead.
    In CI a missing server is a failure, elsewhere a skip."""
    import os

    from tests.pg import start_server, stop_server

    if os.environ.get("HPO_TEST_DATABASE_URL"):
        yield None
        return
    try:
        server = start_server()
    except FileNotFoundError as err:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required in CI: {err}")
        pytest.skip(str(err))
    yield server
    stop_server(server)


@pytest.fixture
def pg_url(pg_server, request: pytest.FixtureRequest) -> str:  # type: ignore[no-untyped-def]
    """A fresh database per test on the session's server; with HPO_TEST_DATABASE_URL, that one
    database, shared by every test (so tests name their studies apart)."""
    import hashlib
    import os
    import re

    if pg_server is None:
        return os.environ["HPO_TEST_DATABASE_URL"]
    digest = hashlib.sha1(request.node.name.encode()).hexdigest()[:8]  # parametrised ids share a prefix
    name = "t_" + re.sub(r"[^a-z0-9]", "_", request.node.name.lower())[:40] + "_" + digest
    return pg_server.create_database(name)
