"""TensorBoard event logs, one run directory per trial (``tensorboard/STUDY/trial-0007``).

Written with tensorboardX: workers need only it and protobuf, not TensorBoard's server stack (which
``hpo tensorboard`` needs where it runs). Scalars of the steps between evaluation points are held in
memory and written right after the trainer's checkpoint at each point, so the file never holds a
step beyond the checkpoint: a retry that resumes from it continues the run with no duplicate or
backward steps. A worker killed between the checkpoint and the write leaves a gap, never a repeat.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from hpo.tracking.base import RunInfo, plain_params, scalars_of, sync_scalars
from hpo.training.trainer import EvalPoint, SyncPoint


class TensorBoardRun:
    def __init__(self, log_dir: Path, info: RunInfo) -> None:
        from tensorboardX import SummaryWriter

        log_dir.mkdir(parents=True, exist_ok=True)
        self.info = info
        self.writer = SummaryWriter(logdir=str(log_dir), flush_secs=10**6, max_queue=10**6)
        self.pending: list[tuple[str, float, int]] = []

    def on_sync(self, point: SyncPoint) -> None:
        for step, loss, norm, lr in zip(point.steps, point.losses, point.grad_norms, point.lrs, strict=True):
            self.pending += [("train/loss", loss, step), ("train/grad_norm", norm, step), ("train/lr", lr, step)]
        self.pending += [(tag, value, point.steps[-1]) for tag, value in sync_scalars(point).items()]

    def on_eval(self, point: EvalPoint, grid: np.ndarray | None) -> None:
        for tag, value, step in self.pending:
            self.writer.add_scalar(tag, value, step)
        self.pending.clear()
        for tag, value in scalars_of(point).items():
            self.writer.add_scalar(tag, value, point.step)
        if grid is not None:
            self.writer.add_image("samples/while_training", grid, point.step, dataformats="HWC")
        self.writer.flush()

    def on_result(self, metrics: Mapping[str, float], images: Mapping[str, np.ndarray], step: int) -> None:
        """The final numbers as scalars and, through the hparams plugin, beside the parameters."""
        from tensorboardX.summary import hparams

        for tag, image in images.items():
            self.writer.add_image(tag, image, step, dataformats="HWC")
        named = {f"result/{k}": float(v) for k, v in metrics.items()}
        for tag, value in named.items():
            self.writer.add_scalar(tag, value, step)
        for summary in hparams(plain_params(self.info.params), named):
            self.writer.file_writer.add_summary(summary)
        self.writer.flush()

    def close(self) -> None:
        """Closed even when its file cannot be written (a full disk): else tensorboardX's own exit hook
        flushes it again and prints a traceback as the process ends."""
        writers = list((self.writer.all_writers or {}).values())
        try:
            self.writer.close()
        finally:
            for file_writer in writers:  # tensorboardX's EventFileWriter: closed means its exit hook does nothing
                file_writer.event_writer._closed = True
