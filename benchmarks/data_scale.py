"""Data at scale: host memory of several workers training from one folder, training throughput and
time to the first step, today's cache (one memory-mapped file per host) against the one before it
(a ``torch.save`` file each worker reads into its own memory, as ``load_data`` did up to 49469cb).

    .venv/bin/python -m benchmarks.data_scale [--n 20000 --size 64 --workers 4 [16] --steps 100 --rounds 3]

A generated folder of ``--n`` shapes at ``--size`` px (PNG, kept in ``--root`` for later runs). For
each loader, ``--workers`` processes of one torch thread each load the data, train 4 steps of a small
network and wait; their summed PSS (``/proc/PID/smaps_rollup``: a page shared by k processes counts
1/k in each) minus the same on a 1k-image folder is the data's share, printed against the set's own
bytes (goal ≤ 1.5× for the new loader, whatever the count of workers), for each count of ``--workers``;
the old loader is not run where its workers would need over 80 % of the host's available memory
(the figure it would need is printed instead). Then the throughput of
``--steps`` steps in this process, the loaders interleaved (goal: within 5 %), with the share of the
step spent waiting for the batch (``data_wait``), and the time from a worker's start to its first step
with no cache (it builds it), with the cache on disk but not in memory, and with both.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import ROOT, write_result
from benchmarks.folders import write_folder
from hpo.spec.config import DataConfig, TrainConfig
from hpo.training.batches import host_memory_bytes
from hpo.training.cache import CacheFiles, drop_from_page_cache
from hpo.training.checkpoint import atomic_save
from hpo.training.data import ImageData, load_data
from hpo.training.shapes import render_shapes
from hpo.training.trainer import Trainer

NET = {"base_channels": 8, "channel_mult": (1, 2), "num_res_blocks": 1, "dropout": 0.0, "device": "cpu"}
NET_EXTRA = {"batch_size": 32, "val_images": 64, "kimg": 1000.0}
LOADERS = ("old", "new")
OLD_PEAK_COPIES = 2.2  # copies of the set an old worker held at its peak (issue 74, measured on `hpo train`)
OWN_BYTES = 0.6e9  # a worker's own memory: interpreter, torch, network (the summed PSS on 1k images / 4)
MEMORY_SHARE = 0.8  # of the host's available memory, the most the old workers may be expected to take


def config(folder: Path, cache: Path, size: int) -> DataConfig:
    return DataConfig(source="folder", path=str(folder), image_size=size, cache_dir=str(cache))


def folder_of(root: Path, n: int, size: int) -> Path:
    """The generated folder, written once (a ``.done`` marker says it is complete)."""
    folder = root / f"shapes-{n}-{size}"
    if not (folder / ".done").exists():
        print(f"writing {n} images at {size} px to {folder} ...", flush=True)
        write_folder(*render_shapes(n, size, seed=0), folder)
        (folder / ".done").write_text("")
    return folder


def old_load(data_cfg: DataConfig) -> ImageData:
    """What ``load_data`` did up to 49469cb on a warm cache: ``torch.load`` the whole file into this process."""
    key = load_data(data_cfg).key  # maps, reads nothing: only to name the file
    blob = torch.load(CacheFiles.of(data_cfg.cache_path, key).legacy, weights_only=True)
    names, skipped = tuple(blob.pop("class_names")), tuple(tuple(s) for s in blob.pop("skipped"))
    return ImageData(class_names=names, key=key, skipped=skipped, **blob)


def write_legacy(data_cfg: DataConfig) -> None:
    """The old cache file beside the new one, for :func:`old_load`."""
    data = load_data(data_cfg)
    path = CacheFiles.of(data_cfg.cache_path, data.key).legacy
    if not path.exists():
        blob = {k: getattr(data, k).clone() for k in ("train_images", "train_labels", "val_images", "val_labels")}
        atomic_save({**blob, "class_names": list(data.class_names), "skipped": [list(s) for s in data.skipped]}, path)


def trainer_for(data: ImageData) -> Trainer:
    return Trainer(TrainConfig(**{**NET, **NET_EXTRA}), data, torch.device("cpu"))  # type: ignore[arg-type]


def worker(args: argparse.Namespace) -> None:
    """One worker: load, train ``--steps``, say when the first step is done and when all are, wait."""
    cfg = config(args.folder, args.cache, args.size)
    data = old_load(cfg) if args.loader == "old" else load_data(cfg)
    trainer = trainer_for(data)
    trainer.run_steps(1)
    print("first", flush=True)
    trainer.run_steps(args.steps - 1)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed heap back to the OS: the trainer's leftovers are noise here
    print("ready", flush=True)
    sys.stdin.readline()


def spawn(cfg: DataConfig, loader: str, steps: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "benchmarks.data_scale", "worker", "--loader", loader, "--steps", str(steps)]
    command += ["--folder", str(cfg.path), "--cache", str(cfg.cache_path), "--size", str(cfg.image_size)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def pss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no Pss for {pid}")


def mapped_pss(pid: int, path: Path) -> int:
    """PSS of the mappings of ``path`` in process ``pid`` (``/proc/PID/smaps``)."""
    total, inside = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].endswith(":"):  # a mapping's header: address range, ..., path
            inside = fields[-1] == str(path)
        elif inside and fields[0] == "Pss:":
            total += int(fields[1]) * 1024
    return total


def summed_pss(cfg: DataConfig, loader: str, workers: int, data_file: Path) -> tuple[int, int]:
    """Summed PSS of ``workers`` processes once each has trained 4 steps (all alive at once), and the
    part of it that maps ``data_file``."""
    procs = [spawn(cfg, loader, 4) for _ in range(workers)]
    for p in procs:
        assert p.stdout is not None
        while (line := p.stdout.readline()) and line.strip() != "ready":
            if not line:
                raise RuntimeError(f"a {loader} worker ended early")
    total = sum(pss(p.pid) for p in procs)
    mapped = sum(mapped_pss(p.pid, data_file) for p in procs)
    for p in procs:
        p.communicate("\n", timeout=60)
    return total, mapped


def first_step_seconds(cfg: DataConfig) -> float:
    """From a new worker's start to the end of its first step."""
    started = time.perf_counter()
    proc = spawn(cfg, "new", 1)
    assert proc.stdout is not None
    while proc.stdout.readline().strip() != "first":
        pass
    seconds = time.perf_counter() - started
    proc.communicate("\n", timeout=60)
    return seconds


