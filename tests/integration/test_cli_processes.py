"""The CLI as a process, where the process is the point: launch runs local workers to the end or
says why they all failed, passes threads and GPUs on, `status --watch` ends cleanly on Ctrl-C, and
`report --open` finds a browser or says there is none."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hpo.service.status_view import trial_columns
from tests.cli import run_cli
from tests.service_helpers import hpo_env, write_spec
from tests.study_builders import add, new_study
from tests.test_cli_conventions import DISTS, crowded_study, table_lines


def test_launch_on_the_default_embedded_database_runs_its_local_worker_to_the_end(tmp_path: Path) -> None:
    """The quickstart's path: no storage given, one local worker on this machine (CPU or GPU)."""
    spec = write_spec(tmp_path, study={"name": "local", "n_trials": 2})
    done = subprocess.run(
        [sys.executable, "-m", "hpo", "launch", str(spec), "--skip-doctor"],
        env=hpo_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2/2 finished" in done.stdout and (tmp_path / "hpo.db").exists()
    assert (tmp_path / "reports" / "local.html").exists()
    table = done.stdout[done.stdout.rindex("\n# ") + 1 : done.stdout.index("report: ")]
    assert max(map(len, table.splitlines())) <= 100, table  # its final table fits the terminal (100 in a pipe)


def test_a_launch_whose_workers_all_failed_exits_nonzero_and_says_why(tmp_path: Path) -> None:
    poison = tmp_path / "poison"
    poison.mkdir()
    (poison / "sitecustomize.py").write_text(
        "import sys\nif 'worker' in sys.argv:\n    raise SystemExit('boom: this worker cannot start')\n"
    )
    spec = write_spec(tmp_path, study={"name": "doomed", "n_trials": 2})
    env = {**hpo_env(), "PYTHONPATH": str(poison)}
    url = f"sqlite:///{tmp_path / 'd.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "hpo", "launch", str(spec), "--skip-doctor", "--storage", url],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: all 1 local worker(s) failed (exit 1)") and "boom: this worker cannot start" in last
    assert not (tmp_path / "reports").exists()  # no empty report


