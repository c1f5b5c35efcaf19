"""Log lines for people: a timestamp, the level and the source, one line per event. Optuna's own
records join ours; its trial-failure tracebacks are cut to their first line (the worker logs the
traceback of a real error itself, and a stopped or pruned trial needs none)."""

from __future__ import annotations

import logging
import sys
import warnings

import optuna

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class OneLineOptunaFailures(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("optuna") and record.exc_info:
            record.exc_info, record.exc_text = None, None
        return True


def setup_logging(verbose: bool = False) -> None:
    """Configure (again: each CLI call in a test process gets its own stderr) the root logger."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format=FORMAT,
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
        force=True,
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(OneLineOptunaFailures())
    optuna.logging.disable_default_handler()
    optuna.logging.enable_propagation()
    for noisy in ("optuna", "sqlalchemy", "PIL", "matplotlib", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose and noisy == "optuna" else logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
