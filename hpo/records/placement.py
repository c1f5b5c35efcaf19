"""Where a trial ran, as its worker recorded it (:func:`hpo.service.placement.placement_here`): host,
worker index, process and device, so that "which machine ran trial 17, and on which GPU?" has an
answer in ``hpo status`` and the report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpo.records.payload import Payload


@dataclass(frozen=True)
class Placement(Payload):
    KEEP_NONE: ClassVar[bool] = True  # "gpu": null says the trial ran on the CPU

    host: str
    worker: int  # the worker index (it offsets the sampler seed)
    pid: int
    device: str  # as the process sees it: "cpu" or "cuda:0"
    gpu: str | None = None  # the host's GPU id (CUDA_VISIBLE_DEVICES mapped back), None on the CPU
    gpu_name: str | None = None

    def cell(self) -> str:
        """Short, for a table: ``host/w0 cpu`` or ``host/w1 gpu 3``."""
        where = "cpu" if self.gpu is None else f"gpu {self.gpu}"
        return f"{self.host}/w{self.worker} {where}"

    def text(self) -> str:
        gpu = "" if self.gpu is None else f" = GPU {self.gpu} ({self.gpu_name})"
        return f"host {self.host}, worker {self.worker}, pid {self.pid}, {self.device}{gpu}"
