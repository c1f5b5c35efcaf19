"""Where a run's training images live, and its batches by step.

Three placements, one rule each (:func:`placement`):

- ``device``: the whole set is copied to the GPU once, where it takes at most
  :data:`RESIDENT_SHARE` of the free GPU memory (the rest is the network's, its optimizer's and its
  activations'); batches are indexed there.
- ``host``: the set stays in the cache's shared mapping (one copy per host, :mod:`hpo.training.cache`);
  each batch is gathered there, pinned when the device is a GPU, and copied with a non-blocking
  transfer. On the CPU nothing is copied but the batch itself.
- ``streamed``: as ``host``, for a set larger than :data:`STREAM_SHARE` of the memory this process
  may use: the operating system pages the mapped file in and out as batches touch it.

Off the device, a background thread gathers the next step's batch while this one trains, so the
reads of a streamed set overlap the step. The batch of a step is a pure function of the step and
the seed (:func:`batch_indices`): a resumed run continues the same order, mid-epoch.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

RESIDENT_SHARE = 0.25  # of the GPU's free memory, the most the whole set may take to live there
STREAM_SHARE = 0.5  # of the memory this process may use, the most a set may take before it is streamed
PLACEMENTS = ("device", "host", "streamed")


def batch_indices(n: int, batch: int, step: int, seed: int) -> torch.Tensor:
    """Indices of the batch at ``step``: epochs are seeded permutations, so this is stateless."""
    out: list[torch.Tensor] = []
    pos, end = step * batch, (step + 1) * batch
    while pos < end:
        epoch, offset = divmod(pos, n)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        take = min(n - offset, end - pos)
        out.append(perm[offset : offset + take])
        pos += take
    return torch.cat(out)


def host_memory_bytes() -> int:
    """The memory this process may use: the host's available memory (free and reclaimable cache),
    or its cgroup's limit where one is set and lower."""
    available = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    available = available or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = cgroup_limit()
    return available if limit is None else min(available, limit)


def cgroup_limit(root: Path = Path("/")) -> int | None:
    """The lowest memory limit of this process's cgroup: v2's ``memory.max`` or v1's
    ``memory.limit_in_bytes``, of its own group (``/proc/self/cgroup``) or of the mount's root (a
    container's view); None when none is set."""
    mount = root / "sys/fs/cgroup"
    candidates = [mount / "memory.max", mount / "memory" / "memory.limit_in_bytes"]
    membership = root / "proc/self/cgroup"
    for line in membership.read_text().splitlines() if membership.exists() else []:
        _, controllers, group = line.split(":", 2)
        if controllers == "":
            candidates.append(mount / group.lstrip("/") / "memory.max")
        elif "memory" in controllers.split(","):
            candidates.append(mount / "memory" / group.lstrip("/") / "memory.limit_in_bytes")
    limits = [int(text) for path in candidates if path.is_file() and (text := path.read_text().strip()).isdigit()]
    return min(limits) if limits else None


def planned_placement(nbytes: int, *, gpu_free_bytes: int | None, host_bytes: int) -> str:
    """The rule, on numbers: ``device`` when a GPU's free memory takes the set in :data:`RESIDENT_SHARE`
    of it, else ``streamed`` over :data:`STREAM_SHARE` of the host's memory, else ``host``."""
    if gpu_free_bytes is not None and nbytes <= RESIDENT_SHARE * gpu_free_bytes:
        return "device"
    return "streamed" if nbytes > STREAM_SHARE * host_bytes else "host"


def placement(nbytes: int, device: torch.device, *, host_bytes: int | None = None) -> str:
    """Where a set of ``nbytes`` trains on ``device``: ``device``, ``host`` or ``streamed`` (module doc)."""
    free = int(torch.cuda.mem_get_info(device)[0]) if device.type == "cuda" else None
    return planned_placement(nbytes, gpu_free_bytes=free, host_bytes=host_bytes or host_memory_bytes())


def placement_words(where: str, nbytes: int) -> str:
    """One line for a plan: where a set of ``nbytes`` will train, and the rule that says so."""
    size = f"the images take {nbytes / 1e9:.2f} GB as uint8"
    rule = {
        "device": f"kept on the GPU (≤ {RESIDENT_SHARE:.0%} of its memory)",
        "host": f"one shared copy per host, batches copied to the device (over {RESIDENT_SHARE:.0%} of a GPU's "
        f"memory or no GPU; under {STREAM_SHARE:.0%} of the host's)",
        "streamed": f"streamed from the cache on disk, the OS paging batches in (over {STREAM_SHARE:.0%} of the "
        "memory a worker may use)",
    }[where]
    return f"data: {size}; {rule}"


class BatchSource:
    """The uint8 images and labels of each step's batch, on the device."""

    def __init__(
        self, images: torch.Tensor, labels: torch.Tensor, device: torch.device, *, batch_size: int, seed: int
    ) -> None:
        self.images, self.labels, self.device = images, labels, device
        self.batch_size, self.seed = batch_size, seed
        self.on_device = images.device == device
        self.pool = None if self.on_device else ThreadPoolExecutor(max_workers=1, thread_name_prefix="hpo-batches")
        self.ahead: tuple[int, Future[tuple[torch.Tensor, torch.Tensor]]] | None = None

    def indices(self, step: int) -> torch.Tensor:
        return batch_indices(int(self.images.shape[0]), self.batch_size, step, self.seed)

    def gather(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch of ``step`` gathered on the host (pinned for a GPU)."""
        idx = self.indices(step)
        x, y = self.images[idx], self.labels[idx]
        if self.device.type == "cuda":
            x, y = x.pin_memory(), y.pin_memory()
        return x, y

    def get(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pool is None:
            idx = self.indices(step).to(self.device)
            return self.images[idx], self.labels[idx]
        if self.ahead is not None and self.ahead[0] == step:
            x, y = self.ahead[1].result()
        else:
            x, y = self.gather(step)
        self.ahead = (step + 1, self.pool.submit(self.gather, step + 1))
        blocking = self.device.type != "cuda"
        return x.to(self.device, non_blocking=not blocking), y.to(self.device, non_blocking=not blocking)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
