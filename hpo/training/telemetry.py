"""Hardware telemetry at each host sync: what a practitioner looks at first when a run is slow or
leaks. Process memory (RSS) and CPU use everywhere; on CUDA the allocator's memory (allocated,
reserved, peak) and, through NVML (``nvidia-ml-py``, optional), the GPU's utilisation and power; and
the share of step time the host spent preparing batches (high: the run is input-bound)."""

from __future__ import annotations

import logging
import os
import resource
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import torch

from hpo.records import HardwareSummary

log = logging.getLogger("hpo.telemetry")
_said_no_nvml = False


class Nvml(Protocol):
    """The part of pynvml used here (tests pass a fake)."""

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...


@dataclass(frozen=True)
class Hardware:
    """One sync point's reading; ``None`` where the machine cannot say."""

    rss_mb: float
    cpu_percent: float  # process CPU time over wall time since the last reading (100 = one core busy)
    data_wait: float  # share of step time spent preparing batches, 0..1
    cuda_allocated_mb: float | None = None
    cuda_reserved_mb: float | None = None
    cuda_peak_mb: float | None = None
    gpu_util_percent: float | None = None
    gpu_power_w: float | None = None

    def scalars(self) -> dict[str, float]:
        """The readings that exist, by name (TensorBoard's ``hw/NAME``)."""
        return {k: float(v) for k, v in asdict(self).items() if v is not None}


def rss_mb() -> float:
    """The process's resident memory now (Linux /proc), else its peak (getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def load_nvml() -> Nvml | None:
    """pynvml, initialised; None (said once per process) when it is not installed or finds no GPU."""
    global _said_no_nvml
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception as err:
        if not _said_no_nvml:
            log.info("no GPU utilisation or power readings (%s); pip install nvidia-ml-py to add them", err)
            _said_no_nvml = True
        return None


class Telemetry:
    """Readings for one run on ``device``: :meth:`waiting` times batch preparation, :meth:`read`
    gives the numbers since the last reading."""

    def __init__(self, device: torch.device, nvml: Nvml | None = None) -> None:
        self.device = device
        self.nvml = nvml if nvml is not None or device.type != "cuda" else load_nvml()
        self.handle = self.nvml.nvmlDeviceGetHandleByIndex(device.index or 0) if self.nvml is not None else None
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.waited = 0.0

    def add_wait(self, seconds: float) -> None:
        self.waited += seconds

    def read(self) -> Hardware:
        wall, cpu = time.perf_counter(), time.process_time()
        elapsed = max(wall - self.wall, 1e-9)
        reading = Hardware(
            rss_mb=rss_mb(),
            cpu_percent=100.0 * (cpu - self.cpu) / elapsed,
            data_wait=min(1.0, self.waited / elapsed),
            **self._cuda(),
            **self._gpu(),
        )
        self.wall, self.cpu, self.waited = wall, cpu, 0.0
        return reading

    def _cuda(self) -> dict[str, float]:
        if self.device.type != "cuda":
            return {}
        return {
            "cuda_allocated_mb": torch.cuda.memory_allocated(self.device) / 2**20,
            "cuda_reserved_mb": torch.cuda.memory_reserved(self.device) / 2**20,
            "cuda_peak_mb": torch.cuda.max_memory_allocated(self.device) / 2**20,
        }

    def _gpu(self) -> dict[str, float]:
        if self.nvml is None:
            return {}
        try:
            util = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
            power = self.nvml.nvmlDeviceGetPowerUsage(self.handle)
        except Exception as err:  # a reading must never stop training
            log.debug("NVML reading failed: %s", err)
            return {}
        return {"gpu_util_percent": float(util.gpu), "gpu_power_w": power / 1000.0}


def summarise_hardware(readings: list[Hardware], *, rss_start_mb: float) -> HardwareSummary:
    def mean(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return sum(present) / len(present) if present else None

    peaks = [r.cuda_peak_mb for r in readings if r.cuda_peak_mb is not None]
    return HardwareSummary(
        rss_start_mb=rss_start_mb,
        rss_peak_mb=max([rss_start_mb, *(r.rss_mb for r in readings)]),
        data_wait=mean([r.data_wait for r in readings]) or 0.0,
        cpu_percent=mean([r.cpu_percent for r in readings]) or 0.0,
        cuda_peak_mb=max(peaks) if peaks else None,
        gpu_util_percent=mean([r.gpu_util_percent for r in readings]),
        gpu_power_w=mean([r.gpu_power_w for r in readings]),
        pid=os.getpid(),
    )
