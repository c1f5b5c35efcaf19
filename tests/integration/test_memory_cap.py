"""A set larger than the memory a worker may use trains, in a real process under a real memory cap.

The process runs in a memory cgroup of its own (v1's ``memory.limit_in_bytes`` or v2's ``memory.max``)
whose limit is below the set's bytes, and far below what the loader before the mapped cache needed
(the process's own ~0.4 GB of anonymous memory plus a private copy of the set): the same process
that copies the set is killed by the cap, the one that trains from the mapping completes, the kernel
reclaiming the file's pages as batches and the moments' pass touch new ones. Needs root (a cgroup
is made and removed); elsewhere skipped, in CI (which runs as root) a failure.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from hpo.spec.config import DataConfig
from hpo.training import data as data_module
from hpo.training.cache import CacheFiles, drop_from_page_cache
from hpo.training.data import load_data
from hpo.training.shapes import render_shapes

ROOT = Path(__file__).resolve().parents[2]
CGROUP = Path("/sys/fs/cgroup")
MB = 2**20
CAP = 768 * MB  # the worker's limit
IMAGES = 280_000  # at 32 px, 3 072 bytes each: 860 MB, 1.12× the cap
SIZE = 32
TILE = 1000  # shapes rendered; the set repeats them (its bytes are the point here, not its pictures)

# The worker: maps the set (``argv[2]`` copy: or copies it, as the loader before the mapped cache
# did), trains 2 evaluation points of a tiny network on it and prints its figures as JSON.
WORKER = """
import dataclasses, json, logging, resource, sys
import torch
from hpo.spec.config import DataConfig
from hpo.training.data import load_data
from hpo.training.trainer import train
from tests.conftest import tiny_config
logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
torch.set_num_threads(1)
data = load_data(DataConfig(**json.loads(sys.argv[1])))
if sys.argv[2] == "copy":
    data = dataclasses.replace(data, train_images=data.train_images.clone(), val_images=data.val_images.clone())
