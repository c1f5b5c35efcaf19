"""Jobs that several benchmark processes share without a scheduler: each job is claimed by creating
``NAME.claim`` (exclusive create, holding the claimant's pid); a claim whose process is gone is taken
over. Start one process per free core, at any time: each takes the next unclaimed job."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(path: Path) -> bool:
    """Claim ``path`` for this process: True when it is ours (new, or its claimant has died)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            pid = int(path.read_text() or 0)
        except (OSError, ValueError):
            return False
        if pid == os.getpid() or (pid and _alive(pid)):
            return pid == os.getpid()
        path.unlink(missing_ok=True)  # its claimant died: take it over (one racer wins the re-create)
        return claim(path)
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


def unclaimed(jobs: Iterable[T], *, done: Callable[[T], bool], claim_path: Callable[[T], Path]) -> Iterator[T]:
    """The jobs not done yet that this process wins, in order; each claim is released after its job."""
    for job in jobs:
        if done(job) or not claim(claim_path(job)):
            continue
        try:
            if not done(job):  # another process may have finished it between the two checks
                yield job
        finally:
            claim_path(job).unlink(missing_ok=True)
