"""Telemetry read back: TensorBoard event files (raw records, so a duplicate cannot hide), the hparams
summary, W&B offline and MLflow file-store runs with the same values, and `hpo tensorboard` over HTTP
and in Chromium. One real study serves them all: its first trial is stopped after two evaluation
points (as by SIGTERM) and its retry continues the same run."""

from __future__ import annotations

import functools
import json
import re
import struct
import subprocess
import sys
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from hpo.service.objective import PointHooks, run_objective
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume
from hpo.service.worker import Worker, WorkerOptions, WorkerStopping
from hpo.spec.loading import load_spec
from tests.browser import browse
from tests.pg import free_port
from tests.service_helpers import hpo_env, poll_json, write_spec
from tests.tensorboard_records import records, scalar


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, Path]:
    folder = tmp_path_factory.mktemp("tracked")
    mlflow_uri = f"sqlite:///{folder / 'mlflow.db'}"
    spec = load_spec(
        write_spec(
            folder,
            study={"name": "tracked", "n_trials": 1},
            train={"kimg": 1.6, "num_evals": 4, "batch_size": 16},
            search={"lr": {"type": "float", "low": 1e-3, "high": 2e-3}},
            sampling={"guidance_scale": 1.5, "steps": 4},
            tracking={
                "tensorboard": True,
                "wandb": {"project": "hpo-test", "mode": "offline"},
                "mlflow": {"tracking_uri": mlflow_uri},
            },
            baselines=[{"lr": 1.5e-3}],
        )
    )
    url = f"sqlite:///{folder / 'hpo.db'}"
    study, _ = create_or_resume(spec, open_storage(url))
    stopped = [False]

    def stop_at_second_eval(trial: Any, point: Any) -> None:
        if point.index == 2 and not stopped[0]:
            stopped[0] = True
            raise WorkerStopping

    objective = functools.partial(run_objective, hooks=PointHooks(after=stop_at_second_eval))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)  # module-scoped: runs before the per-test chdir, and MLflow writes ./mlruns
        mp.setenv("WANDB_SILENT", "true")
        opts = WorkerOptions(
            url=url, study="tracked", exit_when_idle=True, artifact_dir=folder / "art", poll_seconds=0.1
        )
        Worker(opts, objective=objective).serve()
    return study, folder


def test_the_trial_was_stopped_and_its_retry_completed(tracked: tuple[optuna.Study, Path]) -> None:
    study, _ = tracked
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL, TrialState.COMPLETE]


def test_a_retried_trial_continues_its_run_with_no_duplicate_or_backward_steps(
    tracked: tuple[optuna.Study, Path],
) -> None:
    study, folder = tracked
    run = folder / "art" / "tensorboard" / "tracked" / "trial-0000"
    assert len(list(run.glob("events.out.tfevents.*"))) == 2  # one per attempt, same run folder
    recs = records(run)
    steps = [step for tag, step, _ in recs if tag == "train/loss"]
    total = study.get_trials()[1].user_attrs["budget_kimg"] * 1000 // 16  # batch 16
    assert steps == list(range(1, int(total) + 1))  # every step once, in order, across both attempts
    counts = Counter((tag, step) for tag, step, _ in recs if not tag.startswith("_hparams_"))
    assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1][:5]


def test_evaluation_scalars_match_the_trials_stored_curve(tracked: tuple[optuna.Study, Path]) -> None:
    study, folder = tracked
    trial = study.get_trials()[1]
    recs = records(folder / "art" / "tensorboard" / "tracked" / "trial-0000")
    by_step = {step: scalar(v) for tag, step, v in recs if tag == "val/val_rel"}
    curve = trial.user_attrs["curve"]
    assert len(by_step) == 4
    for point in curve.values():
        step = round(point["kimg"] * 1000 / 16)
        assert by_step[step] == pytest.approx(point["val_rel"], rel=1e-5)
        at_plus_two = [v for tag, s, v in recs if tag == "val/val_rel_at_p2.0" and s == step]
        assert scalar(at_plus_two[0]) == pytest.approx(point["val_rel@+2.0"], rel=1e-5)  # per level, named legally
    assert any(tag == "samples/while_training" for tag, _, _ in recs)
    assert all(re.fullmatch(r"[\w\-./]+", tag) for tag, _, _ in recs)  # no tag renamed by the writer


