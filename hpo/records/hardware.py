"""A run's hardware readings as a trial stores them (``HardwareSummary``, written by
:func:`hpo.training.telemetry.summarise_hardware`), with its table cell and line."""

from __future__ import annotations

from dataclasses import dataclass

from hpo.files import JsonObject
from hpo.records.payload import Payload

INPUT_BOUND = 0.3  # a share of step time waiting for data above this is worth a line in the report


def megabytes(mb: float) -> str:
    return f"{mb / 1024:.3g} GB" if mb >= 1024 else f"{mb:.0f} MB"


@dataclass(frozen=True)
class HardwareSummary(Payload):
    """A run's readings in a few numbers (a trial's ``hardware`` attribute)."""

    rss_start_mb: float
    rss_peak_mb: float
    data_wait: float  # mean share over the run's readings
    cpu_percent: float
    cuda_peak_mb: float | None = None
    gpu_util_percent: float | None = None
    gpu_power_w: float | None = None
    pid: int = 0

    def as_dict(self) -> JsonObject:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in super().as_dict().items()}

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
