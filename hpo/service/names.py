"""Names never decide where files go: every path built from a study name goes through
:func:`path_component`, also for studies created by other tools with any name at all. And where the
artifact store keeps an artifact and the TensorBoard logs (``artifact_file``, ``tensorboard_root``)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from hpo.spec.rules import STUDY_NAME

UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
DEFAULT_ARTIFACTS = Path(".hpo/artifacts")  # the artifact store when none is given, relative to where it runs


def path_component(name: str) -> str:
    """A safe names stays as it is; any other becomes its safe characters plus a short hash of the
    whole name (so two unsafe names never share a folder). Never empty, '.', '..' or a path."""
    if STUDY_NAME.fullmatch(name) and len(name) <= 100:
        return name
    readable = UNSAFE.sub("_", name).strip("._-")[:40] or "study"
    return f"{readable}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def artifact_file(artifact_dir: Path, artifact_id: str) -> Path:
    """Where the file store under ``artifact_dir`` keeps an artifact (``artifact_id``: what
    :func:`hpo.service.context.upload` returned)."""
    return artifact_dir / artifact_id


def tensorboard_root(artifact_dir: Path) -> Path:
    return artifact_dir / "tensorboard"
