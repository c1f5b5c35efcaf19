"""Where this process runs a trial, read off the machine by its worker and recorded on the trial
(the record, :class:`hpo.records.placement.Placement`, is read by ``hpo status`` and the report)."""

from __future__ import annotations

import os
import socket

import torch

from hpo.records import Placement


def placement_here(device: torch.device, worker: int) -> Placement:
    """This process's host, pid and ``device`` (with the host's id and name of its GPU on CUDA)."""
    if device.type != "cuda":
        return Placement(socket.gethostname(), worker, os.getpid(), str(device))
    index = device.index if device.index is not None else torch.cuda.current_device()
    return Placement(
        socket.gethostname(),
        worker,
        os.getpid(),
        f"cuda:{index}",
        host_gpu_id(index, os.environ.get("CUDA_VISIBLE_DEVICES")),
        torch.cuda.get_device_name(index),
    )


def host_gpu_id(index: int, visible: str | None) -> str:
    """The id the host knows a process's CUDA device ``index`` by: with CUDA_VISIBLE_DEVICES=2,3 the
    process's cuda:0 is the host's GPU 2 (entries may also be UUIDs)."""
    if not visible:
        return str(index)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return entries[index] if index < len(entries) else str(index)