def terminal_ctrl_c() -> None:
    """Ctrl-C as a terminal delivers it: a suite started in the background (``cmd &`` in a
    non-interactive shell) hands its children SIGINT ignored, and Python keeps it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_status_watch_refreshes_until_the_study_is_finished_and_ctrl_c_ends_it_cleanly(tmp_path: Path) -> None:
    study = new_study(tmp_path, "watched")  # n_trials 40: unfinished
    add(study, {"lr": 1e-3}, value=2.0, curve=[1.0])
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    env = {**hpo_env(url), "PYTHONFAULTHANDLER": "1"}  # a hang dumps every thread's stack on SIGABRT
    stopped = subprocess.Popen([sys.executable, "-m", "hpo", "status", "watched", "--watch", "0.2", "--json"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=terminal_ctrl_c)  # fmt: skip
    assert stopped.stdout is not None
    frames = [json.loads(stopped.stdout.readline()) for _ in range(2)]  # one JSON object per line
    assert all(f["study"]["finished"] == 1 and not f["study"]["done"] for f in frames)
    stopped.send_signal(signal.SIGINT)
    try:
        _, err = stopped.communicate(timeout=60)  # drains both pipes while it stops
    except subprocess.TimeoutExpired:
        stopped.send_signal(signal.SIGABRT)
        _, err = stopped.communicate(timeout=30)
        raise AssertionError(f"Ctrl-C did not end hpo status --watch within 60 s; its stacks:\n{err[-4000:]}") from None
    assert stopped.returncode == 0, err
    finished = new_study(tmp_path, "finished")
    for _ in range(40):
        add(finished, {"lr": 1e-3}, value=2.0, curve=[1.0])
    for watch in (["--watch", "0.1"], ["--watch"]):  # alone, before the study's name too: every 5 s
        code, out, err = run_cli(["status", *watch, "finished", "--storage", url])
        assert code == 0 and out.count("40/40 finished") == 1, err  # one frame: it was already finished


def test_launch_and_confirm_pass_threads_and_gpus_to_their_local_workers(tmp_path: Path) -> None:
    recorder = tmp_path / "record"
    recorder.mkdir()
    (recorder / "sitecustomize.py").write_text(
        "import json, sys\nif 'worker' in sys.argv:\n"
        f"    open({str(tmp_path / 'argv.json')!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "    raise SystemExit('recorded')\n"
    )
    env = {**hpo_env(), "PYTHONPATH": str(recorder)}
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    spec = write_spec(tmp_path, study={"name": "threads", "n_trials": 2})
    source = new_study(tmp_path, "source")
    add(source, {"lr": 1e-3}, value=2.0, curve=[1.0])
    for args in (["launch", str(spec), "--skip-doctor"], ["confirm", "source", "--top", "1", "--seeds", "1"]):
        done = subprocess.run(
            [sys.executable, "-m", "hpo", *args, "--storage", url, "--workers", "2", "--threads", "1", "--gpus", "cpu"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 2 and "all 2 local worker(s) failed" in done.stderr, done.stderr[-2000:]
    argvs = [json.loads(line) for line in (tmp_path / "argv.json").read_text().splitlines()]
    assert len(argvs) == 4
    for argv in argvs:
        assert argv[argv.index("--threads") + 1] == "1" and argv[argv.index("--gpus") + 1] == "cpu", argv
    code, _, err = run_cli(["launch", str(spec), "--storage", url, "--gpus", "0,x", "--detach"])
    assert code == 2 and err.startswith("error: --gpus '0,x': expected 'all', 'cpu' or") and err.count("\n") == 1


def test_report_open_opens_the_browser_or_says_there_is_none(tmp_path: Path) -> None:
    study = new_study(tmp_path, "shown")
    add(study, {"lr": 1e-3}, value=2.0, curve=[1.0])
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$1" > {tmp_path / "opened"}\n')
    browser.chmod(0o755)
    empty = tmp_path / "bin"
    empty.mkdir()
    bare = {k: v for k, v in hpo_env(f"sqlite:///{tmp_path / 'hpo.db'}").items()
            if k not in ("DISPLAY", "WAYLAND_DISPLAY", "TERM", "BROWSER")} | {"PATH": str(empty)}  # fmt: skip
    for env in ({**bare, "BROWSER": str(browser)}, bare):
        done = subprocess.run([sys.executable, "-m", "hpo", "report", "shown", "-o", "r.html", "--open"], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.startswith("report: r.html\n")
        if "BROWSER" in env:
            assert (tmp_path / "opened").read_text().strip() == (tmp_path / "r.html").resolve().as_uri()
            assert "opened in a browser" in done.stdout
        else:
            assert "no browser found on this machine; open r.html" in done.stdout
    assert os.path.getsize(tmp_path / "r.html") > 0


def test_a_worker_stopped_while_it_starts_exits_cleanly_and_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hpo.db'}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "hpo", "worker", "--exit-when-idle", "--threads", "1"],
        env=hpo_env(url), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.5)  # inside start-up: imports, storage
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "stopped by SIGTERM" in err and "Traceback" not in err, err


def test_the_status_table_fits_100_columns_off_a_terminal_and_wide_shows_every_column(tmp_path: Path) -> None:
    url = crowded_study(tmp_path)
    env = {k: v for k, v in hpo_env(url).items() if k != "COLUMNS"}  # a pipe, no $COLUMNS: 100

    def status(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "hpo", "status", "crowded", *args], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    fitted, wide = table_lines(status()), table_lines(status("--wide"))
    assert max(len(line) for line in fitted) <= 100, "\n".join(fitted)
    assert fitted[0].split()[:3] == ["#", "state", "classifier-FID"] and "more column(s) with `hpo status" in fitted[6]
    headers = [c.header for c in trial_columns("classifier-FID", sorted(DISTS))]
    assert all(h in wide[0] for h in headers) and max(len(line) for line in wide) > 100
    assert "ran on" not in fitted[0] and "hardware" not in fitted[0]  # the least important go first
    assert len(wide) == 2 + 4 and [line.split()[0] for line in fitted[2:6]] == ["0", "1", "2", "3"]