result = train(tiny_config(batch_size=16, kimg=0.64, num_evals=2), data)
hw = result.hardware
print(json.dumps({
    "images_per_second": result.images_per_second, "data_wait": hw.data_wait, "steps": result.steps,
    "rss_start_mb": hw.rss_start_mb, "rss_peak_mb": hw.rss_peak_mb,
    "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}), flush=True)
"""


def needs(reason: str) -> None:
    """Skip for ``reason``; in CI, which runs as root with a memory controller, fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"the memory-cap test cannot run in CI: {reason}")
    pytest.skip(reason)


def memory_hierarchy() -> tuple[str, Path]:
    """("v1", this process's memory group) or ("v2", the unified mount), where this process may make a
    group; a skip (a failure in CI) where it may not."""
    if os.geteuid() != 0:
        needs("making a memory cgroup needs root")
    if (CGROUP / "memory" / "memory.limit_in_bytes").exists():
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, group = line.split(":", 2)
            if "memory" in controllers.split(",") and (CGROUP / "memory" / group.lstrip("/")).is_dir():
                return "v1", CGROUP / "memory" / group.lstrip("/")
        return "v1", CGROUP / "memory"
    unified = CGROUP / "cgroup.controllers"
    if unified.exists() and "memory" in unified.read_text().split():
        return "v2", CGROUP
    needs("no cgroup memory controller at /sys/fs/cgroup (v1 memory/ or v2 memory.max)")
    raise AssertionError  # unreachable: needs() raises


@contextmanager
def memory_cgroup(limit: int) -> Iterator[tuple[str, Path]]:
    """A new memory cgroup limited to ``limit`` bytes (removed afterwards; its processes must have ended)."""
    version, parent = memory_hierarchy()
    group = parent / f"hpo-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as err:
        needs(f"cannot make a memory cgroup under {parent}: {err}")
    try:
        (group / ("memory.limit_in_bytes" if version == "v1" else "memory.max")).write_text(str(limit))
        if version == "v2" and (group / "memory.swap.max").exists():
            (group / "memory.swap.max").write_text("0")
        yield version, group
    finally:
        group.rmdir()


def usage(version: str, group: Path) -> dict[str, int]:
    """The group's peak charge in bytes and how often it hit its limit (what the kernel keeps of each)."""
    if version == "v1":
        return {
            "peak": int((group / "memory.max_usage_in_bytes").read_text()),
            "hit_limit": int((group / "memory.failcnt").read_text()),
        }
    events = dict(line.split() for line in (group / "memory.events").read_text().splitlines())
    peak = group / "memory.peak"
    return {"peak": int(peak.read_text()) if peak.exists() else -1, "hit_limit": int(events.get("max", 0))}


def run_capped(group: Path, cfg: DataConfig, mode: str) -> subprocess.CompletedProcess[str]:
    """The worker in ``group``: a shell puts itself there, then becomes the worker."""
    fields = {k: getattr(cfg, k) for k in ("source", "image_size", "num_images", "cache_dir")}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    script = 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"'
    command = ["sh", "-c", script, "sh", str(group), sys.executable, "-c", WORKER, json.dumps(fields), mode]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def tiled_shapes(n: int, size: int, *, seed: int) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    images, labels, names = render_shapes(TILE, size, seed=seed)
    reps = -(-n // TILE)
    return np.tile(images, (reps, 1, 1, 1))[:n], np.tile(labels, reps)[:n], names


def test_a_set_larger_than_a_workers_memory_cap_trains_streamed_where_a_private_copy_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory_hierarchy()  # skipped before the set is built where no cgroup can be made
    cfg = DataConfig(source="shapes", image_size=SIZE, num_images=IMAGES, cache_dir=str(tmp_path / "cache"))
    monkeypatch.setattr(data_module, "render_shapes", tiled_shapes)
    data = load_data(cfg)
    set_bytes, images_file = data.nbytes, CacheFiles.of(cfg.cache_path, data.key).images
    del data
    gc.collect()  # this process's mapping gone, so its pages can leave the page cache
    assert set_bytes > CAP

    drop_from_page_cache(images_file)  # the capped worker reads it from disk, charged for it
    with memory_cgroup(CAP) as (version, group):
        copied = run_capped(group, cfg, "copy")
        copy_usage = usage(version, group)
    assert copied.returncode == -9, (copied.returncode, copied.stderr[-2000:])  # the OOM killer: the cap is real

    drop_from_page_cache(images_file)  # the capped worker reads it from disk, charged for it
    with memory_cgroup(CAP) as (version, group):
        mapped = run_capped(group, cfg, "map")
        mapped_usage = usage(version, group)
    assert mapped.returncode == 0, mapped.stderr[-3000:]
    assert "data: the images take" in mapped.stderr and "streamed from the cache on disk" in mapped.stderr
    figures = json.loads(mapped.stdout.strip().splitlines()[-1])
    # the old loader's need: this process's own memory (at the start of training, before any batch) plus a copy
    assert figures["rss_start_mb"] * MB + set_bytes > CAP
    assert mapped_usage["peak"] <= CAP and mapped_usage["hit_limit"] > 0  # it ran at the cap, pages reclaimed
    assert figures["steps"] == 40 and figures["images_per_second"] > 0  # data_wait: said, not bounded (the disk's)
    print(
        f"memory cap ({version}): {CAP / MB:.0f} MiB, set {set_bytes / MB:.0f} MiB; a private copy killed at a peak "
        f"of {copy_usage['peak'] / MB:.0f} MiB; mapped: peak {mapped_usage['peak'] / MB:.0f} MiB charged, hit "
        f"the cap {mapped_usage['hit_limit']} times, RSS {figures['rss_start_mb']:.0f} MiB at the start, peak "
        f"{figures['max_rss_mb']:.0f} MiB; {figures['images_per_second']:.0f} images/s, data_wait "
        f"{figures['data_wait']:.2%}"
    )
