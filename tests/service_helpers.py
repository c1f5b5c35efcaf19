"""Tiny, fast specs and process helpers for the service tests (real workers, real databases)."""

from __future__ import annotations

import atexit
import copy
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import optuna
import yaml

TINY_SPEC: dict[str, Any] = {
    "study": {"name": "tiny", "n_trials": 4, "heartbeat_interval": 1, "grace_period": 4, "max_retries": 2},
    "data": {"source": "digits", "image_size": 8, "val_fraction": 0.1},
    "train": {
        "kimg": 0.8,
        "num_evals": 2,
        "base_channels": 8,
        "channel_mult": [1, 2],
        "dropout": 0.0,
        "timesteps": 50,
        "val_images": 32,
        "device": "cpu",
    },
    "score": {"features": "classifier", "num_samples": 64, "batch_size": 64, "grid_size": 16},
    "sampler": {"name": "random", "seed": 0},
    "pruner": {"name": "median", "startup_trials": 2, "warmup_evals": 0},
    "search": {
        "lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
        "batch_size": {"type": "categorical", "choices": [16, 32]},
        "timesteps": {"type": "categorical", "choices": [50, 100]},
        "schedule": {"type": "categorical", "choices": ["linear", "cosine"]},
        "guidance_scale": {"type": "float", "low": 1.0, "high": 3.0},
        "steps": {"type": "int", "low": 2, "high": 6, "step": 2},
    },
    "tracking": {"tensorboard": False},
    "baselines": [],
}


def deep_update(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "search":
            out[key] = deep_update(out[key], value)
        else:
            out[key] = value
    return out


# One data and scoring cache for the whole test session: preprocessed images and the feature
# classifier are keyed by content, so tests share them instead of retraining the classifier each time.
# Removed when the session's process exits.
SHARED_CACHE = Path(tempfile.mkdtemp(prefix="hpo-test-cache-"))
atexit.register(shutil.rmtree, SHARED_CACHE, ignore_errors=True)


def write_spec(folder: Path, name: str = "spec.yaml", **changes: Any) -> Path:
    spec = deep_update(TINY_SPEC, changes)
    spec["data"].setdefault("cache_dir", str(SHARED_CACHE))
    path = folder / name
    path.write_text(yaml.safe_dump(spec))
    return path


def hpo_env(url: str | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("HPO_STORAGE", None)
    if url:
        env["HPO_STORAGE"] = url
    return env


def hpo(
    *args: str, url: str | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hpo", *args], env=hpo_env(url), cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def terminate(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM, then SIGKILL if ``proc`` has not exited within ``timeout`` seconds; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_worker(url: str, folder: Path, *extra: str) -> subprocess.Popen[str]:
    args = ["worker", "--exit-when-idle", "--poll", "0.5", "--threads", "1", "--artifacts", str(folder / "artifacts")]
    args += list(extra)
    return subprocess.Popen(
        [sys.executable, "-m", "hpo", *args],
        env=hpo_env(url),
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def poll_json(url: str, server: subprocess.Popen[Any], what: str, timeout: float = 90) -> Any:
    """Poll a starting server until ``url`` answers with non-empty JSON; that JSON."""
    import json
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                data = json.load(response)
            if data:
                return data
        except OSError:
            pass
        assert server.poll() is None, f"{what} exited"
        assert time.monotonic() < deadline, f"{what} did not answer in time"
        time.sleep(0.5)


def dashboard_study_names(port: int, server: subprocess.Popen[str], timeout: float = 60) -> list[str]:
    """The names of the studies a starting optuna-dashboard serves."""
    data = poll_json(f"http://127.0.0.1:{port}/api/studies", server, "the dashboard", timeout)
    return [s["study_name"] for s in data["study_summaries"]]


def study_report(study: optuna.Study, path: Path, *, artifact_dir: Path | None = None) -> Path:
    """A test study's report, through the storage the study was opened with (the service passes the
    storage it holds; a test has only the study)."""
    from hpo.report.render import write_report

    return write_report(study, storage_of(study), path, artifact_dir=artifact_dir)


def storage_of(study: optuna.Study) -> Any:
    """The storage a test's study lives in. Optuna keeps it private (``Study._storage``: its trial
    cache around the RDBStorage, which it duck-types as); this is the one place tests reach for it."""
    return study._storage
