"""The suite's tiers (tests/tiers.py): a folder decides a test's tier, plain pytest runs the default
tier only, and a default-tier test that runs past the limit fails naming where it belongs."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.tiers import CROSS_CUTTING, FOLDERS, TESTS, TIERS, default_folders, misplaced, tier_of

pytest_plugins = ["pytester"]

PLANTED = """
import time

def test_quick():
    pass

def test_slow():
    time.sleep(0.6)
"""


def planted_suite(pytester: pytest.Pytester) -> None:
    """A copy of the layout run with the real plugin (tests/tiers.py copied in): one quick and one
    slow test in the default tier, one test in each other tier."""
    tests = pytester.mkpydir("tests")
    (tests / "tiers.py").write_text((TESTS / "tiers.py").read_text())
    (pytester.path / "conftest.py").write_text('pytest_plugins = ["tests.tiers"]\n')
    (tests / "test_default.py").write_text(PLANTED)
    for tier in FOLDERS:
        folder = tests / tier
        folder.mkdir()
        (folder / "__init__.py").write_text("")
        (folder / f"test_{tier}.py").write_text("import time\n\ndef test_here():\n    time.sleep(0.6)\n")


def test_every_test_file_lies_in_a_tier() -> None:
    """``tier_of`` puts any folder it does not know in the default tier, so a file there would run
    unnoticed: the default tier is the folders named after hpo/'s packages and the cross-cutting files
    directly in tests/, and every other place is reported (tests/tiers.py's docstring)."""
    stray = misplaced()
    assert not stray, (
        f"test files in no tier: {[str(p.relative_to(TESTS.parent)) for p in stray]}; put each in "
        f"tests/<package>/ for the hpo/ package it tests ({', '.join(default_folders())}), in a tier's "
        f"folder ({', '.join(FOLDERS)}), or name it in CROSS_CUTTING"
    )
    files = list(TESTS.rglob("test_*.py"))
    assert {tier_of(p) for p in files} == set(TIERS)
    assert all((TESTS / name).is_file() for name in CROSS_CUTTING)
    assert tier_of(TESTS / "integration" / "test_outages.py") == "integration"
    assert tier_of(TESTS / "spec" / "test_spec.py") == "default"


def test_a_test_file_in_a_folder_hpo_has_no_package_for_is_reported(tmp_path: Path) -> None:
    """A planted layout: hpo/ with packages spec and service.inner; a file in tests/foo/ (no hpo/foo/),
    one a level below tests/spec/ and one directly in tests/ outside CROSS_CUTTING are reported; the
    folders named after packages, a tier's folder at any depth and a cross-cutting file are not."""
    package, tests = tmp_path / "hpo", tmp_path / "tests"
    for folder in ("", "spec", "service", "service/inner"):
        (package / folder).mkdir(parents=True, exist_ok=True)
        (package / folder / "__init__.py").write_text("")
    (package / "report" / "static").mkdir(parents=True)  # folders, but no package
    placed = ["spec/test_a.py", "service/inner/test_b.py", "integration/deep/test_c.py", CROSS_CUTTING[0]]
    stray = ["foo/test_x.py", "spec/extra/test_y.py", "report/static/test_z.py", "test_loose.py"]
    for name in [*placed, *stray]:
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text("def test_here():\n    pass\n")
    assert default_folders(package) == ["service", "service/inner", "spec"]
    assert misplaced(tests, package) == sorted(tests / name for name in stray)


def test_plain_pytest_runs_the_default_tier_and_fails_a_test_past_the_limit(pytester: pytest.Pytester) -> None:
    planted_suite(pytester)
    result = pytester.runpytest_subprocess("-o", "tier_time_limit=0.3", "tests")
    result.assert_outcomes(passed=1, failed=1, deselected=3)
    result.stdout.fnmatch_lines(
        ["*test_slow: call took 0.* s, over the default tier's 0.3 s: make it cheaper or move*"]
    )


def test_tier_all_runs_every_folder_and_only_the_default_tier_has_a_limit(pytester: pytest.Pytester) -> None:
    planted_suite(pytester)
    result = pytester.runpytest_subprocess("-o", "tier_time_limit=0.3", "--tier", "all", "tests")
    result.assert_outcomes(passed=4, failed=1)  # the other tiers' 0.6 s tests pass
    named = pytester.runpytest_subprocess("-o", "tier_time_limit=0.3", "tests/e2e")
    named.assert_outcomes(passed=1)  # a path inside a tier's folder selects that tier by itself
    wrong = pytester.runpytest_subprocess("--tier", "nightly", "tests")
    assert wrong.ret != 0 and "unknown tier ['nightly']" in wrong.stderr.str()


def test_the_repository_layout_has_the_three_tier_folders() -> None:
    assert all((Path(folder) / "__init__.py").exists() for folder in FOLDERS.values())


def test_the_tests_readme_lists_every_test_file_under_its_tier() -> None:
    text = (TESTS / "README.md").read_text()
    sections = {chunk.split(" ")[0]: chunk for chunk in text.split("\n### ")[1:]}
    for path in TESTS.rglob("test_*.py"):
        name = f"`{path.relative_to(TESTS.parent)}`"
        assert name in sections[tier_of(path)], (
            f"{name} is not listed under its tier ({tier_of(path)}) in tests/README.md"
        )


def test_every_other_tier_collects_and_every_fixture_it_asks_for_exists(pytester: pytest.Pytester) -> None:
    """The default tier cannot run the other tiers, but it can plan them: a fixture a moved test
    still asks for from the file it left (a CI failure once) is an error in the plan, found here in
    seconds instead of after 19 minutes of the integration tier. The modules are loaded, in a process of
    their own: loaded in this one, pytester drops them afterwards but not what torchvision registers in
    torch once per process, and the next test to import torchvision failed."""
    root = TESTS.parent
    tiers = [str(TESTS / tier) for tier in FOLDERS]
    result = pytester.runpytest_subprocess(
        "--rootdir", str(root), "-c", str(root / "pyproject.toml"), "--tier", "all", "--setup-plan", "-q",
        "-p", "no:cacheprovider", *tiers,
    )  # fmt: skip
    errors = [line for line in result.outlines if line.startswith("ERROR") or "fixture '" in line]
    assert result.ret == 0 and not errors, "\n".join(result.outlines[-40:])


ROW = re.compile(r"^\| `(tests/[^`]+\.py)` \| (\d+) \|$", re.M)
HEADING = re.compile(r"^(\w+) \((\d+) test functions in (\d+) files\)$", re.M)


def defined_tests(path: Path) -> int:
    """The test functions a file defines (a parametrised one once): what tests/README.md counts."""
    return sum(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
        for node in ast.walk(ast.parse(path.read_text()))
    )


def readme_count_errors(text: str, tests: Path = TESTS) -> list[str]:
    """Where tests/README.md's per-file counts or a tier heading's totals differ from the files."""
    errors = []
    for chunk in text.split("\n### ")[1:]:
        heading = HEADING.match(chunk.splitlines()[0])
        rows = ROW.findall(chunk)
        if heading is None:
            continue
        for name, said in rows:
            if (found := defined_tests(tests.parent / name)) != int(said):
                errors.append(f"{name}: README says {said} test functions, the file defines {found}")
        total = sum(int(n) for _, n in rows)
        if (int(heading[2]), int(heading[3])) != (total, len(rows)):
            errors.append(f"### {heading[1]}: says {heading[2]} in {heading[3]} files; rows: {total} in {len(rows)}")
    return errors


def test_the_tests_readme_counts_what_the_files_define() -> None:
    text = (TESTS / "README.md").read_text()
    headings = [HEADING.match(chunk.splitlines()[0]) for chunk in text.split("\n### ")[1:]]
    assert sorted(h[1] for h in headings if h) == sorted(TIERS), "every tier's heading says its counts"
    errors = readme_count_errors(text)
    assert not errors, "\n".join(errors)


def test_the_count_check_finds_a_wrong_row_and_a_wrong_total(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    text = "\n### default (3 test functions in 1 files)\n\n| `tests/test_a.py` | 3 |\n"
    assert readme_count_errors(text, tmp_path / "tests") == [
        "tests/test_a.py: README says 3 test functions, the file defines 2"
    ]
    fixed = text.replace("| 3 |", "| 2 |")
    assert readme_count_errors(fixed, tmp_path / "tests") == ["### default: says 3 in 1 files; rows: 2 in 1"]
