"""The docs as a newcomer reads them: every `hpo` command in a fenced block parses against the real
CLI (a renamed flag fails here), README stays short, and every link to a file points at one."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.exceptions import TyperException

from tests.doc_commands import (
    COMMANDS,
    DOCS,
    GPU_SPEC_DOCTOR,
    README,
    ROOT,
    RUN_ELSEWHERE,
    DocCommand,
    cli,
    hpo_args,
    parse,
)

README_MAX_LINES = 210
LINK = re.compile(r"\]\(([^)\s]+)\)")
TABLE_COMMAND = re.compile(r"^\| `hpo ([a-z-]+)")


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


def test_the_commands_the_docs_run_elsewhere_name_tests_that_exist() -> None:
    shown = {command.args[0] for command in COMMANDS}
    assert set(RUN_ELSEWHERE) <= shown, set(RUN_ELSEWHERE) - shown
    for test in [*RUN_ELSEWHERE.values(), GPU_SPEC_DOCTOR]:
        file, _, name = test.partition("::")
        assert f"def {name}(" in (ROOT / file).read_text(), test
