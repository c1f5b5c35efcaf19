"""The `hpo` commands in README's and docs/'s fenced blocks: found, and parsed against the real CLI
without running them (shared by the docs and Kubernetes tests and the test that runs them)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from hpo.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```(\w*)\s*$")
SHELL_PUNCTUATION = set("();<>|&")  # a token of only these ends a command (&&, |, >, ...)


@dataclass(frozen=True)
class DocCommand:
    path: Path
    block: int  # the line of its fence: a block's commands run in order, each block from a fresh start
    line: int
    args: tuple[str, ...]  # what follows `hpo`

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_lines(path: Path) -> list[tuple[int, int, str]]:
    """(first line of its block, line number, text) of every line inside a fenced code block,
    backslash continuations joined."""
    lines: list[tuple[int, int, str]] = []
    inside, pending, start, block = False, "", 0, 0
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(text.strip()):
            inside, block = not inside, number
            continue
        if not inside:
            continue
        if not pending:
            start = number
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        lines.append((block, start, pending + text))
        pending = ""
    return lines


def hpo_args(line: str) -> list[tuple[str, ...]]:
    """The arguments of each `hpo` invocation on one shell line: `hpo ...`, `.venv/bin/hpo ...`,
    `VAR=value hpo ...` or `docker compose run --rm hpo ...`; comments and redirections dropped."""
    try:
        lexer = shlex.shlex(line.strip().removeprefix("$ "), posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        tokens = list(lexer)
    except ValueError:  # not shell (e.g. a YAML line with an apostrophe)
        return []
    found, segment = [], []
    for token in [*tokens, ";"]:
        if not set(token) <= SHELL_PUNCTUATION:
            segment.append(token)
            continue
        words = [t for t in segment if not re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", t)]
        if words[:3] == ["docker", "compose", "run"]:
            words = words[words.index("hpo") :] if "hpo" in words else []
        if words and (words[0] == "hpo" or words[0].endswith("/bin/hpo")):
            found.append(tuple(words[1:]))
        segment = []
    return found


def doc_commands() -> list[DocCommand]:
    return [
        DocCommand(path, block, number, args)
        for path in DOCS
        for block, number, line in fenced_lines(path)
        for args in hpo_args(line)
    ]


def cli() -> TyperGroup:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    return group


def parse(args: tuple[str, ...]) -> None:
    """Parse ``hpo ARGS`` as the CLI would, running nothing; a bad flag, value or command raises
    typer's usage error (a TyperException)."""
    group = cli()
    split = next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))
    options, rest = list(args[:split]), list(args[split:])
    try:
        with group.make_context("hpo", [*options, *rest[:1]], resilient_parsing=False) as ctx:
            if not rest:
                return
            command = group.get_command(ctx, rest[0])
            if command is None:
                raise TyperException(f"no such command {rest[0]!r}")
            command.make_context(rest[0], rest[1:], parent=ctx, resilient_parsing=False)
    except typer.Exit as done:  # --help, --version: parsed, and they stop there
        assert done.exit_code == 0


# The study names and the spec files the docs use, and the commands that run until stopped or need a
# scheduler: those are run by the test named (each exists: test_docs checks).
DOC_STUDIES = {"bikes", "mine", "digits-quickstart"}
RUN_ELSEWHERE = {
    "dashboard": "tests/e2e/test_report.py::test_dashboard_serves_the_study_and_its_page_loads",
    "tensorboard": "tests/e2e/test_tracking.py::test_hpo_tensorboard_serves_the_scalars_and_its_page_renders",
    "slurm": "tests/deploy/test_slurm.py::test_a_job_array_finishes_the_study_through_a_requeue_and_a_cancel",
    "run": "tests/integration/test_run_process.py::test_a_run_stopped_and_killed_continues_to_a_model",
}
# The doctor on a spec `hpo init --gpu-memory` planned for a GPU (a 38M-parameter network: minutes per
# check on this CPU) is this test's job, on bikes128.yaml, init's output for a GPU.
GPU_SPEC_DOCTOR = (
    "tests/e2e/test_shipped_specs.py::test_the_doctors_preflight_passes_every_shipped_spec_with_its_own_network"
)
OUTPUT_FLAGS = {"-o", "--output"}


def on_study(args: tuple[str, ...], *, study: str, best: int, spec: Path, work: Path) -> list[str]:
    """A documented command made to run in ``work`` on a test's study: a study the docs name becomes
    ``study`` (``NAME:7`` its best trial ``best``), a spec file not written by an earlier command of
    the block becomes ``spec``, an absolute output path lands under ``work``; new names stay."""
    out: list[str] = []
    for previous, arg in zip(("", *args), args, strict=False):
        if previous in OUTPUT_FLAGS:
            out.append(str(work / arg.lstrip("/")) if arg.startswith("/") else arg)
        elif previous == "--name":
            out.append(arg)
        elif arg in DOC_STUDIES:
            out.append(study)
        elif arg.partition(":")[0] in DOC_STUDIES and arg.partition(":")[2].isdigit():
            out.append(f"{study}:{best}")
        elif arg.endswith(".yaml") and not (work / arg).exists():
            out.append(str(spec))
        else:
            out.append(arg)
    return out


COMMANDS = doc_commands()
