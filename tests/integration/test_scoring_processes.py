from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.scoring.test_scoring import COMPUTE_STATS


def test_concurrent_processes_compute_reference_statistics_once(cache_dir: Path, tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", COMPUTE_STATS, str(cache_dir), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outputs]
    lines = {out.strip() for out, _ in outputs}
    assert len(lines) == 1, lines  # same file, same mtime: written once, read by all
    logs = "".join(err for _, err in outputs)
    assert logs.count("computed classifier reference statistics") == 1
