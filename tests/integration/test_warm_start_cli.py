"""A warm start through the CLI as a process: it names what it carried and refuses a missing study."""

from __future__ import annotations

from pathlib import Path

import optuna

from hpo.service.storage import open_storage
from tests.service.test_warm_start import NEXT_SEARCH, planted_source
from tests.service_helpers import hpo, write_spec


def test_warm_start_through_the_cli_names_what_it_carried_and_refuses_a_missing_study(tmp_path: Path) -> None:
    planted_source(tmp_path)
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    raw = {"study": {"name": "next", "n_trials": 6}, "search": NEXT_SEARCH, "train": {"batch_size": 32}}
    path = write_spec(tmp_path, "next.yaml", **raw)
    missing = hpo("launch", str(path), "--warm-start", "nope", "--workers", "0", "--detach", "--skip-doctor",
                  url=url, cwd=tmp_path)  # fmt: skip
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "no study named 'nope'" in missing.stderr and missing.stderr.count("\n") == 1
    assert "next" not in optuna.get_all_study_names(open_storage(url))  # nothing created
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    none = hpo("launch", str(path), "--warm-start", "source", "--workers", "0", "--detach", "--skip-doctor",
               url=f"sqlite:///{fresh / 'new.db'}", cwd=fresh)  # fmt: skip
    assert none.returncode != 0 and none.stderr.count("\n") == 1 and "(no database there yet)" in none.stderr
    assert list(fresh.iterdir()) == []  # no database created
    done = hpo("launch", str(path), "--warm-start", "source", "--workers", "0", "--detach", "--skip-doctor",
               url=url, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "warm start from 'source': 5 finished trial(s) carried" in done.stdout
    assert "not carried: 1 had lr outside the new range; 1 failed (no value to carry)" in done.stdout
    status = hpo("status", "next", url=url, cwd=tmp_path)
    assert status.returncode == 0 and "0/6" in status.stdout, status.stdout
    assert "warm-started: 5 trial(s) of 'source' informed the sampler and pruner" in status.stdout
    report = hpo("report", "next", "-o", str(tmp_path / "next.html"), url=url, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "5 trial(s) of &#x27;source&#x27; informed the sampler" in (tmp_path / "next.html").read_text()
