"""Errors a person can fix: the CLI prints them as one line, without a traceback."""

from __future__ import annotations

import os
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
