"""``hpo tensorboard [STUDY]``: TensorBoard over the artifact store's event logs (one run per trial,
grouped by study), on 127.0.0.1 by default like the dashboard."""

from __future__ import annotations

import sys
from pathlib import Path

from hpo.errors import HpoError
from hpo.service.names import path_component, tensorboard_root


def log_dir(artifacts: Path, study: str | None, *, wait: bool = False) -> Path:
    root = tensorboard_root(artifacts)
    folder = root / path_component(study) if study else root
    if not folder.is_dir() and not wait:
        what = f"study {study!r}" if study else "any study"
        raise HpoError(f"no TensorBoard logs for {what} under {root}; trials write them as they train")
    return folder


def run_tensorboard(artifacts: Path, study: str | None, *, host: str, port: int, wait: bool = False) -> None:
    try:
        from tensorboard import program
    except ImportError:
        raise HpoError("hpo tensorboard needs TensorBoard; pip install 'hpo[tensorboard]'") from None
    folder = log_dir(artifacts, study, wait=wait)
    board = program.TensorBoard()
    board.configure(argv=[None, "--logdir", str(folder), "--host", host, "--port", str(port)])
    print(f"TensorBoard for {folder} at http://{host}:{port}/", flush=True)
    sys.exit(board.main())
