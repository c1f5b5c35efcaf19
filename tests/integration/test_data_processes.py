"""The data cache across real processes: one copy per host, one build, a corrupt cache rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hpo.spec.config import DataConfig
from hpo.training.cache import CacheFiles
from hpo.training.data import load_data

ROOT = Path(__file__).resolve().parents[2]

# A worker stand-in: imports, says so, loads the data, reads every image and (with ``argv[2]`` train)
# trains a few steps from it on a line of stdin, says so, and exits on the next line. ``argv[1]``:
# the DataConfig as JSON.
WORKER = """
import json, logging, sys
import torch
from hpo.spec.config import DataConfig
from hpo.training.data import load_data
from hpo.training.trainer import Trainer
from tests.conftest import tiny_config
logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
print("imported", flush=True)
sys.stdin.readline()
data = load_data(DataConfig(**json.loads(sys.argv[1])))
total = sum(int(data.train_images[i : i + 512].sum()) for i in range(0, data.train_images.shape[0], 512))
if sys.argv[2] == "train":
    Trainer(tiny_config(batch_size=16), data, torch.device("cpu")).run_steps(4)
print("loaded", data.key, total, flush=True)
sys.stdin.readline()
"""


def start(cfg: DataConfig, mode: str = "train") -> subprocess.Popen[str]:
    fields = {k: getattr(cfg, k) for k in ("source", "image_size", "num_images", "cache_dir")}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, json.dumps(fields), mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip


def pss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no Pss in /proc/{pid}/smaps_rollup")


def step(workers: list[subprocess.Popen[str]], expect: str) -> list[str]:
    """Let every worker go on (a line on stdin) and wait until each says ``expect``."""
    lines = []
    for w in workers:
        assert w.stdin is not None and w.stdout is not None
        if expect != "imported":
            w.stdin.write("go\n")
            w.stdin.flush()
    for w in workers:
        assert w.stdout is not None
        line = w.stdout.readline()
        assert line.startswith(expect), (line, w.stderr.read() if w.stderr else "")
        lines.append(line.strip())
    return lines


def finish(workers: list[subprocess.Popen[str]]) -> list[str]:
    errs = []
    for w in workers:
        _, err = w.communicate("exit\n", timeout=60)
        assert w.returncode == 0, err
        errs.append(err)
    return errs


def test_two_workers_on_one_host_hold_the_cached_set_once(tmp_path: Path) -> None:
    cfg = DataConfig(source="shapes", image_size=64, num_images=5000, cache_dir=str(tmp_path / "cache"))
    data = load_data(cfg)  # built here: the workers only map it
    set_bytes = data.nbytes
    del data
    workers = [start(cfg, "read"), start(cfg, "read")]  # a trainer's own memory (~0.2 GB) would drown 61 MB
    step(workers, "imported")
    before = sum(pss_bytes(w.pid) for w in workers)
    loaded = step(workers, "loaded")
    grown = sum(pss_bytes(w.pid) for w in workers) - before
    finish(workers)
    assert len({line.split()[2] for line in loaded}) == 1  # both read the same images
    # one copy; a copy each would be 2× the set's 61 MB
    assert 0.8 * set_bytes < grown < 1.5 * set_bytes, (
        f"PSS grew {grown / 1e6:.0f} MB for a {set_bytes / 1e6:.0f} MB set"
    )


def test_workers_that_start_together_build_one_cache_and_map_it(tmp_path: Path) -> None:
    cfg = DataConfig(source="shapes", image_size=16, num_images=3000, cache_dir=str(tmp_path / "cache"))
    workers = [start(cfg) for _ in range(3)]
    step(workers, "imported")
    loaded = step(workers, "loaded")
    errs = finish(workers)
    assert len(set(loaded)) == 1  # the same key and the same images in every worker
    assert sum(err.count("data cache written") for err in errs) == 1, errs
    assert len(list((tmp_path / "cache").glob("data-*.u8"))) == 1
    assert not list((tmp_path / "cache").glob(".data-*"))  # no temporary file left behind


def test_a_worker_that_finds_a_truncated_cache_rebuilds_it_and_says_so_once(tmp_path: Path) -> None:
    cfg = DataConfig(source="shapes", image_size=16, num_images=300, cache_dir=str(tmp_path / "cache"))
    files = CacheFiles.of(cfg.cache_path, load_data(cfg).key)
    os.truncate(files.images, files.images.stat().st_size - 100)
    workers = [start(cfg)]
    step(workers, "imported")
    step(workers, "loaded")
    (err,) = finish(workers)
    corrupt = [line for line in err.splitlines() if "corrupt" in line]
    assert len(corrupt) == 1 and "rebuilding it" in corrupt[0], err
    assert files.images.stat().st_size == json.loads(files.meta.read_text())["size"]
