from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from hpo.spec.config import DataConfig
from hpo.training import batches as batches_module
from hpo.training.batches import (
    STREAM_SHARE,
    BatchSource,
    batch_indices,
    cgroup_limit,
    placement,
    planned_placement,
)
from hpo.training.data import load_data
from hpo.training.trainer import Trainer
from tests.conftest import tiny_config

CPU = torch.device("cpu")


def source(n: int = 37, *, seed: int = 5) -> BatchSource:
    images = torch.arange(n * 4, dtype=torch.uint8).reshape(n, 1, 2, 2)
    return BatchSource(images, torch.arange(n), CPU, batch_size=8, seed=seed)


def test_a_source_resumed_mid_epoch_gives_the_batches_of_the_uninterrupted_run() -> None:
    whole = source()
    run = [whole.get(step) for step in range(12)]  # 96 images: over two epochs of 37
    resumed = source()
    again = [resumed.get(step) for step in range(7, 12)]  # a fresh process, resumed at step 7
    for (x, y), (x2, y2) in zip(run[7:], again, strict=True):
        assert torch.equal(x, x2) and torch.equal(y, y2)
    whole.close()
    resumed.close()


def test_each_epoch_shows_every_image_once_in_a_seeded_order() -> None:
    run = source()
    labels = torch.cat([run.get(step)[1] for step in range(12)])
    assert sorted(labels[:37].tolist()) == list(range(37)) and sorted(labels[37:74].tolist()) == list(range(37))
    assert torch.equal(labels[:8], batch_indices(37, 8, 0, 5)) and not torch.equal(labels[:37], labels[37:74])
    run.close()


def test_the_batches_skipped_by_a_prefetch_are_still_the_steps_own() -> None:
    run = source()
    first = run.get(3)  # prefetches step 4
    jumped = run.get(9)  # a step other than the prefetched one is gathered there and then
    assert torch.equal(first[1], batch_indices(37, 8, 3, 5)) and torch.equal(jumped[1], batch_indices(37, 8, 9, 5))
    run.close()


def test_on_the_cpu_a_set_stays_on_the_host_and_a_large_one_is_streamed() -> None:
    assert placement(10**6, CPU, host_bytes=10**9) == "host"
    assert placement(int(STREAM_SHARE * 10**9) + 1, CPU, host_bytes=10**9) == "streamed"


def test_a_trainer_on_the_cpu_trains_from_the_mapped_cache_without_copying_it(tmp_path: Path) -> None:
    data = load_data(DataConfig(source="shapes", image_size=8, num_images=60, cache_dir=str(tmp_path)))
    trainer = Trainer(tiny_config(), data, CPU)
    assert trainer.placement == "host" and trainer.data.train_images is data.train_images
    trainer.run_steps(3)
    assert trainer.step == 3
    trainer.batches.close()


def test_the_set_lives_on_a_gpu_only_where_it_leaves_the_network_room() -> None:
    gib = 2**30
    assert planned_placement(gib, gpu_free_bytes=8 * gib, host_bytes=64 * gib) == "device"
    assert planned_placement(3 * gib, gpu_free_bytes=8 * gib, host_bytes=64 * gib) == "host"
    assert planned_placement(40 * gib, gpu_free_bytes=80 * gib, host_bytes=64 * gib) == "streamed"


def test_a_cgroup_limit_v1_or_v2_bounds_the_memory_a_worker_may_use(tmp_path: Path) -> None:
    assert cgroup_limit(tmp_path) is None  # no cgroup files: no limit
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("4:memory:/jobs/42\n0::/jobs/42\n")
    v1 = tmp_path / "sys/fs/cgroup/memory/jobs/42"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "unlimited"
    (tmp_path / "sys/fs/cgroup/jobs/42").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/jobs/42/memory.max").write_text("max\n")
    assert cgroup_limit(tmp_path) == 9223372036854771712
    (v1 / "memory.limit_in_bytes").write_text("2147483648\n")
    assert cgroup_limit(tmp_path) == 2**31
    (tmp_path / "sys/fs/cgroup/jobs/42/memory.max").write_text("1073741824\n")
    assert cgroup_limit(tmp_path) == 2**30


def test_a_set_over_half_a_workers_memory_trains_streamed_from_the_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = load_data(DataConfig(source="shapes", image_size=8, num_images=60, cache_dir=str(tmp_path)))
    monkeypatch.setattr(batches_module, "host_memory_bytes", lambda: data.nbytes)  # a worker capped at the set
    trainer = Trainer(tiny_config(), data, CPU)
    assert trainer.placement == "streamed" and trainer.data.train_images is data.train_images
    trainer.run_steps(9)
    assert trainer.step == 9 and all(math.isfinite(v) for v in trainer.losses)
    trainer.batches.close()
