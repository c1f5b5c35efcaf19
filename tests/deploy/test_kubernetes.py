"""deploy/kubernetes/ offline: every manifest validates against the Kubernetes API's JSON schemas
(kubernetes-validate's bundled copy, strict: an unknown or misspelt field is an error; no network),
and the pods run what docker-compose.yml and the container test run: the same commands, the same
environment variable names, the same volumes, the storage URL only from a Secret, one GPU per worker,
a grace period that covers a worker's SIGTERM path, and every `hpo` command line parses against the
real CLI."""

from __future__ import annotations

import re
import shlex
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.exceptions import TyperException

from hpo.spec.loading import load_spec
from tests.doc_commands import SHELL_PUNCTUATION, parse

ROOT = Path(__file__).resolve().parent.parent.parent
MANIFESTS = ROOT / "deploy" / "kubernetes"
SHIPPED_SPEC = ROOT / "search_spaces" / "bikes.yaml"
# The oldest version the manifests and docs/kubernetes.md's resize rely on (elastic Indexed Jobs are
# GA from 1.31), and the newest whose schemas the package ships.
VERSIONS = ("1.31", kubernetes_validate.latest_version())
SECRET = "hpo-storage"
SPEC_DIR = "/app/specs"  # where 30-launch.yaml mounts the hpo-spec ConfigMap
# A worker's SIGTERM mid-trial to its exit: 3 s measured (docs/kubernetes.md, "What a worker needs to
# stop"), rounded up; a heartbeat riding out an outage can hold it for one heartbeat interval more.
STOP_SECONDS = 10
JOB_EXTRAS = ["--study", "$(HPO_STUDY)", "--exit-when-idle", "--worker-index", "$(HPO_WORKER_INDEX)"]
JOB_EXTRAS += ["--per-gpu", "$(HPO_PER_GPU)"]
SHELL_KEYWORDS = {"until", "while", "do", "then", "if", "!"}


def documents() -> list[tuple[str, dict[str, Any]]]:
    """(file relative to deploy/kubernetes, resource) for every resource in every manifest."""
    found = []
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                found.append((str(path.relative_to(MANIFESTS)), doc))
    return found


DOCS = documents()


def resource(kind: str, name: str) -> dict[str, Any]:
    matches = [d for _, d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name!r} in {MANIFESTS}, found {len(matches)}"
    return matches[0]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
    return spec


def container(doc: dict[str, Any], name: str, *, init: bool = False) -> dict[str, Any]:
    (found,) = [c for c in pod_spec(doc)["initContainers" if init else "containers"] if c["name"] == name]
    return dict(found)


def containers() -> Iterator[dict[str, Any]]:
    for _, doc in DOCS:
        if doc["kind"] in ("Pod", "Job", "Deployment", "StatefulSet"):
            yield from pod_spec(doc).get("initContainers", [])
            yield from pod_spec(doc)["containers"]


def compose() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


def env_names(c: dict[str, Any]) -> set[str]:
    return {e["name"] for e in c.get("env", [])}


def mounts(c: dict[str, Any]) -> set[tuple[str, bool]]:
    """(container path, read-only) of each volume mount, /dev/shm aside (compose's shm_size)."""
    return {(m["mountPath"], bool(m.get("readOnly"))) for m in c["volumeMounts"] if m["mountPath"] != "/dev/shm"}


def compose_mounts(service: dict[str, Any]) -> set[tuple[str, bool]]:
    found = set()
    for volume in service["volumes"]:
        _, path, *mode = volume.split(":")
        found.add((path, mode == ["ro"]))
    return found


