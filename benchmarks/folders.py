"""Image folders for `hpo run` and its benchmark, written from data that ships in packages: the
handwritten digits scikit-learn bundles (10 classes, 8 px upscaled), coloured shapes (hpo's own
renderer), patches of scikit-learn's two sample photographs (2 classes) and of two photographs
scikit-image ships (stills, 2 classes).

Usage: python -m benchmarks.folders {digits,shapes,photos,stills} OUT [--size 16] [--n 1000]"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.common import photo_folder, still_folder
from hpo.training.data import read_digits
from hpo.training.folders import write_folder
from hpo.training.shapes import render_shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", choices=("digits", "shapes", "photos", "stills"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", type=int, default=16, help="side in pixels (digits and shapes)")
    parser.add_argument("--n", type=int, default=1000, help="images (shapes; digits has 1 797, photos and stills 800)")
    args = parser.parse_args()
    if args.out.exists() and any(args.out.iterdir()):
        raise SystemExit(f"{args.out} is not empty; name a new folder")
    if args.dataset in ("photos", "stills"):
        cut = photo_folder if args.dataset == "photos" else still_folder
        source = cut(args.out.parent / f".{args.out.name}-cache")
        files = sorted(source.rglob("*.png"))
        for path in files:
            (args.out / path.parent.name).mkdir(parents=True, exist_ok=True)
            (args.out / path.parent.name / path.name).write_bytes(path.read_bytes())
        count = len(files)
    elif args.dataset == "digits":
        images, labels, names = read_digits(args.size)
        count = write_folder(images.numpy(), labels.numpy(), names, args.out)
    else:
        count = write_folder(*render_shapes(args.n, args.size, seed=0), args.out)
    print(f"wrote {count} {args.dataset} images to {args.out}")


if __name__ == "__main__":
    main()
