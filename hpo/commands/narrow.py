"""``hpo narrow STUDY -o next.yaml``: the next study's spec from this one's evidence."""

from __future__ import annotations

from pathlib import Path

from hpo.analysis.narrow import narrow, next_spec_yaml
from hpo.errors import HpoError
from hpo.outputs import output_file, write_output
from hpo.service.storage import open_storage
from hpo.service.study import load, metric_of, require_spec
from hpo.service.trials import best_own, own_trials
from hpo.service.urls import redact
from hpo.spec.loading import load_spec


def run_narrow(url: str, study_name: str, out: Path, name: str | None = None) -> list[str]:
    """Write the narrowed spec to ``out`` (checked first; then by loading it back); one line per change."""
    output_file(out, example="next.yaml")
    storage = open_storage(url, must_exist=True)
    study = load(storage, study_name, redact(url))
    spec = require_spec(study)
    trials = own_trials(study)
    if not any(t.value is not None for t in trials):
        raise HpoError(f"study {study_name!r} has no complete trial yet: nothing to narrow around")
    changes = narrow(spec, trials, metric_of(study))
    best = best_own(study)
    assert best is not None  # a complete trial exists (checked above)
    text = next_spec_yaml(spec, changes, best, name=name or f"{study_name}-next", source=study_name)
    write_output(out, text)
    load_spec(out)  # what was written launches
    return [f"{c.name}: {c.action} — {c.evidence}" for c in changes]
