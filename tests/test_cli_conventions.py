"""One set of habits across commands: one name per idea (``-o/--output``, ``--name``, old names still
read), clean help (no value type on flags, one-line summaries, every status column explained),
``--threads``/``--gpus`` wherever workers start, machine-readable ``--json``, a status table that fits
the terminal, ``status --watch`` and ``report --open``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState

from hpo.cli import Group
from hpo.records import HardwareSummary, Placement
from hpo.service.status_view import trial_columns
from tests.cli import command, run_cli
from tests.service_helpers import storage_of, write_spec
from tests.study_builders import add, create_companion, new_study

OUTPUTS = {
    "init": "file",
    "train": "folder",
    "doctor": "folder",
    "report": "file",
    "narrow": "file",
    "export": "folder",
    "sample": "file",
}


def help_text(args: list[str], monkeypatch: pytest.MonkeyPatch, columns: int = 200) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))  # rich lays help out to it: no wrapped words
    code, out, err = run_cli([*args, "--help"])
    assert code == 0, err
    return out


def subcommands() -> dict[str, Any]:
    group = command()
    assert isinstance(group, Group)
    return dict(group.commands)


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_every_command_that_writes_takes_o_output_and_says_file_or_folder(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = next(line for line in help_text([name], monkeypatch).splitlines() if "--output" in line)
    assert "-o" in line and OUTPUTS[name] in line, line
    assert not re.search(r"--out\b", help_text([name], monkeypatch))  # the old name works, unshown


def test_old_option_names_still_read_as_the_new_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HPO_STORAGE", raising=False)
    code, _, err = run_cli(["narrow", "x", "--out", "next.yaml"])  # parsed: it gets as far as the storage
    assert code == 2 and err.startswith("error: no database at hpo.db"), err
    spec = write_spec(tmp_path)
    for flag in ("--new-name", "--name"):
        code, _, err = run_cli(["launch", str(spec), flag, "no/slash", "--detach", "--workers", "0"])
        assert code == 2 and err.startswith("error: --name: ") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_help_shows_no_value_type_on_flags_and_one_line_per_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ["", *subcommands()]:
        text = help_text([name] if name else [], monkeypatch)
        assert "<bool>" not in text, name
        assert not re.search(r"--no-[a-z-]+", text), name  # a flag is one name, not --x/--no-x
    listing = help_text([], monkeypatch).split("Commands")[1]
    rows = [line.strip("│ ") for line in listing.splitlines() if line.startswith("│")]
    assert [row.split()[0] for row in rows] == list(subcommands())  # no summary runs onto a second line
    assert subcommands()["narrow"].short_help == "Write the next study's spec from this one's evidence."


def test_every_status_column_is_explained_in_status_help(monkeypatch: pytest.MonkeyPatch) -> None:
    text = help_text(["status"], monkeypatch)
    for column in trial_columns("classifier-FID", ["lr"]):
        if column.header == "lr":
            assert "one column per searched parameter" in text
        elif column.header == "classifier-FID":
            assert "FID or classifier-FID: the study's score" in text
        else:
            assert f"\n {column.header}: " in text, column.header  # a line of its own, starting with it
    assert "gap@last: held-out over training error" in text and "--wide shows all" in text


DISTS: dict[str, BaseDistribution] = {f"param_{i}": FloatDistribution(0.0, 1.0) for i in range(6)}
DISTS["schedule"] = CategoricalDistribution(["a"])


def crowded_study(tmp_path: Path, name: str = "crowded") -> str:
    """A study whose every column has something in it, and long: seven parameters, a scored curve (the
    stop verdict), the sampling sweep's best, precision/recall, hardware, placement, long reasons."""
    study = new_study(tmp_path, name)
    curve = {str(k): {"kimg": 0.8 * 2**k, "val_rel": 0.7, "gap": 1.1, "score": 9.0 - k} for k in range(1, 5)}
    for i in range(4):
        attrs: dict[str, Any] = {
            "curve": curve,
            "sampling": {"guidance_scale": 2.0, "steps": 20, "eta": 0.0},
            "precision": 0.81,
            "recall": 0.64,
            "hardware": HardwareSummary(700.0, 1234.0, 0.4, 100.0, pid=9).as_dict(),
            "ran_on": Placement("gpu-host-number-one.example.org", i, 99, "cuda:0", "3", "H200").as_dict(),
        }
        if i % 2:
            attrs["fail_reason"] = "pruned_by_median: val_rel 0.93 lags the median 0.71 at point 1 of 4"
        study.add_trial(
            optuna.create_trial(
                state=TrialState.PRUNED if i % 2 else TrialState.COMPLETE,
                params={n: (0.123456 * (i + 1) if n != "schedule" else "a") for n in DISTS},
                distributions=DISTS, value=None if i % 2 else 3.0 + i, user_attrs=attrs,
            )
        )  # fmt: skip
    return f"sqlite:///{tmp_path / 'hpo.db'}"


