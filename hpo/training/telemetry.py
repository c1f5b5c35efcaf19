"""Hardware telemetry at each host sync: what a practitioner looks at first when a run is slow or
leaks. Process memory (RSS) and CPU use everywhere; on CUDA the allocator's memory (allocated,
reserved, peak) and, through NVML (``nvidia-ml-py``, optional), the GPU's utilisation and power; and
the share of step time the host spent preparing batches (high: the run is input-bound)."""

from __future__ import annotations

import itertools
import logging
import os
import resource
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import torch

log = logging.getLogger("hpo.telemetry")
INPUT_BOUND = 0.3  # a share of step time waiting for data above this is worth a line in the report
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


def megabytes(mb: float) -> str:
    return f"{mb / 1024:.3g} GB" if mb >= 1024 else f"{mb:.0f} MB"


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


@dataclass(frozen=True)
class HardwareSummary:
    """A run's readings in a few numbers (a trial's ``hardware`` attribute)."""

    rss_start_mb: float
    rss_peak_mb: float
    data_wait: float  # mean share over the run's readings
    cpu_percent: float
    cuda_peak_mb: float | None = None
    gpu_util_percent: float | None = None
    gpu_power_w: float | None = None
    pid: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareSummary:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def cell(self) -> str:
        """For a table: 'wait 38 %, RSS 1.2 GB'."""
        return f"wait {100 * self.data_wait:.0f} %, RSS {megabytes(self.rss_peak_mb)}"

    def line(self) -> str:
        """'input-bound: 38 % of step time waiting for data; RSS 1.2 GB, GPU 91 %, 310 W'."""
        parts = [f"RSS peak {megabytes(self.rss_peak_mb)}"]
        if self.cuda_peak_mb is not None:
            parts.append(f"CUDA peak {megabytes(self.cuda_peak_mb)}")
        if self.gpu_util_percent is not None:
            parts.append(f"GPU {self.gpu_util_percent:.0f} %")
        if self.gpu_power_w is not None:
            parts.append(f"{self.gpu_power_w:.0f} W")
        wait = f"{100 * self.data_wait:.0f} % of step time waiting for data"
        head = f"input-bound: {wait}" if self.data_wait > INPUT_BOUND else wait
        return f"{head}; " + ", ".join(parts)


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


def hardware_of(raw: object) -> HardwareSummary | None:
    """A stored hardware summary (``HardwareSummary.as_dict``), if there is one."""
    return HardwareSummary.from_dict(raw) if isinstance(raw, dict) else None


def rss_leak(starts: list[tuple[int, float, int]], *, min_trials: int = 3, min_growth_mb: float = 200.0) -> str | None:
    """Per worker process, (pid, RSS at a trial's start, that trial's batch size) in trial order → a
    sentence when the process's RSS kept growing after it had settled: counted from the first trial
    start after its warm-up (its first trial) and after the largest batch it has run (allocators keep
    what the largest batch needed), it grew at every trial start, by more than ``min_growth_mb``, over
    at least ``min_trials`` starts."""
    by_pid: dict[int, list[tuple[float, int]]] = {}
    for pid, rss, batch in starts:
        by_pid.setdefault(pid, []).append((rss, batch))
    for pid, readings in by_pid.items():
        settled = settled_from(readings)
        values = [rss for rss, _ in readings[settled:]]
        rising = all(b > a for a, b in itertools.pairwise(values))
        if len(values) >= min_trials and rising and values[-1] - values[0] > min_growth_mb:
            largest = max(batch for _, batch in readings)
            return (
                f"memory leak? worker process {pid}: RSS at trial start grew from {values[0]:.0f} MB to "
                f"{values[-1]:.0f} MB over the {len(values)} trials since its warm-up and its largest batch "
                f"({largest}), at every one"
            )
    return None


def settled_from(readings: list[tuple[float, int]]) -> int:
    """The first trial start that follows the warm-up trial and the last trial that raised the
    process's largest batch so far."""
    last_raise, largest = 0, -1
    for i, (_, batch) in enumerate(readings):
        if batch > largest:
            last_raise, largest = i, batch
    return last_raise + 1
