"""``hpo run`` through the real CLI: each bad input is one line and leaves what is stored as it was;
``--plan-only`` plans and writes nothing; a finished run says where its model is."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpo.run.budget import parse_budget
from hpo.run.ledger import PHASES, RUN_FILE, Ledger, load_ledger, save_ledger
from tests.cli import run_cli
from tests.images import write_images


def hpo_run(*args: str) -> tuple[int, str, str]:
    return run_cli(["run", *args])


def one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("run") / "shapes"
    write_images(root / "a", 40, size=16)
    write_images(root / "b", 40, size=16, start=40)
    return root


def test_a_budget_in_unknown_units_is_one_line_and_creates_nothing(images: Path, tmp_path: Path) -> None:
    code, _, err = hpo_run(str(images), "--budget", "8 hrs", "-o", str(tmp_path / "out"))
    one_line_error(code, err, "'8 hrs'", "s, m, h or d")
    assert not (tmp_path / "out").exists()


def test_a_budget_below_the_plans_minimum_names_the_minimum_and_creates_nothing(images: Path, tmp_path: Path) -> None:
    code, _, err = hpo_run(str(images), "--budget", "30s", "-o", str(tmp_path / "out"))
    one_line_error(code, err, "below this plan's minimum of", "give --budget")
    assert not (tmp_path / "out").exists()


def test_a_folder_hpo_init_refuses_is_refused_in_the_same_line(tmp_path: Path) -> None:
    write_images(tmp_path / "twelve", 12, size=32)
    code, _, err = hpo_run(str(tmp_path / "twelve"), "--budget", "1h", "-o", str(tmp_path / "out"))
    one_line_error(code, err, "only 12 readable images")
    assert not (tmp_path / "out").exists()
    code, _, err = hpo_run(str(tmp_path / "missing"), "--budget", "1h", "-o", str(tmp_path / "out"))
    one_line_error(code, err, "not a folder")


def stored_run(out: Path, folder: Path, budget_s: float, *, done: int) -> str:
    """A ledger in ``out`` with the first ``done`` phases finished; its file's text."""
    ledger = Ledger(folder=str(folder.resolve()), budget_s=budget_s, study="shapes-16", image_size=None)
    for name in PHASES[:done]:
        ledger.phase(name).spent_s, ledger.phase(name).state = 30.0, "done"
    ledger.decisions.model = str(out / "model")
    save_ledger(ledger, out)
    return (out / RUN_FILE).read_text()


def test_an_output_folder_holding_another_folders_run_is_refused_and_kept(images: Path, tmp_path: Path) -> None:
    before = stored_run(tmp_path / "out", tmp_path / "elsewhere", 3600.0, done=3)
    code, _, err = hpo_run(str(images), "--budget", "1h", "-o", str(tmp_path / "out"))
    one_line_error(code, err, "holds the run of another folder", "elsewhere", "name another -o")
    assert (tmp_path / "out" / RUN_FILE).read_text() == before


def test_another_budget_on_resume_says_what_was_spent_and_what_it_would_change(images: Path, tmp_path: Path) -> None:
    before = stored_run(tmp_path / "out", images, 3600.0, done=3)
    code, _, err = hpo_run(str(images), "--budget", "90m", "-o", str(tmp_path / "out"))
    one_line_error(
        code, err, "--budget 1h00m", "spent 1m30s", "now in decide", "give 30m00s", "re-run with --budget 1h00m"
    )
    assert (tmp_path / "out" / RUN_FILE).read_text() == before


def test_a_killed_runs_time_until_it_is_run_again_is_not_spent(images: Path, tmp_path: Path) -> None:
    from hpo.run.options import RunOptions
    from hpo.run.state import resumed_ledger

    stored_run(tmp_path / "out", images, 3600.0, done=2)
    killed = load_ledger(tmp_path / "out")
    assert killed is not None
    search = killed.phase("search")  # SIGKILLed an hour ago, 40 s after its last tick banked 100 s
    search.state, search.spent_s, search.running_since = "running", 100.0, time.time() - 3600.0
    save_ledger(killed, tmp_path / "out")
    opts = RunOptions(images=images, budget="1h", out=tmp_path / "out", image_size=None, storage=None, workers=None,
                      threads=None)  # fmt: skip
    resumed = resumed_ledger(opts, tmp_path / "out", 3600.0)
    assert resumed is not None and resumed.spent() == pytest.approx(160.0)  # 2 phases of 30 s, and the 100 s banked
    assert resumed.phase("search").state == "running"  # to be continued


