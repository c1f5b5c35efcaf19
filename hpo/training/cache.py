"""The preprocessed data cache: one memory-mapped file per data set, shared by every process of a host.

``data-KEY.u8`` holds the training images, then the held-out images (uint8, N×C×H×W, contiguous),
then their int64 labels at a 64-byte boundary; ``data-KEY.json`` says where each part starts, the
class names, the skipped files and a digest. Every process maps the same file read-only
(``torch.from_file``), so the page cache holds the images once per host however many workers read
them, and a set larger than memory is paged in as batches touch it.

The first process to need a cache builds it under a file lock (the others wait, then map it) and
writes it atomically: the images first, the JSON last, each renamed into place, so a JSON on disk
always describes a complete images file. A cache whose JSON is unreadable, whose images file has the
wrong size, or whose first and last MiB no longer match their digest is removed and rebuilt, with one
warning line. ``data-KEY.pt`` (the ``torch.save`` format before this one, same key) is converted
rather than rebuilt from the source, and left where it is. A folder is decoded into a scratch file
beside the cache (:class:`ScratchImages`) and written out a chunk at a time (:class:`Part`), so a
set larger than memory is built as well as read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from filelock import FileLock

from hpo.errors import DiskFull, is_disk_full, require_space
from hpo.files import replacing

log = logging.getLogger("hpo.data")
CACHE_ELSEWHERE = "set data.cache_dir to a larger disk"
LEGACY_SKIPPED = "skipped"  # the torch.save cache's list of unreadable files (a file of its own, not a stored payload)

FORMAT = 1
ALIGN = 64  # the labels start at a multiple of this: an int64 view of the mapped bytes needs 8
DIGEST_SPAN = 1 << 20  # the digest covers this many bytes at each end of the images file
LABEL_BYTES = 8


class CorruptCache(Exception):
    """A cache on disk that cannot be used; the message says why."""


@dataclass(frozen=True)
class CachedSet:
    """A mapped cache's parts: views of one read-only mapping, nothing copied."""

    train_images: torch.Tensor
    train_labels: torch.Tensor
    val_images: torch.Tensor
    val_labels: torch.Tensor
    class_names: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Part:
    """Rows of ``images`` (and ``labels``) in the order ``index`` gives (None: all, as they are): what
    a cache writes, a chunk at a time, so a set read into a mapped scratch file is never gathered whole."""

    images: torch.Tensor
    labels: torch.Tensor
    index: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return int(self.images.shape[0] if self.index is None else self.index.shape[0])

    def chunks(self, size: int = 4096) -> Iterator[torch.Tensor]:
        for first in range(0, self.rows, size):
            rows = slice(first, first + size) if self.index is None else self.index[first : first + size]
            yield self.images[rows]

    def gathered_labels(self) -> torch.Tensor:
        return self.labels if self.index is None else self.labels[self.index]


@dataclass(frozen=True)
class Parts:
    """A split data set to cache: its training part, its held-out part, the class names and the
    source files skipped (with why)."""

    train: Part
    val: Part
    class_names: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class CacheFiles:
    images: Path
    meta: Path
    legacy: Path  # the torch.save cache of the same key, before format 1

    @classmethod
    def of(cls, cache_dir: Path, key: str) -> CacheFiles:
        return cls(cache_dir / f"data-{key}.u8", cache_dir / f"data-{key}.json", cache_dir / f"data-{key}.pt")

    @property
    def lock(self) -> Path:
        return self.meta.with_suffix(".lock")


