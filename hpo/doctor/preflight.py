"""The preflight: ``hpo doctor --fast`` before a study is created (``hpo launch``, ``hpo run``), its
failures and warnings streamed to stderr, a failed check a refusal."""

from __future__ import annotations

import sys
from pathlib import Path

from hpo.doctor.checklist import Checklist
from hpo.doctor.result import Check
from hpo.doctor.run import run_doctor
from hpo.errors import HpoError, writable_folder
from hpo.spec.spec import Spec


def preflight_doctor(spec: Spec, artifacts: Path, workers: int) -> None:
    """`hpo doctor --fast`: refuse to start a study whose data or model is broken, or whose ``workers``
    trials at once would not fit their checkpoints in ``artifacts``."""

    def show(check: Check) -> None:
        if check.status in ("fail", "warn"):
            print(check.line(), file=sys.stderr)

    checklist = Checklist(show, lambda text: print(text, file=sys.stderr))
    out_dir = writable_folder(Path("runs") / "doctor", "the preflight doctor's files")
    checks = run_doctor(spec, fast=True, out_dir=out_dir, artifacts=artifacts, workers=max(workers, 1),
                        checklist=checklist)  # fmt: skip
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        raise HpoError(
            f"`hpo doctor --fast` failed {len(failed)} check(s) above; fix them, or launch with --skip-doctor"
        )
    print(f"hpo doctor --fast: {len(checks) - len(failed)} of {len(checks)} checks passed")
