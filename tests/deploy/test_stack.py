"""`make test-containers`: the shipped Dockerfile and compose file, built and run for real on a Docker
engine of the test's own. PostgreSQL, a worker, the dashboard and TensorBoard come up with
`docker compose --profile cpu` (the CPU variant: the GPU worker minus its device reservation); a study
launched with `docker compose run --rm hpo launch` finishes and its report lands in ./reports; then a
killed worker container, a stopped one and a restarted database each lose nothing. Prints its figures."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy
import torch
import yaml
from optuna.trial import TrialState

from tests.engine import ROOT, Engine, base_image, build_context, engine, package_indexes, postgres_image, project_image
from tests.pg import free_port
from tests.service_helpers import TINY_SPEC, deep_update

pytestmark = pytest.mark.containers
PASSWORD = "Stack-pw-7Qx2LmZ9"
IMAGE = "hpo:latest"
FIGURES: dict[str, str] = {}


@dataclass
class Stack:
    eng: Engine
    project: Path
    ports: dict[str, int]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://hpo:{PASSWORD}@127.0.0.1:{self.ports['POSTGRES_PORT']}/hpo"

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["docker-compose", "--project-directory", str(self.project), "-p", "hpotest"]
        cmd += ["-f", str(ROOT / "docker-compose.yml"), "--profile", "cpu", *args]
        done = subprocess.run(cmd, env=self.eng.env, cwd=self.project, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"docker-compose {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return done

    def worker_id(self) -> str:
        return self.compose("ps", "-q", "workers-cpu").stdout.strip()

    def worker_log(self) -> str:
        return self.eng.docker("logs", self.worker_id(), merged=True)

    def inspect(self, container: str) -> dict[str, Any]:
        return dict(json.loads(self.eng.docker("inspect", container))[0])

    def study(self, name: str) -> optuna.Study:
        return optuna.load_study(study_name=name, storage=self.url)

    def launch_detached(self, spec: str) -> None:
        done = self.compose("run", "--rm", "-T", "hpo", "launch", f"search_spaces/{spec}.yaml", "--detach")
        assert PASSWORD not in done.stdout + done.stderr


def spec(name: str, **changes: Any) -> dict[str, Any]:
    """The service tests' tiny digits spec, with the image's cache folder."""
    out = deep_update(TINY_SPEC, {"study": {"name": name}, **changes})
    out["data"]["cache_dir"] = "/app/.hpo/cache"
    return out


LONG = {"train": {"kimg": 6, "num_evals": 6}, "search": {"lr": {"type": "float", "low": 1e-3, "high": 2e-3}}}
SPECS = {
    "first": spec("first", study={"name": "first", "n_trials": 3}, tracking={"tensorboard": True}),
    "killed": spec("killed", study={"name": "killed", "n_trials": 1}, **LONG),
    "stopped": spec("stopped", study={"name": "stopped", "n_trials": 1}, **LONG),
    "dbrestart": spec("dbrestart", study={"name": "dbrestart", "n_trials": 1}, **LONG),
}


def wait_for(what: str, ok: Callable[[], bool], timeout: float = 600) -> float:
    """Poll until ``ok()``; the seconds it took."""
    start = time.monotonic()
    while True:
        try:
            if ok():
                return time.monotonic() - start
        except (OSError, sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.OptunaError):
            pass  # the database may be restarting, a server still starting
        assert time.monotonic() - start < timeout, f"timed out waiting for {what}"
        time.sleep(0.5)


def evaluated(stack: Stack, name: str, points: int = 1) -> Callable[[], bool]:
    def ok() -> bool:
        trials = stack.study(name).get_trials()
        return bool(trials) and len(trials[-1].intermediate_values) >= points

    return ok


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    start = time.monotonic()
    with engine() as eng, tempfile.TemporaryDirectory(prefix="hpo-stack-") as tmp:
        with package_indexes() as indexes:
            base_image(eng, indexes)
            postgres_image(eng)
            context = build_context(Path(tmp) / "context")
            project_image(eng, context, IMAGE, "cold build")
            with (context / "hpo" / "cli.py").open("a") as f:
                f.write("\n# a source change: the dependency layers stay cached\n")
            project_image(eng, context, IMAGE, "warm build (source changed)")
        size = int(eng.docker("image", "inspect", IMAGE, "--format", "{{.Size}}"))
        FIGURES["image size"] = f"{size / 1e9:.2f} GB"
        for name, seconds in eng.timings.items():
            FIGURES[name] = f"{seconds:.0f} s"
        project = Path(tmp) / "project"
        for folder in ("data", "models", "reports", "search_spaces"):
            (project / folder).mkdir(parents=True)
        os.chown(project / "reports", 1000, 1000)  # docs/operations.md's step: the containers run as uid 1000
        for name, body in SPECS.items():
            (project / "search_spaces" / f"{name}.yaml").write_text(yaml.safe_dump(body))
        ports = {k: free_port() for k in ("POSTGRES_PORT", "DASHBOARD_PORT", "TENSORBOARD_PORT")}
        env = {"POSTGRES_PASSWORD": PASSWORD, "POSTGRES_IMAGE": "hpo-test/postgres:15", **ports}
        (project / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        s = Stack(eng, project, ports)
        s.compose("down", "-v", "--timeout", "10")  # what an interrupted run left on a kept engine root
        try:
            yield s
        finally:
            logs = s.compose("logs", "--no-color", check=False).stdout
            (Path(tempfile.gettempdir()) / "hpo-stack-logs.txt").write_text(logs)
            s.compose("down", "-v", "--timeout", "10", check=False)
            FIGURES["test wall time"] = f"{time.monotonic() - start:.0f} s"
            print("\nmake test-containers figures:", file=sys.stderr)
            for key, value in FIGURES.items():
                print(f"  {key}: {value}", file=sys.stderr)


def test_the_image_runs_the_torch_make_test_installs(stack: Stack) -> None:
    script = "import torch; print(torch.__version__)"
    version = stack.eng.docker("run", "--rm", "--entrypoint", "python", IMAGE, "-c", script)
    assert version.strip() == torch.__version__
    FIGURES["torch in the image"] = version.strip()


def test_the_stack_runs_a_study_and_its_report_lands_in_reports(stack: Stack) -> None:
    stack.compose("up", "-d", "postgres")
    up = time.monotonic()
    stack.compose("up", "-d", "workers-cpu", "dashboard", "tensorboard")
    launch = subprocess.Popen(
        ["docker-compose", "--project-directory", str(stack.project), "-p", "hpotest", "-f",
         str(ROOT / "docker-compose.yml"), "run", "--rm", "-T", "hpo", "launch", "search_spaces/first.yaml"],
        env=stack.eng.env, cwd=stack.project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for("the worker's first trial", lambda: "trial 0 started" in stack.worker_log())
    FIGURES["`up` to the first trial's start"] = f"{time.monotonic() - up:.0f} s"
    out, err = launch.communicate(timeout=900)
    assert launch.returncode == 0, err[-3000:]
    assert "3/3 finished" in out and PASSWORD not in out + err
    report = stack.project / "reports" / "first.html"
    assert report.exists() and report.stat().st_mode & stat.S_IROTH  # readable by the user on the host
    assert "data:image/png;base64," in report.read_text()
    studies = poll(f"http://127.0.0.1:{stack.ports['DASHBOARD_PORT']}/api/studies")
    assert [s["study_name"] for s in studies["study_summaries"]] == ["first"]
    expected = ["first/trial-0000", "first/trial-0001", "first/trial-0002"]
    runs = poll(f"http://127.0.0.1:{stack.ports['TENSORBOARD_PORT']}/data/runs", until=lambda r: len(r) >= 3)
    assert sorted(runs) == expected  # on a fresh-clone CI run, a first answer held 2 of the 3 runs


def test_each_trial_records_where_it_ran_and_the_log_says_when_it_starts_and_ends(stack: Stack) -> None:
    trials = stack.study("first").get_trials()
    container = stack.inspect(stack.worker_id())
    for t in trials:
        ran_on = t.user_attrs["ran_on"]
        assert ran_on["host"] == container["Config"]["Hostname"] and ran_on["device"] == "cpu"
        assert ran_on["worker"] == 0 and ran_on["pid"] > 0
    log = stack.worker_log()
    for t in trials:
        assert f"trial {t.number} started: " in log and f"trial {t.number} ended: " in log
    assert "Warning" not in log  # no scipy LinAlgWarning (or any other) spam in a worker's log


def test_a_worker_killed_mid_trial_restarts_and_its_trial_resumes_from_the_checkpoint(stack: Stack) -> None:
    """SIGKILL of the worker process from the host, as the kernel's OOM killer or a crash ends it: the
    engine restarts the container (restart: unless-stopped). `docker kill` itself counts as a manual
    stop for the engine, which then does not restart it (`docker compose up -d` does)."""
    stack.launch_detached("killed")
    wait_for("two evaluation points", evaluated(stack, "killed", 2))
    time.sleep(1.0)
    container = stack.worker_id()
    state = stack.inspect(container)
    os.kill(int(state["State"]["Pid"]), signal.SIGKILL)
    wait_for("the container's restart", lambda: stack.inspect(container)["RestartCount"] > state["RestartCount"])
    retried = [TrialState.FAIL, TrialState.COMPLETE]
    wait_for("the retry", lambda: [t.state for t in stack.study("killed").get_trials()] == retried)
    trials = stack.study("killed").get_trials()
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].params == trials[0].params
    assert trials[1].user_attrs["ran_on"]["host"] == trials[0].user_attrs["ran_on"]["host"]
    log = stack.worker_log()
    assert "resumed from" in log and "trial 1 started (retry of trial 0)" in log


def test_compose_stop_queues_the_trial_for_retry_and_up_finishes_the_study(stack: Stack) -> None:
    stack.launch_detached("stopped")
    wait_for("an evaluation point", evaluated(stack, "stopped", 1))
    container = stack.worker_id()
    start = time.monotonic()
    stack.compose("stop", "workers-cpu", timeout=300)
    FIGURES["`compose stop` of a worker mid-trial"] = f"{time.monotonic() - start:.0f} s (grace period 120 s)"
    state = stack.inspect(container)["State"]
    assert state["Status"] == "exited" and state["ExitCode"] == 0
    trials = stack.study("stopped").get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[0].user_attrs["fail_reason"] == "worker_stopped"
    stack.compose("up", "-d", "workers-cpu")
    wait_for("the retry", lambda: stack.study("stopped").get_trials()[1].state == TrialState.COMPLETE)


def test_restarting_postgres_mid_trial_loses_nothing_and_spends_no_retry(stack: Stack) -> None:
    stack.launch_detached("dbrestart")
    wait_for("an evaluation point", evaluated(stack, "dbrestart", 1))
    stack.compose("restart", "postgres", timeout=300)
    wait_for("the trial", lambda: stack.study("dbrestart").get_trials()[0].state.is_finished())
    trials = stack.study("dbrestart").get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE]
    assert sorted(trials[0].intermediate_values) == [1, 2, 3, 4, 5, 6]


def poll(url: str, timeout: float = 120, until: Callable[[Any], bool] = bool) -> Any:
    """The server's JSON answer once ``until`` holds for it (a server that reloads on an interval, as
    TensorBoard its log folder, may answer with part of what is there before it does)."""
    import urllib.request

    found: list[Any] = []

    def ok() -> bool:
        with urllib.request.urlopen(url, timeout=5) as response:
            found.append(json.load(response))
        return until(found[-1])

    wait_for(url, ok, timeout)
    return found[-1]