def table_lines(out: str) -> list[str]:
    lines = out.rstrip("\n").splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("#  ")) :]


def test_a_narrow_terminal_keeps_the_trial_its_state_and_its_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = crowded_study(tmp_path)
    monkeypatch.setenv("COLUMNS", "40")
    code, out, err = run_cli(["status", "crowded", "--storage", url])
    assert code == 0, err
    assert table_lines(out)[0].split() == ["#", "state", "classifier-FID"]


def test_status_json_is_the_study_and_one_object_per_trial(tmp_path: Path) -> None:
    url = crowded_study(tmp_path)
    code, out, err = run_cli(["status", "crowded", "--storage", url, "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["study"]["name"] == "crowded" and data["study"]["metric"] == "classifier-FID"
    assert data["study"]["complete"] == 2 and data["study"]["pruned"] == 2 and data["study"]["best"] == 3.0
    trials = data["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2, 3] and [t["state"] for t in trials[:2]] == ["COMPLETE", "PRUNED"]
    assert trials[0]["value"] == 3.0 and trials[1]["value"] is None and trials[1]["reason"].startswith("pruned_by")
    assert trials[0]["params"]["param_0"] == pytest.approx(0.123456) and trials[0]["val_rel_at_last"] == 0.7
    assert trials[0]["best_sampling"] == {"guidance_scale": 2.0, "steps": 20, "eta": 0.0}
    assert (trials[0]["precision"], trials[0]["recall"]) == (0.81, 0.64) and trials[0]["stop"]["kind"]
    assert trials[2]["ran_on"]["host"] == "gpu-host-number-one.example.org" and trials[2]["ran_on"]["worker"] == 2
    code, out, _ = run_cli(["status", "--storage", url, "--json"])
    assert code == 0 and [s["name"] for s in json.loads(out)["studies"]] == ["crowded"]


def test_confirm_json_is_the_verdict_alone_on_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    source = new_study(tmp_path, "held")
    for i, value in enumerate([8.0, 6.0, 7.0]):
        add(source, {"lr": 1e-3 * (i + 1)}, value=value, curve=[1.0] * 4, baseline=i == 0)
    companion = create_companion(source, storage_of(source), top=2, seeds=2, kimg=3.2)
    results = {1: [5.0, 5.1], 2: [6.0, 6.1], 0: [8.0, 8.1]}
    for _ in range(6):
        trial = companion.ask()
        companion.tell(trial, results[trial.user_attrs["confirm_of"]].pop())
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    args = ["confirm", "held", "--top", "2", "--seeds", "2", "--kimg", "3.2", "--workers", "0", "--storage", url]
    code, out, err = run_cli([*args, "--json"])
    assert code == 0, err
    data = json.loads(out)  # stdout is the JSON alone; the progress went to stderr
    assert data["companion"] == "held-confirm" and data["finished"] == data["expected"] == 6
    assert [c["trial"] for c in data["configurations"]] == [1, 2, 0] and data["configurations"][2]["baseline"]
    assert data["configurations"][0]["mean"] == pytest.approx(5.05) and data["rank_correlation"] == pytest.approx(1.0)
    assert data["verdict"].startswith("The winner holds") and Path(data["report"]).exists()
    assert "6/6 finished" in err
    code, text, _ = run_cli(args)
    assert code == 0 and data["verdict"] in text
