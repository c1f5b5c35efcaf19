"""Where a trial ran: host, worker index, process and device, recorded on the trial by its worker so
that "which machine ran trial 17, and on which GPU?" has an answer in ``hpo status`` and the report."""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Placement:
    host: str
    worker: int  # the worker index (it offsets the sampler seed)
    pid: int
    device: str  # as the process sees it: "cpu" or "cuda:0"
    gpu: str | None = None  # the host's GPU id (CUDA_VISIBLE_DEVICES mapped back), None on the CPU
    gpu_name: str | None = None

    @classmethod
    def here(cls, device: torch.device, worker: int) -> Placement:
        if device.type != "cuda":
            return cls(socket.gethostname(), worker, os.getpid(), str(device))
        index = device.index if device.index is not None else torch.cuda.current_device()
        return cls(
            socket.gethostname(),
            worker,
            os.getpid(),
            f"cuda:{index}",
            host_gpu_id(index, os.environ.get("CUDA_VISIBLE_DEVICES")),
            torch.cuda.get_device_name(index),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> Placement | None:
        """A stored placement (``as_dict``); None when there is none."""
        if raw is None:
            return None
        return cls(
            str(raw.get("host", "?")),
            int(raw.get("worker", 0)),
            int(raw.get("pid", 0)),
            str(raw.get("device", "?")),
            None if raw.get("gpu") is None else str(raw["gpu"]),
            None if raw.get("gpu_name") is None else str(raw["gpu_name"]),
        )

    def cell(self) -> str:
        """Short, for a table: ``host/w0 cpu`` or ``host/w1 gpu 3``."""
        where = "cpu" if self.gpu is None else f"gpu {self.gpu}"
        return f"{self.host}/w{self.worker} {where}"

    def text(self) -> str:
        gpu = "" if self.gpu is None else f" = GPU {self.gpu} ({self.gpu_name})"
        return f"host {self.host}, worker {self.worker}, pid {self.pid}, {self.device}{gpu}"


def host_gpu_id(index: int, visible: str | None) -> str:
    """The id the host knows a process's CUDA device ``index`` by: with CUDA_VISIBLE_DEVICES=2,3 the
    process's cuda:0 is the host's GPU 2 (entries may also be UUIDs)."""
    if not visible:
        return str(index)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return entries[index] if index < len(entries) else str(index)