def layout(n_train: int, n_val: int, item: int) -> dict[str, int]:
    """Byte offsets of the parts of an images file holding ``n_train`` + ``n_val`` items of ``item`` bytes."""
    image_bytes = (n_train + n_val) * item
    labels_at = -(-image_bytes // ALIGN) * ALIGN
    return {"labels_at": labels_at, "size": labels_at + (n_train + n_val) * LABEL_BYTES}


def edge_digest(path: Path, size: int) -> str:
    """sha256 of the first and last :data:`DIGEST_SPAN` bytes: catches a truncated or overwritten file
    without reading a set larger than memory."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(DIGEST_SPAN))
        f.seek(max(0, size - DIGEST_SPAN))
        h.update(f.read(DIGEST_SPAN))
    return h.hexdigest()


def meta_digest(meta: dict[str, object]) -> str:
    body = {k: v for k, v in meta.items() if k != "check"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def write_cache(files: CacheFiles, parts: Parts, key: str) -> None:
    """The images file, then the JSON that says it is complete; each atomically."""
    n_train, n_val = parts.train.rows, parts.val.rows
    shape = [int(s) for s in parts.train.images.shape[1:]]
    item = int(parts.train.images[0].numel())
    at = layout(n_train, n_val, item)
    files.images.parent.mkdir(parents=True, exist_ok=True)
    require_space(files.images.parent, at["size"], "the data cache", elsewhere=CACHE_ELSEWHERE)
    with disk_full_said(files.images.parent, at["size"]), replacing(files.images) as tmp, open(tmp, "wb") as f:
        for part in (parts.train, parts.val):
            for chunk in part.chunks():
                f.write(chunk.contiguous().numpy().tobytes())
        f.write(b"\0" * (at["labels_at"] - (n_train + n_val) * item))
        for part in (parts.train, parts.val):
            f.write(part.gathered_labels().to(torch.int64).contiguous().numpy().tobytes())
        f.flush()
        os.fsync(f.fileno())
    meta: dict[str, object] = {
        "format": FORMAT, "key": key, "shape": shape, "n_train": n_train, "n_val": n_val, **at,
        "class_names": list(parts.class_names), "unreadable": [list(s) for s in parts.skipped],
        "digest": edge_digest(files.images, at["size"]),
    }  # fmt: skip
    meta["check"] = meta_digest(meta)
    with replacing(files.meta) as tmp:
        tmp.write_text(json.dumps(meta))


@contextmanager
def disk_full_said(folder: Path, needed: int) -> Iterator[None]:
    """A full disk while writing as one line with the size needed (:class:`hpo.errors.DiskFull`); other
    errors as they are."""
    try:
        yield
    except OSError as err:
        if is_disk_full(err):
            raise DiskFull(folder, need=needed, what="the data cache", elsewhere=CACHE_ELSEWHERE) from err
        raise


class ScratchImages:
    """Decoded images appended one at a time: to a scratch file in ``folder`` (mapped when complete and
    unlinked at once, so a folder larger than memory is never held whole), or in memory without one."""

    def __init__(self, folder: Path | None, shape: tuple[int, ...], expected: int) -> None:
        self.folder, self.shape, self.expected = folder, shape, expected
        self.count = 0
        self.arrays: list[np.ndarray] = []
        self.path = None if folder is None else folder / f".decode-{os.getpid()}.u8"
        self.file: BinaryIO | None = None

    def __enter__(self) -> ScratchImages:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(self.path, "wb")
        return self

    def add(self, image: np.ndarray) -> None:
        if self.file is None:
            self.arrays.append(image)
        else:
            assert self.folder is not None
            with disk_full_said(self.folder, self.expected * image.nbytes):
                self.file.write(image.tobytes())
        self.count += 1

    def images(self) -> torch.Tensor:
        if self.count == 0:
            return torch.empty((0, *self.shape), dtype=torch.uint8)
        if self.file is None:
            return torch.from_numpy(np.stack(self.arrays))
        self.file.flush()
        size = self.count * int(np.prod(self.shape))
        return torch.from_file(str(self.path), shared=False, size=size, dtype=torch.uint8).view(self.count, *self.shape)

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)  # a mapping of it stays readable until it is dropped


def read_meta(files: CacheFiles, key: str) -> dict[str, object]:
    try:
        meta = json.loads(files.meta.read_text())
    except (OSError, ValueError) as err:
        raise CorruptCache(f"its description cannot be read ({err})") from None
    if not isinstance(meta, dict) or meta.get("check") != meta_digest(meta):
        raise CorruptCache("its description does not match its checksum")
    if meta.get("format") != FORMAT or meta.get("key") != key:
        raise CorruptCache(f"it is format {meta.get('format')} of key {meta.get('key')}, not {FORMAT} of {key}")
    return meta


def drop_from_page_cache(path: Path) -> None:
    """``path``'s clean pages out of the page cache (those no process maps): the next read is from disk,
    as on a cold host (the benchmark's cold cache; a capped test worker charged for what it reads)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def map_cache(files: CacheFiles, key: str) -> CachedSet:
    """The cache's parts as views of one read-only mapping; CorruptCache when it cannot be trusted."""
    meta = read_meta(files, key)
    size = int(meta["size"])  # type: ignore[call-overload]
    actual = files.images.stat().st_size if files.images.exists() else None
    if actual != size:
        raise CorruptCache(f"{files.images.name} has {actual} bytes, not {size}")
    if edge_digest(files.images, size) != meta["digest"]:
        raise CorruptCache(f"{files.images.name} does not match its digest")
    n_train, n_val = int(meta["n_train"]), int(meta["n_val"])  # type: ignore[call-overload]
    shape = tuple(int(s) for s in meta["shape"])  # type: ignore[attr-defined]
    item, labels_at = int(torch.Size(shape).numel()), int(meta["labels_at"])  # type: ignore[call-overload]
    raw = torch.from_file(str(files.images), shared=False, size=size, dtype=torch.uint8)  # MAP_PRIVATE, read-only
    images = raw[: (n_train + n_val) * item].view(n_train + n_val, *shape)
    labels = raw[labels_at:].view(torch.int64)
    return CachedSet(
        images[:n_train], labels[:n_train], images[n_train:], labels[n_train:],
        tuple(str(n) for n in meta["class_names"]),  # type: ignore[attr-defined]
        tuple((str(f), str(r)) for f, r in meta["unreadable"]),  # type: ignore[attr-defined]
    )  # fmt: skip


def read_legacy(path: Path) -> Parts:
    """A ``torch.save`` cache of the format before this one, mapped rather than read."""
    blob = torch.load(path, mmap=True, weights_only=True)
    return Parts(
        Part(blob["train_images"], blob["train_labels"]), Part(blob["val_images"], blob["val_labels"]),
        tuple(blob["class_names"]), tuple((str(f), str(r)) for f, r in blob[LEGACY_SKIPPED]),
    )  # fmt: skip


def open_valid(files: CacheFiles, key: str) -> CachedSet | None:
    """The mapped cache when it is there and sound; a corrupt one is removed (said in one line)."""
    if not files.meta.exists():
        return None
    try:
        return map_cache(files, key)
    except CorruptCache as why:
        log.warning("data cache %s is corrupt (%s); rebuilding it", files.images, why)
        files.meta.unlink(missing_ok=True)
        files.images.unlink(missing_ok=True)
        return None


def cached(files: CacheFiles, key: str, build: Callable[[], Parts]) -> CachedSet:
    """The mapped cache of ``key``, built once per host: the first process builds it under a file
    lock, the others wait for the lock and map what it wrote."""
    try:  # a sound cache needs no lock
        return map_cache(files, key)
    except CorruptCache:
        pass  # checked again, and removed, under the lock
    files.lock.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(files.lock))
    try:
        lock.acquire(timeout=0)
    except TimeoutError:
        log.info("waiting for another process to build the data cache %s", files.images)
        lock.acquire()
    try:
        found = open_valid(files, key)
        if found is not None:
            return found
        parts = read_legacy(files.legacy) if files.legacy.exists() else build()
        write_cache(files, parts, key)
        log.info("data cache written: %s (%.0f MB)", files.images, files.images.stat().st_size / 1e6)
        return map_cache(files, key)  # the builder too holds the mapping, not its own copy
    finally:
        lock.release()
