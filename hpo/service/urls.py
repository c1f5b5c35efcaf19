"""Where a study's database is: the URL a command was given (or $HPO_STORAGE, or the embedded
SQLite file ./hpo.db), checked, and redacted wherever it is shown."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from hpo.errors import HpoError

STORAGE_ENV = "HPO_STORAGE"
DEFAULT_DB = "hpo.db"


def resolve_url(url: str | None = None) -> str:
    """``--storage``, else $HPO_STORAGE, else the embedded database ./hpo.db. ``postgresql://`` and
    ``postgresql+psycopg2://`` both work (SQLAlchemy 2.1 alone would map the first to psycopg 3)."""
    chosen = url or os.environ.get(STORAGE_ENV) or f"sqlite:///{DEFAULT_DB}"
    try:
        parsed = make_url(chosen)
    except ArgumentError:
        raise HpoError(
            f"cannot parse storage URL {redact(chosen)!r}; expected postgresql://USER:PASSWORD@HOST:5432/DB "
            "or sqlite:///FILE"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg2")
        return parsed.render_as_string(hide_password=False)
    if parsed.get_backend_name() not in ("postgresql", "sqlite", "mysql"):
        raise HpoError(f"unsupported storage {redact(chosen)!r}; use postgresql://... or sqlite:///FILE")
    return chosen


def redact(url: str) -> str:
    """The URL with its password replaced by ***; never log or print a URL without this."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def redact_text(message: str, url: str) -> str:
    password = make_url(url).password
    return message.replace(str(password), "***") if password else message


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str) -> Path | None:
    parsed = make_url(url)
    return Path(parsed.database) if parsed.get_backend_name() == "sqlite" and parsed.database else None
