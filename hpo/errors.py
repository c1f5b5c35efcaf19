"""Errors a person can fix: the CLI prints them as one line, without a traceback."""

from __future__ import annotations


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