def throughput(data: ImageData, steps: int) -> tuple[float, float]:
    """(images/s, mean data_wait) of ``steps`` steps after 8 of warm-up."""
    trainer = trainer_for(data)
    trainer.run_steps(8)
    trainer.readings.clear()
    started = time.perf_counter()
    trainer.run_steps(steps)
    seconds = time.perf_counter() - started
    trainer.batches.close()
    return steps * trainer.cfg.batch_size / seconds, statistics.fmean(r.data_wait for r in trainer.readings)


def old_need_bytes(workers: int, set_bytes: int) -> float:
    """Host memory ``workers`` old-loader workers would need at once: :data:`OLD_PEAK_COPIES` of the set
    and :data:`OWN_BYTES` each."""
    return workers * (OLD_PEAK_COPIES * set_bytes + OWN_BYTES)


def measure(args: argparse.Namespace) -> dict[str, float]:
    folder, small = folder_of(args.root, args.n, args.size), folder_of(args.root, 1000, args.size)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=args.root) as tmp:
        cfg, small_cfg = config(folder, Path(tmp) / "cache", args.size), config(small, Path(tmp) / "cache", args.size)
        out["first_step_cold_s"] = first_step_seconds(cfg)  # builds the cache
        data = load_data(cfg)
        out["set_mb"] = data.nbytes / 1e6
        drop_from_page_cache(CacheFiles.of(cfg.cache_path, data.key).images)
        out["first_step_disk_s"] = first_step_seconds(cfg)
        out["first_step_warm_s"] = first_step_seconds(cfg)
        for c in (cfg, small_cfg):
            write_legacy(c)
        data_file = CacheFiles.of(cfg.cache_path, data.key).images
        for workers in args.workers:
            for loader in LOADERS:
                need, memory = old_need_bytes(workers, data.nbytes), host_memory_bytes()
                if loader == "old" and need > MEMORY_SHARE * memory:
                    out[f"old_need_gb@{workers}"] = need / 1e9
                    print(
                        f"old: {workers} workers not run: they would need ~{need / 1e9:,.0f} GB ({OLD_PEAK_COPIES} "
                        f"copies of the set and {OWN_BYTES / 1e9:.1f} GB each), {memory / 1e9:,.0f} GB available",
                        flush=True,
                    )
                    continue
                total, mapped = summed_pss(cfg, loader, workers, data_file)
                share = total - summed_pss(small_cfg, loader, workers, data_file)[0]
                at = f"@{workers}"
                out[f"{loader}_pss_mb{at}"], out[f"{loader}_file_pss_mb{at}"] = total / 1e6, mapped / 1e6
                out[f"{loader}_data_pss_mb{at}"] = share / 1e6
                out[f"{loader}_data_per_set{at}"] = share / data.nbytes
                print(
                    f"{loader}: {workers} workers: summed PSS {total / 1e6:,.0f} MB, {share / 1e6:,.0f} MB over "
                    f"the same on 1k images, {mapped / 1e6:,.0f} MB of it the mapped cache file",
                    flush=True,
                )
        rates: dict[str, list[float]] = {loader: [] for loader in LOADERS}
        waits: dict[str, list[float]] = {loader: [] for loader in LOADERS}
        old = old_load(cfg)
        for _ in range(args.rounds):
            for loader, d in (("old", old), ("new", data)):
                rate, wait = throughput(d, args.steps)
                rates[loader].append(rate)
                waits[loader].append(wait)
        for loader in LOADERS:
            out[f"{loader}_images_per_s"] = statistics.median(rates[loader])
            out[f"{loader}_data_wait"] = statistics.median(waits[loader])
    return out