def pod_env(c: dict[str, Any]) -> dict[str, str]:
    """The container's environment as the pod sees it: a literal value, the completion index of the
    first pod (0), or a stand-in for a Secret's value."""
    env = {}
    for e in c.get("env", []):
        source = e.get("valueFrom", {})
        if "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            env[e["name"]] = "0"
        else:
            env[e["name"]] = e["value"] if "value" in e else f"<secret {source['secretKeyRef']['key']}>"
    return env


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' expansion of ``$(VAR)`` in command and args; an undefined variable is a mistake
    here (Kubernetes would pass it on literally)."""
    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], a) for a in args]


def shell_hpo_args(script: str, env: dict[str, str]) -> list[list[str]]:
    """The arguments of each `hpo` invocation in a ``sh -c`` script, its ``$VAR`` expanded."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    found, segment = [], []
    for token in [*lexer, ";"]:
        if not set(token) <= SHELL_PUNCTUATION:
            segment.append(re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env[m.group(1)], token))
            continue
        while segment and segment[0] in SHELL_KEYWORDS:
            segment.pop(0)
        if segment[:1] == ["hpo"]:
            found.append(segment[1:])
        segment = []
    return found


def hpo_command_lines(c: dict[str, Any]) -> list[list[str]]:
    """What follows `hpo` in each hpo invocation a container makes (the image's entrypoint is hpo)."""
    if not c["image"].startswith("hpo:"):
        return []
    env = pod_env(c)
    command, args = c.get("command"), expand(c.get("args", []), env)
    if command is None:
        return [args]
    if command[:2] == ["sh", "-c"]:
        return shell_hpo_args(command[2], env)
    return [expand(command[1:], env) + args] if command[0] == "hpo" else []


def mounted_spec(tmp_path: Path) -> Path:
    """The spec file the launch pod sees at /app/specs/spec.yaml."""
    path = tmp_path / "spec.yaml"
    path.write_text(resource("ConfigMap", "hpo-spec")["data"]["spec.yaml"])
    return path


def test_every_manifest_validates_against_the_kubernetes_schemas_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object) -> None:
        raise AssertionError("kubernetes-validate tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    kinds = {d["kind"] for _, d in DOCS}
    assert {"Namespace", "PersistentVolumeClaim", "ConfigMap", "Job", "Deployment", "Service"} <= kinds
    assert {"StatefulSet", "Secret", "Pod"} <= kinds
    for version in VERSIONS:
        for path, doc in DOCS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                where = ".".join(str(p) for p in err.path)
                pytest.fail(
                    f"{path}: {doc['kind']} {doc['metadata']['name']} at {where}: {err.message} (k8s {version})"
                )
            assert doc["metadata"]["namespace" if doc["kind"] != "Namespace" else "name"] == "hpo", path


def test_the_schema_check_rejects_a_misspelt_field() -> None:
    job = yaml.safe_load(yaml.safe_dump(resource("Job", "hpo-workers")))
    job["spec"]["parallelsim"] = 4
    with pytest.raises(kubernetes_validate.ValidationError, match="parallelsim"):
        kubernetes_validate.validate(job, VERSIONS[0], strict=True)


def test_workers_run_compose_s_worker_command_plus_what_a_job_needs() -> None:
    job, service = resource("Job", "hpo-workers"), compose()["workers"]
    worker = container(job, "worker")
    assert "command" not in worker  # the image's entrypoint, hpo, as in compose
    assert worker["args"] == service["command"] + JOB_EXTRAS
    added = {m for a in worker["args"] for m in re.findall(r"\$\((\w+)\)", a)}
    assert env_names(worker) == set(service["environment"]) | added
    assert mounts(worker) == compose_mounts(service)
    (shm,) = [v for v in pod_spec(job)["volumes"] if v["name"] == "shm"]
    assert (shm["emptyDir"]["medium"], shm["emptyDir"]["sizeLimit"], service["shm_size"]) == ("Memory", "2Gi", "2gb")
    assert {"mountPath": "/dev/shm", "name": "shm"} in worker["volumeMounts"]


def test_the_launch_dashboard_and_tensorboard_run_what_compose_and_the_container_test_run() -> None:
    services = compose()
    launch = container(resource("Job", "hpo-launch"), "launch")
    # the container test: `docker compose run --rm hpo launch search_spaces/first.yaml`; --workers 0 says
    # what PostgreSQL's default already is: this pod trains nothing
    assert launch["args"] == ["launch", f"{SPEC_DIR}/spec.yaml", "--workers", "0"]
    assert env_names(launch) == set(services["hpo"]["environment"])
    in_compose = compose_mounts(services["hpo"]) - {("/app/search_spaces", True)}
    assert mounts(launch) == in_compose | {(SPEC_DIR, True)}
    for name in ("dashboard", "tensorboard"):
        served = container(resource("Deployment", f"hpo-{name}"), name)
        assert served["args"] == services[name]["command"]
        assert env_names(served) == set(services[name]["environment"])
        assert mounts(served) == compose_mounts(services[name])
        port = int(served["args"][served["args"].index("--port") + 1])
        service = resource("Service", f"hpo-{name}")
        assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(port, "http")]
        assert served["ports"] == [{"name": "http", "containerPort": port}]


