"""Device selection and the small context managers that own runtime resources."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
from torch import nn

from hpo.errors import HpoError


def resolve_device(name: str) -> torch.device:
    """``auto`` → the current CUDA device when present, else CPU; anything else is checked."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise HpoError(f"unknown device {name!r}; expected auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise HpoError(f"device {name!r} requested but CUDA is not available on this machine; use device: auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise HpoError(f"device {name!r}: this machine has {torch.cuda.device_count()} GPU(s)")
    return device


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Switch to eval mode for the block, restoring the previous mode after."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def autocast(device: torch.device, *, sampling: bool = False) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast on CUDA (fp16 attention overflows into NaN). On the CPU only for ``sampling``,
    and only where the CPU multiplies bf16 natively (:func:`cpu_bf16`): there the same weights score
    within 0.023 of fp32 (seed sd 0.655) in 1/1.73 of the time (``benchmarks/fid_speed.py precision``),
    while training stays fp32 (its one bf16 run scored 8.8 against 6.5: not shown harmless)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if sampling and cpu_bf16():
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


CPU_BF16_ENV = "HPO_CPU_BF16"


def cpu_bf16() -> bool:
    """Whether sampling on this CPU runs in bf16: ``HPO_CPU_BF16`` 0 or 1 decides, else (unset or
    ``auto``) whether the CPU has AVX512-BF16 or AMX; without them bf16 is emulated and slower."""
    setting = os.environ.get(CPU_BF16_ENV, "auto").strip().lower()
    if setting not in ("0", "1", "auto"):
        raise HpoError(f"{CPU_BF16_ENV}={setting!r}: expected 0 (fp32), 1 (bf16) or auto")
    if setting != "auto":
        return setting == "1"
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu's own (private: looked up)
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def default_memory_limit(device: torch.device) -> int:
    """The memory a run may plan for: the GPU's, or 80% of the machine's RAM on the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8)


def peak_memory_bytes(device: torch.device) -> int:
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else 0


def release_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def set_threads(threads: int | None) -> None:
    """Give torch ``threads`` CPU threads (None: torch's default, one per core). Processes that share
    cores must split them: two that each take every core run many times slower than one."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)


def threads_per_worker(workers: int) -> int:
    """The CPU cores this process may run on (its affinity: a container's cpuset or ``taskset``, not
    the machine's count) split between ``workers`` local processes (at least one thread each)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(workers, 1))
