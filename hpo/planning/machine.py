"""The machine a plan is for and the study's default name: ``hpo init`` and ``hpo run`` plan alike."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from hpo.errors import HpoError
from hpo.planning.plan import Machine
from hpo.training.runtime import default_memory_limit


def this_machine(gpu_memory_gb: float | None) -> Machine:
    """``--gpu-memory`` plans for another machine; else CUDA device 0's memory, else the CPU plan in
    the memory the doctor allows there (80% of RAM)."""
    if gpu_memory_gb is not None:
        if gpu_memory_gb <= 0:
            raise HpoError(f"--gpu-memory {gpu_memory_gb:g}: give the GPU's memory in GB, e.g. 24 or 80")
        return Machine("gpu", int(gpu_memory_gb * 2**30), f"a GPU with {gpu_memory_gb:g} GiB (--gpu-memory)")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        memory = int(props.total_memory)
        return Machine("gpu", memory, f"this machine's GPU ({props.name}, {memory / 2**30:.0f} GiB)")
    memory = default_memory_limit(torch.device("cpu"))
    return Machine("cpu", memory, f"this machine's CPU ({memory / 2**30:.0f} GiB, 80% of its memory)")


def default_name(images: Path, size: int) -> str:
    """The folder's name and the image size (``bikes-128``), made a safe study name."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", images.resolve().name).strip("-._") or "images"
    return f"{stem[:90]}-{size}"
