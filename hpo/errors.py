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
    """``path``, created if missing; a one-line error naming the owner and the fix when this process
    may not write there (a bind mount the engine created as root, for a container running as uid 1000)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".hpo-write-check-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except PermissionError:
        existing = next((p for p in (path, *path.parents) if p.exists()), path)
        owner = existing.stat().st_uid if existing.exists() else "?"
        raise HpoError(
            f"cannot write {what} to {path}/: {existing} belongs to uid {owner} and this process runs as uid "
            f"{os.getuid()}; make it writable (in Docker: mkdir -p {path.name} && sudo chown 1000:1000 {path.name})"
        ) from None
    return path
