"""The HTML report from a real small study, opened in headless Chromium; and the dashboard."""

from __future__ import annotations

import html
import io
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from PIL import Image

from tests.browser import browse
from tests.cli import hpo_in_process
from tests.doc_commands import COMMANDS, RUN_ELSEWHERE, on_study
from tests.images import write_images
from tests.pg import free_port
from tests.report_study import build_study
from tests.service_helpers import dashboard_study_names, hpo_env, study_report, write_spec

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, Path, str]:
    folder = tmp_path_factory.mktemp("report")
    study, artifacts = build_study(folder)
    path = study_report(study, folder / "report.html", artifact_dir=artifacts)
    return study, path, path.read_text()


def test_report_has_every_section_with_figures_and_embedded_images(report: tuple[optuna.Study, Path, str]) -> None:
    _, _, page = report
    for heading in (
        "Summary",
        "Which hyperparameters mattered",
        "Is it learning?",
        "The search",
        "Samples",
        "Failures and pruned trials",
    ):
        assert f"<h2>{heading}</h2>" in page
    assert "classifier-FID" in page and "not comparable with Inception FID" in page
    assert "pruning saved about" in page
    assert page.count('class="plotly-graph-div"') >= 7  # importances ×2, curves, levels, history, slice, contour, …
    assert page.count("data:image/png;base64,") >= 4  # best trials' grids and the per-evaluation grids
    assert not re.search(r"<(script|img|link)[^>]+(src|href)=[\"']?https?:", page)  # self-contained: opens offline
    failures = page[page.index("Failures and pruned trials") :]
    for reason in ("nan_loss", "oom", "worker_lost"):
        assert f"<td>{reason}</td>" in failures
    assert re.search(r"<td>oom</td><td>2</td><td>#\d+, #\d+</td><td>lr ≥ 6 in 2 of 2</td>", failures)
    assert re.search(r"<td>worker_lost</td><td>1</td><td>#\d+</td><td>—</td>", failures)  # one trial: no range


def test_report_renders_in_chromium_without_javascript_errors(
    report: tuple[optuna.Study, Path, str], tmp_path: Path
) -> None:
    _, path, page = report
    dom, log = browse(path.as_uri(), tmp_path)
    assert "Uncaught" not in log and "SyntaxError" not in log, log[-2000:]
    assert dom.count('class="main-svg"') >= 2 * page.count('class="plotly-graph-div"')  # every plot drew its SVG
    probe = path.with_name("probe.html")  # where the training strip lands once the page has laid out
    measure = (
        "<script>window.addEventListener('load',()=>setTimeout(()=>{const t=document.querySelector('table.strips');"
        "document.body.setAttribute('data-strip',t.getBoundingClientRect().height+'x'+t.rows.length)},500))</script>"
    )
    probe.write_text(page.replace("</body>", measure + "</body>"))
    laid_out, _ = browse(probe.as_uri(), tmp_path)
    height, rows = re.search(r'data-strip="([\d.]+)x(\d+)"', laid_out).groups()  # type: ignore[union-attr]
    assert int(rows) == 1 + 3 and float(height) < 300  # a row per evaluation point, not a tall grid each
    assert "(bootstrap median, 80% interval" in dom  # the importance shown is the one its interval qualifies
    shot = tmp_path / "report.png"
    browse(path.as_uri(), tmp_path, screenshot=shot)
    image = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    assert len(set(image.resize((320, 600)).get_flattened_data())) > 50  # not blank


def test_hostile_study_name_renders_as_text(tmp_path: Path) -> None:
    study = optuna.create_study(study_name=HOSTILE, storage=f"sqlite:///{tmp_path / 'x.db'}")
    for i in range(4):
        study.add_trial(
            optuna.create_trial(
                params={HOSTILE: float(i), "lr": 10.0**-i},
                distributions={
                    HOSTILE: optuna.distributions.FloatDistribution(0, 5),
                    "lr": optuna.distributions.FloatDistribution(1e-4, 1, log=True),
                },
                value=float(i),
                user_attrs={"fail_reason": HOSTILE, "samples": HOSTILE},
            )
        )
    path = study_report(study, tmp_path / "hostile.html", artifact_dir=None)
    page = path.read_text()
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    dom, log = browse(path.as_uri(), tmp_path)
    assert "Uncaught" not in log
    assert "Study &lt;script&gt;alert(1)&lt;/script&gt;" in dom  # shown as text, not run


def test_dashboard_serves_the_study_and_its_page_loads(report: tuple[optuna.Study, Path, str], tmp_path: Path) -> None:
    study, path, _ = report
    url = f"sqlite:///{path.parent / 'hpo.db'}"
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hpo",
            "dashboard",
            "--storage",
            url,
            "--port",
            str(port),
            "--artifacts",
            str(path.parent / "artifacts"),
        ],
        env=hpo_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # request logs would fill an unread pipe and block the server
        text=True,
    )
    try:
        assert dashboard_study_names(port, server) == [study.study_name]
        dom, log = browse(f"http://127.0.0.1:{port}/dashboard", tmp_path)
        assert study.study_name in dom, log[-2000:]
    finally:
        server.terminate()
        server.wait(timeout=30)