def test_hparams_summary_holds_the_parameters_and_the_score(tracked: tuple[optuna.Study, Path]) -> None:
    from tensorboard.plugins.hparams import plugin_data_pb2

    study, folder = tracked
    trial = study.get_trials()[1]
    recs = records(folder / "art" / "tensorboard" / "tracked" / "trial-0000")
    start = [v for tag, _, v in recs if tag == "_hparams_/session_start_info"]
    assert len(start) == 1
    data = plugin_data_pb2.HParamsPluginData.FromString(start[0].metadata.plugin_data.content)
    hparams = {k: v.number_value for k, v in data.session_start_info.hparams.items()}
    assert hparams == {"lr": pytest.approx(trial.params["lr"])}
    fid = [scalar(v) for tag, _, v in recs if tag == "result/fid"]
    assert fid == [pytest.approx(trial.value)]


def test_mlflow_run_has_the_same_values(tracked: tuple[optuna.Study, Path]) -> None:
    from mlflow.tracking import MlflowClient

    study, folder = tracked
    trial = study.get_trials()[1]
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tracked")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1  # the retry continued its predecessor's run
    run = runs[0]
    assert float(run.data.params["lr"]) == pytest.approx(trial.params["lr"])
    assert run.data.metrics["result/fid"] == pytest.approx(trial.value)
    history = client.get_metric_history(run.info.run_id, "val/val_rel")
    assert sorted(m.value for m in history) == pytest.approx(
        sorted(p["val_rel"] for p in trial.user_attrs["curve"].values())
    )
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert sorted(steps) == sorted(set(steps))


def wandb_records(path: Path) -> list[Any]:
    """The records of an offline W&B run file (a LevelDB-style log: 32 KiB blocks of
    checksum:4, length:2, type:1 headers; type 1 is a whole record, 2-4 its first/middle/last parts)."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    pos, parts, out = 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            break
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
            record.ParseFromString(parts)
            out.append(record)
    return out


def test_wandb_offline_run_has_the_same_values(tracked: tuple[optuna.Study, Path]) -> None:
    study, folder = tracked
    trial = study.get_trials()[1]
    runs = sorted((folder / "art" / "trackers" / "tracked" / "wandb").glob("offline-run-*/*.wandb"))
    assert len(runs) == 2, runs  # one per attempt, under the trial's run id
    summary: dict[str, Any] = {}
    history: dict[int, float] = {}
    config: dict[str, Any] = {}
    for path in runs:
        for r in wandb_records(path):
            kind = r.WhichOneof("record_type")
            if kind == "summary":
                summary |= {u.key: json.loads(u.value_json) for u in r.summary.update if u.key}
            elif kind == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
                if "val/val_rel" in items:
                    history[items["_step"]] = items["val/val_rel"]
            elif kind == "run":
                config |= {u.key: json.loads(u.value_json) for u in r.run.config.update}
    assert summary["result/fid"] == pytest.approx(trial.value)
    assert config["lr"] == pytest.approx(trial.params["lr"])
    curve = trial.user_attrs["curve"].values()
    assert sorted(history.values()) == pytest.approx(sorted(p["val_rel"] for p in curve), rel=1e-6)


def test_hpo_tensorboard_serves_the_scalars_and_its_page_renders(
    tracked: tuple[optuna.Study, Path], tmp_path: Path
) -> None:
    study, folder = tracked
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hpo",
            "tensorboard",
            "tracked",
            "--artifacts",
            str(folder / "art"),
            "--port",
            str(port),
        ],
        env=hpo_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        query = urllib.parse.urlencode({"tag": "val/val_rel", "run": "trial-0000"})
        points = poll_json(f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?{query}", server, "TensorBoard")
        curve = study.get_trials()[1].user_attrs["curve"]
        assert sorted(p[2] for p in points) == pytest.approx(sorted(c["val_rel"] for c in curve.values()), rel=1e-5)
        dom, log = browse(f"http://127.0.0.1:{port}/", tmp_path)
        assert "Uncaught" not in log and "TensorBoard" in dom and "trial-0000" in dom, log[-2000:]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_an_unknown_study_has_no_logs_to_serve(tmp_path: Path) -> None:
    from tests.cli import run_cli

    code, _, err = run_cli(["tensorboard", "nope", "--artifacts", str(tmp_path)])
    assert code == 2 and "no TensorBoard logs for study 'nope'" in err
