"""The data cache across real processes: one copy per host, one build, a corrupt cache rebuilt; and a
run killed mid-epoch that resumes the same batches."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from hpo.spec.config import DataConfig
from hpo.training.cache import CacheFiles
from hpo.training.data import load_data
from tests.service_helpers import write_spec

ROOT = Path(__file__).resolve().parents[2]

# A worker stand-in: imports, says so, loads the data, reads every image and (with ``argv[2]`` train)
# trains a few steps from it on a line of stdin, says so, and exits on the next line. ``argv[1]``:
# the DataConfig as JSON.
WORKER = """
import json, logging, sys
import torch
from hpo.spec.config import DataConfig
from hpo.training.data import load_data
from tests.service_helpers import write_spec
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


def test_a_run_killed_mid_epoch_resumes_the_same_batches_to_the_same_weights(tmp_path: Path) -> None:
    """``hpo train`` SIGKILLed once its first checkpoint is on disk, then run again, against the same
    command uninterrupted: 125 steps of 32 over 1 617 training images, the checkpoint at step 31
    (992 images into the first epoch), two epoch boundaries crossed after the resume."""
    spec = write_spec(tmp_path, train={"kimg": 4, "num_evals": 4, "batch_size": 32})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}

    def hpo_train(out: Path) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "hpo", "train", str(spec), "-o", str(out), "--threads", "1"]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)

    whole, killed = hpo_train(tmp_path / "whole"), hpo_train(tmp_path / "killed")  # one thread each, side by side
    checkpoint = tmp_path / "killed" / "checkpoint.pt"  # written atomically: there means complete
    deadline = time.monotonic() + 120
    while not checkpoint.exists():
        assert killed.poll() is None and time.monotonic() < deadline, killed.communicate()[1][-3000:]
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    assert killed.returncode == -signal.SIGKILL and not (tmp_path / "killed" / "summary.json").exists()
    again = hpo_train(tmp_path / "killed")
    _, said = again.communicate(timeout=180)
    assert again.returncode == 0, said[-3000:]
    _, whole_said = whole.communicate(timeout=180)
    assert whole.returncode == 0, whole_said[-3000:]

    resumed = re.search(r"resumed from \S+ at step (\d+)", said)
    n_train = re.search(r"data: (\d+) training", said)
    assert resumed and n_train, said[-3000:]
    step, n, batch, total = int(resumed[1]), int(n_train[1]), 32, 125
    assert (step * batch) % n != 0  # resumed mid-epoch ...
    assert step * batch // n < total * batch // n  # ... with an epoch boundary still to cross
    a, b = (torch.load(tmp_path / run / "checkpoint.pt", weights_only=False) for run in ("whole", "killed"))
    for part in ("model", "ema"):  # the same batches in the same order: the same weights, bit for bit
        assert all(torch.equal(a[part][name], b[part][name]) for name in a[part]), part
    assert a["step"] == b["step"] == total and a["losses"] == b["losses"]
    replayed = [{**p, "replayed": False} for p in b["history"]]  # the resumed run's first points are replayed
    assert a["history"] == replayed and any(p["replayed"] for p in b["history"])
    curves = [json.loads((tmp_path / run / "summary.json").read_text())["curve"] for run in ("whole", "killed")]
    assert curves[0] == curves[1]  # every evaluation point's validation metrics and score, exactly
    print(
        f"killed after the checkpoint at step {step} ({step * batch % n} of {n} images into an epoch); "
        f"resumed to step {total}: weights, losses and curve identical"
    )