# Appended to the commands that queue or train, so the suite stays short; each still runs for real
# on the study it was suggested for (the queued work itself is run by the confirm and launch tests).
CHEAPER = {
    "launch": ["--workers", "0", "--detach", "--skip-doctor"],
    "confirm": ["--workers", "0", "--detach"],  # queued only: a detached local worker would outlive the test
    "train": ["--set", "train.kimg=0.2", "--threads", "1"],
    "doctor": ["--fast", "--threads", "1"],
    "sample": ["--threads", "1"],
}
SERVERS = {"dashboard", "tensorboard"}  # run forever: test_dashboard_serves_the_study_and_its_page_loads


def suggested_commands(page: str) -> list[str]:
    """Every ``hpo …`` command the report prints, in `backticks` or <code>, in page order."""
    found = re.findall(r"`(hpo [^`]+)`|<code>(hpo [^<]+)</code>", page)
    return list(dict.fromkeys(html.unescape(a or b) for a, b in found))


def test_every_command_the_report_suggests_succeeds_on_its_study(
    report: tuple[optuna.Study, Path, str], tmp_path: Path
) -> None:
    _, path, page = report
    commands = suggested_commands(page)
    verbs = {shlex.split(c)[1] for c in commands}
    assert {"narrow", "launch", "confirm", "train", "doctor", "export", "sample"} <= verbs, commands
    work = tmp_path / "work"
    shutil.copytree(path.parent, work, ignore=shutil.ignore_patterns("*.html"))  # the study's database and artifacts
    for command in commands:
        argv = shlex.split(command)[1:]
        if argv[0] in SERVERS:
            continue
        assert not any(a.isupper() for a in argv), f"{command}: a placeholder, not a command"
        done = hpo_in_process(*argv, *CHEAPER.get(argv[0], []), cwd=work)
        assert done.returncode == 0, f"{command}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"


def test_every_command_in_the_docs_runs_on_a_study(report: tuple[optuna.Study, Path, str], tmp_path: Path) -> None:
    """Each fenced block of README and docs/ runs in order, from a fresh copy of a real study's folder:
    the study names it uses mean that study, a spec it reads and did not write is a small one, an
    image folder it surveys is generated; the same cheaper flags as the report's commands. What runs
    forever or needs Slurm or a GPU-sized network is run by the tests RUN_ELSEWHERE and GPU_SPEC_DOCTOR name."""
    study, path, _ = report
    blocks: dict[tuple[Path, int], list[tuple[str, ...]]] = {}
    for command in COMMANDS:
        if command.args[0] not in RUN_ELSEWHERE:
            blocks.setdefault((command.path, command.block), []).append(command.args)
    assert len(blocks) >= 8, sorted(blocks)
    ran: set[str] = set()  # a command that reads nothing its block wrote runs once, in the first block with it
    for (doc, line), commands in blocks.items():
        work = tmp_path / f"{doc.stem}-{line}"
        shutil.copytree(path.parent, work, ignore=shutil.ignore_patterns("*.html"))
        (work / ".hpo").mkdir()
        (work / "artifacts").rename(work / ".hpo" / "artifacts")  # where the docs' commands look by default
        (work / "search_spaces").mkdir()
        spec = write_spec(work, "docs-spec.yaml", study={"name": "from-the-docs", "n_trials": 2})
        planned_for_a_gpu = any(args[0] == "init" and "--gpu-memory" in args for args in commands)
        wrote = False
        for args in commands:
            if planned_for_a_gpu and args[0] == "doctor":
                continue  # GPU_SPEC_DOCTOR runs it
            argv = on_study(args, study=study.study_name, best=study.best_trial.number, spec=spec, work=work)
            key = shlex.join(argv).replace(str(work), "WORK")
            if key in ran and not wrote:
                continue
            ran.add(key)
            wrote |= any(a in ("-o", "--output") for a in argv)
            if argv[0] == "init" and not (work / argv[1]).exists():
                for label in ("a", "b"):
                    write_images(work / argv[1] / label, 40, size=64, start=0 if label == "a" else 40)
            started = time.perf_counter()
            done = hpo_in_process(*argv, *CHEAPER.get(argv[0], []), cwd=work)
            print(f"{time.perf_counter() - started:5.1f} s  {doc.name}:{line}: hpo {shlex.join(argv)}")
            where = f"{doc.name}:{line}: hpo {shlex.join(args)}\n  ran as hpo {shlex.join(argv)}"
            assert done.returncode == 0, f"{where}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
