"""What an image folder holds, from the file headers alone (Pillow reads size and mode without
decoding pixels, so 6 500 photos take a second): images per class, sizes, modes and the files that do
not open. ``hpo init`` plans a spec from it; ``hpo doctor``'s source-files check reports it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from hpo.errors import HpoError
from hpo.training.data import folder_classes, list_images, require_mostly_readable


@dataclass(frozen=True)
class Census:
    """Header facts of some files: one ``(width, height)`` and mode per file that opens."""

    sizes: tuple[tuple[int, int], ...]
    modes: tuple[str, ...]
    unreadable: tuple[tuple[str, str], ...]  # (file, reason)
    readable: tuple[bool, ...]  # per file, in order

    def common_sizes(self, n: int = 3) -> str:
        return ", ".join(f"{w}x{h} ({k})" for (w, h), k in Counter(self.sizes).most_common(n))

    def mode_counts(self) -> dict[str, int]:
        return dict(Counter(self.modes).most_common())


def header_census(files: Sequence[Path]) -> Census:
    """Open each file's header; a file Pillow cannot identify is unreadable, with the reason."""
    sizes, modes, bad, ok = [], [], [], []
    for path in files:
        try:
            with Image.open(path) as img:
                sizes.append(img.size)
                modes.append(img.mode)
            ok.append(True)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
            bad.append((str(path), f"cannot be opened ({type(err).__name__})"))
            ok.append(False)
    return Census(tuple(sizes), tuple(modes), tuple(bad), tuple(ok))


@dataclass(frozen=True)
class FolderSurvey:
    root: Path
    class_counts: tuple[tuple[str, int], ...]  # readable images per class, as training reads the classes
    census: Census
    ignored: int  # images outside the class subfolders (training ignores them too)

    @property
    def num_images(self) -> int:
        return len(self.census.sizes)

    @property
    def num_classes(self) -> int:
        return len(self.class_counts)

    def share_at_least(self, side: int) -> float:
        """Share of the readable images whose smaller side is at least ``side`` pixels."""
        return sum(min(s) >= side for s in self.census.sizes) / max(1, self.num_images)

    def words(self) -> str:
        c = self.census
        classes = (
            f"{self.num_classes} classes ({', '.join(f'{n}: {k}' for n, k in self.class_counts)})"
            if self.num_classes > 1
            else "1 class (no class subfolders: unconditional)"
        )
        bad = (
            f"; {len(c.unreadable)} unreadable, first: {c.unreadable[0][0]} ({c.unreadable[0][1]})"
            if c.unreadable
            else ""
        )
        ignored = f"; {self.ignored} outside the class subfolders, ignored" if self.ignored else ""
        modes = ", ".join(f"{m} ({k})" for m, k in c.mode_counts().items())
        return (
            f"{self.num_images} images in {self.root}: {classes}; sizes {c.common_sizes()}; modes {modes}{bad}{ignored}"
        )


def require_folder(images: Path) -> Path:
    """``images`` if it is a folder; else one line naming it and what to give instead."""
    if not images.is_dir():
        raise HpoError(f"{images}: not a folder; give the folder of images (subfolders are classes)")
    return images


def survey_folder(root: Path) -> FolderSurvey:
    """The folder as training will read it: subfolders are classes when there are several. A folder
    that is missing, empty or mostly unreadable is a one-line :class:`~hpo.errors.DataError`."""
    everything = list_images(root)
    files, labels, names = folder_classes(root, everything)
    census = header_census(files)
    require_mostly_readable(root, census.unreadable, len(files))
    counts = Counter(label for label, ok in zip(labels, census.readable, strict=True) if ok)
    return FolderSurvey(
        root, tuple((name, counts[i]) for i, name in enumerate(names)), census, len(everything) - len(files)
    )