def report(out: dict[str, float], args: argparse.Namespace) -> None:
    print(f"\n{args.n} images at {args.size} px: {out['set_mb']:,.0f} MB as uint8; 1 thread per worker")
    print(f"{'':34}{'old (torch.load)':>18}{'new (mapped)':>14}")
    for workers in args.workers:
        at = f"@{workers}"

        def cell(key: str, fmt: str = ",.0f", *, at: str = at) -> str:
            value = out.get(key + at)
            return "not run" if value is None else format(value, fmt)

        print(
            f"{f'{workers} workers: data in PSS, MB':34}{cell('old_data_pss_mb'):>18}{cell('new_data_pss_mb'):>14}"
            f"   ×set: {cell('old_data_per_set', '.2f')} vs {cell('new_data_per_set', '.2f')}"
        )
        print(f"{f'{workers} workers: summed PSS, MB':34}{cell('old_pss_mb'):>18}{cell('new_pss_mb'):>14}")
        print(
            f"{f'{workers} workers: cache file in it, MB':34}{cell('old_file_pss_mb'):>18}{cell('new_file_pss_mb'):>14}"
        )
        if f"old_need_gb{at}" in out:
            print(f"{'':34}old not run: it would need ~{out[f'old_need_gb{at}']:,.0f} GB")
    print(
        f"{'images/s (median)':34}{out['old_images_per_s']:>18,.0f}{out['new_images_per_s']:>14,.0f}"
        f"   new/old: {out['new_images_per_s'] / out['old_images_per_s']:.3f}"
    )
    print(f"{'data_wait (median)':34}{out['old_data_wait']:>18.2%}{out['new_data_wait']:>14.2%}")
    print(
        f"time to first step: no cache {out['first_step_cold_s']:.1f} s, cache on disk only "
        f"{out['first_step_disk_s']:.1f} s, cache in memory {out['first_step_warm_s']:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", nargs="?", default="measure", choices=("measure", "worker"))
    parser.add_argument("--n", type=int, default=20_000, help="images in the generated folder")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="+", default=[4], help="worker counts, each measured")
    parser.add_argument("--steps", type=int, default=100, help="steps per throughput measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds per loader")
    parser.add_argument("--root", type=Path, default=Path(tempfile.gettempdir()) / "hpo-data-scale")
    parser.add_argument("--loader", choices=LOADERS, default="new")
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--cache", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.role == "worker":
        worker(args)
        return
    args.root.mkdir(parents=True, exist_ok=True)
    out = measure(args)
    report(out, args)
    name = "data_scale" if args.n == 20_000 else f"data_scale_{args.n // 1000}k"  # the docs cite each
    write_result(name, {**out, "n": args.n, "size": args.size, "workers": args.workers})


if __name__ == "__main__":
    main()
