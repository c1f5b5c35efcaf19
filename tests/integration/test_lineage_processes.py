"""Issue 71 in real processes: a warmup-stable-decay run killed in its cooldown resumes to the weights
of the same command run uninterrupted (the cooldown's learning rates are the step's, not the clock's)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from hpo.spec.loading import load_spec
from hpo.training.lr import cooldown_start
from tests.service_helpers import write_spec

ROOT = Path(__file__).resolve().parents[2]


def test_a_wsd_run_killed_in_its_cooldown_resumes_to_the_uninterrupted_runs_weights(tmp_path: Path) -> None:
    """``hpo train --set train.lr_schedule=wsd`` SIGKILLed at its first checkpoint inside the cooldown
    (250 steps of 32, the cooldown the last half, checkpoints at every eighth), then run again."""
    train = {"kimg": 8, "num_evals": 8, "batch_size": 32, "lr_schedule": "wsd", "cooldown_share": 0.5}
    spec = write_spec(tmp_path, train=train)
    cfg = load_spec(spec).train_config({"batch_size": 32})
    start = cooldown_start(cfg)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}

    def hpo_train(out: Path) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "hpo", "train", str(spec), "-o", str(out), "--threads", "1"]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)

    whole, killed = hpo_train(tmp_path / "whole"), hpo_train(tmp_path / "killed")  # one thread each, side by side
    checkpoint, seen, step = tmp_path / "killed" / "checkpoint.pt", 0.0, 0
    deadline = time.monotonic() + 240
    while step <= start:  # a checkpoint is written atomically: there means complete
        assert killed.poll() is None and time.monotonic() < deadline, killed.communicate()[1][-3000:]
        if checkpoint.exists() and checkpoint.stat().st_mtime != seen:
            seen = checkpoint.stat().st_mtime
            step = int(torch.load(checkpoint, weights_only=False)["step"])
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    killed.communicate()
    assert killed.returncode == -signal.SIGKILL and not (tmp_path / "killed" / "summary.json").exists()
    again = hpo_train(tmp_path / "killed")
    _, said = again.communicate(timeout=300)
    assert again.returncode == 0, said[-3000:]
    _, whole_said = whole.communicate(timeout=300)
    assert whole.returncode == 0, whole_said[-3000:]

    resumed = re.search(r"resumed from \S+ at step (\d+)", said)
    assert resumed and start < int(resumed[1]) < cfg.total_steps, said[-3000:]  # killed inside the cooldown
    a, b = (torch.load(tmp_path / run / "checkpoint.pt", weights_only=False) for run in ("whole", "killed"))
    for part in ("model", "ema", "optimizer"):
        flat_a, flat_b = flatten(a[part]), flatten(b[part])
        assert flat_a.keys() == flat_b.keys() and all(torch.equal(flat_a[k], flat_b[k]) for k in flat_a), part
    assert a["step"] == b["step"] == cfg.total_steps and a["losses"] == b["losses"]
    print(f"killed at step {resumed[1]} (cooldown from {start}); resumed to step {cfg.total_steps}: identical")


def flatten(tree: object, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a state dict (nested dicts and lists: the optimizer's), by its path."""
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in flatten(sub, f"{prefix}/{key}").items()}
    if isinstance(tree, list | tuple):
        return {k: v for i, sub in enumerate(tree) for k, v in flatten(sub, f"{prefix}/{i}").items()}
    return {f"{prefix}=": torch.tensor(float(tree))} if isinstance(tree, int | float) else {}