def test_the_bundled_postgres_is_compose_s() -> None:
    pg, service = resource("StatefulSet", "postgres"), compose()["postgres"]
    server = container(pg, "postgres")
    assert server["args"] == service["command"]  # the image's entrypoint stays; compose's command is its CMD
    assert service["image"] == f"${{POSTGRES_IMAGE:-{server['image']}}}"
    assert set(service["environment"]) <= env_names(server)
    assert resource("Service", "postgres")["spec"]["ports"][0]["port"] == 5432
    assert pg["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] in {m["name"] for m in server["volumeMounts"]}


def test_the_storage_url_comes_only_from_the_secret() -> None:
    template = resource("Secret", SECRET)
    users = [c for c in containers() if "HPO_STORAGE" in env_names(c)]
    assert len(users) == 5  # launch, the wait for the study, the worker, the dashboard, TensorBoard
    for c in users:
        (storage,) = [e for e in c["env"] if e["name"] == "HPO_STORAGE"]
        assert storage == {"name": "HPO_STORAGE", "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "url"}}}
    refs = [e["valueFrom"].get("secretKeyRef") for c in containers() for e in c.get("env", []) if "valueFrom" in e]
    assert {ref["name"] for ref in refs if ref is not None} == {SECRET}
    keys = {ref["key"] for ref in refs if ref is not None}
    assert keys == set(template["stringData"])  # the template holds every key a pod reads, and no other
    for path, doc in DOCS:
        if doc is not template:
            assert "postgresql://" not in yaml.safe_dump(doc), f"{path}: a database URL outside the Secret"


def test_workers_hold_one_gpu_each_and_stop_within_their_grace_period(tmp_path: Path) -> None:
    job = resource("Job", "hpo-workers")
    spec, pod = job["spec"], pod_spec(job)
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] >= 1
    assert pod["restartPolicy"] == "OnFailure"
    assert container(job, "worker")["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert pod["nodeSelector"] == {} and pod["tolerations"] == []  # the hooks, empty by default
    study = load_spec(mounted_spec(tmp_path), check_data=False).study
    assert pod["terminationGracePeriodSeconds"] >= study.heartbeat_interval + STOP_SECONDS
    minutes = re.fullmatch(r"(\d+)m", compose()["workers"]["stop_grace_period"])
    assert minutes is not None and pod["terminationGracePeriodSeconds"] == 60 * int(minutes.group(1))
    for c in (container(job, "wait-for-study", init=True), container(job, "worker")):
        assert pod_env(c)["HPO_STUDY"] == study.name


def test_the_spec_config_map_is_the_shipped_bikes_spec() -> None:
    embedded = resource("ConfigMap", "hpo-spec")["data"]["spec.yaml"]
    assert embedded == SHIPPED_SPEC.read_text(), (
        "deploy/kubernetes/20-spec.yaml no longer holds search_spaces/bikes.yaml: paste the spec into it again"
    )


def test_every_hpo_command_in_the_manifests_parses_against_the_cli() -> None:
    lines = [line for c in containers() for line in hpo_command_lines(c)]
    assert sorted(line[0] for line in lines) == ["dashboard", "launch", "status", "tensorboard", "worker"]
    for line in lines:
        try:
            parse(tuple(line))
        except TyperException as err:
            pytest.fail(f"hpo {shlex.join(line)}: {err}")
