"""The studies ``hpo confirm`` creates beside a study (confirmation, budget ladder, width ladder),
found from the study's pointer to them: the companion, or the paragraph to show in its place."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

import optuna

from hpo.analysis.record import StudyRecord


def next_step(text: str) -> str:
    return f"<p class='next'><b>Next:</b> {escape(text)}</p>"


def not_yet(missing: str, command: str, why: str) -> str:
    """What a study has not been asked yet, and the command that asks it."""
    return f"<p>{escape(missing)}</p>" + next_step(f"run `{command}` ({why}).")


def companion_section(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage,
    pointer: str,
    body: Callable[[optuna.Study], str],
    *,
    absent: str,
    kind: str,
) -> str:
    """``body`` of the companion that ``pointer`` (a study attribute) names; ``absent`` (HTML) when there
    is none yet, a line saying so when the pointer outlived its study."""
    name = StudyRecord.of(study).text(pointer)
    if name is None:
        return absent
    try:
        companion = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return f"<p>The {kind} study {escape(name)} is gone.</p>"
    return body(companion)
