"""Names never decide where files go: every path built from a study name goes through
:func:`path_component`, also for studies created by other tools with any name at all."""

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
