"""Inception weights: provisioned once (checksum, atomic write), never fetched mid-study.

clean-fid downloads them to /tmp without a checksum, so an interrupted download leaves a truncated
file that breaks every later call; here a bad file is caught by its SHA-256 before training starts.
"""

from __future__ import annotations

import functools
import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path

from hpo.errors import HpoError
from hpo.spec.config import cache_root

INCEPTION_URL = "https://nvlabs-fi-cdn.nvidia.com/stylegan2-ada-pytorch/pretrained/metrics/inception-2015-12-05.pt"
INCEPTION_SHA256 = "f58cb9b6ec323ed63459aa4fb441fe750cfe39fafad6da5cb504a16f19e958f4"
WEIGHTS_ENV = "HPO_FID_WEIGHTS"
FILE_NAME = "inception-2015-12-05.pt"


def weights_path(setting: str | None = None) -> Path:
    """$HPO_FID_WEIGHTS, else the spec's ``score.weights``, else the cache root's copy
    (environment over file, as everywhere)."""
    if os.environ.get(WEIGHTS_ENV):
        return Path(os.environ[WEIGHTS_ENV]).expanduser()
    if setting:
        return Path(setting).expanduser()
    return cache_root() / FILE_NAME


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@functools.lru_cache(maxsize=8)
def _checked(path: str, size: int, mtime_ns: int, expected: str) -> str:
    return sha256_of(Path(path))


def verify_weights(path: Path, expected: str = INCEPTION_SHA256) -> Path:
    """Raise a one-line HpoError unless ``path`` holds the expected weights."""
    fix = f"run `hpo fetch-weights` on a machine with internet, or set {WEIGHTS_ENV} to a good copy"
    if not path.is_file():
        raise HpoError(f"Inception weights not found at {path}; {fix}, or use score.features: classifier")
    stat = path.stat()
    actual = _checked(str(path), stat.st_size, stat.st_mtime_ns, expected)
    if actual != expected:
        raise HpoError(
            f"Inception weights at {path} are corrupt (sha256 {actual[:12]}…, expected {expected[:12]}…, "
            f"{stat.st_size} bytes); delete the file and {fix}"
        )
    return path


def weights_present() -> bool:
    """Whether the Inception weights are here and whole: a plan for this machine scores with them."""
    try:
        verify_weights(weights_path())
    except HpoError:
        return False
    return True


def fetch_weights(
    dest: Path, *, url: str = INCEPTION_URL, expected: str = INCEPTION_SHA256, timeout: float = 60
) -> Path:
    """Download to a temporary file beside ``dest``, verify SHA-256, then rename into place."""
    if dest.is_file() and sha256_of(dest) == expected:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, tmp.open("wb") as out:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError) as err:
        tmp.unlink(missing_ok=True)
        reason = getattr(err, "reason", err)
        raise HpoError(
            f"cannot download Inception weights from {url} ({reason}); on a machine with internet run "
            f"`hpo fetch-weights --dest FILE` and copy FILE here, then set {WEIGHTS_ENV}=FILE"
        ) from None
    if digest.hexdigest() != expected:
        tmp.unlink(missing_ok=True)
        raise HpoError(
            f"downloaded Inception weights from {url} fail their checksum ({digest.hexdigest()[:12]}…); "
            "nothing was written; try again"
        )
    os.replace(tmp, dest)
    return dest
