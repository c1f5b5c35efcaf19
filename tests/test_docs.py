"""The docs as a newcomer reads them: every `hpo` command in a fenced block parses against the real
CLI (a renamed flag fails here), README stays short, and every link to a file points at one."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from hpo.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 210
FENCE = re.compile(r"^```(\w*)\s*$")
SHELL_PUNCTUATION = set("();<>|&")  # a token of only these ends a command (&&, |, >, ...)
LINK = re.compile(r"\]\(([^)\s]+)\)")
TABLE_COMMAND = re.compile(r"^\| `hpo ([a-z-]+)")


@dataclass(frozen=True)
class DocCommand:
    path: Path
    line: int
    args: tuple[str, ...]  # what follows `hpo`

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line inside a fenced code block, backslash continuations joined."""
    lines: list[tuple[int, str]] = []
    inside, pending, start = False, "", 0
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(text.strip()):
            inside = not inside
            continue
        if not inside:
            continue
        if not pending:
            start = number
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        lines.append((start, pending + text))
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
        DocCommand(path, number, args)
        for path in DOCS
        for number, line in fenced_lines(path)
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


COMMANDS = doc_commands()


def test_the_docs_show_hpo_commands_in_readme_and_in_docs() -> None:
    files = {command.path for command in COMMANDS}
    assert README in files and len(files) >= 3, sorted(str(f) for f in files)


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_every_hpo_command_in_the_docs_parses_against_the_cli(command: DocCommand) -> None:
    try:
        parse(command.args)
    except TyperException as err:
        pytest.fail(f"{command.id}: hpo {shlex.join(command.args)}: {err}")


@pytest.mark.parametrize(
    "args",
    [("launch", "x.yaml", "--no-such-flag"), ("no-such-command",), ("report",), ("sample", "w/", "-n", "many")],
)
def test_a_renamed_flag_a_missing_argument_or_a_bad_value_does_not_parse(args: tuple[str, ...]) -> None:
    with pytest.raises(TyperException):
        parse(args)


def test_commands_are_found_after_env_vars_in_compose_runs_and_before_comments() -> None:
    assert hpo_args("HPO_STORAGE=postgresql://h/db .venv/bin/hpo status S  # trials") == [("status", "S")]
    assert hpo_args("docker compose run --rm hpo launch a.yaml && hpo report A > log") == [
        ("launch", "a.yaml"),
        ("report", "A"),
    ]
    assert hpo_args("mkdir -p data && python -m benchmarks.x") == []


def test_readme_fits_in_210_lines() -> None:
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", path.read_text(), re.MULTILINE)}


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_links_point_at_files_and_headings_that_exist(path: Path) -> None:
    broken = []
    for target in LINK.findall(path.read_text()):
        if "://" in target:
            continue
        file, _, anchor = target.partition("#")
        linked = path.parent / file if file else path
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    assert not broken, broken


def test_readme_links_only_to_docs_that_exist_and_to_each_of_them() -> None:
    targets = {t.split("#")[0] for t in LINK.findall(README.read_text()) if "://" not in t and not t.startswith("#")}
    docs = {str(p.relative_to(ROOT)) for p in DOCS if p != README}
    assert docs <= targets, f"README does not link {sorted(docs - targets)}"
    assert all((ROOT / t).is_file() for t in targets), sorted(t for t in targets if not (ROOT / t).is_file())


def test_readme_command_table_names_every_command_once() -> None:
    group = cli()
    with group.make_context("hpo", ["status"]) as ctx:
        commands = group.list_commands(ctx)
    listed = [m.group(1) for line in README.read_text().splitlines() if (m := TABLE_COMMAND.match(line))]
    assert sorted(listed) == sorted(commands), (sorted(listed), sorted(commands))
