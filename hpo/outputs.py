"""The one rule for what a user names with ``-o/--output``: checked before any work, written whole or
not at all, and every plain mistake one line naming the path and the fix, never a traceback.

A file output (``init``, ``narrow``, ``report``, ``sample``) must not be a folder; a folder output
(``train``, ``doctor``, ``export``) must not be a file; either needs a place this process can write
(not a read-only or virtual filesystem like /proc, not another user's folder). Missing parent folders
are created when the output is written, not when it is checked: a command that then fails on
something else leaves no empty folders behind."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hpo.errors import HpoError
from hpo.files import replacing


def output_file(path: Path, *, example: str, force: bool | None = None) -> Path:
    """``path`` if a file can be written there; checked before any work, leaving nothing behind. Refused:
    a folder (``example`` names a file for the fix), a place under a file or that this process cannot
    write, and an existing file when the command has ``--force`` and it was not given. ``force=None``:
    the command overwrites, as it always has."""
    if path.is_dir():
        raise folder_in_the_way(path, example)
    if force is False and path.exists():
        raise HpoError(f"{path} exists; pass --force to overwrite it, or choose another -o")
    check_writable(path, path.parent)
    return path


def output_folder(path: Path, *, holds: str, empty: bool = False) -> Path:
    """``path`` if a folder of outputs (``holds`` says what, for the messages) can be written there;
    checked before any work, leaving nothing behind. Refused: a file, a place under a file or that this
    process cannot write, and with ``empty`` a folder that already holds something."""
    which = "a new or empty folder" if empty else "a folder"
    if path.exists() and not path.is_dir():
        raise HpoError(f"{path} is a file; name {which} for {holds} instead")
    if empty and path.is_dir() and any(path.iterdir()):
        raise HpoError(f"{path} is not empty; name {which} for {holds}")
    check_writable(path, path)
    return path


def folder_in_the_way(path: Path, example: str) -> HpoError:
    """A folder where a file is wanted: the fix names a file inside it (``--force`` would not help)."""
    return HpoError(f"{path} is a folder; name a file inside it, e.g. {path / example}")


def check_writable(path: Path, folder: Path) -> None:
    """A one-line error unless ``path``'s files can be created in ``folder``: its nearest existing
    part must be a folder that takes a new file (a probe file, created and deleted at once)."""
    existing = nearest_existing(folder)
    if not existing.is_dir():
        raise HpoError(f"cannot write {path}: {existing} is a file, not a folder; choose another place")
    probe = existing / f".hpo-write-check-{os.getpid()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise unwritable(path, err) from None


def nearest_existing(folder: Path) -> Path:
    """``folder`` or the closest folder above it that exists (the filesystem's root at worst)."""
    return next((p for p in (folder, *folder.parents) if p.exists()), Path(folder.anchor or "."))


def unwritable(path: Path, err: OSError) -> HpoError:
    """One line for an OSError met checking or writing ``path``: the path, the system's reason (permission
    denied, read-only file system, no such file in a virtual one, disk full) and the fix."""
    reason = err.strerror or str(err)
    where = nearest_existing(path.parent)
    return HpoError(f"cannot write {path}: {reason} (in {where}); choose a writable place")


@contextmanager
def writing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for the block to write, by hand or by a library (torch.save,
    PIL, safetensors): it replaces ``path`` when the block ends cleanly and is deleted when it fails.
    Creates missing parent folders; a folder at ``path`` or an OSError in the block (unwritable place,
    full disk) becomes one line."""
    if path.is_dir():
        raise folder_in_the_way(path, f"x{path.suffix}")
    try:
        with replacing(path) as tmp:
            yield tmp
    except OSError as err:
        raise unwritable(path, err) from None


def write_output(path: Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all; see :func:`writing`."""
    with writing(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return path


@contextmanager
def output_errors(path: Path) -> Iterator[None]:
    """Around a call that writes ``path`` its own way and reads other files too (the report): an
    OSError about ``path``, its temporary file or a folder above it becomes one line; others (a file
    it reads) pass on unchanged."""
    try:
        yield
    except OSError as err:
        if not names_output(err, path):
            raise
        raise unwritable(path, err) from None


def names_output(err: OSError, path: Path) -> bool:
    """Whether ``err`` is about ``path``: it names ``path``, a file beside it (its temporary file) or a
    folder above it (one being created)."""
    target = Path(os.path.abspath(path))
    named = [Path(os.path.abspath(f)) for f in (err.filename, err.filename2) if isinstance(f, (str, os.PathLike))]
    return any(n.parent == target.parent or n in target.parents for n in named)


def make_folder(path: Path) -> Path:
    """Create the folder ``path`` and any missing above it; an OSError becomes one line."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise unwritable(path, err) from None
    return path
