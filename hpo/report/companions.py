"""The studies ``hpo confirm`` creates beside a study (confirmation, budget ladder, width ladder),
found from the study's pointer to them: the companion, or the paragraph to show in its place."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

import optuna


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
    """``body`` of the companion that ``study.user_attrs[pointer]`` names; ``absent`` (HTML) when there
    is none yet, a line saying so when the pointer outlived its study."""
    name = study.user_attrs.get(pointer)
    if not name:
        return absent
    try:
        companion = optuna.load_study(study_name=str(name), storage=storage)
    except KeyError:
        return f"<p>The {kind} study {escape(str(name))} is gone.</p>"
    return body(companion)