def test_a_finished_run_run_again_points_to_its_model_and_changes_nothing(images: Path, tmp_path: Path) -> None:
    before = stored_run(tmp_path / "out", images, 1800.0, done=len(PHASES))
    code, out, err = hpo_run(str(images), "--budget", "30m", "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert f"is finished; its model is {tmp_path / 'out' / 'model'}" in out and "total     3m30s of 30m00s" in out
    assert (tmp_path / "out" / RUN_FILE).read_text() == before


def test_plan_only_prints_each_phase_planned_within_the_budget_and_writes_nothing(images: Path, tmp_path: Path) -> None:
    code, out, err = hpo_run(str(images), "--budget", "8h", "-o", str(tmp_path / "out"), "--plan-only")
    assert code == 0, err
    lines = out.splitlines()
    for phase in PHASES:
        assert any(line.split()[:1] == [phase] for line in lines), out
    assert "trials at most" in out and f"run it: hpo run {images} --budget 8h00m" in out
    assert "data: the images take 0.00 GB as uint8; one shared copy per host" in out  # where they will train
    assert not (tmp_path / "out").exists()


def test_plan_only_with_a_seed_and_a_split_plans_that_split_and_says_the_command_that_runs_it(
    images: Path, tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    code, out, err = hpo_run(
        str(images), "--budget", "24h", "-o", str(out_dir), "--plan-only", "--seed", "3", "--split", "20/10",
        "--image-size", "16",
    )  # fmt: skip
    assert code == 0, err
    assert f"run it: hpo run {images} --budget 24h00m -o {out_dir} --image-size 16 --seed 3 --split 20/10" in out
    search, decide = (parse_budget(line.split()[4]) for line in out.splitlines()
                      if line.split()[:1] in (["search"], ["decide"]))  # fmt: skip
    assert search == pytest.approx(2 * decide, rel=0.02), out


def test_a_seeded_run_seeds_its_study_sampler_and_every_trials_training(images: Path) -> None:
    from hpo.run.options import RunOptions
    from hpo.run.phases.plan import make_plan
    from hpo.spec.loading import load_spec

    opts = RunOptions(images=images, budget="8h", out=None, image_size=16, storage=None, workers=None, threads=1,
                      seed=3)  # fmt: skip
    text = make_plan(opts, 8 * 3600, 0.0).spec_text
    spec_file = images.parent / "seeded.yaml"
    spec_file.write_text(text)
    spec = load_spec(spec_file)
    assert spec.train.seed == 3 and spec.sampler.seed == 3


def test_a_split_that_leaves_no_final_run_is_one_line_and_creates_nothing(images: Path, tmp_path: Path) -> None:
    code, _, err = hpo_run(str(images), "--budget", "8h", "-o", str(tmp_path / "out"), "--split", "60/30")
    one_line_error(code, err, "--split '60/30'", "e.g. --split 50/10")
    assert not (tmp_path / "out").exists()


def test_plan_only_with_wsd_says_when_runs_cool_down_and_that_the_final_run_continues_the_winner(
    images: Path, tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    code, out, err = hpo_run(str(images), "--budget", "8h", "-o", str(out_dir), "--plan-only", "--lr-schedule", "wsd")
    assert code == 0, err
    assert "lr: warm-up, flat, then a cooldown over the last 20%: a trial cools from" in out, out
    assert "the final run continues the winner's state at" in out and "never cut at full lr" in out
    assert f"run it: hpo run {images} --budget 8h00m -o {out_dir} --lr-schedule wsd" in out
    code, out, err = hpo_run(str(images), "--budget", "8h", "-o", str(out_dir), "--plan-only")
    assert code == 0 and "decay to the floor at each run's end; the final run trains the winner from scratch" in out
    code, _, err = hpo_run(str(images), "--budget", "8h", "-o", str(out_dir), "--lr-schedule", "step")
    one_line_error(code, err, "--lr-schedule 'step'", "give --lr-schedule cosine or wsd")
    assert not out_dir.exists()
