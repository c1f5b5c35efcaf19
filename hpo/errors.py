"""Errors a person can fix: the CLI prints them as one line, without a traceback."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path


class HpoError(Exception):
    """A problem with the user's input or environment; the message names it and the fix."""


class ConfigError(HpoError):
    """An invalid setting. ``key`` is the dotted path of the offending key (``train.lr``)."""

    def __init__(self, key: str, message: str, *, file: str | None = None) -> None:
        self.key = key
        self.message = message
        self.file = file
        where = f"{file}: " if file else ""
        super().__init__(f"{where}{key}: {message}")

    def in_file(self, file: str) -> ConfigError:
        return ConfigError(self.key, self.message, file=file)


class DataError(HpoError):
    """The data cannot be loaded as configured."""


def writable_folder(path: Path, what: str) -> Path:
    """``path`` if this process may write there (or create it: its nearest existing parent is
    writable); else a one-line error naming the owner and the fix (a bind mount the engine created as
    root, for a container running as uid 1000). Creates nothing."""
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
    try:
        probe = existing / f".hpo-write-check-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except PermissionError:
        raise HpoError(
            f"cannot write {what} to {path}/: {existing} belongs to uid {existing.stat().st_uid} and this process "
            f"runs as uid {os.getuid()}; make it writable (in Docker: mkdir -p {path.name} && sudo chown 1000:1000 "
            f"{path.name})"
        ) from None
    return path


# ---- a full disk: a fault of the host, not of the trial or the user's input ----

# How a full disk (or quota) reads when a library reports it without an errno: torch.save's stream writer
# ("unexpected pos …", "file write failed"), SQLite ("database or disk is full"), safetensors and Rust I/O
# ("StorageFull"), PostgreSQL ("could not extend file … No space left on device").
DISK_FULL_WORDS = (
    "No space left on device",
    "Disk quota exceeded",
    "database or disk is full",
    "unexpected pos",
    "file write failed",
    "StorageFull",
)
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
MB = 1 << 20
HOST_FAULT_EXIT = 75  # sysexits' EX_TEMPFAIL: the host failed, not the input; the same command later continues


class HostFault(HpoError):
    """The host stopped the work (a full disk), not the user's input nor the trial: the command exits
    with :data:`HOST_FAULT_EXIT`, and running it again once the host is mended continues the work."""


class DiskFull(HostFault):
    """A write failed, or would fail, for want of space at ``path``; the message says where, how much is
    free, what the next write needs, and the fix. The trial that met it goes back to the queue."""

    def __init__(
        self, path: Path, *, need: int | None = None, what: str = "the next write", elsewhere: str | None = None
    ) -> None:
        self.path = path
        self.need = need
        free = free_bytes(path)
        needs = f", {what} needs {need / MB:.0f} MB" if need is not None else ""
        have = f"{free / MB:.0f} MB free" if free is not None else "its free space unknown"
        fix = f"free space there (or {elsewhere})" if elsewhere else "free space there"
        super().__init__(f"the disk at {path} is full ({have}{needs}): {fix} and run the same command")


def causes(err: BaseException | None, limit: int = 10) -> Iterator[BaseException]:
    """``err`` and what it was raised from or while handling, nearest first (at most ``limit``)."""
    while err is not None and limit > 0:
        yield err
        err, limit = err.__cause__ or err.__context__, limit - 1


def is_disk_full(err: BaseException | None) -> bool:
    """Whether ``err`` (or what it was raised from) is a write refused for want of space, however the
    library in between said it: an ``OSError`` with ENOSPC/EDQUOT (PIL, TensorBoard, shutil), torch's
    ``RuntimeError`` from its stream writer, SQLite's (and SQLAlchemy's wrapping) "database or disk is
    full", safetensors' "StorageFull", or our own :class:`DiskFull`."""
    for e in causes(err):
        if isinstance(e, DiskFull) or (isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS):
            return True
        if any(word in str(e) for word in DISK_FULL_WORDS):
            return True
    return False


def free_bytes(path: Path) -> int | None:
    """Free space for this process on the filesystem that holds ``path`` (or its nearest existing
    parent); None when nothing along it exists."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None:
        return None
    return shutil.disk_usage(existing).free


def disk_full_at(
    err: BaseException, places: Sequence[Path], *, need: int | None = None, what: str = "the next write"
) -> DiskFull:
    """The :class:`DiskFull` to report for ``err``: itself if it is one; else at the file the error names,
    or the fullest of ``places`` (where the process writes: artifacts, database, temporary files)."""
    if isinstance(err, DiskFull):
        return err
    named = next((e.filename for e in causes(err) if isinstance(e, OSError) and e.filename), None)
    if named is not None:
        return DiskFull(Path(str(named)).parent, need=need, what=what)
    known = [(free, p) for p in places if (free := free_bytes(p)) is not None]
    fullest = min(known, key=lambda known_place: known_place[0])[1] if known else Path.cwd()  # the first of equals
    return DiskFull(fullest, need=need, what=what)


def require_space(path: Path, need: int, what: str, *, elsewhere: str | None = None) -> None:
    """Raise :class:`DiskFull` before a write of about ``need`` bytes under ``path`` that would not fit;
    ``elsewhere``: the other fix, where there is one (another folder for it)."""
    free = free_bytes(path)
    if free is not None and free < need:
        raise DiskFull(path, need=need, what=what, elsewhere=elsewhere)
